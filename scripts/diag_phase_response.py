"""Which way a pair's phase moves, step by step: the replay's against the lab's.

``python scripts/diag_phase_response.py CONFIG_DIR [...] [--bins 10] [--predict-args
"--link-shares equal"]``: CONFIG_DIR is one configuration of ``scripts/bench_accuracy.py``'s
output (``bench-out/SET/NAME``: its ``predict.json``, its ``profile/`` and its W = 2 lab runs
``w2.json``, ``w2-r*.json``). It replays the profile at W = 2 as the bench predicted it
(``predict.json``'s own command line, in this process: ``--jobs 1``) with every
replication's step clocks kept, and reads the lab runs' step clocks (``per_worker``'s
``step_end_times_s``).

The *phase* of a step of worker 1: where its end falls inside worker 0's step that holds it,
as a fraction of that step (0 or 1: the two end together, in step; 0.5: they take turns),
for worker 1's step ends inside the throughput window (the replay's, the lab run's). Its
*change*: the next such end's phase minus this one's, wrapped into [-0.5, 0.5) (each
worker's step about as long as the other's: one of worker 1's ends per step of worker 0's).
The table gives, for each bin of phase, the mean change per step (in hundredths of a step)
and how many steps fell there, for the replay's replications and the lab's runs. A negative mean
below 0.5 and a positive one above it pull the pair into step; the opposite pushes it into
turns; near 0 everywhere the phase only wanders. Each run's first ``--skip`` phases inside
its window are left out too (where its start may still set the phase).

Found with it (docs/notes/issue21-two-ps-convoy.md): a fluid link shared by processor
sharing leaves the phase alone over one PS, and pulls a pair into step over two, where a
worker's step waits for the later of its two transfers.

A diagnostic for issue 21, not part of ``gradwire``.
"""

from __future__ import annotations

import argparse
import bisect
import math
import shlex
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
    lab_clocks,
    observe_replications,
    predict_argv,
    print_reports,
)

from gradwire.replay import predict as replay_predict  # noqa: E402

SKIP = 2  # each run's first phases left out: where its start, not its dynamics, sets them


def phases(step_ends: Sequence[Sequence[float]], t0: float = -math.inf,
           t1: float = math.inf) -> list[float]:
    """Worker 1's phase at each of its step ends inside [``t0``, ``t1``] that falls inside one
    of worker 0's steps (any time unit; the module docstring); [] with fewer than two workers."""
    if len(step_ends) < 2:
        return []
    ref = sorted(step_ends[0])
    out = []
    for t in sorted(x for x in step_ends[1] if t0 <= x <= t1):
        k = bisect.bisect_right(ref, t) - 1
        if k < 0 or k + 1 >= len(ref) or ref[k + 1] <= ref[k]:
            continue
        out.append((t - ref[k]) / (ref[k + 1] - ref[k]))
    return out


def changes(phase: Sequence[float], skip: int = SKIP) -> list[tuple[float, float]]:
    """(phase, the change to the next one's, wrapped into [-0.5, 0.5)) for each of one run's
    phases after its first ``skip``."""
    kept = list(phase[skip:])
    return [(x, (y - x + 0.5) % 1.0 - 0.5) for x, y in zip(kept, kept[1:], strict=False)]


def response(pairs: Sequence[tuple[float, float]], bins: int) -> list[tuple[float, int]]:
    """Per bin of phase (``bins`` equal bins of [0, 1)): the mean change and the count
    (nan and 0 for an empty bin)."""
    out = []
    for b in range(bins):
        xs = [d for x, d in pairs if b / bins <= x < (b + 1) / bins]
        out.append((statistics.fmean(xs) if xs else float("nan"), len(xs)))
    return out


def replay_pairs(argv: Sequence[str], skip: int) -> list[tuple[float, float]]:
    """``changes`` of every replication of ``argv`` (a ``gradwire predict`` command line at
    W = 2) inside its throughput window, pooled; DiagError where none has any."""
    pairs: list[tuple[float, float]] = []

    def observe(sim: replay_predict.Simulator, window_us: tuple[float, float],
                steps_per_s: float) -> None:
        pairs.extend(changes(phases([list(x) for x in sim.step_ends], *window_us), skip))

    observe_replications(argv, observe)
    if not pairs:
        raise DiagError(f"gradwire {shlex.join(argv)}: no replication kept two workers' steps")
    return pairs


def lab_pairs(config_dir: Path, skip: int) -> tuple[list[tuple[float, float]], int]:
    """``changes`` of every W = 2 lab run of ``config_dir`` inside its throughput window,
    pooled, and how many runs; DiagError names a run whose step clocks are not numbers."""
    pairs: list[tuple[float, float]] = []
    runs = lab_clocks(config_dir, 2)
    for run in runs:
        try:
            ends = [[float(t) for t in xs] for xs in run.ends]
        except (TypeError, ValueError) as e:
            raise DiagError(f"{run.path}: step clocks that are not numbers "
                            f"({type(e).__name__}: {e})") from None
        pairs += changes(phases(ends, *run.window), skip)
    return pairs, len(runs)


def _cells(rows: Sequence[tuple[float, int]]) -> list[str]:
    """A table row's cells: each bin's mean change in hundredths of a step, and its count."""
    return ["-" if n == 0 else f"{100 * m:+.1f} ({n})" for m, n in rows]


def report(config_dir: Path, bins: int, skip: int, extra: Sequence[str]) -> str:
    """The table for one configuration (module docstring)."""
    rep = response(replay_pairs(predict_argv(config_dir, 2, extra), skip), bins)
    lab, runs = lab_pairs(config_dir, skip)
    heads = [f"{b / bins:.1f}-{(b + 1) / bins:.1f}" for b in range(bins)]
    what = f" ({shlex.join(extra)})" if extra else ""
    lines = [f"## {config_dir.name}{what}: mean change of the pair's phase per step, "
             f"hundredths of a step (steps)", "", "| | " + " | ".join(heads) + " |",
             "|---|" + "---:|" * bins,
             "| replay | " + " | ".join(_cells(rep)) + " |"]
    if runs:
        lines.append(f"| lab ({runs} runs) | " + " | ".join(_cells(response(lab, bins))) + " |")
    else:
        lines.append("(no W = 2 lab run in the folder)")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    config_args(ap, workers=False)  # W = 2 alone
    ap.add_argument("--bins", type=int, default=10, help="bins of phase (default 10)")
    ap.add_argument("--skip", type=int, default=SKIP,
                    help=f"each run's first steps left out (default {SKIP})")
    args = ap.parse_args(argv)
    if args.bins < 1 or args.skip < 0:
        print("diag_phase_response: --bins must be at least 1 and --skip at least 0",
              file=sys.stderr)
        return 2
    return print_reports("diag_phase_response", args,
                         lambda d, _, extra: report(d, args.bins, args.skip, extra))


if __name__ == "__main__":
    sys.exit(main())
