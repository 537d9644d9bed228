"""Match every tensor transfer across nodes: producer op, packets on both ends, receive op.

A transfer is one ``RecvTensor`` call. Its transaction id is built from what both ends agree
on: TF's step id (shared by all tasks of a step), the rendezvous edge name, the sending and
receiving tasks, and the direction (``pull``: a PS sends parameters to a worker; ``push``: a
worker sends gradients to a PS). The capture of each end supplies the packet times (request,
first and last DATA) on that end's clock; the trace supplies the receive op (receiver's clock)
and the op producing the tensor (sender's clock).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from gradwire.aligner.nodes import Domains, NodeData, is_loopback
from gradwire.collector.h2capture import split_endpoint
from gradwire.collector.summary import task_of
from gradwire.records import OpRecord, StepTrace, Stream


@dataclass(frozen=True, kw_only=True)
class Transfer:
    """One tensor transfer with what each end saw of it (times on each end's own clock).

    Attributes:
        txn: transaction id, ``<step_id>|<edge>|<src task>-><dst task>|<direction>``.
        direction: ``pull`` (PS to worker), ``push`` (worker to PS) or ``other``.
        edge: rendezvous edge name (``edge_16_MatMul/ReadVariableOp``).
        src_device, dst_device: sending and receiving TF devices.
        src_domain, dst_domain: their clock domains (a capture's own domain where one saw the
            call, else the domain of the device's task).
        step_id: TF's step id (None when no capture shows the call).
        node, step: bundle and hook step whose trace holds the receive op ('' and None if none).
        bytes_: tensor bytes (from the trace, else the receiver's DATA bytes; None if neither).
        recv: the receive op (``RecvTensor`` on the receiving device), if traced.
        producer: the op feeding the sender's ``_Send``, if traced.
        at_receiver, at_sender: the call as the receiver's (gRPC client's) and sender's (gRPC
            server's) captures saw it.
    """

    txn: str
    direction: str
    edge: str
    src_device: str
    dst_device: str
    src_domain: str
    dst_domain: str
    step_id: int | None
    node: str = ""
    step: int | None = None
    bytes_: int | None = None
    recv: OpRecord | None = None
    producer: OpRecord | None = None
    at_receiver: Stream | None = None
    at_sender: Stream | None = None


def direction_of(src_device: str, dst_device: str) -> str:
    """``pull`` for PS -> worker, ``push`` for worker -> PS, else ``other``."""
    jobs = (task_of(src_device).split(":")[0], task_of(dst_device).split(":")[0])
    return {("ps", "worker"): "pull", ("worker", "ps"): "push"}.get(jobs, "other")


def split_key(rendezvous_key: str) -> tuple[str, str, str] | None:
    """``src;incarnation;dst;edge;frame:iter`` -> (src device, dst device, edge)."""
    parts = rendezvous_key.split(";")
    return (parts[0], parts[2], parts[3]) if len(parts) >= 4 else None


def txn_id(step: int | str | None, edge: str, src_device: str, dst_device: str) -> str:
    """Transaction id of a transfer (see ``Transfer.txn``)."""
    return (f"{step}|{edge}|{task_of(src_device)}->{task_of(dst_device)}|"
            f"{direction_of(src_device, dst_device)}")


Key = tuple[str, str, str]  # (src device, dst device, edge)


def stream_sides(nodes: Sequence[NodeData], loopback: bool
                 ) -> dict[tuple[Key, int], dict[str, tuple[str, Stream]]]:
    """Every decoded RecvTensor call, by (key, step id), with the stream each end captured.

    Values map ``receiver``/``sender`` to (clock domain, stream). A node's capture is the
    receiver's when the node holds the gRPC client's address, the sender's when it holds the
    server's; a capture holding both (loopback) counts for both. With ``loopback`` (the cluster
    runs on loopback: ``Domains.loopback``) every node holds the loopback addresses.
    """
    out: dict[tuple[Key, int], dict[str, tuple[str, Stream]]] = defaultdict(dict)
    for node in nodes:
        for s in node.streams:
            key = split_key(s.tensor) if s.tensor else None
            if key is None or s.step_id is None:
                continue
            if _holds(node, s.client, loopback):
                out[(key, s.step_id)].setdefault("receiver", (node.domain, s))
            if _holds(node, s.server, loopback):
                out[(key, s.step_id)].setdefault("sender", (node.domain, s))
    return out


def _holds(node: NodeData, endpoint: str, loopback_cluster: bool) -> bool:
    """Whether ``ip:port`` is an address of the node's host; in a cluster on loopback the
    loopback addresses are (only the host itself reaches them)."""
    ip = split_endpoint(endpoint)[0]
    return (not node.addresses or ip in node.addresses
            or (loopback_cluster and is_loopback(ip)))


def _step_id_candidates(trace: StepTrace, by_key: dict[Key, list[tuple[int, int]]]
                        ) -> list[tuple[int, float, int]]:
    """(-votes, median gap ns, step id) of every TF step id whose receiver-side calls share
    edges with the step's receive ops, best first: most shared edges, then closest requests."""
    votes: Counter[int] = Counter()
    gaps: dict[int, list[int]] = defaultdict(list)
    for op in trace.ops:
        if not op.is_transfer:
            continue
        for req_ns, sid in by_key.get((op.src_device, op.dst_device, op.tensor), ()):
            votes[sid] += 1
            gaps[sid].append(abs(req_ns - op.start_us * 1000))
    return sorted((-votes[sid], statistics.median(gaps[sid]), sid) for sid in votes)


def _step_ids(traces: Sequence[StepTrace], by_key: dict[Key, list[tuple[int, int]]]
              ) -> dict[int, int | None]:
    """The TF step id of each traced step of one node, distinct: the surest step (most shared
    edges, then closest requests) picks first, the others take their best id left. Every step
    pulls the same edges, so a step whose TF stamps run late could otherwise take its
    neighbour's id (seen: two traced steps both matched to the calls of the later one)."""
    ranked = {t.step: _step_id_candidates(t, by_key) for t in traces}
    taken: set[int] = set()
    out: dict[int, int | None] = {}
    for step in sorted(ranked, key=lambda st: ranked[st][0][:2] if ranked[st] else (1, 0.0)):
        out[step] = next((sid for _v, _g, sid in ranked[step] if sid not in taken), None)
        if out[step] is not None:
            taken.add(out[step])
    return out


def _producers(trace: StepTrace) -> dict[tuple[str, str], OpRecord]:
    return {(op.device, op.graph_node or op.name): op for op in trace.ops if not op.is_transfer}


def match_transfers(nodes: Sequence[NodeData], domains: Domains) -> list[Transfer]:
    """All transfers: every traced receive op and every captured RecvTensor call, matched.

    Calls seen only in captures (untraced steps or nodes) still become transfers, without ops:
    they constrain the clocks all the same.
    """
    sides = stream_sides(nodes, domains.loopback)
    by_key: dict[Key, list[tuple[int, int]]] = defaultdict(list)
    for (key, sid), ends in sides.items():
        if "receiver" in ends:
            by_key[key].append((ends["receiver"][1].request_ns or 0, sid))
    out: list[Transfer] = []
    used: set[tuple[Key, int]] = set()
    for node in nodes:
        sids = _step_ids(node.steps, by_key)
        for trace in node.steps:
            sid = sids[trace.step]
            producers = _producers(trace)
            for op in trace.ops:
                if not op.is_transfer:
                    continue
                key = (op.src_device, op.dst_device, op.tensor)
                ends = sides.get((key, sid), {}) if sid is not None else {}
                if ends:
                    used.add((key, sid))  # type: ignore[arg-type]
                prod = producers.get((op.src_device, op.producer.rsplit(":", 1)[0]))
                out.append(_transfer(key, sid, ends, domains, node=node.name, step=trace.step,
                                     recv=op, producer=prod))
    for (key, sid), ends in sides.items():
        if (key, sid) not in used:
            out.append(_transfer(key, sid, ends, domains))
    return out


def _transfer(key: Key, sid: int | None, ends: dict[str, tuple[str, Stream]], domains: Domains,
              *, node: str = "", step: int | None = None, recv: OpRecord | None = None,
              producer: OpRecord | None = None) -> Transfer:
    src, dst, edge = key
    recv_domain, at_recv = ends.get("receiver", (domains.of_device(dst), None))
    send_domain, at_send = ends.get("sender", (domains.of_device(src), None))
    nbytes = recv.bytes_ if recv is not None and recv.bytes_ is not None else (
        at_recv.response_bytes if at_recv is not None else None)
    txn_step = sid if sid is not None else f"{node}:{step}"
    return Transfer(txn=txn_id(txn_step, edge, src, dst), direction=direction_of(src, dst),
                    edge=edge, src_device=src, dst_device=dst, src_domain=send_domain,
                    dst_domain=recv_domain, step_id=sid, node=node, step=step,
                    bytes_=nbytes, recv=recv, producer=producer, at_receiver=at_recv,
                    at_sender=at_send)
