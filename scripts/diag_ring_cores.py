"""How a one-host ring run's workers shared the host's cores: a CPU diagnostic for issue 22.

Reads the worker bundles of a ``python -m lab --mode ring --workers W --collect DIR`` run (every
worker traced in the same steps; one host, so every trace is on the same clock) and, with
``--profile PDIR``, the 1-worker profile the ring is predicted from. Compute ops are a worker's
traced ops on its own device that are neither transfers nor the collective
(``CollectiveReduceV2``, its ``RecvBuf``, sends, receives). Reports:

- **per worker**: traced steps, each step's summed compute op time and its busy span (the union
  of its compute ops), medians, ms; the profile's the same.
- **busy workers**: over the traced window (from the latest first traced op to the earliest last
  one, so every worker is traced throughout), the share of time k workers have a compute op
  running, k = 0..W, and the mean number of compute ops running at once on the host.
- **stretch**: each compute op's duration over the profile's median for the same op (node name),
  by how many compute ops of the whole host ran at the op's midpoint; the time-weighted mean
  ratio (sum of durations over sum of profile medians) and the ops' count. Processor sharing of
  ``--cores`` cores by n single-threaded ops gives ``max(1, n / cores)``.

Usage, from the repo root:

    .venv/bin/python scripts/diag_ring_cores.py DIR [--profile PDIR] [--cores 2]

``DIR``: the ``--collect`` directory (its ``worker<i>`` bundles) or a ``hook_dir``. ``PDIR``:
the profile's bundle directory (its ``worker0``).
"""

from __future__ import annotations

import argparse
import bisect
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from gradwire.bundle import read_step
from gradwire.errors import GradwireError
from gradwire.records import OpRecord, StepTrace

NOT_COMPUTE = frozenset({"CollectiveReduceV2", "CollectiveReduce", "RecvBuf", "_Send", "_Recv",
                         "_HostSend", "_HostRecv", "Send", "Recv", "RecvTensor"})


def compute_ops(step: StepTrace) -> list[OpRecord]:
    """The step's compute ops on a worker device: no transfer, no collective, no send or
    receive, at least 1 us long."""
    return [op for op in step.ops if "/job:worker" in op.device and not op.is_transfer
            and op.op_type not in NOT_COMPUTE and op.end_us > op.start_us]


def union_us(ops: list[OpRecord]) -> list[tuple[int, int]]:
    """The ops' intervals merged: ``[(start_us, end_us), ...]`` ascending, disjoint."""
    out: list[list[int]] = []
    for op in sorted(ops, key=lambda o: o.start_us):
        if out and op.start_us <= out[-1][1]:
            out[-1][1] = max(out[-1][1], op.end_us)
        else:
            out.append([op.start_us, op.end_us])
    return [(a, b) for a, b in out]


def worker_bundles(folder: Path) -> dict[str, list[StepTrace]]:
    """``{folder name: traced steps}`` of every ``worker<i>`` folder in ``folder`` with traced
    steps (``trace/step-*.ops.json``): the bundles of ``--collect``, or the TraceHook's own
    folders of a run without capture (``LabConfig.hook_dir``)."""
    out = {}
    for path in sorted(folder.glob("worker*")):
        files = sorted((path / "trace").glob("step-*.ops.json"))
        if files:
            out[path.name] = [read_step(f) for f in files]
    return out


def step_summary(steps: list[StepTrace]) -> tuple[float, float]:
    """Median over the steps of the summed compute op time and of the busy span, ms."""
    per_step = [compute_ops(s) for s in steps]
    op_ms = [sum(o.duration_us for o in ops) / 1e3 for ops in per_step]
    span_ms = [sum(b - a for a, b in union_us(ops)) / 1e3 for ops in per_step]
    return statistics.median(op_ms), statistics.median(span_ms)


def running_counts(ops: list[OpRecord]) -> tuple[list[int], list[int]]:
    """The number of ops running on the host as a step function: boundary times (us) and the
    count from each boundary to the next."""
    events = sorted([(o.start_us, 1) for o in ops] + [(o.end_us, -1) for o in ops])
    times, counts, n = [], [], 0
    for t, d in events:
        n += d
        if times and times[-1] == t:
            counts[-1] = n
        else:
            times.append(t)
            counts.append(n)
    return times, counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path)
    p.add_argument("--profile", type=Path, default=None)
    p.add_argument("--cores", type=float, default=2.0)
    args = p.parse_args(argv)
    try:
        run = worker_bundles(args.dir)
        prof = worker_bundles(args.profile) if args.profile else {}
    except GradwireError as exc:
        print(f"diag_ring_cores: {exc}", file=sys.stderr)
        return 2
    if not run:
        print(f"diag_ring_cores: {args.dir}: no worker bundle with traced steps", file=sys.stderr)
        return 2
    print("per worker: steps, median compute op time / busy span per step (ms)")
    for name, steps in sorted({**{f"profile {k}": v for k, v in prof.items()}, **run}.items()):
        op_ms, span_ms = step_summary(steps)
        print(f"  {name:16} {[s.step for s in steps]}  {op_ms:8.1f} / {span_ms:8.1f}"
              f"  (ops at once while busy {op_ms / span_ms:.2f})")
    per_worker = {n: [o for s in steps for o in compute_ops(s)] for n, steps in run.items()}
    lo = max(min(o.start_us for o in ops) for ops in per_worker.values())
    hi = min(max(o.end_us for o in ops) for ops in per_worker.values())
    if hi <= lo:
        print("diag_ring_cores: the workers' traced steps do not overlap in time", file=sys.stderr)
        return 2
    # share of the window with k workers busy
    unions = {n: union_us(ops) for n, ops in per_worker.items()}
    bounds = sorted({lo, hi, *(t for u in unions.values() for iv in u for t in iv
                               if lo < t < hi)})
    busy_k: dict[int, float] = defaultdict(float)
    for a, b in zip(bounds, bounds[1:], strict=False):
        mid = (a + b) / 2
        k = sum(any(s <= mid < e for s, e in u) for u in unions.values())
        busy_k[k] += b - a
    every = [o for ops in per_worker.values() for o in ops]
    times, counts = running_counts(every)
    area = 0.0
    for i, t in enumerate(times[:-1]):
        a, b = max(t, lo), min(times[i + 1], hi)
        if b > a:
            area += counts[i] * (b - a)
    print(f"\nwindow {(hi - lo) / 1e3:.0f} ms; share of it with k workers computing:")
    for k in range(len(run) + 1):
        print(f"  k={k}: {busy_k.get(k, 0.0) / (hi - lo):6.1%}")
    print(f"  compute ops running at once on the host, window mean: {area / (hi - lo):.2f}")
    if not prof:
        return 0
    base: dict[str, list[int]] = defaultdict(list)
    for steps in prof.values():
        for s in steps:
            for o in compute_ops(s):
                base[o.name].append(o.duration_us)
    med = {k: statistics.median(v) for k, v in base.items()}
    by_n: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for o in every:
        if o.name not in med or med[o.name] <= 0:
            continue
        mid = (o.start_us + o.end_us) / 2
        n = counts[bisect.bisect_right(times, mid) - 1]
        acc = by_n[n]
        acc[0] += o.duration_us
        acc[1] += med[o.name]
        acc[2] += 1
    matched = sum(v[2] for v in by_n.values())
    print(f"\nstretch against the profile ({matched} of {len(every)} ops matched by name):")
    print("  ops running  ops   time-weighted ratio   processor sharing")
    for n in sorted(by_n):
        d, m, c = by_n[n]
        print(f"  {n:11d}  {c:5d}  {d / m:8.2f}  {max(1.0, n / args.cores):14.2f}")
    d = sum(v[0] for v in by_n.values())
    m = sum(v[1] for v in by_n.values())
    print(f"  all          {matched:5d}  {d / m:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
