"""Where a W >= 2 prediction's error comes from: the workers' phases, or the rate at a phase.

``python scripts/diag_same_phase.py CONFIG_DIR [...] [--workers 2,3,4] [--near 5]
[--predict-args "--link-windows ratio"]``: CONFIG_DIR is one configuration of
``scripts/bench_accuracy.py``'s output (``bench-out/SET/NAME``: its ``predict.json``, its
``profile/`` and its lab runs ``wW*.json``). For each W it replays the profile as the bench
predicted it (``predict.json``'s own command line, that W alone, in this process:
``--jobs 1``), and keeps each replication's throughput and *spacing*; then it sets each lab
run beside the replications whose spacing is nearest to the run's own.

The spacing of a run: for each of worker 0's steps (end to end, inside the throughput window),
where the other workers' next step ends fall in it as fractions of it; the smallest gap between
two of these points on the step's circle; its median over the steps. 0: two workers end their
steps together (in step); 1/W: evenly spaced (a pair taking turns: 0.5).

The table, per lab run: its spacing and ex/s, the median ex/s of the ``--near`` replications
nearest in spacing ("the replay at that spacing") and the difference. Per W, below it:

- the **prediction** (the replications' mean, as ``gradwire predict``) against the runs'
  median: the error the bench reports;
- the **rate error**: the median over the runs of (the replay at the run's spacing - the run),
  what is left when the replay is put where the run was;
- the replications' median spacing against the runs': whether the replay visits the lab's
  phases.

A diagnostic for issue 21 (docs/notes/issue21-same-phase.md), not part of ``gradwire``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench_accuracy import lab_run_files  # noqa: E402

from gradwire.cli import main as gradwire_main  # noqa: E402
from gradwire.replay import predict as replay_predict  # noqa: E402


class DiagError(Exception):
    """A bad input: its message names the file and the fault."""


@dataclass(frozen=True)
class Point:
    """One run or replication: its spacing (fraction of a step) and throughput (examples/s)."""

    spacing: float
    examples_per_s: float


def spacing(step_ends: Sequence[Sequence[float]], t0: float, t1: float) -> float | None:
    """The median over worker 0's steps inside [t0, t1] of the smallest circular gap between
    the workers' step ends, as a fraction of that step (any time unit); None with fewer than
    two workers or no step where every other worker ends one."""
    if len(step_ends) < 2:
        return None
    ref = [t for t in step_ends[0] if t0 <= t <= t1]
    gaps = []
    for a, b in zip(ref, ref[1:], strict=False):
        points = [0.0]
        for ends in step_ends[1:]:
            inside = [t for t in ends if a <= t < b]
            if not inside:
                break
            points.append((inside[0] - a) / (b - a))
        else:
            points.sort()
            circle = [y - x for x, y in zip(points, points[1:], strict=False)]
            gaps.append(min(circle + [1.0 - points[-1]]))
    return statistics.median(gaps) if gaps else None


def at_spacing(replications: Sequence[Point], s: float, near: int) -> float:
    """The median throughput of the ``near`` replications whose spacing is nearest ``s``."""
    nearest = sorted(replications, key=lambda p: abs(p.spacing - s))[:near]
    return statistics.median(p.examples_per_s for p in nearest)


@dataclass(frozen=True)
class LabRun:
    """One lab run of a bench configuration: its file, its result, each worker's step end
    times (s, in worker order), its throughput window (s) and its examples/s."""

    path: Path
    result: dict
    ends: list[list[float]]
    window: tuple[float, float]
    examples_per_s: float


def lab_clocks(config_dir: Path, workers: int) -> list[LabRun]:
    """The lab runs at ``workers`` of a bench configuration with their step clocks;
    DiagError names a file that is not a lab result with them."""
    out = []
    for path in lab_run_files(config_dir, workers):
        try:
            run = json.loads(path.read_text())
            per = run["per_worker"]
            ends = [per[w]["step_end_times_s"] for w in sorted(per)]
            t0, t1 = run["throughput_window_s"]
            ex = float(run["throughput_examples_per_s"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise DiagError(f"{path}: not a lab result with step clocks "
                            f"({type(e).__name__}: {e})") from None
        out.append(LabRun(path, run, ends, (t0, t1), ex))
    return out


def lab_points(config_dir: Path, workers: int) -> list[tuple[str, Point]]:
    """The lab runs at ``workers`` of a bench configuration, each with its spacing over the
    lab's throughput window."""
    out = []
    for run in lab_clocks(config_dir, workers):
        s = spacing(run.ends, *run.window)
        if s is not None:
            out.append((run.path.name, Point(s, run.examples_per_s)))
    return out


def profile_dir(config_dir: Path) -> Path:
    """The profile a bench configuration is predicted from: its own (``profile/``), else that
    of the configuration its ``config.json`` names (``profile_of``: a what-if or a cross
    prediction), beside it."""
    own = config_dir / "profile"
    if own.exists():
        return own
    try:
        source = json.loads((config_dir / "config.json").read_text()).get("profile_of")
    except (OSError, ValueError, AttributeError):
        source = None
    return config_dir.parent / source / "profile" if isinstance(source, str) and source else own


def predict_argv(config_dir: Path, workers: int, extra: Sequence[str]) -> list[str]:
    """``predict.json``'s command line for ``workers`` alone and the sim alone, on this
    configuration's profile (``profile_dir``), run in this process, plus ``extra``."""
    path = config_dir / "predict.json"
    try:
        argv = list(json.loads(path.read_text())["gradwire"]["argv"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DiagError(f"{path}: not a bench prediction with its command line "
                        f"({type(e).__name__}: {e})") from None
    if argv[:1] != ["predict"] or len(argv) < 2:
        raise DiagError(f"{path}: its command line is not a 'predict BUNDLE ...'")
    out = ["predict", str(profile_dir(config_dir)),
           *without_options(argv[2:], {"--workers", "--model", "--format", "--jobs", "-o"})]
    return out + ["--workers", str(workers), "--model", "sim", "--jobs", "1", "-q",
                  "--format", "json", *extra]


def without_options(argv: Sequence[str], names: set[str]) -> list[str]:
    """``argv`` without each option of ``names`` and the value after it."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in names:
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


Observer = Callable[[replay_predict.Simulator, tuple[float, float], float], None]


def observe_replications(argv: Sequence[str], observe: Observer, record: bool = False) -> None:
    """Run ``argv`` (a ``gradwire predict`` command line, in this process) with ``observe``
    among ``replay.predict.REPLICATION_OBSERVERS`` (``record``: every op of the replications
    recorded, ``RECORD_REPLICATIONS``), its own output sent to stderr; DiagError where it
    fails."""
    replay_predict.REPLICATION_OBSERVERS.append(observe)
    replay_predict.RECORD_REPLICATIONS = record
    try:
        with contextlib.redirect_stdout(sys.stderr):  # predict's own JSON is not this report
            code = gradwire_main(list(argv))
    finally:
        replay_predict.REPLICATION_OBSERVERS.remove(observe)
        replay_predict.RECORD_REPLICATIONS = False
    if code != 0:
        raise DiagError(f"gradwire {shlex.join(argv)}: exit {code}")


def replications(argv: Sequence[str], batch_size: int) -> list[Point]:
    """Replay ``argv`` (a ``gradwire predict`` command line) and keep every replication's
    spacing and throughput (examples/s)."""
    kept: list[Point] = []

    def observe(sim: replay_predict.Simulator, window_us: tuple[float, float],
                steps_per_s: float) -> None:
        s = spacing(sim.step_ends, *window_us)
        if s is not None:
            kept.append(Point(s, steps_per_s * batch_size))

    observe_replications(argv, observe)
    return kept


def config_batch(config_dir: Path) -> int:
    """A bench configuration's batch size (its ``config.json``); DiagError if unreadable."""
    cfg_path = config_dir / "config.json"
    try:
        return int(json.loads(cfg_path.read_text())["batch_size"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DiagError(f"{cfg_path}: not a bench configuration ({type(e).__name__}: {e})"
                        ) from None


def report(config_dir: Path, workers: Sequence[int], near: int, extra: Sequence[str]) -> str:
    """The markdown section of one configuration."""
    batch = config_batch(config_dir)
    lines = [f"## {config_dir.name}" + (f" ({' '.join(extra)})" if extra else ""), "",
             "| W | run | spacing | lab ex/s | replay at that spacing | % |",
             "|---:|---|---:|---:|---:|---:|"]
    summary = []
    for w in workers:
        runs = lab_points(config_dir, w)
        if not runs:
            continue
        reps = replications(predict_argv(config_dir, w, extra), batch)
        if not reps:
            raise DiagError(f"{config_dir}: the replay at W = {w} kept no replication")
        diffs = []
        for name, p in runs:
            r = at_spacing(reps, p.spacing, near)
            diffs.append(100 * (r / p.examples_per_s - 1))
            lines.append(f"| {w} | {name} | {p.spacing:.2f} | {p.examples_per_s:.1f} | "
                         f"{r:.1f} | {diffs[-1]:+.1f} |")
        lab = statistics.median(p.examples_per_s for _, p in runs)
        pred = statistics.fmean(p.examples_per_s for p in reps)
        summary.append(
            f"- W = {w}: prediction {pred:.1f} against the runs' median {lab:.1f} "
            f"({100 * (pred / lab - 1):+.1f}%); rate error at the runs' spacings "
            f"{statistics.median(diffs):+.1f}% (median of {len(diffs)}); spacing: replay "
            f"{statistics.median(p.spacing for p in reps):.2f} (median of {len(reps)} "
            f"replications), runs {statistics.median(p.spacing for _, p in runs):.2f}")
    return "\n".join(lines + [""] + summary) + "\n"


def config_args(ap: argparse.ArgumentParser, workers: bool = True) -> None:
    """The arguments every configuration diagnostic takes: the folders, ``--workers`` (where
    ``workers``: a diagnostic of one W has none) and ``--predict-args``."""
    ap.add_argument("configs", nargs="+", type=Path, help="bench-out/SET/NAME folders")
    if workers:
        ap.add_argument("--workers", default="2,3,4", help="W to compare (default 2,3,4)")
    ap.add_argument("--predict-args", default="",
                    help="more gradwire predict options, one string (a variant)")


def print_reports(prog: str, args: argparse.Namespace,
                  report_of: Callable[[Path, list[int], list[str]], str]) -> int:
    """Print ``report_of(folder, workers, predict args)`` for each of ``args.configs``
    (``config_args``; workers empty without ``--workers``); a bad ``--workers`` (2) or a
    ``DiagError`` (1) is one line on stderr named ``prog``. The exit status."""
    try:
        workers = [int(x) for x in args.workers.split(",")] if "workers" in args else []
    except ValueError:
        print(f"{prog}: --workers {args.workers!r}: not a comma-separated list of integers",
              file=sys.stderr)
        return 2
    try:
        for d in args.configs:
            print(report_of(d, workers, shlex.split(args.predict_args)))
    except DiagError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    config_args(ap)
    ap.add_argument("--near", type=int, default=5,
                    help="replications nearest in spacing per run (default 5)")
    args = ap.parse_args(argv)
    return print_reports("diag_same_phase", args,
                         lambda d, w, extra: report(d, w, args.near, extra))


if __name__ == "__main__":
    sys.exit(main())
