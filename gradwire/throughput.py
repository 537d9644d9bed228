"""Throughput of several workers from their step end times, one estimator for the lab and the
replayer.

Each worker's rate is its own steps between its first and last step end inside a common window
over the time between them; the cluster's rate is the sum. Measuring each worker between its
own ends keeps lock-step (synchronous) runs unbiased: there every worker ends a step within a
hair of the others, and counting every end inside the window over the window's length drops
the last step of each worker that ends just after the window closes, up to (W - 1) / W of a
step per worker.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence


def lab_warmup_steps(steps: int) -> int:
    """Steps of a worker's ``steps`` that the lab's window drops as warm-up: the first
    quarter, at least one (``scripts/lab``'s ``cluster_throughput``; ``gradwire predict
    --run-steps`` measures its replications the same way)."""
    return max(1, steps // 4)


def summed_worker_rates(ends: Sequence[Sequence[float]], weights: Sequence[float],
                        t0: float, t1: float) -> float | None:
    """Sum over workers of ``weight`` x steps per unit time inside the window [t0, t1].

    ``ends``: each worker's step end times, ascending, in any time unit; ``weights``: what one
    step of each worker counts (examples per step, or 1 for steps); the result is per that same
    time unit. A worker with a single end inside the window counts one step over the window.
    None when the window is empty or a worker has no end inside it (other than at t0).
    """
    if t1 <= t0:
        return None
    total = 0.0
    for t, n in zip(ends, weights, strict=True):
        inside = [x for x in t if t0 <= x <= t1]
        if not inside or (len(inside) == 1 and inside[0] == t0):
            return None
        if len(inside) >= 2 and inside[-1] > inside[0]:
            total += n * (len(inside) - 1) / (inside[-1] - inside[0])
        else:
            total += n / (t1 - t0)
    return total


def worker_rates(ends: Sequence[Sequence[float]], t0: float, t1: float) -> list[float] | None:
    """Each worker's steps per unit time inside the window [t0, t1], as
    ``summed_worker_rates`` counts them (a worker's own ends; one step over the window for a
    single end). None when the window is empty or a worker has no end inside it."""
    rates = []
    for t in ends:
        rate = summed_worker_rates([t], [1.0], t0, t1)
        if rate is None:
            return None
        rates.append(rate)
    return rates


def steps_done(ends: Sequence[float], t: float) -> float:
    """A worker's steps done by time ``t``, counting the step in progress by the share of its
    span already past: k + (t - end_k) / (end_k+1 - end_k) between its k-th and (k+1)-th
    step ends (``ends`` ascending; the first step spans from time 0). ``t`` after the last
    end counts every step."""
    k = bisect_right(ends, t)
    if k == len(ends):
        return float(k)
    before = ends[k - 1] if k else 0.0
    return k + (t - before) / (ends[k] - before)


def batch_rates(ends: Sequence[Sequence[float]], t0: float, t1: float,
                batches: int = 10) -> list[float]:
    """Steps per unit time of all workers together in each of ``batches`` equal slices of
    [t0, t1], each worker's steps counted with ``steps_done``: no slice gains or loses a
    whole step by where a step end falls, so workers in lock-step (all ending a step at
    once) do not make the slices differ by W steps at a time. ``ends``: each worker's step
    end times, ascending, in any time unit. ValueError for an empty window or no batch."""
    if not t1 > t0 or batches < 1:
        raise ValueError(f"batch_rates: the window [{t0}, {t1}] in {batches} batches")
    width = (t1 - t0) / batches
    edges = [t0 + b * width for b in range(batches)] + [t1]
    done = [sum(steps_done(e, t) for e in ends) for t in edges]
    return [(done[b + 1] - done[b]) / width for b in range(batches)]
