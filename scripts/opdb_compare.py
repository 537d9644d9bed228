"""Two op cost databases side by side: per op type, how the times of the shapes both timed
compare (docs/opdb.md, "Threads").

    python scripts/opdb_compare.py A.sqlite B.sqlite [--min-us 1000] [--ops Conv2D,MatMul]

For each op type and dtype, over the build rows whose key (inputs, attributes, dtype, device)
both files hold, it prints how many, and the median, 10th and 90th percentile of B's time over
A's, all rows and those at least ``--min-us`` in A (the large ops, where an intra-op pool or
a cache shows). Each file's build rows must be of one machine (``--machine-a/-b`` pick one).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from gradwire.errors import GradwireError
from gradwire.opdb import OpTiming
from gradwire.replay.opcost import build_rows


def _by_key(rows: list[OpTiming]) -> dict[tuple, OpTiming]:
    return {(r.op, r.inputs, r.attrs, r.dtype, r.device): r for r in rows}


def _quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def _row(op: str, dtype: str, pairs: list[tuple[float, float]], min_us: float
         ) -> tuple[str, str, int, float, int, float, float, float]:
    nan = float("nan")
    large = [x for t, x in pairs if t >= min_us]
    return (op, dtype, len(pairs), statistics.median(x for _, x in pairs), len(large),
            statistics.median(large) if large else nan,
            _quantile(large, 0.1) if large else nan, _quantile(large, 0.9) if large else nan)


def compare(a: list[OpTiming], b: list[OpTiming], min_us: float
            ) -> list[tuple[str, str, int, float, int, float, float, float]]:
    """Per (op, dtype) of the keys both hold, then all of them pooled (op "all"): (op, dtype,
    n, median of B / A, n of A's at least ``min_us``, their median, 10th and 90th percentile
    of B / A)."""
    ka, kb = _by_key(a), _by_key(b)
    ratios: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for key in ka.keys() & kb.keys():
        ra, rb = ka[key], kb[key]
        if ra.median_us > 0:
            ratios[(ra.op, ra.dtype)].append((ra.median_us, rb.median_us / ra.median_us))
    out = [_row(op, dtype, pairs, min_us) for (op, dtype), pairs in sorted(ratios.items())]
    pooled = [x for pairs in ratios.values() for x in pairs]
    return out + [_row("all", "", pooled, min_us)] if pooled else out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", type=Path, help="the first database file")
    p.add_argument("b", type=Path, help="the second database file")
    p.add_argument("--machine-a", default=None, help="whose build rows in A (default: its only)")
    p.add_argument("--machine-b", default=None, help="whose build rows in B (default: its only)")
    p.add_argument("--min-us", type=float, default=1000.0,
                   help="the large ops' least time in A, µs (default 1000)")
    p.add_argument("--ops", default=None, help="comma-separated op types (default: all)")
    args = p.parse_args(argv)
    try:
        a, fa = build_rows(args.a, args.machine_a)
        b, fb = build_rows(args.b, args.machine_b)
    except GradwireError as exc:
        print(f"opdb_compare: {exc}", file=sys.stderr)
        return 2
    if args.ops:
        wanted = set(args.ops.split(","))
        a = [r for r in a if r.op in wanted]
    table = compare(a, b, args.min_us)
    print(f"B / A: B = {args.b} (machine {fb}), A = {args.a} (machine {fa})")
    print(f"| op | dtype | shapes | median | shapes >= {args.min_us:g} us in A | median | "
          "10% | 90% |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for op, dtype, n, med, n_large, med_l, p10, p90 in table:
        print(f"| {op} | {dtype} | {n} | {med:.2f} | {n_large} | {med_l:.2f} | {p10:.2f} | "
              f"{p90:.2f} |")
    if not table:
        print("opdb_compare: no shape timed in both", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
