"""Argument types every command's parser shares."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def path_arg(text: str) -> Path:
    """A path argument: refused when empty (``-o ""`` would otherwise name the current
    folder without saying so)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path: name a file or folder")
    return Path(text)


def int_at_least(least: int, unit: str = "") -> Callable[[str], int]:
    """argparse type for a whole number (of ``unit``, said in the errors) no smaller than
    ``least``."""
    of = f" {unit}" if unit else ""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number{' of' + of if of else ''}: "
                                             f"{text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}{of}: {text!r}")
        return value
    return parse
