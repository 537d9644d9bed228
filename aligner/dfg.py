"""The global data-flow graph: every traced op of every node plus the transfers between them.

``global_dfg(alignment)`` builds it once, typed: per traced step of each bundle its ops and the
transfers received in it, on the reference clock (``DfgStep``, ``DfgOp``, ``DfgTransfer``), with
the partition graph's dependencies. It is what the replayer's step templates are built from
(``replay/template.py``) and what ``gradwire align`` exports; networkx is used only for that
export and the walks over it (``GlobalDFG.graph``, ``build_dfg``).

In the export, node ids are ``<bundle>/<step>/<task>/<op>`` for ops and
``<bundle>/<step>/xfer/<edge>`` for transfers. Node attributes (times on the reference clock,
microseconds):

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
from functools import cached_property
from typing import Any

import networkx as nx

from gradwire.aligner.align import Alignment
from gradwire.aligner.transfers import Transfer
from gradwire.collector.summary import task_of
from gradwire.records import DataDep, OpRecord, VariableRecord


@dataclass(frozen=True, kw_only=True)
class DfgOp:
    """A traced op on the reference clock: ``start_us``/``end_us`` its record's times
    aligned in its device's clock domain (microseconds); ``record`` the op as traced."""

    id: str
    kind: str
    task: str
    start_us: float
    end_us: float
    record: OpRecord

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def device(self) -> str:
        return self.record.device


@dataclass(frozen=True, kw_only=True)
class DfgTransfer:
    """A received tensor on the reference clock (microseconds): ``request_us`` (the
    receiver's request, else its receive op's start), ``first_data_us``/``last_data_us`` (its
    DATA at the receiver, else the receive op's start/end), ``recv_start_us``/``recv_end_us``
    (the receive op, in the receiver's clock domain), ``producer_end_us`` (the sender's op that
    produced it, if traced), ``wire_bytes`` (DATA bytes the receiver's capture saw, gRPC framing
    included, else the tensor's size); ``wire_times``: whether a capture gave first and last
    DATA."""

    id: str
    kind: str
    transfer: Transfer
    request_us: float
    first_data_us: float
    last_data_us: float
    recv_start_us: float
    recv_end_us: float
    producer_end_us: float | None
    wire_bytes: float
    wire_times: bool


@dataclass(frozen=True, kw_only=True)
class DfgStep:
    """One traced step of one bundle: its ops (transfer ops included, as traced), the
    partition graph's dependencies within each device, and the transfers received in it (in
    the alignment's order)."""

    bundle: str
    step: int
    ops: tuple[DfgOp, ...]
    deps: tuple[DataDep, ...]
    transfers: tuple[DfgTransfer, ...]
    variables: tuple[VariableRecord, ...] = ()  # the partition graphs', in node order


@dataclass(frozen=True)
class GlobalDFG:
    """Every traced step of every bundle (``steps`` by bundle and step), every received transfer
    (``transfers``, in the alignment's order), and the transfers without a traced producer or
    without packets (``txn`` ids) for the report."""

    steps: dict[tuple[str, int], DfgStep]
    transfers: tuple[DfgTransfer, ...]
    without_producer: tuple[str, ...] = ()
    without_packets: tuple[str, ...] = ()

    @cached_property
    def graph(self) -> nx.DiGraph:
        """The graph as networkx, the export's form (module docstring); built when asked."""
        return _to_networkx(self)

    @cached_property
    def report(self) -> DfgReport:
        """Counts and problems of the graph (``DfgReport``): acyclic, every receive matched
        to its send and seen in the captures."""
        report = DfgReport()
        _check(self.graph, report, list(self.without_producer), list(self.without_packets))
        return report


def _kind(device: str) -> str:
    return task_of(device).split(":")[0]


def _op_id(bundle: str, step: int, op: OpRecord) -> str:
    return f"{bundle}/{step}/{task_of(op.device)}/{op.graph_node or op.name}"


@dataclass
class DfgReport:
    """Counts and problems found while building the graph (``problems`` empty when sound)."""

    counts: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def global_dfg(al: Alignment) -> GlobalDFG:
    """The typed global DFG of an alignment (its checks in ``GlobalDFG.report``)."""
    xfers: dict[tuple[str, int], list[DfgTransfer]] = {}
    every: list[DfgTransfer] = []
    unmatched_send: list[str] = []
    unmatched_wire: list[str] = []
    for t in al.transfers:
        if t.recv is None:
            continue
        every.append(_transfer(al, t))
        xfers.setdefault((t.node, t.step), []).append(every[-1])
        if t.producer is None:
            unmatched_send.append(t.txn)
        if t.at_receiver is None and t.at_sender is None and _has_capture(al, t):
            unmatched_wire.append(t.txn)
    steps: dict[tuple[str, int], DfgStep] = {}
    for node in al.nodes:
        for trace in node.steps:
            ops = []
            for op in trace.ops:
                d = al.domains.of_device(op.device)
                ops.append(DfgOp(id=_op_id(node.name, trace.step, op), kind=_kind(op.device),
                                 task=task_of(op.device), start_us=al.aligned_us(d, op.start_us),
                                 end_us=al.aligned_us(d, op.end_us), record=op))
            steps[(node.name, trace.step)] = DfgStep(
                bundle=node.name, step=trace.step, ops=tuple(ops),
                deps=tuple(dep for dep in trace.deps if not dep.tensor),
                transfers=tuple(xfers.get((node.name, trace.step), ())),
                variables=trace.variables)
    return GlobalDFG(steps, tuple(every), tuple(unmatched_send), tuple(unmatched_wire))


def build_dfg(al: Alignment) -> tuple[nx.DiGraph, DfgReport]:
    """The global DFG of an alignment as networkx, and its report (``global_dfg``)."""
    dfg = global_dfg(al)
    return dfg.graph, dfg.report


def _to_networkx(dfg: GlobalDFG) -> nx.DiGraph:
    g = nx.DiGraph()
    for st in dfg.steps.values():
        for op in st.ops:
            if op.record.is_transfer:
                continue
            r = op.record
            g.add_node(op.id, kind=op.kind, bundle=st.bundle, step=st.step, task=op.task,
                       device=r.device, name=r.name, op_type=r.op_type, start_us=op.start_us,
                       end_us=op.start_us + r.duration_us, duration_us=r.duration_us)
    for x in dfg.transfers:
        t = x.transfer
        recv_id = _op_id(t.node, t.step, t.recv)  # type: ignore[arg-type]
        g.add_node(recv_id, kind=_kind(t.dst_device), bundle=t.node, step=t.step,
                   task=task_of(t.dst_device), device=t.dst_device, name=t.recv.graph_node,
                   op_type=t.recv.op_type, start_us=x.recv_start_us,
                   end_us=x.recv_start_us + t.recv.duration_us,
                   duration_us=t.recv.duration_us)
        g.add_node(x.id, **_transfer_attrs(x))
        g.add_edge(x.id, recv_id, control=False, transfer=True)
        if t.producer is not None:
            g.add_edge(_op_id(t.node, t.step, t.producer), x.id, control=False,
                       transfer=True)
    for st in dfg.steps.values():  # after the receive ops exist: they feed their consumers
        for dep in st.deps:
            a = f"{st.bundle}/{st.step}/{task_of(dep.src_device)}/{dep.src}"
            b = f"{st.bundle}/{st.step}/{task_of(dep.dst_device)}/{dep.dst}"
            if a in g and b in g:
                g.add_edge(a, b, control=dep.control, transfer=False)
    return g


def _has_capture(al: Alignment, t: Any) -> bool:
    return any(n.streams and n.domain in (t.src_domain, t.dst_domain) for n in al.nodes)


def _transfer(al: Alignment, t: Transfer) -> DfgTransfer:
    """``t`` (received, traced) on the reference clock."""
    recv = t.recv
    assert recv is not None
    r = t.at_receiver
    recv_start = al.aligned_us(t.dst_domain, recv.start_us)
    recv_end = al.aligned_us(t.dst_domain, recv.end_us)

    def at(ns: int | None, fallback: float) -> float:
        return al.capture_aligned_us(t.dst_domain, ns) if r is not None and ns else fallback

    return DfgTransfer(
        id=f"{t.node}/{t.step}/xfer/{t.edge}",
        kind="downlink" if t.direction == "pull" else "uplink" if t.direction == "push"
        else "network", transfer=t,
        request_us=at(r.request_ns if r is not None else None, recv_start),
        first_data_us=at(r.first_data_ns if r is not None else None, recv_start),
        last_data_us=at(r.last_data_ns if r is not None else None, recv_end),
        recv_start_us=recv_start, recv_end_us=recv_end,
        producer_end_us=al.aligned_us(t.src_domain, t.producer.end_us)
        if t.producer is not None else None,
        wire_bytes=float(r.response_bytes) if r is not None and r.response_bytes
        else float(t.bytes_ or 0),
        wire_times=bool(r is not None and r.first_data_ns and r.last_data_ns))


def _transfer_attrs(x: DfgTransfer) -> dict[str, Any]:
    t = x.transfer
    attrs: dict[str, Any] = {
        "kind": x.kind, "bundle": t.node, "step": t.step, "task": task_of(t.dst_device),
        "device": t.dst_device, "name": t.edge, "op_type": "Transfer", "txn": t.txn,
        "step_id": t.step_id, "bytes": t.bytes_, "src_task": task_of(t.src_device),
        "dst_task": task_of(t.dst_device)}
    start = x.producer_end_us if x.producer_end_us is not None else x.recv_start_us
    end = x.recv_end_us
    if x.wire_times:
        attrs["first_data_us"] = x.first_data_us
        attrs["last_data_us"] = x.last_data_us
        start, end = x.first_data_us, x.last_data_us
    attrs.update(start_us=start, end_us=end, duration_us=end - start)
    return attrs


def _check(g: nx.DiGraph, report: DfgReport, no_send: list[str], no_wire: list[str]) -> None:
    # the kinds every graph of a PS job has are counted when absent too, so that the keys
    # do not change from one alignment to the next; a job's other task kinds when present
    kinds = Counter(dict.fromkeys(("downlink", "ps", "uplink", "worker"), 0))
    kinds.update(d["kind"] for _, d in g.nodes(data=True))
    report.counts = {"nodes": g.number_of_nodes(), "edges": g.number_of_edges(),
                     **{f"{k}_nodes": v for k, v in sorted(kinds.items())},
                     "transfers_without_producer": len(no_send),
                     "transfers_without_packets": len(no_wire)}
    if not g.number_of_nodes():  # a PS's bundle alone, or none recorded with the TraceHook
        report.problems.append("the graph is empty: no bundle has a traced step (give the "
                               "worker's bundle recorded with the TraceHook)")
    if not nx.is_directed_acyclic_graph(g):
        cycle = nx.find_cycle(g)
        report.problems.append("the graph has a cycle: " + " -> ".join(a for a, _ in cycle))
    if no_send:
        report.problems.append(f"{len(no_send)} receive(s) without their producer op in the "
                               f"sender's trace, e.g. {no_send[0]}")
    if no_wire:
        report.problems.append(f"{len(no_wire)} traced receive(s) not found in the captures, "
                               f"e.g. {no_wire[0]}")


DFG_FORMAT = {"format": "gradwire-dfg", "version": 1}  # dfg.json's and dfg.graphml's


def dfg_document(g: nx.DiGraph, report: DfgReport, meta: dict[str, Any]) -> dict[str, Any]:
    """The dfg.json document: networkx node-link data plus counts, problems and ``meta``."""
    doc = nx.node_link_data(g, edges="edges")
    doc["graph"] = {**DFG_FORMAT, **meta, "counts": report.counts, "problems": report.problems}
    return doc


def write_graphml(g: nx.DiGraph, path: Any, meta: dict[str, Any] | None = None) -> None:
    """GraphML of the graph (attributes that are None are left out, as GraphML requires),
    with dfg.json's format, version and ``meta`` (reference, objective, time unit) as the
    graph's own attributes."""
    h = nx.DiGraph(**DFG_FORMAT, **(meta or {}))
    h.add_nodes_from((n, {k: v for k, v in d.items() if v is not None})
                     for n, d in g.nodes(data=True))
    h.add_edges_from(g.edges(data=True))
    nx.write_graphml(h, path)
