"""Command-line helpers shared by the benchmark scripts and the lab: one-line usage errors,
types for integers >= 1 and a number >= 0, and a wrapper that prints a user's error as one
line instead of a traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from gradwire.units import positive_int_arg


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line, ``NAME: error: ...``, exit 2.

    ``error_name``: the NAME (default: ``prog``), for a ``prog`` that is a whole command
    line such as ``python scripts/lab``."""

    def __init__(self, *args: Any, error_name: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.error_name = error_name or self.prog

    def error(self, message: str) -> NoReturn:
        print(f"{self.error_name}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


positive_int = positive_int_arg  # argparse type: an integer >= 1


def positive_ints(text: str) -> list[int]:
    """argparse type: comma-separated integers >= 1 (``1,2``)."""
    return [positive_int_arg(t) for t in text.split(",")]


def nonnegative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0: {text}")
    return value


def run_cli(prog: str, body: Callable[[], int],
            errors: tuple[type[BaseException], ...]) -> int:
    """``body()``'s exit code; an error of ``errors`` is printed as one line ``PROG: error: ...``
    (exit 1) and Ctrl-C as ``PROG: interrupted`` (exit 130)."""
    try:
        return body()
    except errors as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
