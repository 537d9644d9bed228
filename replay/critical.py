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

import bisect
import heapq
import math
import statistics
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import networkx as nx
import numpy as np

from gradwire.aligner.critical import (
    WAIT,
    CriticalPath,
    Segment,
    critical_path,
    critical_path_document,
    path_of,
)
from gradwire.errors import ReplayError
from gradwire.replay.engine import Simulator
from gradwire.replay.generators import ps_of_slot, resource_name
from gradwire.replay.mechanisms import shown_ps
from gradwire.replay.template import BARRIER, DELAY, StepTemplate

TOP_N = 8

Describe = Callable[[int, int], tuple[str, str]]


def walk(ri: np.ndarray, rf: np.ndarray, last: int, floor_us: float,
         describe: Describe, rows: list[int] | None = None) -> list[Segment]:
    """The segments of the path that ends with record row ``last``, back to ``floor_us``, first
    to last. ``ri``/``rf``: the kernel's record rows (``Kernel.rows``); ``describe(graph,
    task)``: the kind and name of a task (kind ``barrier`` for a join); ``rows``: if given,
    the record rows with time on the path are appended to it."""
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
            if rows is not None:
                rows.append(x)
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
    """The critical paths of a recorded simulation's steps (``sim.cfg.record`` must be on),
    each walked once (``of``: one per simulation, shared by --explain and --timeline)."""

    def __init__(self, sim: Simulator) -> None:
        if not sim.cfg.record:
            raise ReplayError("a critical path needs a recorded replay (SimConfig.record)")
        self.sim = sim
        self.ri, self.rf = sim.kernel.rows()
        self._last = [sim.kernel.step_end_rows(w) for w in range(sim.cfg.workers)]
        self._paths: dict[tuple[int, int], tuple[CriticalPath, list[int]]] = {}
        self.events = sim.events  # the simulation as these rows saw it

    @classmethod
    def of(cls, sim: Simulator) -> ReplayPaths:
        """The paths of ``sim``, made once (kept on the simulation)."""
        paths = getattr(sim, "_critical_paths", None)
        if paths is None or paths.events != sim.events:  # run on since: made again
            paths = cls(sim)
            sim._critical_paths = paths  # type: ignore[attr-defined]
        return paths

    def describe(self, graph: int, task: int) -> tuple[str, str]:
        t = self.sim.templates[graph]
        slot = self.sim.compiled[graph].slot[task]  # the PS under this configuration
        return resource_name(t.kind[task], ps_of_slot(slot, self.sim.cfg.ps)), t.name[task]

    def step(self, worker: int, step: int) -> CriticalPath:
        """The critical path of ``worker``'s ``step`` (0-based, an ended step)."""
        return self._walked(worker, step)[0]

    def rows_on_path(self, worker: int, step: int) -> list[int]:
        """The record rows with time on the critical path of ``worker``'s ``step``."""
        return self._walked(worker, step)[1]

    def row_of(self, x: int) -> tuple[int, int, int, float]:
        """Record row ``x``: lane, step graph, task, end (us)."""
        return int(self.ri[x, 0]), int(self.ri[x, 1]), int(self.ri[x, 2]), float(self.rf[x, 2])

    def _walked(self, worker: int, step: int) -> tuple[CriticalPath, list[int]]:
        if (worker, step) not in self._paths:
            starts, ends = self.sim.step_starts[worker], self.sim.step_ends[worker]
            if not 0 <= step < len(ends):
                raise ReplayError(f"worker {worker} ended {len(ends)} steps, not step {step}")
            rows: list[int] = []
            segs = walk(self.ri, self.rf, self._last[worker][step], starts[step],
                        self.describe, rows)
            self._paths[(worker, step)] = (path_of(segs, step, ends[step] - starts[step],
                                                   top_n=TOP_N), rows)
        return self._paths[(worker, step)]


def explain(sim: Simulator, warmup: int, top_n: int = TOP_N) -> dict[str, Any]:
    """The critical paths of every worker's steps after ``warmup``, summed up: per step on
    average, the path's time by kind and the names that take most of it, and one step's whole
    path (worker 0's middle step) as an example. Times in microseconds."""
    paths = ReplayPaths.of(sim)
    cps = [paths.step(w, k) for w, ends in enumerate(sim.step_ends)
           for k in range(warmup, len(ends))]
    n = len(cps)
    if not n:
        raise ReplayError(f"no worker ended more than {warmup} warm-up steps to explain")
    by_kind: dict[str, float] = defaultdict(float)
    by_name: dict[str, float] = defaultdict(float)
    for cp in cps:
        for k, v in cp.by_kind_us.items():
            by_kind[k] += v / n
        for s in cp.segments:
            by_name[s.name] += s.duration_us / n
    step_us = statistics.fmean(cp.span_us for cp in cps)
    w0 = next(w for w, ends in enumerate(sim.step_ends) if len(ends) > warmup)
    ends0 = sim.step_ends[w0]
    example = paths.step(w0, max(warmup, len(ends0) // 2))
    return {
        "mechanism": sim.cfg.mechanism, "workers": sim.cfg.workers, "ps": shown_ps(sim.cfg),
        "steps": n, "mean_step_us": step_us,
        "by_kind_us": {k: v for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "share": {k: v / step_us for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "top": [{"name": k, "us_per_step": v, "share": v / step_us}
                for k, v in sorted(by_name.items(), key=lambda kv: (-kv[1], kv[0]))[:top_n]],
        "example": critical_path_document(example, "us, simulated"),
    }


def observed_path(t: StepTemplate) -> CriticalPath:
    """The critical path of the profiled step ``t`` on the aligned real timeline, over the
    template's own graph (``StepTemplate.obs_start``/``obs_end``: each op as it ran, coarsened
    as the template is): from the op that ended last, back through the predecessor that ended
    last (``aligner.critical.critical_path``), a predecessor being an op it depends on or the
    op that ran before it on the same worker, PS or link, so that a replayed step's path and
    the real one compare op by op. Raises ``ReplayError`` for a template without observed times."""
    n = len(t.kind)
    if len(t.obs_start) != n or len(t.obs_end) != n or any(
            math.isnan(x) for x in t.obs_start + t.obs_end):
        raise ReplayError(f"step {t.step}'s template has no observed times for every op")
    g = nx.DiGraph()
    for i in range(n):
        g.add_node(i, kind=resource_name(t.kind[i], t.ps[i]), name=t.name[i], step=t.step,
                   start_us=t.obs_start[i], end_us=t.obs_end[i])
    g.add_edges_from((a, b) for a in range(n) for b in t.succ[a])
    # the resource it waited for: on a worker, a PS or a link, the op before it there (as the
    # replay's blocker), e.g. a small push that left behind a big one
    rank = _time_order(t)
    by_resource: dict[tuple[str, int], list[int]] = defaultdict(list)
    for i in range(n):
        if t.kind[i] != DELAY:
            by_resource[(t.kind[i], t.ps[i])].append(i)
    for ops in by_resource.values():
        ops.sort(key=lambda i: (t.obs_end[i], rank[i]))
        ends = [t.obs_end[i] for i in ops]
        for i in ops:
            k = bisect.bisect_right(ends, t.obs_start[i]) - 1
            while k >= 0 and rank[ops[k]] >= rank[i]:  # edges follow one order: no cycle
                k -= 1
            if k >= 0:
                g.add_edge(ops[k], i)
    return critical_path(g, t.step)


def _time_order(t: StepTemplate) -> list[int]:
    """A topological order of ``t``'s ops that follows their observed ends where the edges
    allow (Kahn's algorithm, least end first): the rank of each op."""
    indeg = list(t.indeg)
    ready = [(t.obs_end[i], t.obs_start[i], i) for i in range(len(indeg)) if indeg[i] == 0]
    heapq.heapify(ready)
    rank = [0] * len(indeg)
    k = 0
    while ready:
        i = heapq.heappop(ready)[2]
        rank[i] = k
        k += 1
        for s in t.succ[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready, (t.obs_end[s], t.obs_start[s], s))
    return rank


def agreement(a: CriticalPath, b: CriticalPath) -> dict[str, float]:
    """How far apart two critical paths of one step are: ``time_share``, the time both spend
    in the same named ops over the longer path's time (1: the same ops for the same time);
    ``kind_share``, the same by kind; ``total_ratio``, b's total over a's."""
    def by_name(cp: CriticalPath) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for s in cp.segments:
            out[s.name] += s.duration_us
        return out

    na, nb = by_name(a), by_name(b)
    longer = max(sum(na.values()), sum(nb.values()), 1e-9)
    kinds = set(a.by_kind_us) | set(b.by_kind_us)
    return {"time_share": sum(min(v, nb.get(k, 0.0)) for k, v in na.items()) / longer,
            "kind_share": sum(min(a.by_kind_us.get(k, 0.0), b.by_kind_us.get(k, 0.0))
                              for k in kinds) / longer,
            "total_ratio": b.total_us / max(a.total_us, 1e-9)}
