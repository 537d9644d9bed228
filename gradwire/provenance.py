"""What produced an output: gradwire's version, its git commit when run from a checkout, and
the command line, stamped into output JSON so that results from different code can be told
apart (``scripts/bench_accuracy.py report`` checks them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from gradwire import __version__

_ROOT = Path(__file__).resolve().parent.parent


def source_commit() -> str | None:
    """The git commit of the gradwire source being run, with ``-dirty`` when its tracked files
    have changes; None outside a git checkout (an installed package) or without git."""
    if not (_ROOT / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(_ROOT), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=True)
        dirty = subprocess.run(["git", "-C", str(_ROOT), "status", "--porcelain",
                                "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def same_code(a: str, b: str, root: Path = _ROOT) -> bool:
    """Whether clean commits ``a`` and ``b`` of the checkout at ``root`` hold the same code: no
    file but Markdown differs between them (False when either is dirty or unknown, or git
    cannot tell)."""
    if a == b and not a.endswith("-dirty"):
        return True
    if a.endswith("-dirty") or b.endswith("-dirty") or not (root / ".git").exists():
        return False
    try:
        out = subprocess.run(["git", "-C", str(root), "diff", "--name-only", a, b, "--",
                              ".", ":(exclude)*.md"],
                             capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return False
    return not out.stdout.strip()


def provenance(argv: list[str] | None = None) -> dict[str, Any]:
    """``{"version", "commit", "argv"}`` of this run (``argv``: default ``sys.argv[1:]``)."""
    return {"version": __version__, "commit": source_commit(),
            "argv": list(sys.argv[1:] if argv is None else argv)}
