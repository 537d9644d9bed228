"""Predict throughput for configurations (W workers, M PSes, bandwidth, order, flow control).

Throughput follows ICPE'20 section 4: warm-up steps are dropped, then steps completed by all
workers are time-averaged over the window in which every worker is past its warm-up and none
has finished; the simulation is extended (doubling the steps) until the 95% confidence interval
from 10 batch means is within ``ci_target`` of the mean, or ``max_steps`` is reached.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from gradwire.replay.engine import SimConfig, Simulator
from gradwire.replay.template import DOWN, PS, UP, StepTemplate

GOODPUT = 1448 / 1514  # TCP payload per Ethernet frame (1500 MTU, timestamps): 0.956
_T95 = 2.262  # Student t, 9 degrees of freedom


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """One configuration's predicted throughput.

    ``examples_per_s`` with its 95% confidence interval ``ci``; ``steps`` simulated per worker;
    ``bottleneck`` the busiest resource and ``utilisation`` its busy fraction; ``events`` the
    op-events simulated.
    """

    model: str
    workers: int
    ps: int
    bandwidth_bps: float
    order: str
    flow_control: bool
    examples_per_s: float
    steps_per_s: float
    ci: tuple[float, float]
    steps: int
    bottleneck: str
    utilisation: float
    events: int


def assign_ps(templates: Sequence[StepTemplate], ps: int) -> list[list[int]]:
    """PS index of every op for ``ps`` servers: as profiled when the counts agree, else each
    tensor to the least-loaded server by bytes, biggest first (TF's greedy load balancing),
    the same for pulls and pushes of one variable (matched by position in the byte ranking)."""
    out = []
    for t in templates:
        prof = max(t.ps) + 1 if t.ps else 1
        if prof == ps:
            out.append(list(t.ps))
            continue
        m = list(t.ps)
        for kind in (DOWN, UP):
            idx = sorted((i for i, k in enumerate(t.kind) if k == kind),
                         key=lambda i: (-t.amount[i], i))
            load = [0.0] * ps
            for i in idx:
                k = min(range(ps), key=lambda s: (load[s], s))
                m[i] = k
                load[k] += t.amount[i]
        for i, k in enumerate(t.kind):
            if k == PS:
                m[i] = t.ps[i] % ps
        out.append(m)
    return out


def _window_throughput(sim: Simulator, warmup: int) -> tuple[float, tuple[float, float]]:
    """Steps per second over the common window, and its 95% CI from 10 batch means."""
    t0 = max(e[warmup - 1] if warmup else 0.0 for e in sim.step_ends)
    t1 = min(e[-1] for e in sim.step_ends)
    ends = sorted(x for e in sim.step_ends for x in e if t0 < x <= t1)
    if t1 <= t0 or not ends:
        return 0.0, (0.0, 0.0)
    rate = len(ends) / (t1 - t0) * 1e6
    edges = [t0 + (t1 - t0) * k / 10 for k in range(11)]
    counts = [0] * 10
    for x in ends:
        counts[min(9, int((x - t0) / (t1 - t0) * 10))] += 1
    batch = [c / ((edges[k + 1] - edges[k]) / 1e6) for k, c in enumerate(counts)]
    half = _T95 * statistics.stdev(batch) / math.sqrt(10)
    return rate, (rate - half, rate + half)


def simulate(templates: Sequence[StepTemplate], batch_size: int, workers: int, ps: int,
             bandwidth_bps: float, order: str = "observed", win_bytes: float | None = None,
             seed: int = 0, steps: int = 200, max_steps: int = 3200, ci_target: float = 0.02,
             record: bool = False, link: str = "fair",
             worker_bandwidth_bps: float | None = None) -> tuple[Prediction, Simulator]:
    """Replay ``workers`` workers until the throughput's CI is within ``ci_target``.

    ``bandwidth_bps``: each PS link per direction; ``worker_bandwidth_bps``: each worker's NIC
    (None: unconstrained, as in a lab that shapes only the PS links), bits per second.
    """
    cfg = SimConfig(workers=workers, ps=ps, rate_bytes_per_us=bandwidth_bps * GOODPUT / 8e6,
                    win_bytes=win_bytes, order=order, seed=seed, record=record, link=link,
                    worker_rate_bytes_per_us=math.inf if worker_bandwidth_bps is None
                    else worker_bandwidth_bps * GOODPUT / 8e6)
    sim = Simulator(templates, cfg, assign_ps(templates, ps))
    n = steps
    while True:
        sim.run(n)
        warm = min(n - 1, max(3, n // 10))
        rate, ci = _window_throughput(sim, warm)
        if rate > 0 and (ci[1] - ci[0]) / 2 <= ci_target * rate or n >= max_steps:
            break
        n *= 2
    util = sim.link_busy_share()
    names = [f"downlink ps:{i}" for i in range(ps)] + [f"uplink ps:{i}" for i in range(ps)]
    wbusy = sim.worker_busy_us / max(sim.now * workers, 1e-9)
    best = max(range(len(util)), key=lambda i: util[i])
    bottleneck, u = (names[best], util[best]) if util[best] >= wbusy else ("worker", wbusy)
    pred = Prediction(model="sim", workers=workers, ps=ps, bandwidth_bps=bandwidth_bps,
                      order=order, flow_control=win_bytes is not None,
                      examples_per_s=rate * batch_size, steps_per_s=rate,
                      ci=(ci[0] * batch_size, ci[1] * batch_size), steps=n,
                      bottleneck=bottleneck, utilisation=min(1.0, u), events=sim.events)
    return pred, sim
