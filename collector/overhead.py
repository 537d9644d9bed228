"""Parsing overhead of received tensors (ICPE'20 section 3.2.1): op.overhead = alpha*size + beta.

For every RecvTensor op a node executed (TF trace), the overhead is the time from the last DATA
of the stream that carried its tensor (the node's own capture, so the same clock) to the op's
end. Matching is by rendezvous edge name and time: the stream whose last DATA is the latest one
inside the op's [start, end]. A least-squares line per node gives alpha and beta.
"""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gradwire.records import StepTrace, Stream


@dataclass(frozen=True)
class OverheadPoint:
    """One received tensor: its size and the time from its last DATA to the op's end."""

    step: int
    tensor: str
    bytes_: int
    overhead_us: float


@dataclass(frozen=True)
class OverheadFit:
    """overhead_us = alpha_us_per_byte * bytes + beta_us, with its quality."""

    node: str
    points: int
    unmatched_ops: int
    alpha_us_per_byte: float
    beta_us: float
    r2: float
    residual_median_abs_us: float
    residual_p95_abs_us: float
    negative: int


def edge_of(key: str | None) -> str | None:
    """The edge name field of a rendezvous key (``src;incarnation;dst;EDGE;frame:iter``)."""
    parts = (key or "").split(";")
    return parts[3] if len(parts) >= 5 else None


def match_points(traces: Iterable[StepTrace], streams: Iterable[Stream], task: str
                 ) -> tuple[list[OverheadPoint], int]:
    """Overhead points of the RecvTensor ops run by ``task`` ('worker:0'), and the unmatched."""
    ends: dict[str, list[int]] = defaultdict(list)
    for s in streams:
        edge = edge_of(s.tensor)
        if edge and s.last_data_ns is not None:
            ends[edge].append(s.last_data_ns)
    for v in ends.values():
        v.sort()
    job, _, index = task.partition(":")
    points, unmatched = [], 0
    for trace in traces:
        for op in trace.ops:
            if op.name != "RecvTensor" or f"/job:{job}/" not in op.device + "/" or \
                    f"/task:{index}/" not in op.device + "/" or op.bytes_ is None:
                continue
            times = ends.get(op.tensor, [])
            i = bisect.bisect_right(times, op.end_us * 1000) - 1
            if i < 0 or times[i] < op.start_us * 1000:
                unmatched += 1
                continue
            points.append(OverheadPoint(op.step, op.tensor, op.bytes_,
                                        op.end_us - times[i] / 1000))
    return points, unmatched


def fit_overhead(node: str, points: Sequence[OverheadPoint], unmatched: int = 0) -> OverheadFit:
    """Least-squares line through the points, R^2 and residual statistics."""
    n = len(points)
    if n < 2:
        return OverheadFit(node, n, unmatched, 0.0, points[0].overhead_us if n else 0.0, 0.0,
                           0.0, 0.0, sum(p.overhead_us < 0 for p in points))
    xs = [float(p.bytes_) for p in points]
    ys = [p.overhead_us for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    alpha = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    beta = my - alpha * mx
    res = [y - (alpha * x + beta) for x, y in zip(xs, ys, strict=True)]
    ss_tot = sum((y - my) ** 2 for y in ys)
    r2 = 1 - sum(r * r for r in res) / ss_tot if ss_tot else 0.0
    abs_res = sorted(abs(r) for r in res)
    return OverheadFit(node, n, unmatched, alpha, beta, r2, statistics.median(abs_res),
                       abs_res[min(n - 1, int(round(0.95 * (n - 1))))],
                       sum(y < 0 for y in ys))
