"""``gradwire opdb build|ingest|show|fit|check|step``: the op cost database (docs/opdb.md)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

from gradwire import emit
from gradwire.argtypes import path_arg
from gradwire.errors import GradwireError
from gradwire.quiet import native_stderr_silenced
from gradwire.units import size_arg

DEFAULT_DB = Path("opdb.sqlite")
FORMATS = ("table", "json")


def add_parser(sub: Any) -> None:
    """Register ``opdb`` and its actions."""
    p = sub.add_parser(
        "opdb", help="the op-level cost database: time ops, ingest traces, fit and check",
        description="An SQLite file of TensorFlow op times keyed by op type, input shapes, "
        "attributes, dtype, device and machine (Huang et al.): `build` times ops alone over a "
        "grid of shapes on this machine, `ingest` adds the ops of recorded bundles, `show` "
        "lists what is there, `fit` reports the regression's error on held-out shapes per op "
        "type, `check` costs a bundle's recorded steps from the database and compares them "
        "with the trace, `step` runs a recorded worker step whole on this machine (as XLA "
        "compiles it, with --xla) from the graph its bundle kept. See docs/opdb.md.",
        epilog="Examples:\n  gradwire opdb build --db ops.sqlite\n"
        "  gradwire opdb ingest bundles/worker0 --db ops.sqlite\n"
        "  gradwire opdb fit --db ops.sqlite\n"
        "  gradwire opdb check bundles/worker0 --db ops.sqlite\n"
        "  gradwire opdb step bundles/ --xla --db ops.sqlite",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        a = actions.add_parser(name, help=help_text, description=help_text)
        a.add_argument("--db", type=path_arg, default=DEFAULT_DB, metavar="FILE",
                       help=f"the database file (default: {DEFAULT_DB})")
        # -v/-q after the action too (the CLI adds them after `opdb`; SUPPRESS keeps those)
        a.add_argument("-v", "--verbose", dest="verbose_after", action="count",
                       default=argparse.SUPPRESS, help="more log output and progress lines")
        a.add_argument("-q", "--quiet", dest="quiet_after", action="store_true",
                       default=argparse.SUPPRESS,
                       help="no progress or 'wrote' lines (notes and warnings still print)")
        return a

    b = action("build", "time TensorFlow ops alone over a grid of shapes and dtypes on this "
               "machine (needs the [tf] extra); resumable: points already in the database "
               "are skipped, and each point is stored as soon as it is timed; at the end "
               "each op type's regression is chosen (5-fold) and kept for predict")
    which = b.add_mutually_exclusive_group()
    which.add_argument("--ops", default=None, metavar="LIST",
                       help="comma-separated op types to time (default: all of the grid's; "
                       "`gradwire opdb build --list` names them)")
    which.add_argument("--ops-of", type=path_arg, action="append", default=None,
                       metavar="BUNDLE",
                       help="time only the grid's op types that this bundle's recorded steps "
                       "ran (a worker bundle with a trace, or a folder of them; one per flag, "
                       "repeated for more: --ops-of A --ops-of B): what predict needs for "
                       "those jobs, in a fraction of the grid's time")
    b.add_argument("--points", type=_positive, default=64, metavar="N",
                   help="shape points per op type and dtype (default 64; a larger N adds "
                   "points to those of a smaller one)")
    b.add_argument("--reps", type=_positive, default=10, metavar="N",
                   help="timed runs per point, after 3 warm-up runs (default 10; fewer for a "
                   "point whose runs would take over 2 s)")
    b.add_argument("--threads", type=_positive, default=None, metavar="N",
                   help="intra-op threads each op may use (TensorFlow's "
                   "intra_op_parallelism_threads; default: TensorFlow's own, a thread per "
                   "core). Time ops with the threads your job runs them with: the lab's "
                   "nodes run 1. The rows are kept as another machine's")
    b.add_argument("--cache-pass", type=size_arg, default=None, metavar="SIZE",
                   help="the memory passed over before each timed run (e.g. 128MiB; default: "
                   "calibrated on this machine before its first point, about a minute, and "
                   "kept in the database with its rows; docs/opdb.md, \"The cache pass\")")
    b.add_argument("--xla", action="store_true",
                   help="time each point's op as XLA compiles it alone (rows of device "
                   "XLA_CPU beside TensorFlow's own kernels', and the launch of a compiled "
                   "cluster): what `predict --op-fusion` costs a job under XLA's "
                   "auto-clustering with. Resumable apart from the plain build")
    b.add_argument("--list", action="store_true", help="list the grid's op types and exit")
    b.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)  # the child
    i = action("ingest", "add the ops of recorded bundles' steps (their RunMetadata) to the "
               "database")
    i.add_argument("bundles", type=path_arg, nargs="*", help="node bundles, or folders of them")
    _add_sample(i, "ingest the sample bundles shipped with gradwire")
    for name, text in (("show", "list the database's op types, machines and sources"),
                       ("fit", "fit the per-op-type regressions on the rows `build` timed and "
                        "report their error on held-out shapes (5-fold cross-validation)")):
        s = action(name, text)
        s.add_argument("--machine", default=None, metavar="FINGERPRINT",
                       help="only this machine's rows")
        emit.add_format(s, FORMATS, json_flag=False)
        emit.add_out_file(s, "the report")
    c = action("check", "cost a bundle's recorded steps from the database (rows timed by "
               "`build`) and compare them with the trace, and estimate each step's peak "
               "memory from its tensors' lifetimes beside TensorFlow's allocator records")
    _add_bundle(c)
    c.add_argument("--machine", default=None, metavar="FINGERPRINT",
                   help="whose build rows to cost with (default: the trace's own machine where "
                   "the database has its rows, else the database's only machine)")
    emit.add_format(c, FORMATS, json_flag=False)
    emit.add_out_file(c, "the report")
    st = action("step", "time a recorded worker step's whole compute on this machine, run "
                "from the graph the TraceHook kept (needs the [tf] extra): with --xla what "
                "`predict --op-fusion` runs the job's one XLA cluster for, without it what "
                "`predict --accumulate` runs each rerun micro-step for")
    _add_bundle(st, sample=False)
    st.add_argument("--xla", action="store_true",
                    help="with XLA's auto-clustering (global_jit_level ON_1, TF_XLA_FLAGS="
                    "--tf_xla_cpu_global_jit), the PS's ops kept out of its clusters")
    st.add_argument("--threads", type=_positive, default=None, metavar="N",
                    help="intra-op and inter-op threads (default: those the traced session "
                    "ran with, as its bundle recorded them; TensorFlow's own where it did "
                    "not say); predict finds the timing under the machine the trace names")
    st.add_argument("--runs", type=_positive, default=20, metavar="N",
                    help="timed runs after the warm-up (default 20)")
    st.add_argument("--warmup", type=_positive, default=3, metavar="N",
                    help="runs before the timed ones; XLA compiles in the first (default 3)")


def _add_bundle(p: argparse.ArgumentParser, sample: bool = True) -> None:
    """The BUNDLE argument; ``sample``: or ``--sample`` (not for `step`: the shipped sample
    keeps no graph to run)."""
    p.add_argument("bundle", type=path_arg, nargs="?" if sample else None,
                   help="a worker's bundle with a recorded trace (or the folder of a "
                   "profile's bundles holding one)")
    if sample:
        _add_sample(p, "read the sample bundles shipped with gradwire (its worker's trace)")


def _add_sample(p: argparse.ArgumentParser, help_text: str) -> None:
    p.add_argument("--sample", action="store_true", help=help_text)


def _given(args: argparse.Namespace) -> list[Path]:
    """The bundles (or folders) named, or the sample with --sample: one of them, as every
    command that reads bundles has it (``bundle.given_or_sample``)."""
    from gradwire.bundle import given_or_sample, one_given_or_sample

    sample = getattr(args, "sample", False)
    if hasattr(args, "bundles"):
        return given_or_sample(args.bundles, sample, "the BUNDLES (or their folder)")
    return [one_given_or_sample(args.bundle or None, sample,
                                "a worker's BUNDLE (or its profile's folder)")]


def _one_traced(args: argparse.Namespace) -> Any:
    """The one bundle with a TensorFlow trace that ``args.bundle`` is or holds, opened;
    GradwireError when it holds none or two."""
    from gradwire.bundle import open_bundle

    given = args.given
    traced = _traced_bundles(args, given)  # a folder of a profile's bundles too
    if len(traced) > 1:
        raise GradwireError(f"{len(traced)} bundles with a TensorFlow trace here "
                            f"({', '.join(p.name for p in traced)}): give one", path=given[0])
    return open_bundle(traced[0])


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer from 1")
    return n


CREATING = ("build", "ingest", "step")  # the actions that make the database if need be


def run(args: argparse.Namespace) -> int:
    """Run ``gradwire opdb ACTION``; returns the exit code."""
    from gradwire.opdb import check_path

    if getattr(args, "verbose", 0) < 2:  # TensorFlow's C++ notes, one per traced run, go
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.action in ("ingest", "check", "step"):  # what to read, before the database
        args.given = _given(args)
    check_path(args.db, create=args.action in CREATING)  # before the work starts
    return {"build": _build, "ingest": _ingest, "show": _show, "fit": _fit,
            "check": _check, "step": _step}[args.action](args)


def _say(args: argparse.Namespace, msg: str) -> None:
    """A progress or closing line (not with -q)."""
    if not getattr(args, "quiet", False):
        _line(args, msg)


def _note(args: argparse.Namespace, msg: str, kind: str = "note") -> None:
    """A note (or ``kind`` warning): printed with -q too, as every command's are
    (cli.QUIET_HELP)."""
    _line(args, f"{kind}: {msg}")


def _line(args: argparse.Namespace, msg: str) -> None:
    print(f"gradwire opdb {args.action}: {msg}", file=sys.stderr, flush=True)


XLA_LABEL = " @xla"  # the build-point label of a point timed as XLA compiles it
MAX_RESTARTS = 50  # native crashes one build survives (each skips the point that crashed)


def _build(args: argparse.Namespace) -> int:
    """Time the grid in a child process, started again after each native crash of
    TensorFlow (oneDNN has shapes it dies on): the child skips the point it died on."""
    from gradwire.collector.opgrid import families_named

    if args.ops_of:
        args.ops = _ops_of(args)
    if args.ops is not None and not any(n.strip() for n in args.ops.split(",")):
        raise GradwireError(f"--ops {args.ops!r} names no op type (leave --ops out for every "
                            "one; `gradwire opdb build --list` lists them)", usage=True)
    if args.list:
        for fam in families_named(args.ops):
            print(f"{fam.op:40s} {', '.join(fam.dtypes)}")
        return 0
    try:
        families_named(args.ops)
    except ValueError as exc:
        raise GradwireError(f"--ops: {exc}", usage=True) from None
    if args.in_process:
        return _build_here(args)
    import subprocess

    argv = [sys.executable, "-m", "gradwire", "opdb", "build", "--in-process", "--db",
            str(args.db), "--points", str(args.points), "--reps", str(args.reps)]
    argv += ["--ops", args.ops] if args.ops else []
    argv += ["--threads", str(args.threads)] if args.threads else []
    argv += ["--xla"] if args.xla else []
    argv += ["--cache-pass", f"{args.cache_pass:.0f}"] if args.cache_pass else []
    argv += ["-v"] * min(2, getattr(args, "verbose", 0)) + (["-q"] if args.quiet else [])
    for _ in range(MAX_RESTARTS + 1):
        child = subprocess.Popen(argv)
        try:
            code = child.wait()
        except BaseException:  # Ctrl-C, SIGTERM: the child unmarks its point and stops
            child.terminate()
            child.wait()
            raise
        if code >= 0:  # finished, or failed for a reason of its own
            return code
        _note(args, f"TensorFlow died (signal {-code}); starting again, without that point")
    raise GradwireError(f"TensorFlow died {MAX_RESTARTS + 1} times; the points timed are kept "
                        "(run build again to go on)", path=args.db)


def _ops_of(args: argparse.Namespace) -> str:
    """``--ops-of``: the comma list of the grid's op types that the given bundles' recorded
    steps ran (``collector.opgrid.grid_ops_of``), said with those the grid does not time; a
    bundle without recorded steps (a PS's) is skipped, said."""
    from gradwire.bundle import open_bundle
    from gradwire.collector.opgrid import RING_HOP, grid_ops_of
    from gradwire.collector.opingest import recorded_steps
    from gradwire.collector.opshapes import executed_ops
    from gradwire.errors import BundleError

    ran: set[str] = set()
    read = 0
    for path in _traced_bundles(args, args.ops_of):
        try:
            steps = recorded_steps(open_bundle(path))
        except BundleError as exc:  # a PS's bundle given alone, or no TraceHook
            _note(args, f"{path}: skipped: {exc.message}")
            continue
        read += 1
        for _, meta in steps:
            ran.update(o.op for o in executed_ops(meta))
    if not read:
        raise GradwireError("--ops-of: no bundle with recorded steps among "
                            f"{', '.join(map(str, args.ops_of))}")
    grid, others = grid_ops_of(ran)
    if not grid:
        raise GradwireError(f"--ops-of: none of the {len(ran)} op types these bundles ran is "
                            "in the grid (`gradwire opdb build --list`): `gradwire opdb ingest` "
                            "adds their traced ops instead")
    ops = [op for op in grid if op != RING_HOP]
    _note(args, f"--ops-of: {len(ops)} of the grid's op types ran in these bundles: "
          f"{', '.join(ops)}" + (", and the ring all-reduce's hop for their collectives"
                                 if RING_HOP in grid else "")
          + (f"; not in the grid (their rows come only from `gradwire opdb ingest`): "
             f"{', '.join(others)}" if others else ""))
    return ",".join(grid)


def _traced_bundles(args: argparse.Namespace, given: list[Path]) -> list[Path]:
    """The bundles with a TensorFlow trace among ``given`` (bundles, or folders of them: a
    PS's bundle there has no trace and is skipped, said); GradwireError when none."""
    from gradwire.bundle import SESSION_FILE, TRACE_DIR, find_bundles

    paths = []
    for one in given:
        many = find_bundles(one)
        for p in many:
            if len(many) > 1 and not (p / TRACE_DIR / SESSION_FILE).is_file():
                _note(args, f"{p}: no TensorFlow trace (a PS's bundle?): skipped")
            else:
                paths.append(p)
    if not paths:
        raise GradwireError(f"no bundle with a TensorFlow trace among {', '.join(map(str, given))}")
    return paths


def _build_here(args: argparse.Namespace) -> int:
    from gradwire.collector.opgrid import RING_HOP, families_named, points

    families = families_named(args.ops)
    with native_stderr_silenced():  # after the cheap checks: it takes seconds, and notes
        import tensorflow as tf  # from C++ at import (gradwire/quiet.py)

    from gradwire.collector.opbench import XLA_LAUNCH, PointTimer, time_xla_launch
    from gradwire.opdb import OpDatabase, local_machine, threads_said

    machine = local_machine(tf.__version__, args.threads or 0)
    todo = list(points(families, per_family=args.points))
    suffix = XLA_LABEL if args.xla else ""  # XLA's rows are points of their own

    def label(point: Any) -> str:
        return point.label() + suffix

    with OpDatabase(args.db, create=True) as db:
        db.add_machine(machine)
        crashed = db.crashed_points(machine.fingerprint)
        for name in crashed:
            _note(args, f"{name}: skipped: TensorFlow died timing it in an earlier build")
            db.mark_point(machine.fingerprint, name, None, "crashed TensorFlow")
        labels = db.point_labels(machine.fingerprint)
        todo = [p for p in todo if label(p) not in labels]
        hops = [p for p in todo if p.family.op == RING_HOP]  # timed together, after the rest
        todo = [p for p in todo if p.family.op != RING_HOP]
        if args.xla and hops:
            _note(args, f"--xla: the ring all-reduce's hop is not an op XLA compiles: "
                  f"{RING_HOP} left to a build without --xla")
            hops = []
        _say(args, f"{len(todo)} points to time{' as XLA compiles them' if args.xla else ''} "
             f"on {machine.description} ({machine.cores} "
             f"cores, {threads_said(machine.threads)}, TensorFlow {machine.tf_version}, machine "
             f"{machine.fingerprint}); "
             f"{len(labels)} already in {args.db}")
        measured = skipped = 0
        t0 = time.monotonic()  # the calibration counts: it is part of a first build's time
        flush = _cache_pass(args, tf, db, machine) if todo else 0
        if args.xla and XLA_LAUNCH + XLA_LABEL not in labels:
            launch = time_xla_launch(tf, machine, reps=3 * args.reps)
            db.put([launch])
            db.mark_point(machine.fingerprint, XLA_LAUNCH + XLA_LABEL, launch.key(), "timed")
            _say(args, f"a compiled cluster's launch: {launch.median_us:.0f} us (taken off "
                 "each op's XLA time in predict: a job's ops share their cluster's)")
        t_points = time.monotonic()
        with (_Progress(args, len(todo), "timing ops") as bar,
              PointTimer(tf, flush_bytes=flush, threads=machine.threads, xla=args.xla) as timer):
            for point in todo:
                # marked before it runs: a point that kills TensorFlow (a native crash) is
                # found marked but untimed by the next build, which skips it
                db.mark_point(machine.fingerprint, label(point), None, "started")
                try:
                    got = timer.time(point, machine, reps=args.reps)
                except BaseException:
                    db.forget_point(machine.fingerprint, label(point))  # Ctrl-C: not its fault
                    raise
                if isinstance(got, str):
                    skipped += 1
                    _say_verbose(args, f"{label(point)}: skipped: {got}")
                    db.mark_point(machine.fingerprint, label(point), None, got)
                else:
                    db.put([got])
                    db.mark_point(machine.fingerprint, label(point), got.key(), "timed")
                    measured += 1
                bar.advance()
        each = (f" ({(time.monotonic() - t_points) / len(todo):.2f} s a grid point)"
                if todo else "")
        if hops:
            measured += _time_hops(args, db, machine, hops)
        _keep_choices(args, db, machine.fingerprint)
        outcomes = db.point_outcomes(machine.fingerprint)
    timed = outcomes.pop("timed", 0)
    _say(args, f"timed {measured} points, skipped {skipped} in {time.monotonic() - t0:.0f} s"
         f"{each}; "
         f"{args.db} holds {timed} of this machine's grid points, {sum(outcomes.values())} "
         "skipped (too large, not run as that op type, or TensorFlow died: -v names them)")
    return 0


def _keep_choices(args: argparse.Namespace, db: Any, fp: str) -> None:
    """Choose each op type's regression on machine ``fp``'s rows (k-fold, ``replay.opcost``)
    and keep the choices in ``db``, so that predict fits only the chosen one; op types whose
    rows have not changed keep theirs."""
    from gradwire.opdb import BUILD
    from gradwire.replay.opcost import CostModel, chosen_kinds

    rows = list(db.timings(fingerprint=fp, source=BUILD))
    if not rows:
        return
    model = CostModel(rows, db.model_choices(fp))
    with _Progress(args, len(model.groups), "choosing each op type's regression") as bar:
        choices = chosen_kinds(model, tick=bar.advance)
    db.keep_model_choices(fp, choices)


def _cache_pass(args: argparse.Namespace, tf: Any, db: Any, machine: Any) -> int:
    """The pass (bytes) to time this machine's points after: the one its rows in ``db`` were
    timed after, else ``--cache-pass``, else calibrated here (``collector.opbench.
    calibrate_pass``); recorded in ``db`` with the machine."""
    from gradwire.collector.cachepass import pass_ladder, reported_pass_bytes
    from gradwire.collector.opbench import PROBES, calibrate_pass
    from gradwire.collector.opgrid import RING_HOP

    fp = machine.fingerprint
    kept = db.cache_pass(fp)
    timed_before = [p for p in db.point_labels(fp) if not p.startswith(RING_HOP)]
    if kept is None and timed_before:  # rows built before the pass was kept: the old rule
        kept = (reported_pass_bytes(), "twice the reported cache (rows built before "
                "calibration)")  # they were timed after
        db.set_cache_pass(fp, *kept)
    wanted = int(args.cache_pass) if args.cache_pass else None
    if kept is not None:
        size, how = kept
        said = f"cache pass {size / 2**20:.0f} MiB: "  # a calibration's own words start so
        how = f"calibrated: {how.removeprefix(said)}" if how.startswith(said) else how
        if wanted is not None and wanted != size:
            raise GradwireError(f"machine {fp}'s rows here were timed after a "
                                f"{size / 2**20:.0f} MiB cache pass ({how}); build with that, "
                                "or into another file", path=args.db)
        _say(args, f"each timed run first passes over {size / 2**20:.0f} MiB, as this "
             f"machine's rows here were ({how})")
        return size
    if wanted is not None:
        db.set_cache_pass(fp, wanted, "--cache-pass")
        return wanted
    reference = reported_pass_bytes()
    total = 2 * len(PROBES) * len(pass_ladder(reference))
    _say(args, f"calibrating the cache pass: {len(PROBES)} small ops after passes of 16 MiB "
         f"to {reference / 2**20:.0f} MiB (twice the cache the machine reports), twice")
    with _Progress(args, total, "calibrating the cache pass") as bar:
        cal = calibrate_pass(tf, machine, reference, threads=machine.threads, reps=args.reps,
                             tick=bar.advance)
    db.set_cache_pass(fp, cal.chosen, cal.said())
    _say(args, cal.said())
    return cal.chosen


def _time_hops(args: argparse.Namespace, db: Any, machine: Any, hops: list[Any]) -> int:
    """Time the ring all-reduce hop's points (``collector/ringhop.py``) in one go, by two
    TensorFlow processes of their own; their rows and marks go in together. Returns how many."""
    from gradwire.collector.ringhop import PAIRS, measure_hops

    _say(args, f"timing a hop of the collective ring all-reduce at {len(hops)} chunk sizes "
         f"({PAIRS} pairs of TensorFlow processes on loopback, one after another)")
    fp = machine.fingerprint
    for p in hops:
        db.mark_point(fp, p.label(), None, "started")
    elements = [dict(p.values)["elements"] for p in hops]
    try:
        rows = measure_hops(elements, machine, reps=args.reps)
    except BaseException:  # not a crash of a point: the next build times them again
        for p in hops:
            db.forget_point(fp, p.label())
        raise
    db.put(rows)
    for p, row in zip(hops, rows, strict=True):
        db.mark_point(fp, p.label(), row.key(), "timed")
    nothing = [n for n, row in zip(elements, rows, strict=True) if row.median_us <= 0]
    if nothing:
        _note(args, "the ring hop of " + ", ".join(map(str, nothing)) + " float32 "
              "took no longer than loopback TCP's own streaming of its bytes, so its row says "
              "0 µs (a slow loopback on this host?); ring predictions charge it no software time",
              "warning")
    return len(rows)


def _say_verbose(args: argparse.Namespace, msg: str) -> None:
    if getattr(args, "verbose", 0):
        _say(args, msg)


class _Progress:
    """A progress bar on a terminal, else a line per tenth of the work with the time left at
    the rate so far (not with -q)."""

    def __init__(self, args: argparse.Namespace, total: int, what: str) -> None:
        self.args, self.total, self.what = args, total, what
        self.done = 0
        self.t0 = time.monotonic()
        self.bar: Any = None

    def __enter__(self) -> _Progress:
        if not getattr(self.args, "quiet", False) and sys.stderr.isatty() and self.total:
            from rich.console import Console
            from rich.progress import Progress

            self.bar = Progress(transient=True, console=Console(stderr=True))
            self.bar.start()
            self.task = self.bar.add_task(self.what, total=self.total)
        return self

    def advance(self) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.advance(self.task)
        elif self.total and self.done % max(1, self.total // 10) == 0:
            took = time.monotonic() - self.t0
            left = took / self.done * (self.total - self.done)
            _say(self.args, f"{self.what}: {self.done}/{self.total} ({took:.0f} s"
                 + (f", about {left:.0f} s left)" if self.done < self.total and left >= 1 else ")"))

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def _ingest(args: argparse.Namespace) -> int:
    from gradwire.collector.opingest import ingest_bundle
    from gradwire.opdb import OpDatabase

    paths = _traced_bundles(args, args.given)
    found = []
    for path in paths:  # every bundle read before the database is touched: all or nothing
        found.append(ingest_bundle(path, lambda m: _say_verbose(args, m)))
    with OpDatabase(args.db, create=True) as db:
        for (machine, rows), path in zip(found, paths, strict=True):
            db.add_machine(machine)
            n = db.put(rows)
            _say(args, f"{path}: {n} op shape points ({sum(r.reps for r in rows)} executions) "
                 f"from machine {machine.fingerprint} ({machine.description})")
    _say(args, f"wrote {args.db}")
    return 0


def _rows(args: argparse.Namespace) -> list[Any]:
    """The rows ``build`` timed (of ``--machine`` if given): what check and predict cost
    with; ingested trace rows would put a trace's shapes on both sides of a fold."""
    from gradwire.opdb import BUILD, OpDatabase

    with OpDatabase(args.db) as db:
        db.refuse_unknown_machine(args.machine)
        return list(db.timings(fingerprint=args.machine, source=BUILD))


def _show(args: argparse.Namespace) -> int:
    from gradwire.opdb import OpDatabase, threads_said

    emit.ready_out(args, FORMATS)
    with OpDatabase(args.db) as db:
        db.refuse_unknown_machine(args.machine)
        machines = [m.__dict__ for m in db.machines()]
        summary = [s for s in db.summary() if args.machine in (None, s["fingerprint"])]
        steps = [dataclasses.asdict(st) for st in db.steps()
                 if args.machine in (None, st.fingerprint)]
    doc = {"db": str(args.db), "machines": machines, "op_types": summary, "steps": steps}

    def table(con: Any) -> None:
        from rich.table import Table

        t = Table(title=f"{args.db}: machines")
        for col in ("fingerprint", "description", "cores", "tf_version", "threads"):
            t.add_column(col)
        for m in machines:
            t.add_row(m["fingerprint"], m["description"], str(m["cores"] or "?"),
                      m["tf_version"],
                      threads_said(m.get("threads")))
        con.print(t)
        t = Table(title="op types")
        for col in ("op", "device", "machine", "source", "rows", "fastest µs", "slowest µs"):
            t.add_column(col, justify="right" if col in ("rows", "fastest µs", "slowest µs")
                         else "left")
        for s in summary:
            t.add_row(s["op"], s["device"], s["fingerprint"], s["source"], str(s["rows"]),
                      f"{s['min_us']:.1f}", f"{s['max_us']:.1f}")
        con.print(t)
        if steps:
            t = Table(title="worker steps run whole (`opdb step`)")
            for col in ("bundle", "graph", "device", "machine", "runs", "median ms",
                        "10-90% ms"):
                t.add_column(col, justify="right" if col in ("runs", "median ms") else "left")
            for st in steps:
                t.add_row(st["label"], st["graph"], st["device"], st["fingerprint"],
                          str(st["reps"]), f"{st['median_us'] / 1e3:.2f}",
                          f"{st['p10_us'] / 1e3:.2f}-{st['p90_us'] / 1e3:.2f}")
            con.print(t)

    emit.emit(args, FORMATS, table=table, doc=doc)
    return 0


def _fit(args: argparse.Namespace) -> int:
    from gradwire.replay.opcost import MODELS, CostModel

    emit.ready_out(args, FORMATS)
    rows = _rows(args)
    if not rows:
        raise GradwireError("no rows timed by `gradwire opdb build` to fit", path=args.db)
    if emit.shows_progress(args):  # cross-validating every op type: seconds to a minute
        kinds = len({(r.op, r.dtype, r.device, r.fingerprint) for r in rows})
        _say(args, f"fitting the regressions of {kinds} op types on {len(rows):,} rows "
             "(each cross-validated)")
    model = CostModel(rows)
    report = [{"op": k[0], "dtype": k[1], "device": k[2], "machine": k[3], "rows": v.rows,
               "chosen": v.chosen,
               **{f"{m}_median_pct": 100 * v.median(m) for m in MODELS},
               **{f"{m}_p90_pct": 100 * v.p90(m) for m in MODELS}}
              for k, v in sorted(model.validations.items())]
    too_few = sorted({r.op for r in rows} - {r["op"] for r in report})

    def table(con: Any) -> None:
        from rich.table import Table

        t = Table(title="held-out relative error of the op time regression (5-fold), %")
        for col in ("op", "dtype", "device", "rows", "chosen",
                    *(f"{m} median" for m in MODELS), *(f"{m} p90" for m in MODELS)):
            t.add_column(col, justify="left" if col in ("op", "dtype", "device", "chosen")
                         else "right")
        for r in report:
            t.add_row(r["op"], r["dtype"], r["device"], str(r["rows"]), r["chosen"],
                      *(f"{r[f'{m}_median_pct']:.1f}" for m in MODELS),
                      *(f"{r[f'{m}_p90_pct']:.1f}" for m in MODELS))
        con.print(t)
        if too_few:
            con.print(f"too few rows to validate (6 or more needed): {', '.join(too_few)}")

    emit.emit(args, FORMATS, table=table, doc={"op_types": report, "too_few_rows": too_few})
    return 0


def _check(args: argparse.Namespace) -> int:
    from gradwire.collector.opingest import bundle_machine, own_steps
    from gradwire.collector.opshapes import NOT_COMPUTE
    from gradwire.replay.memory import RECEIVES, allocator_peak_bytes, estimated_peak_bytes
    from gradwire.replay.opcheck import check_step, summarise
    from gradwire.replay.opcost import model_for_trace, one_thread
    from gradwire.replay.sentholds import capture_of, ps_sends, step_holds

    emit.ready_out(args, FORMATS)
    b = _one_traced(args)
    recorded = bundle_machine(b.session, b.path)
    model, fp, note = model_for_trace(args.db, args.machine, recorded)
    streams, sends_note = capture_of(b)
    checks = []
    for step, meta, devices, mine in own_steps(b, compute_only=False):
        compute = frozenset(o.name for o in mine if o.op not in NOT_COMPUTE)
        with one_thread():
            c = check_step(step, mine, model, compute)
        if c is not None:
            holds = step_holds(ps_sends(meta, devices), streams, mine)
            checks.append(dataclasses.replace(
                c, estimated_peak_bytes=estimated_peak_bytes(mine, received=False,
                                                             held_until=holds),
                local_peak_bytes=estimated_peak_bytes(mine, received=False),
                sends_held=len(holds),
                allocator_peak_bytes=allocator_peak_bytes(meta, devices).get("all", 0.0),
                received_bytes=float(sum(sum(o.output_bytes) for o in mine
                                         if o.op in RECEIVES))))
    if not checks:
        raise GradwireError("no recorded step with compute ops", path=b.path)
    s = summarise(checks)
    doc = {"bundle": str(b.path), "machine": fp, "bundle_machine": recorded.fingerprint,
           "threads_note": note, "sends_note": sends_note,
           "summary": s, "steps": [c.__dict__ for c in checks]}

    def table(con: Any) -> None:
        from rich.table import Table

        t = Table(title=f"{b.path}: steps costed from {args.db} (machine {fp})")
        for col in ("step", "traced sum ms", "predicted sum ms", "sum error %",
                    "traced path ms", "predicted path ms", "path error %", "covered %"):
            t.add_column(col, justify="right")
        m = Table(title="peak memory of each step, MB")
        for col in ("step", "lifetimes", "sends freed at once", "TF allocator",
                    "memory error %"):
            m.add_column(col, justify="right")
        for c in checks:
            mem = c.memory_error()
            t.add_row(str(c.step), f"{c.traced_sum_us / 1e3:.2f}",
                      f"{c.predicted_sum_us / 1e3:.2f}", f"{100 * c.sum_error():+.1f}",
                      f"{c.traced_path_us / 1e3:.2f}", f"{c.predicted_path_us / 1e3:.2f}",
                      f"{100 * c.path_error():+.1f}", f"{100 * c.covered_share:.0f}")
            m.add_row(str(c.step), f"{c.estimated_peak_bytes / 1e6:.1f}",
                      f"{c.local_peak_bytes / 1e6:.1f}", f"{c.allocator_peak_bytes / 1e6:.1f}",
                      "-" if mem is None else f"{100 * mem:+.1f}")
        con.print(t)
        con.print(m)
        con.print(f"the peaks leave out the tensors received from other tasks (a median "
                  f"{s['received_bytes'] / 1e6:.1f} MB a step), which TensorFlow's allocator "
                  "records do not hold: the worker holds them besides")
        con.print(sends_note or f"the lifetimes hold a median {s['sends_held']:.0f} sent "
                  "tensors a step until their last byte left the worker (its capture); 'sends "
                  "freed at once' frees them at their last local reader")
        if recorded.fingerprint != fp:
            con.print(f"note: the bundle was recorded on machine {recorded.fingerprint} "
                      f"({recorded.description}), not {fp}")
        if note:
            con.print(note)

    emit.emit(args, FORMATS, table=table, doc=doc)
    return 0


def _step(args: argparse.Namespace) -> int:
    """Time the traced worker step's compute in a child process (TensorFlow's threads and
    XLA's flags are read when it is imported) and store it (``OpDatabase.put_step``). A
    database (and its folders) made for it is removed again when the step does not run."""
    from gradwire import atomic
    from gradwire.bundle import GRAPH_FILE, TRACE_DIR
    from gradwire.collector.opingest import bundle_machine
    from gradwire.opdb import OpDatabase

    b = _one_traced(args)
    threads = args.threads or bundle_machine(b.session, b.path).threads or 0
    graph = b.path / TRACE_DIR / GRAPH_FILE
    if not graph.is_file():
        raise GradwireError(f"no recorded graph ({TRACE_DIR}/{GRAPH_FILE}): the bundle was "
                            "recorded before the TraceHook kept it; record the profile again",
                            path=b.path)
    if graph.stat().st_size == 0:
        raise GradwireError("the recorded graph is an empty file: record the profile again",
                            path=graph)
    if not b.step_files:
        raise GradwireError("no recorded step", path=b.path)
    runmeta = b.step_files[0].with_name(b.step_files[0].name.replace(".ops.json",
                                                                      ".runmeta.pb"))
    if not runmeta.is_file():
        raise GradwireError(f"no RunMetadata beside {b.step_files[0].name}", path=b.path)
    db_path = Path(args.db)
    new_db = not os.path.lexists(db_path)
    # its folders, made here, go at exit if still empty (atomic.ready_folder)
    atomic.ready_folder(db_path.parent, "folder of the --db database", holds_outputs=False)
    with OpDatabase(args.db, create=True):
        pass  # the file is usable before minutes of timing
    try:
        row, machine, targets = _time_step(args, b, graph, runmeta, threads)
    except BaseException:  # nothing stored: a database made for the row goes again
        if new_db and _holds_no_rows(db_path):
            with contextlib.suppress(OSError):
                db_path.unlink()
        raise
    with OpDatabase(args.db, create=True) as db:
        db.add_machine(machine)
        db.put_step(row)
    _say(args, f"the step's compute: {row.median_us / 1e3:.2f} ms (10-90%: "
         f"{row.p10_us / 1e3:.2f}-{row.p90_us / 1e3:.2f}, {row.reps} runs, "
         f"{row.cores_busy:.2f} cores busy; {targets} tensors for the PS), stored in "
         f"{args.db} for machine {machine.fingerprint} ({machine.description})")
    return 0


def _holds_no_rows(path: Path) -> bool:
    """Whether the SQLite database at ``path`` has no row in any table (another command may
    have written to a database this one made); False where it cannot be read."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(path)) as conn:
            tables = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")]
            return not any(conn.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone()
                           for t in tables)
    except sqlite3.Error:
        return False


def _time_step(args: argparse.Namespace, b: Any, graph: Path, runmeta: Path,
               threads: int) -> tuple[Any, Any, int]:
    """``opdb step``'s timing of bundle ``b``'s recorded ``graph`` and its first step's
    ``runmeta``: the row to store (``opdb.StepTiming``), the machine it ran on, and how many
    tensors the worker step sends the PS."""
    import json
    import subprocess

    from gradwire.collector.graphstep import graph_digest
    from gradwire.opdb import StepTiming, local_machine, spread

    argv = [sys.executable, "-m", "gradwire.collector.graphstep", str(graph), str(runmeta),
            "--runs", str(args.runs), "--warmup", str(args.warmup)]
    argv += ["--threads", str(threads)] if threads else []
    argv += ["--xla"] if args.xla else []
    how = ("compiled by XLA" if args.xla else "TensorFlow's kernels") + (
        f", {threads} thread(s)" if threads else ", TensorFlow's default threads")
    _say(args, f"{b.path}: running the worker's step {args.warmup + args.runs} times "
         f"({how})")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    quiet = None if getattr(args, "verbose", 0) else subprocess.DEVNULL  # TensorFlow's notes
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=quiet, text=True, env=env,
                          check=False)
    lines = done.stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        out = {}
    if done.returncode != 0 or "times_us" not in out:
        why = out.get("error") or f"TensorFlow's process ended with code {done.returncode}"
        raise GradwireError(f"the step did not run: {why}", path=graph)
    machine = local_machine(out["tf_version"], threads)
    row = StepTiming(graph=graph_digest(graph), fingerprint=machine.fingerprint,
                     device="XLA_CPU" if args.xla else "CPU", label=str(b.path),
                     cores_busy=float(out["cores_busy"]), **spread(out["times_us"]))
    return row, machine, out["targets"]
