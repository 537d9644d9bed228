"""How the replay's rate depends on the length of its replications, against the lab's runs.

``python scripts/diag_run_length.py CONFIG_DIR [...] [--workers 2,3,4] [--lengths 60,200]
[--predict-args "--link fair"]``: CONFIG_DIR is one configuration of
``scripts/bench_accuracy.py``'s output (``bench-out/SET/NAME``: its ``predict.json``, its
profile and its lab runs ``wW*.json``). For each W it replays the profile as the bench
predicted it (``predict.json``'s own command line, that W alone, in this process: for an
asynchronous PS, replications as long as the lab's runs and measured with its window,
``--run-steps N``), then again with ``--steps L`` in place of ``--run-steps`` for each L of
``--lengths`` (replications of L steps per worker, 10% warm-up). Per W and length: the
replications' mean rate (the prediction) as a signed % error against the lab runs' median,
and the replications' median spacing (``diag_same_phase.spacing``: 0 in step, 1/W evenly
spaced), against the runs' own; a replay drifting into step or out of it shows as a
spacing that moves with the length.

A diagnostic for issue 21 (docs/notes/issue21-run-length-drift.md), not part of ``gradwire``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))

from diag_same_phase import (  # noqa: E402
    DiagError,
    config_args,
    config_batch,
    lab_points,
    predict_argv,
    print_reports,
    replications,
    without_options,
)

RUN_STEPS, STEPS = "--run-steps", "--steps"


def with_steps(argv: Sequence[str], length: int) -> list[str]:
    """``argv`` (a ``gradwire predict`` command line) with replications of ``length`` steps
    per worker: its ``--run-steps N`` and ``--steps N`` dropped, ``--steps length`` added."""
    return [*without_options(argv, {RUN_STEPS, STEPS}), STEPS, str(length)]


def report(config_dir: Path, workers: Sequence[int], lengths: Sequence[int],
           extra: Sequence[str]) -> str:
    """The markdown section of one configuration: a row per W and replication length."""
    batch = config_batch(config_dir)
    lines = [f"## {config_dir.name}" + (f" ({' '.join(extra)})" if extra else ""), "",
             "| W | lab runs | lab ex/s (median) | lab spacing | replications | "
             "prediction ex/s | % | replay spacing |",
             "|---:|---:|---:|---:|---|---:|---:|---:|"]
    for w in workers:
        runs = lab_points(config_dir, w)
        if not runs:
            continue
        lab = statistics.median(p.examples_per_s for _, p in runs)
        lab_spacing = statistics.median(p.spacing for _, p in runs)
        bench = predict_argv(config_dir, w, extra)
        own = (f"the bench's ({RUN_STEPS} {bench[bench.index(RUN_STEPS) + 1]})"
               if RUN_STEPS in bench else "the bench's")
        for label, argv in ((own, bench),
                            *((f"{STEPS} {n}", with_steps(bench, n)) for n in lengths)):
            reps = replications(argv, batch)
            if not reps:
                raise DiagError(f"{config_dir}: the replay at W = {w} ({label}) kept no "
                                f"replication")
            pred = statistics.fmean(p.examples_per_s for p in reps)
            lines.append(f"| {w} | {len(runs)} | {lab:.1f} | {lab_spacing:.2f} | {label} | "
                         f"{pred:.1f} | {100 * (pred / lab - 1):+.1f} | "
                         f"{statistics.median(p.spacing for p in reps):.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    config_args(ap)
    ap.add_argument("--lengths", default="60,200",
                    help="replication lengths, steps per worker, to set beside the bench's "
                    "(default 60,200)")
    args = ap.parse_args(argv)
    try:
        lengths = [int(x) for x in args.lengths.split(",")]
    except ValueError:
        lengths = []
    if not lengths or min(lengths) < 10:
        print(f"diag_run_length: --lengths {args.lengths!r}: not a comma-separated list of "
              f"steps, each at least 10", file=sys.stderr)
        return 2
    return print_reports("diag_run_length", args,
                         lambda d, w, extra: report(d, w, lengths, extra))


if __name__ == "__main__":
    sys.exit(main())
