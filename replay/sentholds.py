"""How long a worker holds each tensor it sends to a PS: until its last byte left the worker.

TensorFlow's ``_Send`` only hands a tensor to the rendezvous; the PS's ``RecvTensor`` call
takes it, and gRPC writes a large tensor's buffer without copying it, releasing the buffer
once the kernel has taken its last byte. So a sent tensor outlives its last local reader by
its wait in gRPC's queue: on one connection, behind every byte of the step's pushes ahead of
it (the deep MLP's 79 gradients of a step, produced in 10 ms, leave over 130 ms at
700 Mbit/s). The worker's own capture times the release from above, but for gRPC's own
delay: the last DATA byte of the RecvTensor response that carried the tensor left the worker
after the kernel took it, by at most what the socket buffer held ahead of it; gRPC may
process the call's completion later still on a busy host (docs/opdb.md, "Peak memory";
docs/preregistered/issue23-memory-wire.md). The PS's receive end is no bound: it adds the
queue of the link between the two.

A traced step's sends are the ``_Send`` nodes of its partition graphs on the worker's own
devices whose receiver is a PS; each is matched to the capture's response stream whose
rendezvous key names its edge, in the TF step whose pushes started inside the traced step
(the step id most of the step's matched streams share). Times are the worker's own clock:
the trace's microseconds and the capture's nanoseconds are both the host's wall clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from gradwire.aligner.transfers import split_key
from gradwire.bundle import Bundle
from gradwire.collector.opshapes import ExecutedOp, split_input
from gradwire.records import Stream

Key = tuple[str, int]  # (node, output slot)


def ps_sends(meta: Any, devices: set[str]) -> dict[str, Key]:
    """The tensors a step's ``_Send`` nodes on ``devices`` hand to a PS: rendezvous edge name
    -> the (node, output slot) the send reads."""
    out = {}
    for g in meta.partition_graphs:
        for n in g.node:
            if (n.op in ("_Send", "_HostSend") and n.device in devices and n.input
                    and "/job:ps/" in n.attr["recv_device"].s.decode()):
                src, slot, _ = split_input(n.input[0])
                out[n.attr["tensor_name"].s.decode()] = (src, slot)
    return out


def step_holds(sent: dict[str, Key], streams: Sequence[Stream], ops: Sequence[ExecutedOp]
               ) -> dict[Key, float]:
    """Each sent tensor of one traced step (``sent``, its ops ``ops``) -> when the last byte
    of its response left the worker (µs, the trace's clock); tensors no stream carried are
    left out."""
    if not ops or not sent:
        return {}
    t0 = min(o.start_us for o in ops)
    t1 = max(o.end_us for o in ops)
    by_edge: dict[str, list[Stream]] = {}
    for s in streams:
        parts = split_key(s.tensor) if s.tensor else None
        if parts and parts[2] in sent and s.first_data_ns and s.last_data_ns:
            by_edge.setdefault(parts[2], []).append(s)
    # the TF step whose pushes began while this traced step ran
    inside = Counter(s.step_id for group in by_edge.values() for s in group
                     if t0 <= s.first_data_ns / 1e3 <= t1)
    if not inside:
        return {}
    step_id = inside.most_common(1)[0][0]
    out: dict[Key, float] = {}
    for edge, group in by_edge.items():
        ends = [s.last_data_ns / 1e3 for s in group if s.step_id == step_id]
        if ends:
            out[sent[edge]] = max(ends)
    return out


def capture_of(b: Bundle) -> tuple[list[Stream], str | None]:
    """The HTTP/2 streams of bundle ``b``'s capture, and a note where there are none to
    time the sends by (no capture, or one that cannot be read: the sends are then freed at
    their last local reader, and nothing else is lost)."""
    from gradwire.collector.h2capture import capture_streams
    from gradwire.errors import GradwireError

    freed = "each sent tensor is freed at its last local reader (an estimate from below)"
    if b.capture_file is None or not b.capture_file.is_file():
        return [], f"{b.path}: no capture, so {freed}"
    try:
        return capture_streams(b.capture_file, b.ports or None), None
    except GradwireError as e:
        return [], f"{e}; {freed}"


def bundle_holds(b: Bundle) -> tuple[list[dict[Key, float]], str | None]:
    """``step_holds`` of every recorded step of worker bundle ``b``, in ``own_steps`` order,
    and ``capture_of``'s note."""
    from gradwire.collector.opingest import own_steps

    streams, note = capture_of(b)
    return [step_holds(ps_sends(meta, devices), streams, mine)
            for _, meta, devices, mine in own_steps(b, compute_only=False)], note
