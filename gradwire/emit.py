"""One CLI convention for every command: where results go and in which format.

- ``--format table|json|csv|jsonl`` (the ones a command has): what the results are written as;
  default ``table``, or with ``-o FILE`` the format its suffix names (.json, .jsonl, .csv,
  .txt).
- ``-o/--out``: commands with one result write it to FILE instead of standard output (``-`` is
  standard output); commands with several (collect, align, predict) write them into a folder.
- ``-q/--quiet``: no table, progress or "wrote" lines; what ``--format`` or ``-o`` asked for is
  still written, and warnings and errors still print.
- ``-v/--verbose``: more log output and progress lines.
- ``--ports``: the cluster's gRPC ports.
- Each command ends by listing, on standard error, the files it wrote.

Old spellings (``--json`` as a flag, ``--port``, ``predict --json FILE``) still work for this
release, with a deprecation note on standard error naming the new spelling.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gradwire import atomic
from gradwire.errors import GradwireError

FORMAT_BY_SUFFIX = {".json": "json", ".jsonl": "jsonl", ".csv": "csv", ".txt": "table"}
FORMAT_HELP = {"table": "aligned tables", "json": "one JSON document",
               "jsonl": "one JSON object per line", "csv": "CSV with a header row"}


def add_format(p: argparse.ArgumentParser, formats: tuple[str, ...], json_flag: bool = True,
               out_is_folder: bool = False) -> None:
    """``--format`` with the formats this command has (default: table, or -o FILE's suffix;
    with ``out_is_folder``, what standard output shows), and (``json_flag``, where the command
    had it) the deprecated ``--json`` flag."""
    default = ("table; -o DIR's files are written whatever it is" if out_is_folder
               else "table, or with -o the format FILE's suffix names")
    p.add_argument("--format", choices=formats, default=None,
                   help="results as " + "; ".join(f"{f}: {FORMAT_HELP[f]}" for f in formats)
                   + f" (default: {default})")
    if "json" in formats and json_flag:
        p.add_argument("--json", dest="json_flag", action="store_true",
                       help=argparse.SUPPRESS)  # deprecated: --format json


def add_out_file(p: argparse.ArgumentParser, what: str) -> None:
    """``-o/--out FILE`` for a command with one result."""
    p.add_argument("-o", "--out", default=None, metavar="FILE",  # str: './-' is not '-'
                   help=f"write {what} to FILE instead of standard output ('-': standard "
                   "output); a symlink is followed, a device or FIFO written in place")


def add_ports(p: argparse.ArgumentParser, parse: Callable[[str], list[int]],
              help_text: str, old_spelling: bool = True) -> None:
    """``--ports``, and (``old_spelling``, where the command had it) its deprecated spelling
    ``--port``."""
    p.add_argument("--ports", type=parse, default=[], help=help_text)
    if old_spelling:
        p.add_argument("--port", dest="port_old", type=parse, default=None,
                       help=argparse.SUPPRESS)  # deprecated: --ports


def apply_deprecations(args: argparse.Namespace) -> None:
    """Map old spellings onto the new ones, each with a note on standard error."""
    cmd = args.command
    if getattr(args, "json_flag", False):
        deprecated(cmd, "--json", "--format json")
        if args.format not in (None, "json"):
            raise GradwireError(f"--json and --format {args.format} contradict each other",
                                usage=True)
        args.format = "json"
    if getattr(args, "port_old", None) is not None:
        deprecated(cmd, "--port", "--ports")
        args.ports = list(args.ports) + list(args.port_old)


def shows_progress(args: argparse.Namespace) -> bool:
    """Whether a command prints progress lines: on a terminal, or with -v; never with -q
    (it wins over -v)."""
    return (sys.stderr.isatty() or bool(getattr(args, "verbose", 0))) and not getattr(
        args, "quiet", False)


def deprecated(command: str, old: str, new: str) -> None:
    """The one-line deprecation note of an old spelling."""
    print(f"gradwire {command}: note: {old} is deprecated and goes in the next release: use "
          f"{new}", file=sys.stderr)


def result_format(args: argparse.Namespace, formats: tuple[str, ...]) -> str:
    """The format of a command's results: --format, else -o FILE's suffix, else table."""
    if args.format:
        return str(args.format)
    out = getattr(args, "out", None)
    if out is None or atomic.is_stdout(out):
        return "table"
    fmt = FORMAT_BY_SUFFIX.get(Path(out).suffix.lower())
    if fmt is None or fmt not in formats:
        fmt = next(f for f in ("json", "jsonl", "csv") if f in formats)
        if Path(out).suffix.lower() in FORMAT_BY_SUFFIX:  # a suffix this command cannot write
            raise GradwireError(f"-o {out}: this command writes {', '.join(formats)}; give "
                                "--format or another suffix", usage=True)
    return fmt


def ready_out(args: argparse.Namespace, formats: tuple[str, ...]) -> None:
    """Check -o FILE and the format it will be written in before the long work (one-line
    error, nothing lost)."""
    result_format(args, formats)
    if getattr(args, "out", None) is not None:
        atomic.ready_file(args.out, "-o file")


def emit(args: argparse.Namespace, formats: tuple[str, ...], *,
         table: Callable[[Any], None] | None = None, doc: Any = None,
         rows: Iterable[dict[str, Any]] | None = None, columns: list[str] | None = None,
         out_is_folder: bool = False, say_wrote: bool = True) -> list[Path | str]:
    """Write a command's results to -o FILE or standard output in the chosen format: the
    ``table`` printer (it takes the rich Console to print on), ``doc`` as JSON,
    or ``rows`` (streamed) as jsonl/csv/json/table. ``out_is_folder``: the command's -o is a
    folder of files it writes itself, and its results go to standard output. With -q and no
    -o or --format, a table is not printed (``rows`` are still drawn: their work has notes).
    Returns the file written (none: standard output); ``say_wrote=False`` leaves its "wrote"
    line to the caller (``wrote``), for notes that only the drawn rows can tell."""
    out = None if out_is_folder else getattr(args, "out", None)
    fmt = args.format or ("table" if out_is_folder else result_format(args, formats))
    if out is None and fmt == "table" and getattr(args, "quiet", False):
        for _ in rows or ():
            pass
        return []
    to_stdout = out is None or atomic.is_stdout(out)
    if to_stdout and fmt == "table" and table is not None:
        from gradwire.render import wide_console

        table(wide_console())  # a closed pipe ends quietly, exit 0 (rich's own exits 1)
        return []
    with atomic.open_output(out if out is not None else atomic.STDOUT, "-o file") as fh:
        if rows is not None:
            from gradwire import export

            if fmt == "json":
                fh.write("[")
                for k, row in enumerate(rows):
                    fh.write(("," if k else "") + "\n" + json.dumps(row))
                fh.write("\n]\n")
            else:
                export.write_rows(rows, fmt, columns or [], out=fh)  # type: ignore[arg-type]
        elif fmt == "json":
            fh.write(json.dumps(doc, indent=1) + "\n")
        elif table is not None:
            from rich.console import Console

            table(Console(file=fh, width=160, color_system=None, force_terminal=False))
    written = [] if to_stdout else [out]
    if say_wrote:
        wrote(args, written)
    return written


def wrote(args: argparse.Namespace, paths: Iterable[Path | str]) -> None:
    """The closing line that lists the files a command wrote (not with -q)."""
    shown = [str(p) for p in paths if not atomic.is_stream(p)]
    if shown and not getattr(args, "quiet", False):
        action = getattr(args, "action", None)  # a subcommand's own (gradwire opdb show)
        name = f"{args.command} {action}" if action else args.command
        print(f"gradwire {name}: wrote {', '.join(shown)}", file=sys.stderr)
