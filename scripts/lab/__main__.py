"""CLI: ``python scripts/lab [options]`` runs one real PS training cluster in namespaces."""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # `python scripts/lab`: make `import lab` work
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lab.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
