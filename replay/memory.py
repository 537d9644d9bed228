"""Peak memory of a worker's step from its graph's tensor lifetimes (dPRO section 5's memory
estimator), and TensorFlow's own count of it to check against.

``estimated_peak_bytes``: every tensor an op outputs is allocated when the op starts and freed
when the last op that reads it ends (its producer's end when none reads it; the step stats have
no entry of a ``_Send``: a tensor sent to another task is held until ``held_until`` says, where
the worker's capture times it (replay/sentholds.py: until its last byte left the worker, as
gRPC holds it until written out), else freed when its last local reader ends); each output of
an op is a tensor of its own, freed when its own last reader ends; an op whose output is a view
of its input (``ALIASING``: an identity, a reshape, a variable's read) adds nothing; an
element-wise op (``FORWARDS``) writes its output into an input's buffer where TensorFlow's
kernels do: the input made by an op of this step, as many bytes, and no reader of it ending
after this op (docs/preregistered/issue23-memory-forwarding-report.md). The peak is the most
bytes alive at once. What it leaves out: an op's scratch memory (oneDNN's workspaces, a
convolution's im2col buffer), which TensorFlow allocates and frees inside the op, and tensors
kept across steps (the variables), which the step did not allocate.

``allocator_peak_bytes``: TensorFlow's allocator records, in each op's step stats
(``memory[].allocation_records``), every allocation and release with its time; their running
sum from the step's start, per allocator, peaks where the step held the most. Scratch memory is
in it; tensors received from other tasks are not (the RPC layer allocates them, outside any
op: no ``_Recv`` of the lab's profiles has a record), so ``opdb check`` compares it with the
estimate without them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gradwire.collector.opshapes import ExecutedOp

ALIASING = frozenset({"Identity", "IdentityN", "Reshape", "ExpandDims", "Squeeze",
                      "StopGradient", "ReadVariableOp", "Snapshot", "VarHandleOp", "NoOp",
                      "Const", "_Arg", "_Retval", "_SOURCE", "_SINK"})
RECEIVES = frozenset({"_Recv", "_HostRecv"})  # filled by the RPC layer, not by an op
# TensorFlow's element-wise kernels that write their output into an input's buffer when
# nothing else holds it (``forward_input_or_allocate_output``): cwise ops, activations and
# their gradients, AddN, BiasAdd. From the kernels, not fitted.
FORWARDS = frozenset({
    "Relu", "Relu6", "Elu", "Selu", "LeakyRelu", "ReluGrad", "Relu6Grad", "EluGrad",
    "SeluGrad", "LeakyReluGrad", "Sigmoid", "Tanh", "SigmoidGrad", "TanhGrad", "AddV2", "Add",
    "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "SquaredDifference", "Neg", "Exp", "Square",
    "Sqrt", "Rsqrt", "AddN", "BiasAdd"})


def estimated_peak_bytes(ops: Sequence[ExecutedOp], *, received: bool = True,
                         held_until: Mapping[tuple[str, int], float] | None = None) -> float:
    """The most bytes of one device's step tensors alive at once (see the module); without
    ``received``, the tensors received from other tasks left out (as TensorFlow's
    allocation records leave them out); ``held_until``: (node, output slot) -> a time (µs)
    before which that tensor is not freed (a sent tensor's last byte leaving the worker:
    replay/sentholds.py)."""
    by_name = {o.name: o for o in ops}
    last_read: dict[tuple[str, int], float] = dict(held_until or {})  # -> its last use
    for o in ops:
        for key in _inputs(o):
            last_read[key] = max(last_read.get(key, 0.0), o.end_us)
    # a view keeps what it views alive: carry reads back through chains of aliasing ops
    views = [o for o in ops if o.op in ALIASING and o.input_nodes]
    for _ in range(len(views)):
        changed = False
        for o in views:
            until = max(o.end_us, last_read.get((o.name, 0), 0.0))
            src = next(_inputs(o))
            if last_read.get(src, 0.0) < until:
                last_read[src] = until
                changed = True
        if not changed:
            break

    def root(key: tuple[str, int]) -> tuple[str, int] | None:
        """The (op, output) whose buffer a tensor is, through views; None: not made by an op
        of this step (a variable's value, a constant)."""
        for _ in range(len(views) + 1):
            o = by_name.get(key[0])
            if o is None or (o.op in ALIASING and not o.input_nodes):
                return None
            if o.op not in ALIASING:
                return key
            key = next(_inputs(o))
        return None

    # each output's buffer: [allocated at, freed at, bytes]; an element-wise op forwarding
    # an input writes into that input's buffer, which then lives as long as its output
    buffers: dict[tuple[str, int], list[float]] = {}
    holder: dict[tuple[str, int], tuple[str, int]] = {}  # a forwarded output -> its buffer
    made = [o for o in ops if o.op not in ALIASING and sum(o.output_bytes) > 0
            and (received or o.op not in RECEIVES)]
    for o in sorted(made, key=lambda o: o.start_us):
        into = None
        if o.op in FORWARDS and len(o.output_bytes) == 1:
            for key in _inputs(o):
                r = root(key)
                if r is None or by_name[r[0]].op in RECEIVES:
                    continue
                buf = holder.get(r, r)
                b = buffers.get(buf)
                if b is not None and b[2] == o.output_bytes[0] and b[1] <= o.end_us:
                    into = buf  # the same bytes, and no reader of it after this op
                    break
        for k, size in enumerate(o.output_bytes):
            free = max(o.end_us, last_read.get((o.name, k), o.end_us))
            if into is not None:
                buffers[into][1] = free
                holder[(o.name, k)] = into
            elif size > 0:
                buffers[(o.name, k)] = [o.start_us, free, float(size)]
    events: list[tuple[float, int, float]] = []
    for start, free, size in buffers.values():
        events.append((start, 1, size))
        # at one instant frees (0) come before allocations (1), but a tensor's own free
        # after its allocation (2): an op of no measurable length still held its output
        events.append((free, 2 if free == start else 0, -size))
    return _peak(events)


def _inputs(o: ExecutedOp) -> Iterator[tuple[str, int]]:
    """``o``'s inputs as (node, output slot); slot 0 where the op does not say."""
    slots = o.input_slots or (0,) * len(o.input_nodes)
    return zip(o.input_nodes, slots, strict=True)


def _peak(events: list[tuple[float, int, float]]) -> float:
    """The largest running sum of the events' byte changes, taken in (time, order) order."""
    live = peak = 0.0
    for _, _, delta in sorted(events):
        live += delta
        peak = max(peak, live)
    return peak


def allocator_peak_bytes(run_metadata: Any, devices: set[str]) -> dict[str, float]:
    """Per allocator of ``devices``, and for all of them together (``all``), the peak of the
    allocation records' running sum over the step (bytes; see the module)."""
    records: dict[str, list[tuple[float, int, float]]] = defaultdict(list)
    for dev in run_metadata.step_stats.dev_stats:
        if dev.device not in devices:
            continue
        for ns in dev.node_stats:
            for mem in ns.memory:  # at one instant a release (negative bytes) comes first
                records[mem.allocator_name].extend(
                    (r.alloc_micros, r.alloc_bytes, r.alloc_bytes)
                    for r in mem.allocation_records)
    records["all"] = [r for recs in list(records.values()) for r in recs]
    return {name: _peak(recs) for name, recs in records.items()}
