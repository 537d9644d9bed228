"""Peak memory of a worker's step from its graph's tensor lifetimes (dPRO section 5's memory
estimator), and TensorFlow's own count of it to check against.

``estimated_peak_bytes``: every tensor an op outputs is allocated when the op starts and freed
when the last op that reads it ends (its producer's end when none reads it; the step stats
have no entry of a ``_Send``, so a tensor sent to another task is freed when its last local
reader ends, where TensorFlow holds it until gRPC has written it out:
docs/preregistered/issue23-memory-sends-report.md); an op whose output is a view of its input
(``ALIASING``: an identity, a reshape, a variable's read) adds nothing. The peak is the most
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
from collections.abc import Sequence
from typing import Any

from gradwire.collector.opshapes import ExecutedOp

ALIASING = frozenset({"Identity", "IdentityN", "Reshape", "ExpandDims", "Squeeze",
                      "StopGradient", "ReadVariableOp", "Snapshot", "VarHandleOp", "NoOp",
                      "Const", "_Arg", "_Retval", "_SOURCE", "_SINK"})
RECEIVES = frozenset({"_Recv", "_HostRecv"})  # filled by the RPC layer, not by an op


def estimated_peak_bytes(ops: Sequence[ExecutedOp], *, received: bool = True) -> float:
    """The most bytes of one device's step tensors alive at once (see the module); without
    ``received``, the tensors received from other tasks left out (as TensorFlow's
    allocation records leave them out)."""
    last_read: dict[str, float] = {}
    for o in ops:
        for src in o.input_nodes:
            last_read[src] = max(last_read.get(src, 0.0), o.end_us)
    # a view keeps what it views alive: carry reads back through chains of aliasing ops
    views = [o for o in ops if o.op in ALIASING and o.input_nodes]
    for _ in range(len(views)):
        changed = False
        for o in views:
            until = max(o.end_us, last_read.get(o.name, 0.0))
            src = o.input_nodes[0]
            if last_read.get(src, 0.0) < until:
                last_read[src] = until
                changed = True
        if not changed:
            break
    events: list[tuple[float, int, float]] = []
    for o in ops:
        size = float(sum(o.output_bytes))
        if size <= 0 or o.op in ALIASING or (not received and o.op in RECEIVES):
            continue
        free = max(o.end_us, last_read.get(o.name, o.end_us))
        events.append((o.start_us, 1, size))
        # at one instant frees (0) come before allocations (1), but a tensor's own free
        # after its allocation (2): an op of no measurable length still held its output
        events.append((free, 2 if free == o.start_us else 0, -size))
    return _peak(events)


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
