"""How the ops' times depend on the cache pass before each timed run (docs/opdb.md, "The cache
pass"; docs/preregistered/issue23-flush-size-report.md).

    python scripts/opdb_flush_study.py [--every 40] [--rounds 3] [--threads 1]

Times every ``--every``-th point of the ``--points 24`` grid (the ring hop left out) after each
pass of the calibration's ladder (16 MiB doubling to twice the cache /sys reports), the passes
interleaved, ``--rounds`` times; prints, per pass, the median over the points of their time
over their time after the largest pass, and the seconds a point took, then each point's times.
Run it alone: the op times are what is measured.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--every", type=int, default=40, help="every N-th grid point (default 40)")
    p.add_argument("--rounds", type=int, default=3, help="timings per point and pass (3)")
    p.add_argument("--threads", type=int, default=1, help="TensorFlow threads (default 1)")
    args = p.parse_args(argv)

    from gradwire.collector.cachepass import pass_ladder, reported_pass_bytes
    from gradwire.quiet import native_stderr_silenced

    with native_stderr_silenced():
        import tensorflow as tf
    from gradwire.collector.opbench import run_point
    from gradwire.collector.opgrid import FAMILIES, RING_HOP, points
    from gradwire.opdb import local_machine

    machine = local_machine(tf.__version__, args.threads)
    sizes = pass_ladder(reported_pass_bytes())
    chosen = [q for q in points(FAMILIES, per_family=24) if q.family.op != RING_HOP]
    chosen = chosen[:: args.every]
    times: dict[int, dict[int, list[float]]] = {s: {} for s in sizes}
    seconds: dict[int, list[float]] = {s: [] for s in sizes}
    for r in range(args.rounds):
        for i, point in enumerate(chosen):
            for size in sizes if r % 2 == 0 else sizes[::-1]:
                t0 = time.perf_counter()
                with native_stderr_silenced():
                    got = run_point(tf, point, machine, flush_bytes=size, threads=args.threads)
                seconds[size].append(time.perf_counter() - t0)
                if not isinstance(got, str):
                    times[size].setdefault(i, []).append(got.median_us)
        print(f"round {r + 1} of {args.rounds} done", file=sys.stderr)

    ref = times[sizes[-1]]
    print(f"{len(ref)} points, {machine.description}, {args.threads} thread(s)")
    print("pass MiB  median time / largest pass's  s per point")
    for size in sizes:
        ratios = [statistics.median(times[size][i]) / statistics.median(ref[i])
                  for i in ref if i in times[size]]
        print(f"{size / 2**20:8.0f}  {statistics.median(ratios):31.3f}  "
              f"{statistics.mean(seconds[size]):11.2f}")
    print("\npoint (us after each pass)")
    for i in sorted(ref):
        print(f"{chosen[i].label()[:60]:60s}",
              " ".join(f"{statistics.median(times[s][i]):8.1f}" for s in sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
