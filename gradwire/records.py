"""The records every stage passes around: frozen, keyword-only dataclasses, units in names.

Times are integers on the recording node's own clock: ``*_us`` microseconds and ``*_ns``
nanoseconds since the Unix epoch (CLOCK_REALTIME), unless a field says otherwise. Byte counts
are ``bytes_`` (the trailing underscore avoids the builtin).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


def to_dict(record: Any) -> dict[str, Any]:
    """A record as a plain JSON-ready dict (nested records and tuples included)."""
    return dataclasses.asdict(record)


@dataclass(frozen=True, kw_only=True)
class OpRecord:
    """One executed TensorFlow op in one recorded step, as step stats report it.

    Fields:
        step: index of the training step (the hook's counter of ``session.run`` calls).
        name: node name in step stats (``RecvTensor`` for transfers seen by the receiver).
        op_type: op type (``MatMul``, ``RecvTensor``...); from the partition graph when known.
        device: full device name, ``/job:ps/replica:0/task:0/device:CPU:0``.
        start_us: op start, microseconds since the epoch on the node's clock.
        end_us: op end (``all_start_micros + all_end_rel_micros``), same clock.
        graph_node: name of the op's node in the partition graph ('' if none matches).
        tensor: for transfers, the rendezvous edge name (``edge_7_MatMul/ReadVariableOp``).
        bytes_: for transfers, the tensor's size derived from shape and dtype (None if unknown).
        bytes_reported: for transfers, the size TensorFlow itself reported (None if absent).
        src_device: for transfers, the sending device.
        dst_device: for transfers, the receiving device.
        producer: for transfers, the node feeding the sender's ``_Send`` ('' if unknown).
    """

    step: int
    name: str
    op_type: str
    device: str
    start_us: int
    end_us: int
    graph_node: str = ""
    tensor: str = ""
    bytes_: int | None = None
    bytes_reported: int | None = None
    src_device: str = ""
    dst_device: str = ""
    producer: str = ""

    @property
    def is_transfer(self) -> bool:
        """True for a tensor transfer (``RecvTensor``/``_Recv``/``_Send`` with a tensor)."""
        return bool(self.tensor)

    @property
    def duration_us(self) -> int:
        """End minus start, microseconds."""
        return self.end_us - self.start_us


@dataclass(frozen=True, kw_only=True)
class DataDep:
    """One edge of a partition graph: ``dst`` consumes ``src`` (or waits on it, if control).

    Cross-device edges join a ``_Send`` to the ``_Recv`` with the same ``tensor`` name.
    """

    src: str
    dst: str
    src_device: str
    dst_device: str
    control: bool = False
    tensor: str = ""


@dataclass(frozen=True, kw_only=True)
class VariableRecord:
    """One variable node of a partition graph (``VarHandleOp``, ``VariableV2``, or another of
    the resources ``replica_device_setter`` puts on a PS).

    Fields:
        name: its node name, ``dense/kernel``.
        device: the device holding it, ``/job:ps/replica:0/task:1/device:CPU:0``.
        bytes_: its size from the node's shape and dtype attributes (None if unknown).
        colocated_with: the node it is colocated with (its ``_class`` ``loc:@``), as an
            optimizer's slot is with its variable; '' if none.
    """

    name: str
    device: str
    bytes_: int | None = None
    colocated_with: str = ""


@dataclass(frozen=True, kw_only=True)
class StepTrace:
    """Everything derived from one recorded step's RunMetadata. ``variables`` in the order of
    their nodes in each partition graph (graph by graph): TensorFlow keeps a graph's nodes in
    creation order, the order ``replica_device_setter`` placed the variables in."""

    step: int
    ops: tuple[OpRecord, ...]
    deps: tuple[DataDep, ...]
    devices: tuple[str, ...]
    variables: tuple[VariableRecord, ...] = ()

    @property
    def start_us(self) -> int:
        """Earliest op start of the step, microseconds (node clock)."""
        return min(op.start_us for op in self.ops)

    @property
    def end_us(self) -> int:
        """Latest op end of the step, microseconds (node clock)."""
        return max(op.end_us for op in self.ops)


@dataclass(frozen=True, kw_only=True)
class ClockSample:
    """CLOCK_REALTIME and CLOCK_MONOTONIC read back to back, nanoseconds."""

    realtime_ns: int
    monotonic_ns: int


@dataclass(frozen=True, kw_only=True)
class CaptureInfo:
    """What a packet capture did: tool, where, how, and what it lost.

    ``drops_kernel`` counts packets the kernel dropped for lack of buffer, ``drops_capturer``
    those the capture tool itself dropped, ``drops_iface`` those the interface dropped (None
    when the tool does not say).
    """

    tool: str
    file: str
    iface: str
    filter: str
    snaplen_bytes: int
    buffer_bytes: int
    packets_captured: int | None = None
    drops_kernel: int | None = None
    drops_capturer: int | None = None
    drops_iface: int | None = None
    started_ns: int | None = None
    stopped_ns: int | None = None


@dataclass(frozen=True, kw_only=True)
class Packet:
    """One captured TCP segment.

    ``ts_ns`` is the capture timestamp (epoch nanoseconds, the capturing host's clock);
    ``wire_bytes`` the original length on the wire, ``payload`` the captured TCP payload
    (possibly shorter than ``payload_bytes`` when the snap length cut it).
    """

    ts_ns: int
    src: str
    dst: str
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int
    wire_bytes: int
    payload_bytes: int
    payload: bytes = field(default=b"", repr=False)

    @property
    def cut_bytes(self) -> int:
        """Payload bytes the snap length cut off (``payload_bytes`` minus those captured)."""
        return max(0, self.payload_bytes - len(self.payload))


@dataclass(frozen=True, kw_only=True)
class Frame:
    """One HTTP/2 frame seen in a capture.

    ``ts_ns`` is the capture time of the packet that completed the frame (as tshark reports it).
    ``conn`` numbers TCP connections in order of first appearance. ``src``/``dst`` are
    ``ip:port``. Type-specific fields are None where they do not apply: ``window_increment``
    (WINDOW_UPDATE), ``settings`` ((id, value) pairs of SETTINGS), ``path`` and ``status`` (decoded
    HEADERS), ``grpc_messages`` (lengths of gRPC messages completed in this DATA frame).
    """

    ts_ns: int
    conn: int
    src: str
    dst: str
    stream_id: int
    type: int
    flags: int
    length: int
    window_increment: int | None = None
    settings: tuple[tuple[int, int], ...] | None = None
    path: str | None = None
    status: str | None = None
    error_code: int | None = None


@dataclass(frozen=True, kw_only=True)
class Stream:
    """One HTTP/2 stream (one gRPC call) of a capture, with its DATA service intervals.

    Bytes are DATA payload bytes (gRPC messages, padding excluded). ``intervals_ns`` are the
    spans of the response direction in which this stream's DATA frames followed each other
    without another stream's DATA in between on the same connection and direction; a new
    interval starts after each interruption. ``tensor`` and ``step_id`` come from a decoded
    ``RecvTensorRequest`` (rendezvous key and step id), when the call is one.
    """

    conn: int
    client: str
    server: str
    stream_id: int
    path: str | None
    status: str | None
    tensor: str | None
    step_id: int | None
    request_ns: int | None
    first_data_ns: int | None
    last_data_ns: int | None
    end_ns: int | None
    request_bytes: int
    response_bytes: int
    intervals_ns: tuple[tuple[int, int], ...]
