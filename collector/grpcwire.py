"""gRPC over HTTP/2: length-prefixed messages in DATA, and TensorFlow's RecvTensorRequest.

Pure functions over bytes. A gRPC message is a 1-byte compressed flag, a 4-byte big-endian
length and the message. ``RecvTensorRequest`` (tensorflow/core/protobuf/worker.proto) carries
``step_id`` (field 1, int64) and ``rendezvous_key`` (field 2, string), which tie a stream to the
tensor it moves and the step it belongs to.
"""

from __future__ import annotations

from collections.abc import Iterator

RECV_TENSOR_PATH = "/tensorflow.WorkerService/RecvTensor"


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of the protobuf varint at ``pos``; ValueError if cut short."""
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated or overlong varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def proto_fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of each top-level field; ValueError on bad input."""
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
            yield field, wire, value
        elif wire == 2:
            n, pos = read_varint(buf, pos)
            if pos + n > len(buf):
                raise ValueError("length-delimited field runs past the message")
            yield field, wire, buf[pos : pos + n]
            pos += n
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            if pos + n > len(buf):
                raise ValueError("fixed-width field runs past the message")
            yield field, wire, int.from_bytes(buf[pos : pos + n], "little")
            pos += n
        else:
            raise ValueError(f"unsupported wire type {wire}")


def grpc_messages(data: bytes) -> tuple[list[bytes], bytes]:
    """Split gRPC length-prefixed messages; returns (complete messages, leftover bytes)."""
    out, pos = [], 0
    while len(data) - pos >= 5:
        n = int.from_bytes(data[pos + 1 : pos + 5], "big")
        if len(data) - pos - 5 < n:
            break
        out.append(data[pos + 5 : pos + 5 + n])
        pos += 5 + n
    return out, data[pos:]


def decode_recv_tensor_request(message: bytes) -> tuple[int | None, str | None]:
    """(step_id, rendezvous_key) of a RecvTensorRequest; (None, None) if it is not one."""
    step = key = None
    try:
        for field, wire, value in proto_fields(message):
            if field == 1 and wire == 0:
                step = value - (1 << 64) if value >= 1 << 63 else value
            elif field == 2 and wire == 2:
                key = bytes(value).decode("utf-8")  # type: ignore[arg-type]
    except (ValueError, UnicodeDecodeError):
        return None, None
    return step, key
