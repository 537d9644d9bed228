"""Pure translation of one step's RunMetadata (step stats + partition graphs) into records.

No I/O and no TensorFlow import: it reads the protobuf message it is given. Facts it relies on,
checked against TF 2.21 compat.v1 with a gRPC parameter-server cluster:

* A worker's RunMetadata holds step stats for its own device *and* for every PS device that ran
  part of the step; the PS side's ``RecvTensor`` ops (the PS pulling gradients from the worker)
  appear under the PS device, the worker's ``RecvTensor`` ops (parameter pulls) under the worker.
* A ``RecvTensor`` node's ``timeline_label`` reads ``[SIZE] [RATE] EDGE from SRC to DST``; EDGE
  is the ``tensor_name`` attribute of the matching ``_Send``/``_Recv`` pair in the partition
  graphs. The SIZE is not trustworthy (it can read ``[0B]`` for a multi-MB pull), so transfer
  sizes come from the producer tensor's dtype and shape instead.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from gradwire.records import DataDep, OpRecord, StepTrace, VariableRecord

# DataType enum (tensorflow/core/framework/types.proto) -> bytes per element; None = variable.
DTYPE_BYTES: dict[int, int | None] = {
    1: 4, 2: 8, 3: 4, 4: 1, 5: 2, 6: 1, 7: None, 8: 8, 9: 8, 10: 1, 11: 1, 12: 1, 13: 4,
    14: 2, 15: 2, 16: 2, 17: 2, 18: 16, 19: 2, 20: None, 21: None, 22: 4, 23: 8,
}
TRANSFER_GRAPH_OPS = frozenset({"_Recv", "_HostRecv", "_Send", "_HostSend"})
# the ops replica_device_setter hands to its ps_strategy (TensorFlow's STANDARD_PS_OPS):
# variables (with a shape and dtype) and the other stateful resources it puts on a PS
VARIABLE_GRAPH_OPS = frozenset({
    "Variable", "VariableV2", "AutoReloadVariable", "VarHandleOp", "MutableHashTable",
    "MutableHashTableV2", "MutableHashTableOfTensors", "MutableHashTableOfTensorsV2",
    "MutableDenseHashTable", "MutableDenseHashTableV2", "BoostedTreesEnsembleResourceHandleOp",
    "BoostedTreesQuantileStreamResourceHandleOp", "ResourceConditionalAccumulator",
    "DecisionTreeResource"})
# the ops through which SyncReplicasOptimizer's workers hand their gradients to the PS
# (ConditionalAccumulator and SparseConditionalAccumulator, resource and ref variants): a
# step that runs one trains synchronously
ACCUMULATE_OPS = frozenset({"AccumulatorApplyGradient", "ResourceAccumulatorApplyGradient",
                            "SparseAccumulatorApplyGradient",
                            "ResourceSparseAccumulatorApplyGradient"})
RECV_LABEL = re.compile(r"^(?:\[[^\]]*\]\s*)*(?P<edge>\S+) from (?P<src>\S+) to (?P<dst>\S+)\s*$")
_SIZE_LABEL = re.compile(r"^\[(?P<num>[\d.]+)(?P<unit>B|KB|MB|GB)\]")
_OP_LABEL = re.compile(r"^(?:\[[^\]]*\]\s*)*\S+ = (?P<op>[\w.]+)\(")
_UNIT = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}

StaticBytes = Callable[[str], "int | None"]


def tensor_bytes(dtype: int, dims: Iterable[int]) -> int | None:
    """Bytes of a dense tensor of DataType enum ``dtype`` and shape ``dims`` (None if unknown)."""
    per = DTYPE_BYTES.get(int(dtype) % 100)  # reference types are dtype + 100
    dims = list(dims)
    if per is None or any(d < 0 for d in dims):
        return None
    return per * math.prod(dims)


def label_size_bytes(label: str) -> int | None:
    """The size TensorFlow printed at the head of a timeline label (``[3.0MB]``), in bytes."""
    m = _SIZE_LABEL.match(label)
    if not m:
        return None
    return int(round(float(m.group("num")) * _UNIT[m.group("unit")]))


def split_input(name: str) -> tuple[str, int, bool]:
    """``'^a'`` -> ('a', -1, True); ``'a:2'`` -> ('a', 2, False); ``'a'`` -> ('a', 0, False)."""
    if name.startswith("^"):
        return name[1:], -1, True
    node, _, slot = name.rpartition(":")
    if node and slot.isdigit():
        return node, int(slot), False
    return name, 0, False


def _attr_s(node: Any, key: str) -> str:
    return node.attr[key].s.decode() if key in node.attr else ""


def times_us(ns: Any) -> tuple[int, int]:
    """An op's start and end (µs, the step stats' clock), its outputs handed over."""
    start = ns.all_start_micros or ns.all_start_nanos // 1000
    rel = max(ns.all_end_rel_micros, ns.op_end_rel_micros)
    if rel == 0 and ns.all_end_rel_nanos:
        rel = ns.all_end_rel_nanos // 1000
    return int(start), int(start + rel)


class _GraphIndex:
    """Partition-graph lookups: node -> (op, device), edge name -> send/recv node."""

    def __init__(self, graphs: Iterable[Any]) -> None:
        self.node_op: dict[str, str] = {}
        self.node_device: dict[str, str] = {}
        self.send_by_edge: dict[str, Any] = {}
        self.recv_by_edge: dict[str, Any] = {}
        self.transfer_by_name: dict[str, Any] = {}
        self.deps: list[DataDep] = []
        nodes = [n for g in graphs for n in g.node]
        self.variables = partition_variables(nodes)
        for n in nodes:
            self.node_op[n.name] = n.op
            self.node_device[n.name] = n.device
            if n.op in TRANSFER_GRAPH_OPS:
                self.transfer_by_name[n.name] = n
            if n.op in ("_Send", "_HostSend"):
                self.send_by_edge[_attr_s(n, "tensor_name")] = n
            elif n.op in ("_Recv", "_HostRecv"):
                self.recv_by_edge[_attr_s(n, "tensor_name")] = n
        for n in nodes:
            for inp in n.input:
                src, _, control = split_input(inp)
                self.deps.append(
                    DataDep(src=src, dst=n.name, src_device=self.node_device.get(src, n.device),
                            dst_device=n.device, control=control)
                )
        for edge, send in self.send_by_edge.items():
            recv = self.recv_by_edge.get(edge)
            if recv is not None:
                self.deps.append(
                    DataDep(src=send.name, dst=recv.name, src_device=send.device,
                            dst_device=recv.device, tensor=edge)
                )

    def producer(self, edge: str) -> str:
        """``'node:slot'`` feeding the ``_Send`` of ``edge`` ('' if unknown)."""
        send = self.send_by_edge.get(edge)
        if send is None or not send.input:
            return ""
        node, slot, _ = split_input(send.input[0])
        return f"{node}:{slot}"


def partition_variables(nodes: Iterable[Any]) -> tuple[VariableRecord, ...]:
    """The variable (and other PS resource) nodes among partition-graph ``nodes``, in their
    order; bytes from each node's ``shape`` and ``dtype`` attributes; ``colocated_with`` the
    node its ``_class`` attribute (``loc:@name``) ties it to, such as an optimizer's slot's
    variable."""
    out = []
    for node in nodes:
        if node.op not in VARIABLE_GRAPH_OPS:
            continue
        size = None
        if "shape" in node.attr and "dtype" in node.attr:
            shape = node.attr["shape"].shape
            if not shape.unknown_rank:
                size = tensor_bytes(node.attr["dtype"].type, (d.size for d in shape.dim))
        locs = ([s.decode() for s in node.attr["_class"].list.s] if "_class" in node.attr
                else [])
        other = next((loc[5:] for loc in locs if loc.startswith("loc:@")
                      and loc[5:] != node.name), "")
        out.append(VariableRecord(name=node.name, device=node.device, bytes_=size,
                                  colocated_with=other))
    return tuple(out)


def _output_bytes(step_stats: Any) -> dict[str, int]:
    """``'node:slot'`` -> bytes of that output, from step stats tensor descriptions."""
    out: dict[str, int] = {}
    for dev in step_stats.dev_stats:
        for ns in dev.node_stats:
            for o in ns.output:
                td = o.tensor_description
                if not td.HasField("shape") or td.shape.unknown_rank:
                    continue
                size = tensor_bytes(td.dtype, (d.size for d in td.shape.dim))
                if size is not None:
                    out[f"{ns.node_name}:{o.slot}"] = size
    return out


def parse_run_metadata(
    run_metadata: Any, step: int, static_bytes: StaticBytes | None = None
) -> StepTrace:
    """Translate one step's ``RunMetadata`` into a StepTrace (ops, data deps, devices, and the
    partition graphs' variables in node order).

    ``static_bytes(producer)`` may supply the size of a producer tensor (``'node:slot'``) from
    the client graph's static shapes when step stats carry no shape for it.
    """
    index = _GraphIndex(run_metadata.partition_graphs)
    out_bytes = _output_bytes(run_metadata.step_stats)
    ops: list[OpRecord] = []
    devices: dict[str, None] = {}  # TF lists a device once per partition that ran on it
    for dev in run_metadata.step_stats.dev_stats:
        devices[dev.device] = None
        for ns in dev.node_stats:
            ops.append(_op_record(ns, dev.device, step, index, out_bytes, static_bytes))
    ops.sort(key=lambda o: (o.start_us, o.end_us, o.device, o.name))
    return StepTrace(step=step, ops=tuple(ops), deps=tuple(index.deps), devices=tuple(devices),
                     variables=tuple(index.variables))


def _op_record(
    ns: Any,
    device: str,
    step: int,
    index: _GraphIndex,
    out_bytes: dict[str, int],
    static_bytes: StaticBytes | None,
) -> OpRecord:
    start, end = times_us(ns)
    label = ns.timeline_label
    reported = None
    if ns.output and ns.output[0].tensor_description.HasField("allocation_description"):
        reported = ns.output[0].tensor_description.allocation_description.requested_bytes
    graph_op = index.node_op.get(ns.node_name, "")
    edge = src = dst = ""
    graph_node = ns.node_name if graph_op else ""
    if ns.node_name == "RecvTensor":
        op_type = "RecvTensor"
        m = RECV_LABEL.match(label)
        if m:
            edge, src, dst = m.group("edge"), m.group("src"), m.group("dst")
            recv = index.recv_by_edge.get(edge)
            graph_node = recv.name if recv is not None else ""
        if reported is None:  # the label's size is rounded to one decimal: a last resort
            reported = label_size_bytes(label)
    else:
        m = _OP_LABEL.match(label)
        op_type = graph_op or (m.group("op") if m else ns.node_name)
        if graph_op in TRANSFER_GRAPH_OPS:
            node = index.transfer_by_name.get(ns.node_name)
            if node is not None:
                edge = _attr_s(node, "tensor_name")
                src, dst = _attr_s(node, "send_device"), _attr_s(node, "recv_device")
    producer = index.producer(edge) if edge else ""
    size = None
    if producer:
        size = out_bytes.get(producer)
        if size is None and static_bytes is not None:
            size = static_bytes(producer)
    return OpRecord(
        step=step, name=ns.node_name, op_type=op_type, device=device, start_us=start,
        end_us=end, graph_node=graph_node, tensor=edge, bytes_=size,
        bytes_reported=reported if edge else None, src_device=src, dst_device=dst,
        producer=producer,
    )

