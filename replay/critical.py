"""The critical path of replayed steps (dPRO section 3; HTA's critical-path analysis).

A recorded replay (``SimConfig.record``) keeps, for every task run, when it became ready, when
it started and ended, the task whose end made it ready (its *cause*) and, when it waited for
its slot or a core, the task that held them (its *blocker*; ``replay/kernel.py``). The
critical path of a step is walked backwards from the task that ended it:

- a task's own run, from its start to its end, is a segment of its kind: ``worker`` or ``ps``
  compute, ``downlink`` or ``uplink`` (a transfer's time includes its share of a busy link),
  ``delay`` (request latency, parsing overheads);
- if it waited for its slot (a lane's earlier op on the same resource) or for a PS core, the
  walk goes on through the task that held it; a wait nothing explains is ``wait``;
- otherwise the walk goes on through its cause; at a barrier, through the lane that came last;
- it stops at the step's start: the segments cover the step exactly, so ``by_kind_us`` sums
  to the step's duration.

The same ``CriticalPath`` records as the aligned real timeline's (``aligner/critical.py``), so
a replayed step and a traced one compare field by field.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from gradwire.aligner.critical import (
    WAIT,
    CriticalPath,
    Segment,
    critical_path_document,
    path_of,
)
from gradwire.replay.engine import Simulator
from gradwire.replay.taskgraph import ReplayError
from gradwire.replay.template import DELAY, DOWN, PS, UP, WORKER

BARRIER = "barrier"
TOP_N = 8
_KIND = {DELAY: "delay", WORKER: "worker", PS: "ps", DOWN: "downlink", UP: "uplink"}

Describe = Callable[[int, int], tuple[str, str]]


def walk(ri: np.ndarray, rf: np.ndarray, last: int, floor_us: float,
         describe: Describe) -> list[Segment]:
    """The segments of the path that ends with record row ``last``, back to ``floor_us``, first
    to last. ``ri``/``rf``: the kernel's record rows (``Kernel.rows``); ``describe(graph,
    task)``: the kind and name of a task (kind ``barrier`` for a join)."""
    out: list[Segment] = []
    t = float(rf[last, 2])
    x = last
    for _ in range(len(ri) + 1):  # each row is met at most once: a guard, not a limit
        lane, graph, task, cause, blocker = (int(v) for v in ri[x, :5])
        ready, start, end = (float(v) for v in rf[x])
        kind, name = describe(graph, task)
        node = f"worker:{lane}/{name}"
        if kind == BARRIER and 0 <= blocker != x:  # it waited for the last lane to come
            x = blocker
            continue
        seg_end = min(end, t)
        seg_start = max(min(start, seg_end), floor_us)
        if seg_end > seg_start:
            out.append(Segment(node=node, kind=kind, name=name, start_us=seg_start,
                               end_us=seg_end, duration_us=seg_end - seg_start))
        t = seg_start
        if t <= floor_us:
            break
        if start > ready and blocker >= 0:  # it waited for its slot or a core: the holder
            x = blocker
            continue
        if start > ready:
            t = _wait(out, node, f"{WAIT} for {kind}", max(ready, floor_us), t)
        before = float(rf[cause, 2]) if cause >= 0 else floor_us
        if before < t:
            t = _wait(out, node, f"{WAIT} before {kind}", max(before, floor_us), t)
        if cause < 0 or t <= floor_us:
            break
        x = cause
    else:  # pragma: no cover - the rows form a DAG; a loop would be a kernel bug
        raise ReplayError("the record rows' causes form a cycle")
    out.reverse()
    return out


def _wait(out: list[Segment], node: str, name: str, lo: float, hi: float) -> float:
    if hi > lo:
        out.append(Segment(node=node, kind=WAIT, name=name, start_us=lo, end_us=hi,
                           duration_us=hi - lo))
    return lo


class ReplayPaths:
    """The critical paths of a recorded simulation's steps (``sim.cfg.record`` must be on)."""

    def __init__(self, sim: Simulator) -> None:
        if not sim.cfg.record:
            raise ReplayError("a critical path needs a recorded replay (SimConfig.record)")
        self.sim = sim
        self.ri, self.rf = sim.kernel.rows()
        self._last = [sim.kernel.step_end_rows(w) for w in range(sim.cfg.workers)]

    def describe(self, graph: int, task: int) -> tuple[str, str]:
        t = self.sim.templates[graph]
        return _KIND[t.kind[task]], t.name[task]

    def step(self, worker: int, step: int) -> CriticalPath:
        """The critical path of ``worker``'s ``step`` (0-based, an ended step)."""
        starts, ends = self.sim.step_starts[worker], self.sim.step_ends[worker]
        if not 0 <= step < len(ends):
            raise ReplayError(f"worker {worker} ended {len(ends)} steps, not step {step}")
        last = self._last[worker][step]
        segs = walk(self.ri, self.rf, last, starts[step], self.describe)
        return path_of(segs, step, ends[step] - starts[step], top_n=TOP_N)


def explain(sim: Simulator, warmup: int, top_n: int = TOP_N) -> dict[str, Any]:
    """The critical paths of every worker's steps after ``warmup``, summed up: per step on
    average, the path's time by kind and the names that take most of it, and one step's whole
    path (worker 0's middle step) as an example. Times in microseconds."""
    paths = ReplayPaths(sim)
    cps = [paths.step(w, k) for w, ends in enumerate(sim.step_ends)
           for k in range(min(warmup, len(ends) - 1), len(ends))]
    n = len(cps)
    by_kind: dict[str, float] = defaultdict(float)
    by_name: dict[str, float] = defaultdict(float)
    for cp in cps:
        for k, v in cp.by_kind_us.items():
            by_kind[k] += v / n
        for s in cp.segments:
            by_name[s.name] += s.duration_us / n
    step_us = statistics.fmean(cp.span_us for cp in cps)
    ends0 = sim.step_ends[0]
    example = paths.step(0, min(len(ends0) - 1, max(warmup, len(ends0) // 2)))
    return {
        "workers": sim.cfg.workers, "ps": sim.cfg.ps, "steps": n, "mean_step_us": step_us,
        "by_kind_us": {k: v for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "share": {k: v / step_us for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "top": [{"name": k, "us_per_step": v, "share": v / step_us}
                for k, v in sorted(by_name.items(), key=lambda kv: (-kv[1], kv[0]))[:top_n]],
        "example": critical_path_document(example),
    }
