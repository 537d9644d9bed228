"""Pure: the ops one step executed, each with its input and output shapes, from RunMetadata.

A step's step stats give each executed node's output tensors (dtype and shape) and its own
execution time; its partition graphs give each node's inputs (``producer:slot``) and attributes.
Joining the two gives every op's input shapes without TensorFlow's shape inference, for the op
cost database (``gradwire opdb``): ``opdb build`` runs one op alone and reads it back with this,
``opdb ingest`` reads every op of a recorded step.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gradwire.opfeatures import canonical_op, device_type

from .stepstats import RECV_LABEL, split_input, tensor_bytes, times_us

# DataType enum (tensorflow/core/framework/types.proto) -> name; reference types are +100
DTYPE_NAMES = {1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8",
               7: "string", 9: "int64", 10: "bool", 14: "bfloat16", 17: "uint16",
               19: "float16", 20: "resource", 21: "variant", 22: "uint32", 23: "uint64"}
# attributes that change an op's cost at equal shapes
COST_ATTRS = ("data_format", "dilations", "fused_ops", "is_training", "ksize", "padding",
              "strides", "transpose_a", "transpose_b", "adj_x", "adj_y")
# ops that move, name or wait for data rather than compute on it
NOT_COMPUTE = frozenset({
    "RecvTensor", "_Recv", "_Send", "_HostRecv", "_HostSend", "_Arg", "_Retval", "NoOp",
    "Const", "HostConst", "Identity", "IdentityN", "VarHandleOp", "VariableV2", "Variable",
    "ReadVariableOp", "Placeholder", "StopGradient", "_SOURCE", "_SINK", "Shape", "ShapeN",
    "Size", "Rank", "Reshape", "ExpandDims", "Squeeze", "ZerosLike", "OnesLike", "Fill",
    "RandomUniform", "RandomStandardNormal", "RandomUniformInt", "TruncatedNormal",
    "QueueDequeueV2", "QueueEnqueueV2", "QueueDequeueManyV2", "Assert", "Print"})
# producers whose output is a variable's value (read on the worker, or pulled from a PS)
VARIABLE_READS = frozenset({"_Recv", "_HostRecv", "VarHandleOp", "ReadVariableOp",
                            "VariableV2", "Variable"})


@dataclass(frozen=True, kw_only=True)
class ExecutedOp:
    """One op as a step ran it: node ``name``, ``op`` type (oneDNN prefixes removed),
    ``device`` type (``CPU``/``GPU``), input and output ``shapes`` (an input whose shape the
    step did not record is ``None``), ``dtype`` name of its first output (see ``executed_ops``),
    cost-relevant
    ``attrs``, its own execution time in µs, the nodes it waits for (``preds``: data and
    control inputs, by node name), and which inputs are variables (``from_variable``: read
    from a variable or received from a PS, aligned with ``inputs``), the node each input comes
    from (``input_nodes``), when it ran (``start_us``, ``end_us``: the step stats' clock,
    the end including its outputs' hand-over), its outputs' bytes, and the full name of the
    device it ran on (``placed``), and which output of its node each input is
    (``input_slots``, aligned with ``input_nodes``; empty: not known, the first)."""

    name: str
    op: str
    device: str
    inputs: tuple[tuple[int, ...] | None, ...]
    outputs: tuple[tuple[int, ...], ...]
    dtype: str
    attrs: tuple[tuple[str, Any], ...]
    duration_us: float
    preds: tuple[str, ...] = ()
    from_variable: tuple[bool, ...] = ()
    input_nodes: tuple[str, ...] = ()
    start_us: float = 0.0
    end_us: float = 0.0
    output_bytes: tuple[int, ...] = ()
    placed: str = ""
    input_slots: tuple[int, ...] = ()


def attr_value(av: Any) -> Any:
    """A hashable, JSON-ready Python value of an AttrValue proto (tuples of ints/strings/
    bools, a string, an int, a bool, a float, a dtype number); None for other kinds (shapes,
    tensors, functions)."""
    kind = av.WhichOneof("value")
    if kind == "list":
        for field in ("i", "s", "b", "f"):
            items = list(getattr(av.list, field))
            if items:
                return tuple(x.decode() if isinstance(x, bytes) else x for x in items)
        return ()
    if kind == "s":
        return av.s.decode(errors="replace")
    if kind in ("i", "b", "f", "type"):
        return getattr(av, kind)
    return None


def _node_time_us(ns: Any) -> float:
    """An op's own execution time (µs): from its start to the end of its computation."""
    rel = ns.op_end_rel_micros or ns.all_end_rel_micros
    if rel == 0 and (ns.op_end_rel_nanos or ns.all_end_rel_nanos):
        return (ns.op_end_rel_nanos or ns.all_end_rel_nanos) / 1000.0
    return float(rel)


def _out_shapes(ns: Any) -> dict[int, tuple[tuple[int, ...], int]]:
    out = {}
    for o in ns.output:
        td = o.tensor_description
        if td.HasField("shape") and not td.shape.unknown_rank:
            out[o.slot] = (tuple(int(d.size) for d in td.shape.dim), int(td.dtype) % 100)
    return out


Shapes = dict[str, dict[int, tuple[tuple[int, ...], int]]]  # node -> slot -> (shape, dtype)


def executed_ops(run_metadata: Any, *, compute_only: bool = True) -> Iterator[ExecutedOp]:
    """The ops of one step's ``run_metadata`` (a RunMetadata message with partition graphs),
    in step-stats order; with ``compute_only`` those not in ``NOT_COMPUTE``. Shapes of inputs
    come from their producers' recorded outputs (a received tensor's from the op that fed its
    send, on the device that sent it; a resource handle's is its variable's shape and dtype);
    an op without outputs (an optimizer's update) takes the dtype of its last numeric input."""
    nodes, stats = _graph(run_metadata)
    shapes = _recorded_shapes(nodes, stats)
    # with ``compute_only`` off, each RecvTensor entry of the step stats is yielded as the
    # _Recv it fills (``_received``)
    recvs = {n.attr["tensor_name"].s: n for n in nodes.values()
             if n.op in ("_Recv", "_HostRecv") and "tensor_name" in n.attr}
    for device, ns in stats:
        if ns.node_name == "RecvTensor" and not compute_only:
            got = _received(ns, device, recvs, shapes)
            if got is not None:
                yield got
            continue
        node = nodes.get(ns.node_name)
        if node is None:
            continue
        op = canonical_op(node.op)
        outs = shapes.get(ns.node_name, {})
        start, end = times_us(ns)
        if compute_only and (op in NOT_COMPUTE or node.op in NOT_COMPUTE):
            continue
        inputs, in_types, variable, sources, slots = [], [], [], [], []
        for name in node.input:
            src, slot, control = split_input(name)
            if control:
                continue
            got = shapes.get(src, {}).get(slot)
            inputs.append(got[0] if got else None)
            variable.append(src in nodes and nodes[src].op in VARIABLE_READS)
            sources.append(src)
            slots.append(slot)
            if got:
                in_types.append(got[1])
        numeric = [t for t in in_types if t not in (20, 21)]  # not resource or variant
        first = outs[min(outs)] if outs else ((), numeric[-1] if numeric else 0)
        attrs = tuple(sorted((k, v) for k in COST_ATTRS if k in node.attr
                             and (v := attr_value(node.attr[k])) is not None))
        yield ExecutedOp(
            name=ns.node_name, op=op, device=device_type(device), inputs=tuple(inputs),
            outputs=tuple(outs[s][0] for s in sorted(outs)),
            dtype=DTYPE_NAMES.get(first[1], str(first[1])), attrs=attrs,
            duration_us=_node_time_us(ns),
            preds=tuple(split_input(name)[0] for name in node.input),
            from_variable=tuple(variable), input_nodes=tuple(sources), input_slots=tuple(slots),
            start_us=float(start), end_us=float(end),
            output_bytes=tuple(tensor_bytes(outs[k][1], outs[k][0]) or 0 for k in sorted(outs)),
            placed=device)


def _graph(run_metadata: Any) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """A step's partition graphs' nodes by name, and its step stats as (device,
    NodeExecStats) of every device."""
    nodes = {n.name: n for g in run_metadata.partition_graphs for n in g.node}
    return nodes, [(dev.device, ns) for dev in run_metadata.step_stats.dev_stats
                   for ns in dev.node_stats]


def _sends(nodes: dict[str, Any]) -> dict[bytes, Any]:
    """The ``_Send`` nodes of the partition graphs by their rendezvous edge name."""
    return {n.attr["tensor_name"].s: n for n in nodes.values()
            if n.op in ("_Send", "_HostSend") and "tensor_name" in n.attr and n.input}


def _recorded_shapes(nodes: dict[str, Any], stats: list[tuple[str, Any]]) -> Shapes:
    """Each node's recorded outputs (``stats``: (device, NodeExecStats) of every device), a
    resource handle's its variable's, a ``_Recv``'s its ``_Send``'s input's, recorded where
    that ran (a PS's device stats)."""
    shapes: Shapes = {}
    for _, ns in stats:
        shapes.setdefault(ns.node_name, {}).update(_out_shapes(ns))
    sends = _sends(nodes)
    for n in nodes.values():  # a resource handle stands for its variable: the variable's shape
        shape = n.attr["shape"].shape if "shape" in n.attr else None
        if n.op == "VarHandleOp" and shape is not None and not shape.unknown_rank:
            dims = tuple(int(d.size) for d in shape.dim)
            shapes.setdefault(n.name, {})[0] = (dims, int(n.attr["dtype"].type) % 100)
    for n in nodes.values():  # then the receives: a handle's shape may feed a send
        if n.op in ("_Recv", "_HostRecv") and "tensor_name" in n.attr:
            send = sends.get(n.attr["tensor_name"].s)
            if send is not None and n.name not in shapes:
                src, slot, _ = split_input(send.input[0])
                got = shapes.get(src, {}).get(slot)
                if got:
                    shapes[n.name] = {0: got}
    return shapes


@dataclass(frozen=True)
class SentTensor:
    """A tensor one step sent between tasks: its rendezvous ``edge`` name, its recorded
    ``shape`` (None: not recorded) and whether it is a variable's value (``from_variable``:
    its send reads a variable, or a tensor of a variable's shape)."""

    edge: str
    shape: tuple[int, ...] | None
    from_variable: bool


def sent_tensors(run_metadata: Any) -> list[SentTensor]:
    """Every tensor a step's partition graphs send (each ``_Send``, any device), with the shape
    its producer recorded (``executed_ops``'s shapes)."""
    nodes, stats = _graph(run_metadata)
    shapes = _recorded_shapes(nodes, stats)
    variables = {got[0] for name, n in nodes.items() if n.op in VARIABLE_READS
                 and n.op not in ("_Recv", "_HostRecv") for got in shapes.get(name, {}).values()}
    out = []
    for edge, send in _sends(nodes).items():
        src, slot, _ = split_input(send.input[0])
        got = shapes.get(src, {}).get(slot)
        reads = src in nodes and nodes[src].op in VARIABLE_READS
        out.append(SentTensor(edge=edge.decode(), shape=got[0] if got else None,
                              from_variable=reads or (got is not None and got[0] in variables)))
    return out


def _received(ns: Any, device: str, recvs: dict[bytes, Any],
              shapes: Shapes) -> ExecutedOp | None:
    """A ``RecvTensor`` step-stats entry as the ``_Recv`` node it fills (its label names the
    edge), or None when no receive of the partition graphs has that edge."""
    m = RECV_LABEL.match(ns.timeline_label)
    if not m:
        return None
    recv = recvs.get(m.group("edge").encode())
    if recv is None:
        return None
    out = shapes.get(recv.name, {}).get(0)
    start, end = times_us(ns)
    return ExecutedOp(
        name=recv.name, op="_Recv", device=device_type(device), inputs=(),
        outputs=(out[0],) if out else (), dtype=DTYPE_NAMES.get(out[1], "") if out else "",
        attrs=(), duration_us=_node_time_us(ns), start_us=float(start), end_us=float(end),
        output_bytes=(tensor_bytes(out[1], out[0]) or 0,) if out else (), placed=device)
