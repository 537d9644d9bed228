"""The critical path of one traced step on the aligned real timeline (dPRO sections 4.3 and 5, HTA).

The global DFG of ``gradwire.aligner.dfg.build_dfg`` carries every op's and transfer's real
start and end on the reference clock (microseconds). The critical path of a hook step is found
backwards, as HTA's critical-path analysis and dPRO's optimizer read it: start at the node of the
step that ends last; from a node ``x`` step to the predecessor (in the same step) that ends last,
the one ``x`` waited for; stop at a node with no predecessor in the step.

The time between that predecessor's end and ``x``'s start is a **wait** (executor queue, a busy
device, idling), a segment of kind ``wait`` named after the kind of ``x`` (``wait before
downlink``). On a real timeline a node may also start *before* its latest predecessor ends: a
receive op is launched before its tensor's last DATA arrives, and aligned clocks keep an error
of a few microseconds. Such a gap is clamped to zero and its length added to ``overlap_us``, so

    sum(by_kind_us.values()) == total_us + overlap_us

>>> import networkx as nx
>>> g = nx.DiGraph()
>>> g.add_node("a", kind="worker", step=1, name="a", start_us=0.0, end_us=10.0)
>>> g.add_node("b", kind="uplink", step=1, name="b", start_us=12.0, end_us=20.0)
>>> g.add_edge("a", "b")
>>> cp = critical_path(g, 1)
>>> [(s.kind, s.name, s.duration_us) for s in cp.segments]
[('worker', 'a', 10.0), ('wait', 'wait before uplink', 2.0), ('uplink', 'b', 8.0)]
>>> cp.total_us, cp.by_kind_us
(20.0, {'uplink': 8.0, 'wait': 2.0, 'worker': 10.0})
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import networkx as nx

from gradwire.errors import GradwireError

WAIT = "wait"
TOP_N = 5


@dataclass(frozen=True, kw_only=True)
class Segment:
    """One stretch of the critical path, times on the reference clock (microseconds).

    ``node``: the DFG node id; for a wait, the node that waited (the one after the wait).
    ``kind``: the node's kind (``worker``, ``ps``, ``downlink``, ``uplink``, ...) or ``wait``.
    ``name``: the op or transfer name; for a wait, ``wait before <kind of node>``.
    ``start_us``, ``end_us``, ``duration_us`` (= end - start): the node's own real times (its
    start may lie before the previous segment's end: see ``CriticalPath.overlap_us``).
    """

    node: str
    kind: str
    name: str
    start_us: float
    end_us: float
    duration_us: float


@dataclass(frozen=True, kw_only=True)
class CriticalPath:
    """The critical path of one hook step, microseconds on the reference clock.

    ``segments``: ops, transfers and waits, first to last. ``total_us``: last segment's end minus
    first segment's start. ``by_kind_us``: segment time per kind (``worker`` and ``ps`` compute,
    ``downlink``, ``uplink``, ``wait``), summing to ``total_us + overlap_us``. ``overlap_us``:
    how long nodes on the path started before the node they waited for had ended (clamped
    waits). ``top``: the ``TOP_N`` names with the most path time, ``(name, duration_us)``,
    longest first (waits are summed per name, e.g. all ``wait before downlink``).
    ``span_us``: the step's extent, last end minus first start over all its nodes.
    """

    bundle: str | None
    step: int
    segments: tuple[Segment, ...]
    total_us: float
    by_kind_us: dict[str, float]
    top: tuple[tuple[str, float], ...]
    overlap_us: float
    span_us: float


def _order(g: nx.DiGraph, n: Any) -> tuple[float, float, str]:
    """Latest end first; ties: later start, then the larger node id (deterministic)."""
    d = g.nodes[n]
    return (float(d["end_us"]), float(d["start_us"]), str(n))


def _step_nodes(g: nx.DiGraph, step: int, bundle: str | None) -> tuple[set[Any], str | None]:
    nodes = {n for n, d in g.nodes(data=True) if d.get("step") == step
             and (bundle is None or d.get("bundle") == bundle)}
    if not nodes:
        steps = sorted({(str(d.get("bundle")), d.get("step")) for _, d in g.nodes(data=True)
                        if bundle is None or d.get("bundle") == bundle}, key=str)
        have = ", ".join(f"{b} step {s}" for b, s in steps) or "none"
        where = f" of bundle {bundle!r}" if bundle is not None else ""
        raise GradwireError(f"the graph has no node of step {step}{where} (it has: {have})")
    bundles = sorted({str(g.nodes[n].get("bundle")) for n in nodes})
    if bundle is None and len(bundles) > 1:
        raise GradwireError(f"step {step} was traced by several bundles ({', '.join(bundles)}); "
                            "name one with bundle=")
    return nodes, bundle if bundle is not None else g.nodes[next(iter(nodes))].get("bundle")


def _segment(g: nx.DiGraph, n: Any) -> Segment:
    d = g.nodes[n]
    start, end = float(d["start_us"]), float(d["end_us"])
    return Segment(node=str(n), kind=str(d["kind"]), name=str(d.get("name", n)),
                   start_us=start, end_us=end, duration_us=end - start)


def critical_path(g: nx.DiGraph, step: int, bundle: str | None = None,
                  top_n: int = TOP_N) -> CriticalPath:
    """The critical path of hook step ``step`` (of ``bundle``; needed only when several bundles
    traced that step) in the global DFG ``g`` (node attributes ``kind``, ``step``, ``bundle``,
    ``name``, ``start_us``, ``end_us``, microseconds on one clock). Only nodes and edges of that
    step are walked. Raises ``GradwireError`` when the step has no node, several bundles hold it
    and none is named, or the walk meets a cycle."""
    nodes, owner = _step_nodes(g, step, bundle)
    x = max(nodes, key=lambda n: _order(g, n))
    backwards: list[Segment] = [_segment(g, x)]
    seen = {x}
    overlap = 0.0
    while True:
        preds = [p for p in g.predecessors(x) if p in nodes]
        if not preds:
            break
        p = max(preds, key=lambda n: _order(g, n))
        if p in seen:
            raise GradwireError(f"the graph has a cycle through {p} in step {step}")
        seen.add(p)
        start, end = float(g.nodes[x]["start_us"]), float(g.nodes[p]["end_us"])
        if start > end:
            backwards.append(Segment(node=str(x), kind=WAIT,
                                     name=f"{WAIT} before {g.nodes[x]['kind']}",
                                     start_us=end, end_us=start, duration_us=start - end))
        else:
            overlap += end - start
        backwards.append(_segment(g, p))
        x = p
    starts = [float(g.nodes[n]["start_us"]) for n in nodes]
    ends = [float(g.nodes[n]["end_us"]) for n in nodes]
    return path_of(list(reversed(backwards)), step, max(ends) - min(starts), owner, overlap,
                   top_n)


def path_of(segments: list[Segment], step: int, span_us: float, bundle: str | None = None,
            overlap_us: float = 0.0, top_n: int = TOP_N) -> CriticalPath:
    """The ``CriticalPath`` of ``segments`` (first to last) of a step spanning ``span_us``:
    their total, their time per kind and the ``top_n`` names that take most of it."""
    by_kind: dict[str, float] = defaultdict(float)
    by_name: dict[str, float] = defaultdict(float)
    for s in segments:
        by_kind[s.kind] += s.duration_us
        by_name[s.name] += s.duration_us
    top = tuple(sorted(by_name.items(), key=lambda kv: (-kv[1], kv[0]))[:top_n])
    total = segments[-1].end_us - segments[0].start_us if segments else 0.0
    return CriticalPath(bundle=bundle, step=step, segments=tuple(segments), total_us=total,
                        by_kind_us=dict(sorted(by_kind.items())), top=top,
                        overlap_us=overlap_us, span_us=span_us)


def critical_path_document(cp: CriticalPath, time_unit: str = "us, reference clock"
                           ) -> dict[str, Any]:
    """The critical path as a JSON-ready dict (``format: gradwire-critical-path``, version 1;
    times in microseconds, on the reference clock for a traced step, field names as in
    ``CriticalPath``); ``time_unit`` says which clock."""
    return {
        "format": "gradwire-critical-path", "version": 1, "time_unit": time_unit,
        "bundle": cp.bundle, "step": cp.step, "total_us": cp.total_us, "span_us": cp.span_us,
        "overlap_us": cp.overlap_us, "by_kind_us": dict(cp.by_kind_us),
        "top": [{"name": name, "duration_us": us} for name, us in cp.top],
        "segments": [{"node": s.node, "kind": s.kind, "name": s.name, "start_us": s.start_us,
                      "end_us": s.end_us, "duration_us": s.duration_us} for s in cp.segments],
    }
