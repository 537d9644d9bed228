"""The global data-flow graph: every traced op of every node plus the transfers between them.

Node ids are ``<bundle>/<step>/<task>/<op>`` for ops and ``<bundle>/<step>/xfer/<edge>`` for
transfers. Node attributes (times on the reference clock, microseconds):

- ``kind``: ``worker`` or ``ps`` (compute on a device of that job; other jobs keep their job
  name), ``downlink`` (a pull, PS to worker) or ``uplink`` (a push, worker to PS);
- ``bundle``, ``step`` (hook step), ``task`` (``worker:0``), ``device``, ``name``, ``op_type``;
- ``start_us``, ``end_us``, ``duration_us``;
- transfers also: ``bytes``, ``txn`` (transaction id), ``step_id``, ``src_task``, ``dst_task``,
  and, when a capture saw them, ``first_data_us``/``last_data_us`` (at the receiver).

Edges: partition-graph data dependencies (``control`` True for control edges) and, per
transfer, producer op -> transfer -> receive op (``transfer`` True).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from gradwire.aligner.align import Alignment
from gradwire.collector.summary import task_of
from gradwire.records import OpRecord


def _kind(device: str) -> str:
    return task_of(device).split(":")[0]


def _op_id(bundle: str, step: int, op: OpRecord) -> str:
    return f"{bundle}/{step}/{task_of(op.device)}/{op.graph_node or op.name}"


@dataclass
class DfgReport:
    """Counts and problems found while building the graph (``problems`` empty when sound)."""

    counts: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def build_dfg(al: Alignment) -> tuple[nx.DiGraph, DfgReport]:
    """The global DFG of an alignment, checked: acyclic, every receive matched to its send."""
    g = nx.DiGraph()
    report = DfgReport()
    for node in al.nodes:
        for trace in node.steps:
            for op in trace.ops:
                if op.is_transfer:
                    continue
                d = al.domains.of_device(op.device)
                start = al.aligned_us(d, op.start_us)
                g.add_node(_op_id(node.name, trace.step, op), kind=_kind(op.device),
                           bundle=node.name, step=trace.step, task=task_of(op.device),
                           device=op.device, name=op.name, op_type=op.op_type, start_us=start,
                           end_us=start + op.duration_us, duration_us=op.duration_us)
    unmatched_send: list[str] = []
    unmatched_wire: list[str] = []
    for t in al.transfers:
        if t.recv is None:
            continue
        recv_id = _op_id(t.node, t.step, t.recv)  # type: ignore[arg-type]
        start = al.aligned_us(t.dst_domain, t.recv.start_us)
        g.add_node(recv_id, kind=_kind(t.dst_device), bundle=t.node, step=t.step,
                   task=task_of(t.dst_device), device=t.dst_device, name=t.recv.graph_node,
                   op_type=t.recv.op_type, start_us=start, end_us=start + t.recv.duration_us,
                   duration_us=t.recv.duration_us)
        xid = f"{t.node}/{t.step}/xfer/{t.edge}"
        g.add_node(xid, **_transfer_attrs(al, t))
        g.add_edge(xid, recv_id, control=False, transfer=True)
        if t.producer is not None:
            g.add_edge(_op_id(t.node, t.step, t.producer), xid, control=False, transfer=True)
        else:
            unmatched_send.append(t.txn)
        if t.at_receiver is None and t.at_sender is None and _has_capture(al, t):
            unmatched_wire.append(t.txn)
    for node in al.nodes:  # after the receive ops exist: they feed their consumers
        for trace in node.steps:
            for dep in trace.deps:
                if dep.tensor:
                    continue  # cross-device edges are the transfers above
                a = f"{node.name}/{trace.step}/{task_of(dep.src_device)}/{dep.src}"
                b = f"{node.name}/{trace.step}/{task_of(dep.dst_device)}/{dep.dst}"
                if a in g and b in g:
                    g.add_edge(a, b, control=dep.control, transfer=False)
    _check(g, report, unmatched_send, unmatched_wire)
    return g, report


def _has_capture(al: Alignment, t: Any) -> bool:
    return any(n.streams and n.domain in (t.src_domain, t.dst_domain) for n in al.nodes)


def _transfer_attrs(al: Alignment, t: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "kind": "downlink" if t.direction == "pull" else "uplink" if t.direction == "push"
        else "network", "bundle": t.node, "step": t.step, "task": task_of(t.dst_device),
        "device": t.dst_device, "name": t.edge, "op_type": "Transfer", "txn": t.txn,
        "step_id": t.step_id, "bytes": t.bytes_, "src_task": task_of(t.src_device),
        "dst_task": task_of(t.dst_device)}
    start = (al.aligned_us(t.src_domain, t.producer.end_us) if t.producer is not None
             else al.aligned_us(t.dst_domain, t.recv.start_us))
    end = al.aligned_us(t.dst_domain, t.recv.end_us)
    rcv = t.at_receiver
    if rcv is not None and rcv.first_data_ns and rcv.last_data_ns:
        attrs["first_data_us"] = al.capture_aligned_us(t.dst_domain, rcv.first_data_ns)
        attrs["last_data_us"] = al.capture_aligned_us(t.dst_domain, rcv.last_data_ns)
        start, end = attrs["first_data_us"], attrs["last_data_us"]
    attrs.update(start_us=start, end_us=end, duration_us=end - start)
    return attrs


def _check(g: nx.DiGraph, report: DfgReport, no_send: list[str], no_wire: list[str]) -> None:
    kinds = Counter(d["kind"] for _, d in g.nodes(data=True))
    report.counts = {"nodes": g.number_of_nodes(), "edges": g.number_of_edges(),
                     **{f"{k}_nodes": v for k, v in sorted(kinds.items())},
                     "transfers_without_producer": len(no_send),
                     "transfers_without_packets": len(no_wire)}
    if not nx.is_directed_acyclic_graph(g):
        cycle = nx.find_cycle(g)
        report.problems.append("the graph has a cycle: " + " -> ".join(a for a, _ in cycle))
    if no_send:
        report.problems.append(f"{len(no_send)} receive(s) without their producer op in the "
                               f"sender's trace, e.g. {no_send[0]}")
    if no_wire:
        report.problems.append(f"{len(no_wire)} traced receive(s) not found in the captures, "
                               f"e.g. {no_wire[0]}")


def dfg_document(g: nx.DiGraph, report: DfgReport, meta: dict[str, Any]) -> dict[str, Any]:
    """The dfg.json document: networkx node-link data plus counts, problems and ``meta``."""
    doc = nx.node_link_data(g, edges="edges")
    doc["graph"] = {"format": "gradwire-dfg", "version": 1, **meta, "counts": report.counts,
                    "problems": report.problems}
    return doc


def write_graphml(g: nx.DiGraph, path: Any) -> None:
    """GraphML of the graph (attributes that are None are left out, as GraphML requires)."""
    h = nx.DiGraph()
    h.add_nodes_from((n, {k: v for k, v in d.items() if v is not None})
                     for n, d in g.nodes(data=True))
    h.add_edges_from(g.edges(data=True))
    nx.write_graphml(h, path)
