"""Command-line helpers shared by the benchmark scripts and the lab: one-line usage errors,
types for integers >= 1, a number >= 0, output files and folders, git revisions and sizes,
checked before any work, and a wrapper that prints a user's error as one
line instead of a traceback."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
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


def output_file(text: str) -> Path:
    """argparse type: a file a script writes its results to at the end (``--json``): refused
    before the run where it could not be written then (a folder, a folder that is not
    there), so that no result is lost to a wrong path."""
    path = Path(text)
    if path.exists() and not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: not a regular file (a folder?)")
    if not path.resolve().parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: its folder {path.parent} is not there")
    return path


def output_folder(text: str) -> Path:
    """argparse type: a folder a script keeps its files in (made if missing): refused where
    a file is."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: a file, not a folder")
    return path


def revision(text: str) -> str:
    """argparse type: a git revision of this repository (``--before REV``), checked before
    anything is timed."""
    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet",
                           f"{text}^{{commit}}"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise argparse.ArgumentTypeError(f"{text}: no such commit in {repo}")
    return text


def size_text(text: str) -> str:
    """argparse type: a size such as ``64MiB`` (gradwire's units), kept as given."""
    from gradwire.units import parse_size_bytes

    try:
        parse_size_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


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
