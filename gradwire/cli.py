"""The `gradwire` command: subcommands, one-line errors, no tracebacks for a user's mistake."""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn

from gradwire import __version__, atomic, emit
from gradwire.argtypes import int_at_least, path_arg
from gradwire.errors import GradwireError, MissingExtra, fault_of
from gradwire.units import int_range

EPILOG = ("One convention for every command: -o/--out (where results go; '-' is standard "
          "output), --format, -q/--quiet, -v/--verbose (-vv: debug), and --ports where a "
          "capture is read on its own (frames, streams, win, phases, collect; a bundle "
          "names its ports). "
          "Docs: README.md and docs/cli.md.")
QUIET_HELP = ("no table, progress or 'wrote' lines (results asked for with -o, or with "
              "--format where the command has it, are still written; notes, warnings and "
              "errors still print)")
DOC_FORMATS = ("table", "json")
# the packages of an optional extra (pyproject.toml): a command that needs one not installed
# names the extra to install
# stdout that fails (EBADF: closed by the shell, atomic.hold_closed_streams)
STDOUT_ERRORS = {errno.ENOSPC, errno.EIO, errno.EFBIG, errno.EDQUOT, errno.EBADF}
# faults of a file the user named or holds (permissions, links, a full or read-only disk)
USER_FILE_ERRORS = {errno.EACCES, errno.EPERM, errno.ELOOP, errno.ENOTDIR, errno.EISDIR,
                    errno.ENAMETOOLONG, errno.EROFS, errno.ENOSPC, errno.EDQUOT}
EXTRA_OF = {**dict.fromkeys(("numpy", "networkx", "cvxpy", "matplotlib", "numba", "scipy",
                             "sklearn"),
                            "predict"),
            "tensorflow": "tf", "google": "tf", "scapy": "capture", "ray": "ray"}
ROW_FORMATS = ("table", "jsonl", "csv", "json")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (the full usage is one --help away)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        """argparse's, but an argument no parser took is refused by the command it was
        given to (``gradwire phases: error: unrecognized arguments: ...``), not by
        ``gradwire``."""
        ns, extra = self.parse_known_args(args, namespace)
        if extra:
            self._deepest(ns).error(f"unrecognized arguments: {' '.join(extra)}")
        return ns

    def _deepest(self, ns: argparse.Namespace) -> argparse.ArgumentParser:
        """The parser of the (sub)command ``ns`` names: ``gradwire opdb ingest``'s."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(ns, action.dest, None) or "")
                if isinstance(chosen, _Parser):
                    return chosen._deepest(ns)
        return self


def _ports(text: str) -> list[int]:
    ports: list[int] = []
    parts = [p.strip() for p in text.split(",")]
    if not any(parts) or not all(parts):  # "2222,,2223": a typo, as for --workers
        raise argparse.ArgumentTypeError(f"empty item in {text!r}: write ports like 2222,2223 "
                                         "or 2222-2225")
    try:
        for part in parts:
            first, last = int_range(part)  # 2222-2225: a range
            if last < first:
                raise argparse.ArgumentTypeError(f"port range {part!r} runs backwards")
            if not (first >= 1 and last <= 65535):  # before the range is built
                bad = first if first < 1 else last
                raise argparse.ArgumentTypeError(f"not a TCP port (1-65535): {bad}")
            ports += range(first, last + 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"ports must be comma-separated numbers or ranges "
                                         f"(2222,2223 or 2222-2225): {text!r}") from None
    bad = [p for p in ports if not 1 <= p <= 65535]
    if bad:
        raise argparse.ArgumentTypeError(f"not a TCP port (1-65535): {bad[0]}")
    return ports


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    from gradwire.collector.capture import DEFAULT_BUFFER_MIB, DEFAULT_SNAPLEN  # stdlib only
    parser = _Parser(
        prog="gradwire",
        description="Predict distributed TensorFlow training throughput from traces of a small "
        "run: collect bundles on each node, inspect them, align and replay them.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"gradwire {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    c = sub.add_parser(
        "collect", help="capture a node's gRPC traffic while training runs, into a bundle",
        description="Start a packet capture filtered to the cluster's gRPC ports, run the "
        "training command with GRADWIRE_BUNDLE set (a TraceHook in the script writes its steps "
        "into the same bundle), and stop the capture cleanly when the command exits, on Ctrl-C "
        "or SIGTERM (or earlier: --duration, SIGUSR1; the command runs on). With --attach, "
        "capture beside training that is already running.",
        epilog="Examples:\n  gradwire collect --out b/worker0 --iface eth0 --ports 2222,2223 "
        "-- python train.py\n  gradwire collect --attach --duration 60 --out b/ps0 --ports 2222",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("-o", "--out", required=True, type=path_arg, metavar="DIR",
                   help="bundle folder to create (new, or empty)")
    c.add_argument("--iface", default="any", help="interface to capture on (default: any)")
    emit.add_ports(c, _ports, "gRPC ports of the cluster, e.g. 2222,2223 or 2222-2225 "
                   "(default: from TF_CONFIG)", old_spelling=False)
    c.add_argument("--tool", default="auto", choices=["auto", "dumpcap", "tcpdump", "scapy"],
                   help="capture tool (default: dumpcap, else tcpdump, else scapy)")
    c.add_argument("--snaplen", type=int_at_least(64, "bytes"), default=DEFAULT_SNAPLEN,
                   help=f"bytes kept per packet (default: {DEFAULT_SNAPLEN}, whole packets)")
    c.add_argument("--buffer-mib", type=int_at_least(1, "MiB"), default=DEFAULT_BUFFER_MIB,
                   help=f"kernel capture ring, MiB (default: {DEFAULT_BUFFER_MIB}; holds about "
                   "1 s of a 2 Gbit/s link, so a busy CPU does not make the kernel drop packets)")
    c.add_argument("--attach", action="store_true",
                   help="capture beside already-running training (no command)")
    c.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                   help="seconds to capture (default: until the command exits, or with "
                   "--attach until Ctrl-C); with a command, the capture ends and the command "
                   "runs on, its later steps timed by the TraceHook without a capture, which "
                   "predict uses to take the recording's cost out (SIGUSR1 to collect does "
                   "the same at any time)")
    c.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the training command")

    i = sub.add_parser(
        "inspect", help="summarize a bundle: nodes, steps, ops, bytes, capture, problems",
        description="Print what a bundle holds: nodes and devices, recorded steps, ops per "
        "step, bytes per step and direction (from the trace and from the capture), capture "
        "packets and drops, and problems found. BUNDLE may be one node's bundle or a folder "
        "holding one bundle per node; --format json then writes a list. --sample inspects the "
        "sample bundle shipped with gradwire (recorded by its lab). Exit status 1 when the "
        "report lists a problem (standard error repeats the first), 0 when none.",
        epilog="Examples:\n  gradwire inspect bundles/worker0\n  gradwire inspect bundles/ "
        "--format json -o summary.json\n  gradwire inspect --sample",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    i.add_argument("bundle", nargs="?", type=path_arg,
                   help="a node's bundle, or a folder of node bundles")
    i.add_argument("--sample", action="store_true",
                   help="inspect the sample bundle shipped with gradwire")
    emit.add_format(i, DOC_FORMATS)
    emit.add_out_file(i, "the summary")

    fields = {
        "frames": "one row per frame: ts (s), src, dst, stream_id, type (RFC 7540 number), "
        "flags, length, and where they apply window_increment, settings ({id: value}) and path",
        "streams": "one row per stream (gRPC call): conn, client, server, stream_id, path, "
        "status, step_id, request_ts, first_data_ts, last_data_ts, end_ts (s), request_bytes, "
        "response_bytes, intervals (DATA service intervals) and tensor (rendezvous key)",
    }
    for name, what in (("frames", "every HTTP/2 frame"), ("streams", "every HTTP/2 stream")):
        p = sub.add_parser(
            name, help=f"{what} of a capture (pcap, pcapng, or a bundle)",
            description=f"Decode {what} of TensorFlow's gRPC traffic in a capture: TCP "
            "reassembly, HTTP/2 framing, HPACK headers, gRPC messages and RecvTensorRequest "
            "(tensor key and step). CAPTURE is a pcap/pcapng file or a bundle folder (its "
            f"capture and ports are used). Output: {fields[name]}. A note on stderr counts "
            "what could not be read as HTTP/2 (TCP gaps, resyncs, skipped bytes...) and says "
            "when the file ends mid-packet.",
            epilog=f"Examples:\n  gradwire {name} bundles/worker0 --format jsonl | head\n"
            f"  gradwire {name} capture.pcapng --ports 2222,2223 -o {name}.csv",
            formatter_class=argparse.RawDescriptionHelpFormatter)
        _add_capture(p, "pcap/pcapng file or bundle folder", "worker0")
        emit.add_ports(p, _ports, "server port(s) to decode as HTTP/2, e.g. 2222,2223 "
                       "(default: the bundle's ports, else every connection that is HTTP/2)")
        emit.add_format(p, ROW_FORMATS, json_flag=False)
        emit.add_out_file(p, f"the {name}")

    w = sub.add_parser(
        "win", help="advertised HTTP/2 windows and the WIN that best explains multiplexing",
        description="Read the flow-control windows the receivers advertised (SETTINGS "
        "INITIAL_WINDOW_SIZE over time, connection WINDOW_UPDATEs), then fit the WIN of the "
        "ICPE'20 multiplexing model (first service of a stream up to WIN, second to completion) "
        "that best reproduces the observed RecvTensor stream end times of a 1-worker capture. "
        "Prints the end-time errors (average, median, 95th percentile, maximum, as in the "
        "paper's Table 1) for the fitted and the advertised WIN.",
        epilog="Examples:\n  gradwire win bundles/worker0\n  gradwire win bundles/worker0 "
        "-o win.json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_capture(w, "bundle folder or pcap/pcapng file", "worker0")
    emit.add_ports(w, _ports, "server port(s), as for frames")
    w.add_argument("--direction", choices=["down", "up", "all"], default="down",
                   help="down: PS -> worker parameter pulls (default, as in the paper); up: "
                   "worker -> PS gradients; all")
    emit.add_format(w, DOC_FORMATS, json_flag=False)
    emit.add_out_file(w, "the fit and the windows")

    o = sub.add_parser(
        "overhead", help="fit the parsing overhead of received tensors: alpha*size + beta",
        description="For every RecvTensor op a node ran (TF trace), the time from the last "
        "DATA of the stream that carried its tensor (that node's own capture) to the op's end; "
        "a least-squares line per node gives alpha (us per MB) and beta (us), with R^2 and "
        "residuals. Give a folder of node bundles (or several bundles): each node's ops are "
        "matched with its own capture.",
        epilog="Examples:\n  gradwire overhead bundles/\n  gradwire overhead bundles/ -o "
        "overhead.json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    o.add_argument("bundles", type=path_arg, nargs="*",
                   help="bundle folders, or one folder of them")
    o.add_argument("--sample", action="store_true",
                   help="fit the sample bundles shipped with gradwire")
    emit.add_format(o, DOC_FORMATS)
    emit.add_out_file(o, "the fits")

    ph = sub.add_parser(
        "phases", help="per-worker downlink, worker, uplink and server times from a capture",
        description="Profiling from a capture alone (MASCOTS'18): segment the RecvTensor "
        "traffic into training steps (by step id) per worker, and report the mean, spread and "
        "median of the downlink time, worker time, uplink time and server time, and the bytes "
        "per step each way. The first step of each worker is skipped as warm-up.",
        epilog="Examples:\n  gradwire phases bundles/ps0\n  gradwire phases capture.pcapng "
        "--ports 2222 --format json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_capture(ph, "bundle folder or pcap/pcapng file", "ps0")
    emit.add_ports(ph, _ports, "server port(s), as for frames")
    emit.add_format(ph, DOC_FORMATS)
    emit.add_out_file(ph, "the phases")
    for module in _stage_commands().values():
        module.add_parser(sub)
    for command in sub.choices.values():  # -v/-q also after the command: gradwire predict -v
        command.add_argument("-v", "--verbose", dest="verbose_after", action="count", default=0,
                             help="more log output and progress lines (-vv: debug)")
        command.add_argument("-q", "--quiet", dest="quiet_after", action="store_true",
                             help=QUIET_HELP)
    return parser


def _stage_commands() -> dict[str, Any]:
    """Subcommands defined by the stages (each module has ``add_parser`` and ``run``)."""
    from gradwire.aligner import command as align_command
    from gradwire.replay import command as predict_command
    from gradwire.replay import opdb_command, optimize_command

    return {"align": align_command, "predict": predict_command, "opdb": opdb_command,
            "optimize": optimize_command}


class Terminated(BaseException):  # noqa: N818 - it is the signal's name, not an error's
    """SIGTERM or SIGHUP arrived: unwind like Ctrl-C, so that worker processes are stopped
    and no output is left half written."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop_on_signals() -> None:
    """SIGTERM and SIGHUP raise :class:`Terminated`. Where Python drops an exception (a
    ctypes callback: numba's compiler calls one back), the signal is sent again, to be
    raised where it unwinds: once, it was lost and the run went on to the end, exit 0."""
    def stop(signum: int, _frame: object) -> None:
        raise Terminated(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    previous = sys.unraisablehook

    def dropped(info: Any) -> None:
        exc = info.exc_value
        if isinstance(exc, Terminated | KeyboardInterrupt):
            # from another thread, a moment later: sent from here, it would be raised here,
            # and dropped too
            signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
            again = threading.Timer(0.05, os.kill, args=(os.getpid(), signum))
            again.daemon = True
            again.start()
            return
        previous(info)

    sys.unraisablehook = dropped


def _exit_past_a_stuck_pool(code: int) -> None:
    """End the process with ``code`` now, its streams flushed, where a process pool's
    manager thread is still alive after a stop signal or Ctrl-C: the interpreter's exit joins that
    thread with no time limit, and one left waiting on a pipe a killed worker had half
    written kept a signalled ``predict --jobs 2`` alive after it said it stopped (a clean-clone
    CI, 2026-12-07, once in about ten; ``procpool.kill_workers`` gives it 10 s first). Nothing
    is left to write: the outputs were given up as the signal unwound."""
    stuck = [t for t in threading.enumerate()
             if t.is_alive() and type(t).__name__ == "_ExecutorManagerThread"]
    if not stuck:
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to say
            stream.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    atomic.hold_closed_streams()
    try:
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:  # Ctrl-C while the parser's modules load
        print("gradwire: interrupted", file=sys.stderr)
        return 130
    args.verbose += args.verbose_after
    args.quiet = args.quiet or args.quiet_after
    name = " ".join(filter(None, (args.command, getattr(args, "action", None))))  # opdb's too
    _log_as(name, args.verbose)
    if args.command != "collect":  # collect forwards signals to its command itself
        _stop_on_signals()
    try:
        emit.apply_deprecations(args)
        _protect_inputs(args)
        code = _dispatch(args)
        sys.stdout.flush()  # a full disk or a closed pipe is said here, not at exit
        return code
    except GradwireError as exc:
        # a fault in how the command was called, found past the parser (GradwireError's
        # ``usage``): pointed to the help as the parser's own errors are
        print(f"gradwire {name}: error: {exc}" + (f" (see gradwire {name} --help)"
                                                  if exc.usage else ""), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        if not getattr(args, "in_process", False):  # opdb build's child: its parent says it
            print(f"gradwire {name}: interrupted", file=sys.stderr)
        _exit_past_a_stuck_pool(130)
        return 130
    except Terminated as sig:
        print(f"gradwire {name}: stopped by {signal.Signals(sig.signum).name}",
              file=sys.stderr)
        _exit_past_a_stuck_pool(128 + sig.signum)
        return 128 + sig.signum
    except BrokenPipeError:  # the reader (e.g. `| head`) went away: stop quietly
        atomic.detach_stdout()
        return 0
    except ModuleNotFoundError as exc:
        extra = EXTRA_OF.get((exc.name or "").partition(".")[0])
        if extra is None:
            raise
        print(f"gradwire {name}: error: {MissingExtra(exc.name or '', extra)}",
              file=sys.stderr)
        return MissingExtra.exit_code
    except OSError as exc:
        # a file of the user's that the command could not read or write, where no reader
        # said so in its own words: the file and the fault
        if exc.filename is not None and exc.errno in USER_FILE_ERRORS:
            print(f"gradwire {name}: error: {exc.filename}: {fault_of(exc)}", file=sys.stderr)
            return 2
        # standard output failed under a table or a print (e.g. > /dev/full); anything else
        # is not gradwire's output, and shows where it came from
        if exc.filename is not None or exc.errno not in STDOUT_ERRORS:
            raise
        atomic.detach_stdout()
        print(f"gradwire {name}: error: cannot write to standard output: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 2


class _LogLines(logging.Handler):
    """Log records on standard error as the CLI's other lines: ``gradwire inspect: warning:
    ...``; below a warning (-v, -vv) with the module that says it. Standard error is looked
    up at each line (a test's capture replaces it)."""

    def __init__(self, command: str) -> None:
        super().__init__()
        self.command = command

    def emit(self, record: logging.LogRecord) -> None:
        where = f" {record.name}:" if record.levelno < logging.WARNING else ""
        try:
            print(f"gradwire {self.command}: {record.levelname.lower()}:{where} "
                  f"{self.format(record)}", file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging's own convention: report, never raise
            self.handleError(record)


def _log_as(command: str, verbose: int) -> None:
    """Log lines on standard error in the CLI's form (:class:`_LogLines`, replacing an
    earlier command's in the same process): warnings, and with -v and -vv gradwire's own
    info and debug lines, never a library's (-vv printed thousands of the HPACK decoder's)."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _LogLines)]:
        root.removeHandler(old)
    root.addHandler(_LogLines(command))
    logging.getLogger("gradwire").setLevel(logging.WARNING - 10 * min(verbose, 2))


def _add_capture(p: argparse.ArgumentParser, help_text: str, node: str) -> None:
    """The CAPTURE argument of a command that reads one capture, and --sample: the sample
    bundle's ``node`` (its worker's or its PS's capture) in its place."""
    p.add_argument("capture", nargs="?", type=path_arg, help=help_text)
    p.add_argument("--sample", action="store_true",
                   help=f"read the sample bundle shipped with gradwire (its {node})")
    p.set_defaults(sample_node=node)


def _capture_given(args: argparse.Namespace) -> Path:
    """The capture (file or bundle folder) a command was given, or with --sample the sample
    bundle's node; an error naming both when there is neither, or both."""
    from gradwire.bundle import one_given_or_sample

    path = one_given_or_sample(args.capture, args.sample,
                               "a CAPTURE (a pcap/pcapng file or a bundle folder)")
    return path / args.sample_node if args.sample else path  # the sample: its node's


def _protect_inputs(args: argparse.Namespace) -> None:
    """No output of this run may replace a file it reads (a capture, lab results...), and
    its standard output may not be one (a shell redirection)."""
    paths = [getattr(args, a, None) for a in ("bundle", "capture")]
    if getattr(args, "action", None) in ("show", "fit", "check"):  # opdb: -o beside --db
        paths.append(args.db)
    paths += list(getattr(args, "bundles", None) or []) + list(getattr(args, "measured", None)
                                                               or [])
    atomic.protect_inputs(p for p in paths if p is not None)
    atomic.refuse_stdout_onto_inputs()


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command ``args`` names; returns its exit code."""
    if args.command == "collect":
        return _collect(args)
    if args.command == "inspect":
        return _inspect(args)
    if args.command in ("frames", "streams"):
        return _frames_or_streams(args)
    if args.command == "win":
        return _win(args)
    if args.command == "overhead":
        return _overhead(args)
    if args.command == "phases":
        return _phases(args)
    stage = _stage_commands()[args.command]
    return int(stage.run(args))


def _collect(args: argparse.Namespace) -> int:
    from gradwire.collector.collect import CollectOptions, collect

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    opts = CollectOptions(
        out=args.out, command=cmd, iface=args.iface, ports=args.ports, tool=args.tool,
        snaplen_bytes=args.snaplen, buffer_mib=args.buffer_mib, attach=args.attach,
        duration_s=args.duration,
    )
    def say(msg: str) -> None:  # -q: its warnings only, as every command's
        if not args.quiet or msg.startswith("warning:"):
            print(f"gradwire collect: {msg}", file=sys.stderr)

    return collect(opts, progress=say)


def _reading(command: str, args: argparse.Namespace, capture: Path) -> None:
    """A progress line before a capture is read (on a terminal, or with -v): a 2 GB one
    takes seconds warm and tens of seconds from disk."""
    if emit.shows_progress(args):
        print(f"gradwire {command}: reading {capture} "
              f"({_size(capture)})", file=sys.stderr, flush=True)


def _size(path: Path) -> str:
    n = path.stat().st_size
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def _inspect(args: argparse.Namespace) -> int:
    from gradwire.bundle import find_bundles, one_given_or_sample, open_bundle
    from gradwire.collector.summary import summarize
    from gradwire.render import print_inspection

    path = one_given_or_sample(args.bundle, args.sample, "a BUNDLE to inspect")
    emit.ready_out(args, DOC_FORMATS)
    reports = []
    for folder in find_bundles(path):
        bundle = open_bundle(folder)
        if bundle.capture_file is not None:
            _reading("inspect", args, bundle.capture_file)
        reports.append(summarize(bundle))

    def table(console: Any) -> None:
        for report in reports:
            print_inspection(report, console)

    emit.emit(args, DOC_FORMATS, table=table, doc=reports[0] if len(reports) == 1 else reports)
    # the report is out whole; the exit says it names a problem, as a linter's does
    found = [f"{r['bundle']}: {p}" for r in reports for p in r["problems"]]
    if found:
        more = f" (and {len(found) - 1} more problem(s))" if len(found) > 1 else ""
        print(f"gradwire inspect: problem: {found[0]}{more}", file=sys.stderr)
        return 1
    return 0


def _frames_or_streams(args: argparse.Namespace) -> int:
    from gradwire import export
    from gradwire.collector.h2capture import H2Capture, iter_frames

    path, ports = _capture_and_ports(_capture_given(args), args.ports)
    emit.ready_out(args, ROW_FORMATS)
    cap = H2Capture(ports or None)
    if args.command == "frames":  # drawn as written: the notes below come after them
        written = emit.emit(args, ROW_FORMATS, rows=(export.frame_row(f)
                                                     for f in iter_frames(path, capture=cap)),
                            columns=export.FRAME_COLUMNS, say_wrote=False)
    else:
        for _ in iter_frames(path, capture=cap):
            pass
        written = emit.emit(args, ROW_FORMATS,
                            rows=(export.stream_row(s) for s in cap.streams()),
                            columns=export.STREAM_COLUMNS, say_wrote=False)
    stats = cap.stats()
    problems = {k: v for k, v in stats.items() if k not in ("connections", "frames") and v}
    if problems:
        print(f"gradwire {args.command}: note: {path}: " + ", ".join(
            f"{k.replace('_', ' ')} {v}" for k, v in problems.items()), file=sys.stderr)
    _note_cut_short(args.command, path, cap, "shown up to there")
    if not cap.order:
        print(f"gradwire {args.command}: note: {path}: no HTTP/2 connection"
              + (f" on port(s) {','.join(map(str, ports))}" if ports else ""), file=sys.stderr)
    elif not stats.get("frames") and stats.get("not_http2_connections", 0) < len(cap.order):
        # connections, not said to be other traffic above, but not one whole frame on them
        print(f"gradwire {args.command}: note: {path}: no whole HTTP/2 frame on its "
              f"{len(cap.order)} connection(s): none that ends within the capture",
              file=sys.stderr)
    emit.wrote(args, written)  # the closing line, after the notes, as every command's is
    return 0


def _win(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from gradwire.collector.h2capture import H2Capture
    from gradwire.collector.win import advertised_windows, connection_window_updates, fit_capture
    from gradwire.render import print_win

    path, ports = _capture_and_ports(_capture_given(args), args.ports)
    emit.ready_out(args, DOC_FORMATS)
    _reading("win", args, path)
    cap = H2Capture(ports or None)
    fit, frames = fit_capture(path, ports, args.direction, capture=cap)
    if not fit.steps:  # nothing is written: an existing -o file stays as it was
        why = ("it ends mid-packet (the capture was cut short) before any" if cap.truncated
               else "is this a TensorFlow capture, with --ports set? It holds no")
        raise GradwireError(f"no RecvTensor transfers of direction {args.direction!r} that can "
                            f"be timed: {why} whole transfer", path=path)
    _note_cut_short("win", path, cap, "fitted on the transfers before that")
    report = {"capture": str(path), "fit": asdict(fit),
              "advertised_initial_window": advertised_windows(frames),
              "connection_window_updates": connection_window_updates(frames)}
    emit.emit(args, DOC_FORMATS, table=lambda console: print_win(report, console), doc=report)
    return 0


def _overhead(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from gradwire.bundle import find_bundles, given_or_sample, one_bundle_per_task, open_bundle
    from gradwire.collector.h2capture import H2Capture, capture_streams
    from gradwire.collector.overhead import fit_overhead, match_points
    from gradwire.collector.summary import bundle_task
    from gradwire.errors import BundleError
    from gradwire.render import print_overhead

    paths = given_or_sample(args.bundles, args.sample, "the BUNDLES (each node's, or their "
                            "folder)")
    emit.ready_out(args, DOC_FORMATS)
    given = [open_bundle(p) for arg in paths for p in find_bundles(arg)]
    # a bundle given twice (as a folder and as a bundle under it) is one node, as align has it
    bundles = list({b.path.resolve(): b for b in given}.values())
    traces = [t for b in bundles for t in b.load_steps()]
    if not traces:
        raise BundleError("no recorded steps in these bundles (the TraceHook writes them)",
                          path=paths[0])
    task = {b.path: bundle_task(b) for b in bundles}
    one_bundle_per_task((task[b.path], b.path.name, b.path) for b in bundles)
    fits = []
    for b in bundles:
        node = task[b.path]
        if not node:
            print(f"gradwire overhead: note: {b.path}: its manifest names no task and no "
                  "cluster task has this host's address (collect with TF_CONFIG set); left "
                  "out", file=sys.stderr)
            continue
        if b.capture_file is None:
            print(f"gradwire overhead: note: {b.path}: no capture in this bundle; left out",
                  file=sys.stderr)
            continue
        cap = H2Capture(b.ports or None)
        streams = capture_streams(b.capture_file, capture=cap)
        _note_cut_short("overhead", b.capture_file, cap, "fitted on the transfers before that")
        points, unmatched = match_points(traces, streams, node)
        fits.append(fit_overhead(node, points, unmatched))
    if not any(f.points >= 2 for f in fits):
        raise GradwireError("no node has two or more RecvTensor ops matched with its capture's "
                            "streams: nothing to fit", path=paths[0])
    emit.emit(args, DOC_FORMATS, table=lambda console: print_overhead(fits, console),
              doc=[asdict(f) for f in fits])
    return 0


def _phases(args: argparse.Namespace) -> int:
    from gradwire.collector.h2capture import H2Capture, capture_streams
    from gradwire.collector.phases import step_phases, summarize_phases
    from gradwire.render import print_phases

    path, ports = _capture_and_ports(_capture_given(args), args.ports)
    emit.ready_out(args, DOC_FORMATS)
    cap = H2Capture(ports or None)
    summary = summarize_phases(step_phases(capture_streams(path, capture=cap)))
    if not summary:
        raise GradwireError("no worker step with both downlink and uplink RecvTensor streams"
                            + (": the capture ends mid-packet (it was cut short)"
                               if cap.truncated else ""), path=path)
    _note_cut_short("phases", path, cap, "timed up to there")
    emit.emit(args, DOC_FORMATS, table=lambda console: print_phases(summary, console),
              doc=summary)
    return 0


def _note_cut_short(command: str, path: Path | str, cap: Any, what: str) -> None:
    """Say, once, that the capture ``cap`` read from ``path`` ends mid-packet (``what``: what
    the command did with the packets before it)."""
    if cap.truncated:
        print(f"gradwire {command}: note: {path} ends mid-packet (the capture was cut short); "
              f"{what}", file=sys.stderr)


def _capture_and_ports(path: Path, ports: list[int]) -> tuple[Path, list[int]]:
    """A capture file and its ports from a file or a bundle folder."""
    if path.is_dir():
        from gradwire.bundle import MANIFEST, find_bundles, open_bundle
        from gradwire.errors import BundleError

        if not os.path.lexists(path / MANIFEST):
            nodes = find_bundles(path)  # raises, naming the folder, when it holds no bundle
            raise BundleError(f"a folder of node bundles: give one node's, e.g. {nodes[0]}",
                              path=path)
        bundle = open_bundle(path)
        if bundle.capture_file is None:
            raise BundleError("bundle has no capture file", path=path)
        return bundle.capture_file, ports or bundle.ports
    return path, ports
