"""HTTP/2 framing of one direction of a connection (RFC 7540/9113): bytes in, frames out.

Pure, no I/O. Handles the client preface (h2c prior knowledge), connections whose start was not
captured and bytes lost in gaps (it resynchronises on a chain of plausible frame headers rather
than misparse), every frame type, padding, and header blocks split over CONTINUATION frames,
decoded with the ``hpack`` library so ``:path`` and ``:status`` are known. Each frame carries two
times: when its first byte and when its last byte was captured.

Bounded state: the buffer holds at most one frame (up to 16 MiB, the largest length a header
can state) plus the segment that completes it, and a header block split over CONTINUATION frames
is kept up to ``MAX_HEADER_BLOCK`` bytes; a longer one is dropped, counted in
``oversized_header_blocks``, and HPACK decoding stops for the direction (its table is out of
step from there on), as after an HPACK error.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0, 1, 2, 3, 4
PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 5, 6, 7, 8, 9
FLAG_END_STREAM, FLAG_END_HEADERS, FLAG_PADDED, FLAG_PRIORITY = 0x1, 0x4, 0x8, 0x20
MAX_LENGTH = (1 << 24) - 1
RESYNC_CHAIN = 3  # consecutive plausible headers needed to trust a resynchronisation
MAX_HEADER_BLOCK = 1 << 20  # bytes of one header block kept (gRPC's default limit is 8 KiB)
_HEADER = struct.Struct(">HBBBI")  # length hi16, length lo8, type, flags, stream id


@dataclass(frozen=True)
class H2Frame:
    """One parsed frame; ``payload`` is the frame payload (padding included), or only its first
    bytes for a DATA frame longer than its direction's ``data_prefix`` (``length`` is always the
    whole payload's; ``data_content_length`` gives the content's)."""

    start_ns: int
    ts_ns: int
    stream_id: int
    type: int
    flags: int
    length: int
    payload: bytes
    headers: tuple[tuple[str, str], ...] | None = None  # decoded header list, when complete


def parse_header(buf: bytes | bytearray | memoryview, at: int = 0) -> tuple[int, int, int, int]:
    """(length, type, flags, stream id) of the 9-byte frame header at ``at``."""
    hi, lo, ftype, flags, sid = _HEADER.unpack_from(buf, at)
    return (hi << 8) | lo, ftype, flags, sid & 0x7FFFFFFF


def plausible(length: int, ftype: int, flags: int, sid: int, max_length: int) -> bool:
    """Could these header fields start a real frame? (used to resynchronise)."""
    if length > max_length or ftype > CONTINUATION:
        return False
    if ftype in (SETTINGS, PING, GOAWAY):
        return sid == 0 and (length % 6 == 0 if ftype == SETTINGS else
                             length == 8 if ftype == PING else length >= 8)
    if ftype == WINDOW_UPDATE:
        return length == 4
    if ftype == RST_STREAM:
        return sid != 0 and length == 4
    if ftype == PRIORITY:
        return sid != 0 and length == 5
    return sid != 0


def data_content_length(flags: int, length: int, payload: bytes) -> int:
    """Bytes of a DATA frame's content (its padding left out), from its header's length and
    its payload's first byte (the pad length, when PADDED): right for a prefix payload too."""
    if flags & FLAG_PADDED and payload:
        return max(0, length - 1 - payload[0])
    return length


def data_content_prefix(flags: int, length: int, payload: bytes) -> bytes:
    """The first bytes of a DATA frame's content that ``payload`` (whole or a prefix) holds."""
    start = 1 if flags & FLAG_PADDED and payload else 0
    return payload[start : start + data_content_length(flags, length, payload)]


def strip_padding(ftype: int, flags: int, payload: bytes) -> bytes:
    """The frame's content without padding (and without the HEADERS priority block)."""
    start, end = 0, len(payload)
    if flags & FLAG_PADDED and ftype in (DATA, HEADERS, PUSH_PROMISE) and payload:
        end -= payload[0]
        start = 1
    if ftype == HEADERS and flags & FLAG_PRIORITY:
        start += 5
    if ftype == PUSH_PROMISE:
        start += 4
    return payload[start:max(start, end)]


class H2Direction:
    """Frames of one direction of one connection.

    Args:
        start: ``"client"`` when the capture holds the connection from its first byte on the
            client side (the preface comes first), ``"server"`` likewise for the server side,
            ``None`` when the start was not captured (resynchronise on frame headers).
        max_length: largest frame length accepted while resynchronising.
        data_prefix: when set, a DATA frame's payload is kept only up to this many bytes (at
            least 1: a padded frame's pad length); the rest is counted as it arrives and never
            buffered or copied, which is most of a capture's bytes. ``None`` keeps it whole.
    """

    def __init__(self, start: str | None, max_length: int = 1 << 22,
                 data_prefix: int | None = None) -> None:
        if data_prefix is not None and data_prefix < 1:
            raise ValueError(f"data_prefix must be 1 or more, not {data_prefix}")
        self.state = "preface" if start == "client" else "frames" if start == "server" else "sync"
        self.max_length = max_length
        self.data_prefix = data_prefix
        self.skip_left = 0  # bytes still to come of a DATA frame whose payload is cut (buf empty)
        # the cut frame's (start ns, stream id, flags, length, payload prefix) while it comes
        self.skipping: tuple[int, int, int, int, bytes] | None = None
        self.buf = bytearray()
        self.base = 0  # absolute offset of buf[0]
        self.chunk_ts: list[tuple[int, int]] = []  # (absolute offset, ts) of each chunk start
        self.decoder: hpack.Decoder | None = hpack.Decoder()
        self.header_block: bytearray | None = None
        self.frames = 0
        self.resyncs = 0
        self.skipped_bytes = 0
        self.hpack_errors = 0
        self.oversized_header_blocks = 0
        self.not_h2: str | None = None

    def _ts_at(self, offset: int) -> int:
        ts = self.chunk_ts[0][1]
        for off, t in self.chunk_ts:
            if off > offset:
                break
            ts = t
        return ts

    def feed(self, ts_ns: int, data: bytes, gap_before: bool = False) -> list[H2Frame]:
        """Add in-order bytes; returns the frames they complete."""
        if self.not_h2:
            return []
        if gap_before:
            self._lost()
        out: list[H2Frame] = []
        if self.skip_left:  # the rest of a cut DATA frame: counted, not buffered
            n = min(self.skip_left, len(data))
            self.skip_left -= n
            self.base += n
            if not self.skip_left:
                out.append(self._cut_frame(ts_ns))
            if n == len(data):
                return out
            data = memoryview(data)[n:]
        self.chunk_ts.append((self.base + len(self.buf), ts_ns))
        self.buf += data
        pos = 0
        while True:
            if self.state == "preface":
                if len(self.buf) - pos < len(PREFACE):
                    if not PREFACE.startswith(bytes(self.buf[pos:])):
                        self._not_h2()
                    break
                if self.buf[pos : pos + len(PREFACE)] != PREFACE:
                    self._not_h2()
                    break
                pos += len(PREFACE)
                self.state = "frames"
            elif self.state == "sync":
                found, at = self._resync(pos)
                self.skipped_bytes += at - pos
                pos = at
                if not found:
                    break
                self.state = "frames"
                self.resyncs += 1
            else:
                if len(self.buf) - pos < 9:
                    break
                length, ftype, flags, sid = parse_header(self.buf, pos)
                have = len(self.buf) - pos - 9
                keep = self.data_prefix
                if ftype == DATA and keep is not None and length > keep:
                    if have < keep:
                        break
                    prefix = bytes(self.buf[pos + 9 : pos + 9 + keep])
                    if have < length:  # the rest arrives later: skip it as it comes
                        self.skipping = (self._ts_at(self.base + pos), sid, flags, length, prefix)
                        self.skip_left = length - have
                        pos = len(self.buf)
                        break
                    out.append(H2Frame(self._ts_at(self.base + pos), ts_ns, sid, ftype, flags,
                                       length, prefix))
                    self.frames += 1
                    pos += 9 + length
                    continue
                if have < length:
                    break
                payload = bytes(self.buf[pos + 9 : pos + 9 + length])
                frame = H2Frame(self._ts_at(self.base + pos), ts_ns, sid, ftype, flags, length,
                                payload, self._headers(ftype, flags, payload))
                out.append(frame)
                self.frames += 1
                pos += 9 + length
        self._consume(pos)
        return out

    def _cut_frame(self, ts_ns: int) -> H2Frame:
        """The DATA frame whose payload was cut, now that its last byte came at ``ts_ns``."""
        assert self.skipping is not None
        start_ns, sid, flags, length, prefix = self.skipping
        self.skipping = None
        self.frames += 1
        return H2Frame(start_ns, ts_ns, sid, DATA, flags, length, prefix)

    def _consume(self, pos: int) -> None:
        del self.buf[:pos]
        self.base += pos
        # chunks in offset order: keep those from the buffer's start on, and the one it is in
        ts, k = self.chunk_ts, 0
        while k < len(ts) and ts[k][0] < self.base:
            k += 1
        if k > 1:
            del ts[: k - 1]

    def _resync(self, pos: int) -> tuple[bool, int]:
        """(True, offset) of the first header starting a chain of plausible frames; (False,
        offset) when more bytes are needed to judge the candidate at offset (or none is left)."""
        buf, end = self.buf, len(self.buf)
        for i in range(pos, end - 9 + 1):
            at, ok = i, 0
            while at + 9 <= end and ok < RESYNC_CHAIN:
                length, ftype, flags, sid = parse_header(buf, at)
                if not plausible(length, ftype, flags, sid, self.max_length):
                    break
                ok += 1
                at += 9 + length
            if ok == RESYNC_CHAIN:
                return True, i
            if ok and at + 9 > end:  # the chain ran out of bytes, not out of plausibility
                return False, i
        return False, max(pos, end - 8)

    def _lost(self) -> None:
        """Bytes were lost: drop the partial frame and resynchronise; HPACK state is gone."""
        self.skipped_bytes += len(self.buf)
        if self.skipping is not None:  # a cut DATA frame is lost like a partial one
            self.skipped_bytes += 9 + self.skipping[3] - self.skip_left
            self.skip_left, self.skipping = 0, None
        self.base += len(self.buf)
        self.buf.clear()
        self.chunk_ts = []
        self.state = "sync" if self.state != "preface" else "preface"
        self.decoder = None
        self.header_block = None

    def _not_h2(self) -> None:
        head = bytes(self.buf[:8])
        self.not_h2 = ("TLS, not cleartext HTTP/2" if head[:1] == b"\x16" and head[1:2] == b"\x03"
                       else f"no HTTP/2 preface (starts with {head!r})")

    def _headers(
        self, ftype: int, flags: int, payload: bytes
    ) -> tuple[tuple[str, str], ...] | None:
        if ftype in (HEADERS, PUSH_PROMISE):
            self.header_block = bytearray(strip_padding(ftype, flags, payload))
        elif ftype == CONTINUATION and self.header_block is not None:
            self.header_block += payload
        else:
            return None
        if len(self.header_block) > MAX_HEADER_BLOCK:
            self.oversized_header_blocks += 1
            self.header_block = None
            self.decoder = None
            return None
        if not flags & FLAG_END_HEADERS or self.header_block is None:
            return None
        block, self.header_block = bytes(self.header_block), None
        if self.decoder is None:
            return None
        try:
            return tuple((str(k), str(v)) for k, v in self.decoder.decode(block, raw=False))
        except (hpack.HPACKError, UnicodeDecodeError, IndexError, ValueError):
            self.hpack_errors += 1
            self.decoder = None  # the dynamic table is out of step from here on
            return None
