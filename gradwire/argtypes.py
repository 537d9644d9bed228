"""Argument types every command's parser shares."""

from __future__ import annotations

import argparse
from pathlib import Path


def path_arg(text: str) -> Path:
    """A path argument: refused when empty (``-o ""`` would otherwise name the current
    folder without saying so)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path: name a file or folder")
    return Path(text)
