"""Does the op database's cache pass need to be as large as the cache /sys reports?
(docs/opdb.md, "The cache pass"; docs/preregistered/issue23-flush-size.md)

    python scripts/opdb_flush_study.py [--every 20] [--rounds 3] [--threads 1] [--json OUT]

1. Measures the kept cache (collector/cachesize.py: a random dependent walk over working sets
   doubling up to twice the reported cache) and prints the latency curve.
2. Times every ``--every``-th point of the ``--points 24`` grid (the ring hop left out) after
   a pass of ``pass_bytes`` (twice the kept cache) and after one of twice the reported cache,
   interleaved, ``--rounds`` times each; prints each point's median over rounds for both, their
   ratio, and the seconds a point took with each pass.

Run it alone: the op times and the walk's latencies are what is measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--every", type=int, default=20, help="every N-th grid point (default 20)")
    p.add_argument("--rounds", type=int, default=3, help="timings per point and pass (3)")
    p.add_argument("--threads", type=int, default=1, help="TensorFlow threads (default 1)")
    p.add_argument("--json", type=Path, help="write the measurements here")
    args = p.parse_args(argv)

    from gradwire.collector.cachesize import pass_bytes, probe_cache
    from gradwire.quiet import native_stderr_silenced

    probe = probe_cache()
    print("working set MiB  ns per load")
    for size, ns in zip(probe.sizes, probe.ns, strict=True):
        print(f"{size / 2**20:15.0f}  {ns:11.1f}")
    print(probe.said())
    small, large = pass_bytes(probe), max(2 * probe.reported, pass_bytes(probe))
    print(f"passes: {small / 2**20:.0f} MiB (twice the kept cache) and "
          f"{large / 2**20:.0f} MiB (twice the reported)")

    with native_stderr_silenced():
        import tensorflow as tf
    from gradwire.collector.opbench import run_point
    from gradwire.collector.opgrid import FAMILIES, RING_HOP, points
    from gradwire.opdb import local_machine

    machine = local_machine(tf.__version__, args.threads)
    grid = [q for q in points(FAMILIES, per_family=24) if q.family.op != RING_HOP]
    chosen = grid[:: args.every]
    times: dict[int, dict[str, list[float]]] = {}
    seconds: dict[int, list[float]] = {small: [], large: []}
    for r in range(args.rounds):
        order = (small, large) if r % 2 == 0 else (large, small)
        for i, point in enumerate(chosen):
            for size in order:
                t0 = time.perf_counter()
                with native_stderr_silenced():
                    got = run_point(tf, point, machine, flush_bytes=size, threads=args.threads)
                seconds[size].append(time.perf_counter() - t0)
                if not isinstance(got, str):
                    times.setdefault(i, {}).setdefault(str(size), []).append(got.median_us)
        print(f"round {r + 1} of {args.rounds} done", file=sys.stderr)

    ratios = []
    print(f"\n{'point':70s} {'small us':>9s} {'large us':>9s} {'ratio':>6s}")
    for i, by_size in sorted(times.items()):
        a, b = by_size.get(str(small)), by_size.get(str(large))
        if not a or not b:
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        ratios.append(ma / mb)
        print(f"{chosen[i].label()[:70]:70s} {ma:9.1f} {mb:9.1f} {ma / mb:6.2f}")
    within = sum(0.85 <= x <= 1.15 for x in ratios) / len(ratios)
    print(f"\n{len(ratios)} points: median ratio (small pass / large) "
          f"{statistics.median(ratios):.3f}, {100 * within:.0f}% within 0.85-1.15; "
          f"s per point: {statistics.mean(seconds[small]):.2f} (small), "
          f"{statistics.mean(seconds[large]):.2f} (large)")
    if args.json:
        args.json.write_text(json.dumps({
            "sizes": probe.sizes, "ns": probe.ns, "kept": probe.kept,
            "reported": probe.reported, "passes": [small, large],
            "points": [chosen[i].label() for i in sorted(times)],
            "times_us": {chosen[i].label(): v for i, v in sorted(times.items())},
            "seconds": {str(k): v for k, v in seconds.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
