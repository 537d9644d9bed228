"""Peak memory of a worker's step from its graph's tensor lifetimes (dPRO section 5's memory
estimator), and TensorFlow's own count of it to check against.

``estimated_peak_bytes``: every tensor an op outputs is allocated when the op starts and freed
when the last op that reads it ends (its producer's end when none reads it); an op whose
output is a view of its input (``ALIASING``: an identity, a reshape, a variable's read) adds
nothing. The peak is the most bytes alive at once. What it leaves out: an op's scratch memory
(oneDNN's workspaces, a convolution's im2col buffer), which TensorFlow allocates and frees
inside the op, and tensors kept across steps (the variables), which the step did not allocate.

``allocator_peak_bytes``: TensorFlow's allocator records, in each op's step stats
(``memory[].allocation_records``), every allocation and release with its time; their running
sum from the step's start, per allocator, peaks where the step held the most. Scratch memory is
in it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from gradwire.collector.opshapes import ExecutedOp

ALIASING = frozenset({"Identity", "IdentityN", "Reshape", "ExpandDims", "Squeeze",
                      "StopGradient", "ReadVariableOp", "Snapshot", "VarHandleOp", "NoOp",
                      "Const", "_Arg", "_Retval", "_SOURCE", "_SINK"})


def estimated_peak_bytes(ops: Sequence[ExecutedOp]) -> float:
    """The most bytes of one device's step tensors alive at once (see the module)."""
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
        if size <= 0 or o.op in ALIASING:
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
