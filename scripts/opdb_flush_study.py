"""How the ops' times depend on the cache pass before each timed run (docs/opdb.md, "The cache
pass"; docs/preregistered/issue23-flush-size-report.md).

    python scripts/opdb_flush_study.py [--every 40] [--rounds 3] [--threads 1]

Times every ``--every``-th point of the ``--points 24`` grid (the ring hop left out) after each
pass of the calibration's ladder (16 MiB doubling to twice the cache /sys reports),
``--rounds`` times, every other round in the reverse order of passes
(``collector.opbench.times_after_passes``, as the calibration does); prints, per pass, the
median over the points of their time over their time after the largest pass, and the seconds
a point took, then each point's times.
Run it alone: the op times are what is measured.
"""

from __future__ import annotations

import argparse
import statistics
import sys


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
    from gradwire.collector.opbench import times_after_passes
    from gradwire.collector.opgrid import FAMILIES, RING_HOP, points
    from gradwire.opdb import local_machine

    machine = local_machine(tf.__version__, args.threads)
    sizes = pass_ladder(reported_pass_bytes())
    chosen = [q for q in points(FAMILIES, per_family=24) if q.family.op != RING_HOP]
    chosen = chosen[:: args.every]
    total, done = args.rounds * len(sizes) * len(chosen), [0]

    def tick() -> None:
        done[0] += 1
        if done[0] % max(1, total // 10) == 0:
            print(f"{done[0]}/{total} timings", file=sys.stderr)

    with native_stderr_silenced():
        per_point, seconds = times_after_passes(tf, chosen, machine, sizes, rounds=args.rounds,
                                                threads=args.threads, tick=tick)
    times = {s: {i: t for i, t in enumerate(per_point[s]) if t} for s in sizes}

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
