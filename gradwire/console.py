"""The console script ``gradwire``: ``gradwire.cli.main``, with a Ctrl-C that comes while its
modules load said in one line (exit 130), as a later one is, not as a traceback."""

from __future__ import annotations

import sys


def main() -> int:
    """Load the CLI and run it; returns the process exit code."""
    try:
        from gradwire.cli import main as cli_main
    except KeyboardInterrupt:
        print("gradwire: interrupted", file=sys.stderr)
        return 130
    return cli_main()
