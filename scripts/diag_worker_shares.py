"""How evenly the workers of an asynchronous run share the PS link: each worker's own rate.

``python scripts/diag_worker_shares.py CONFIG_DIR [...] [--workers 2,4,8]
[--predict-args "--link hostqueue"] [--lab-only]``: CONFIG_DIR is one configuration of
``scripts/bench_accuracy.py``'s output (``bench-out/SET/NAME``: its ``predict.json``, its
``profile/`` and its lab runs ``wW*.json``). For each W, each lab run's workers' own rates in
its throughput window (steps/s, as ``gradwire.throughput.worker_rates`` counts them: the lab's
and the replayer's estimator), and the same for every replication of the replay the bench
predicted (``predict.json``'s command line, that W alone, in this process).

The **spread** of a run is its fastest worker's rate over its slowest's: 1.00 when the workers
share the link equally over the window, 2.00 when one made twice the steps of another. Equal
sharing (the replay's default links) gives every worker the same share whenever they run
together, so its spread comes only from where each worker's steps fell; a link whose
connections keep unequal shares step after step (a drop-tail queue's, docs/predict.md, "The
PS's own queue") spreads them. Per W: the runs' spreads and ex/s, the replications' median
and 5-95% spread (the percentiles of ``gradwire predict``'s phase range), the prediction
against the runs' median, and how many times over the W connections' windows fill the PS's
queue: W x the larger of the two windows the profile's
captures show (``predict.json``'s ``profile.link_window_bytes``: what a connection keeps on
its way) over the lab's queue (the runs' ``queue_bytes``). ``--lab-only`` leaves the replay
out (its columns empty): a quick survey of many folders.

A diagnostic for issue 21 (the sim low at W = 8: docs/notes/issue21-worker-shares.md), not
part of ``gradwire``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from diag_same_phase import (  # noqa: E402
    DiagError,
    config_args,
    config_batch,
    lab_clocks,
    observe_replications,
    predict_argv,
    print_reports,
)

from gradwire.replay import predict as replay_predict  # noqa: E402
from gradwire.throughput import worker_rates  # noqa: E402


def spread(ends: Sequence[Sequence[float]], t0: float, t1: float) -> float | None:
    """The fastest worker's rate over the slowest's inside [t0, t1] (``worker_rates``); None
    with fewer than two workers or where a worker has no end inside the window."""
    if len(ends) < 2:
        return None
    rates = worker_rates(ends, t0, t1)
    if rates is None or min(rates) <= 0:
        return None
    return max(rates) / min(rates)


def lab_spreads(config_dir: Path, workers: int) -> list[tuple[str, float, float, float]]:
    """Each lab run at ``workers`` of a configuration: its file name, spread, ex/s and queue
    (bytes)."""
    out = []
    for run in lab_clocks(config_dir, workers):
        try:
            queue = float(run.result["queue_bytes"])
        except (KeyError, TypeError, ValueError) as e:
            raise DiagError(f"{run.path}: a lab result without its queue "
                            f"({type(e).__name__}: {e})") from None
        s = spread(run.ends, *run.window)
        if s is not None:
            out.append((run.path.name, s, run.examples_per_s, queue))
    return out


def replay_spreads(argv: Sequence[str], batch_size: int) -> list[tuple[float, float]]:
    """Every replication of ``argv`` (a ``gradwire predict`` command line): its spread and
    examples/s."""
    kept: list[tuple[float, float]] = []

    def observe(sim: replay_predict.Simulator, window_us: tuple[float, float],
                steps_per_s: float) -> None:
        s = spread(sim.step_ends, *window_us)
        if s is not None:
            kept.append((s, steps_per_s * batch_size))

    observe_replications(argv, observe)
    return kept


def profile_window(config_dir: Path) -> float:
    """The larger of the two windows (bytes) the profile's captures show, as the bench's
    prediction read them (``predict.json``'s ``profile.link_window_bytes``)."""
    path = config_dir / "predict.json"
    try:
        return max(float(x) for x in json.loads(path.read_text())["profile"]["link_window_bytes"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DiagError(f"{path}: no profile windows in it ({type(e).__name__}: {e})") from None


def report(config_dir: Path, workers: Sequence[int], extra: Sequence[str],
           replay: bool = True) -> str:
    """The markdown section of one configuration (``replay``: with the replay's columns)."""
    batch = config_batch(config_dir)
    window = profile_window(config_dir)
    lines = [f"## {config_dir.name}" + (f" ({' '.join(extra)})" if extra else ""), "",
             "| W | windows / queue | lab runs: spread (ex/s) | replay: median spread (5-95%) | "
             "prediction | lab median | % |", "|---:|---:|---|---|---:|---:|---:|"]
    for w in workers:
        runs = lab_spreads(config_dir, w)
        if not runs:
            continue
        lab = statistics.median(ex for _, _, ex, _ in runs)
        replayed = ("", "", "")  # the replay's spreads, its prediction and its % error
        if replay:
            reps = replay_spreads(predict_argv(config_dir, w, extra), batch)
            if not reps:
                raise DiagError(f"{config_dir}: the replay at W = {w} kept no replication")
            spreads = [s for s, _ in reps]
            pred = statistics.fmean(ex for _, ex in reps)
            low, high = replay_predict.phase_percentiles(spreads)  # as the phase range's
            replayed = (f"{statistics.median(spreads):.2f} ({low:.2f}-{high:.2f})", f"{pred:.1f}",
                        f"{100 * (pred / lab - 1):+.1f}")
        lab_cell = ", ".join(f"{s:.2f} ({ex:.1f})" for _, s, ex, _ in runs)
        lines.append(f"| {w} | {w * window / runs[0][3]:.1f} | {lab_cell} | {replayed[0]} | "
                     f"{replayed[1]} | {lab:.1f} | {replayed[2]} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    config_args(ap)
    ap.add_argument("--lab-only", action="store_true",
                    help="the lab runs' columns only, no replay (a quick survey)")
    args = ap.parse_args(argv)
    return print_reports("diag_worker_shares", args,
                         lambda d, ws, extra: report(d, ws, extra, not args.lab_only))


if __name__ == "__main__":
    sys.exit(main())
