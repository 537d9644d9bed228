"""Do an op's timed runs drift with their index? Times random grid points with many runs each,
in one process as ``gradwire opdb build`` does (``PointTimer``: three warm-up runs, then each
timed run after the cache pass), and prints, per run index, the median over the points of
that run's time over the point's median of its second half; then the median over the points
of the first five runs' median over the first ten's.

    .venv/bin/python scripts/opdb_run_trend.py [--points 60] [--runs 20] [--seed 1]
        [--threads 1] [--cache-pass 128MiB]
"""

from __future__ import annotations

import random
import statistics
import sys

from benchcli import OneLineParser


def main() -> int:
    ap = OneLineParser(prog="opdb_run_trend.py", description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=60, help="grid points drawn (default 60)")
    ap.add_argument("--runs", type=int, default=20, help="timed runs a point (default 20)")
    ap.add_argument("--seed", type=int, default=1, help="the draw's seed (default 1)")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    ap.add_argument("--cache-pass", default="128MiB", help="the pass (default 128MiB)")
    args = ap.parse_args()
    if args.runs < 10:
        ap.error("--runs: at least 10")
    from gradwire.quiet import native_stderr_silenced
    with native_stderr_silenced():
        import tensorflow as tf
    from gradwire.collector.opbench import PointTimer
    from gradwire.collector.opgrid import FAMILIES, RING_HOP, points
    from gradwire.opdb import OpTiming, local_machine
    from gradwire.units import parse_size_bytes

    seen: list[list[float]] = []
    of_times = OpTiming.of_times.__func__  # type: ignore[attr-defined]

    def keep(cls: type, times_us: list[float], **key: object) -> OpTiming:
        seen.append(list(times_us))  # in the order they were timed
        return of_times(cls, times_us, **key)

    OpTiming.of_times = classmethod(keep)  # type: ignore[method-assign, assignment]
    machine = local_machine(tf.__version__, args.threads)
    grid = list(points(tuple(f for f in FAMILIES if f.op != RING_HOP), per_family=8))
    random.Random(args.seed).shuffle(grid)
    with PointTimer(tf, flush_bytes=int(parse_size_bytes(args.cache_pass)),
                    threads=args.threads) as timer:
        for point in grid[:args.points]:
            timer.time(point, machine, reps=args.runs, budget_s=2.0 * args.runs / 10)
    full = [t for t in seen if len(t) == args.runs]
    half = args.runs // 2
    print(f"{len(seen)} points timed, {len(full)} with all {args.runs} runs "
          f"(--cache-pass {args.cache_pass}, --threads {args.threads})")
    print("| run | median over the points of its time / the point's second half's median |")
    print("|---:|---:|")
    for i in range(args.runs):
        ratio = statistics.median(t[i] / statistics.median(t[half:]) for t in full)
        print(f"| {i + 1} | {ratio:.3f} |")
    five = statistics.median(statistics.median(t[:5]) / statistics.median(t[:10]) for t in full)
    print(f"\nfirst five runs' median / first ten's, median over the points: {five:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
