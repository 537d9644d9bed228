"""HTTP/2 frames and streams of a capture: the thin shell over the pure parsers.

``H2Capture`` takes TCP packets one at a time (from ``PcapReader`` or a live source), keeps one
reassembler and one HTTP/2 parser per connection direction, and returns ``Frame`` records as
they complete; ``streams()`` gives one ``Stream`` record per HTTP/2 stream. Memory grows with
the number of streams, not with the capture's size.

What is tracked is bounded, and what is not is counted in ``stats()`` (which the CLI reports as
a note): at most ``MAX_CONNECTIONS`` connections (packets of further ones are counted as
``untracked_packets`` and not decoded) and ``MAX_STREAMS`` streams per capture (frames of
further streams are still decoded and returned, but the streams get no ``Stream`` record:
``untracked_streams``). A stream costs about 210 bytes of state, a connection about 3 KB.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gradwire.collector import http2 as h2
from gradwire.collector.grpcwire import (
    RECV_TENSOR_PATH,
    decode_recv_tensor_request,
    grpc_messages,
)
from gradwire.collector.pcapfile import PcapReader
from gradwire.collector.tcpstream import TcpDirection
from gradwire.collector.transport import TransportCounter, TransportReader
from gradwire.records import Frame, Packet, Stream

if TYPE_CHECKING:  # h2pings reads endpoints with split_endpoint, below
    from gradwire.collector.h2pings import PingLog

SYN, ACK, FIN, RST = 0x02, 0x10, 0x01, 0x04
REQUEST_KEEP_BYTES = 1 << 16  # request bytes kept per stream to decode its first message
MAX_STREAMS = 1 << 20  # streams tracked per capture: 5,000 steps of 200 RecvTensor streams
MAX_CONNECTIONS = 1 << 16  # connections tracked per capture


def endpoint(ip: str, port: int) -> str:
    """``ip:port``, with IPv6 addresses in brackets."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def split_endpoint(text: str) -> tuple[str, int]:
    """``endpoint``'s ``ip:port`` (``[ip]:port`` for IPv6) as (ip, port); port -1 where it
    names none."""
    ip, _, port = text.rpartition(":")
    return ip.strip("[]"), int(port) if port.isdigit() else -1


@dataclass(slots=True)
class _StreamState:
    path: str | None = None
    status: str | None = None
    request_ns: int | None = None
    first_data_ns: int | None = None
    last_data_ns: int | None = None
    end_ns: int | None = None
    request_bytes: int = 0
    response_bytes: int = 0
    intervals: list[list[int]] | None = None  # response DATA runs [start, end] ns, when any
    request_buf: bytearray | None = None  # request bytes until the first message decodes
    tensor: str | None = None
    step_id: int | None = None


@dataclass
class _Side:
    tcp: TcpDirection = field(default_factory=TcpDirection)
    h2: h2.H2Direction | None = None
    last_data_stream: int | None = None


class _Connection:
    def __init__(self, index: int, client: tuple[str, int], server: tuple[str, int],
                 handshake: bool) -> None:
        self.index = index
        self.client, self.server = client, server
        self.handshake = handshake
        self.sides = {True: _Side(), False: _Side()}  # key: from_client
        self.streams: dict[int, _StreamState] = {}
        self.untracked_above = 0  # highest stream id left untracked (ids only grow)


class H2Capture:
    """Frames and streams of every HTTP/2 connection in a sequence of TCP packets.

    Args:
        ports: server ports to decode as HTTP/2 (like tshark's decode-as); None tries every
            TCP connection and keeps those that turn out to be HTTP/2.
        max_streams: streams tracked (given a ``Stream`` record) over all connections.
        max_connections: connections tracked; packets of further ones are not decoded.
    """

    def __init__(self, ports: Iterable[int] | None = None, max_streams: int = MAX_STREAMS,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.ports = set(ports) if ports else None
        self.conns: dict[tuple[tuple[str, int], tuple[str, int]], _Connection] = {}
        self.order: list[_Connection] = []
        self.last_ts = 0
        self.truncated = False  # set by iter_frames: the file ends mid-packet
        self.max_streams = max_streams
        self.max_connections = max_connections
        self.tracked_streams = 0
        self.untracked_streams = 0  # streams past max_streams (frames decoded, no record)
        self.untracked_packets = 0  # packets of connections past max_connections
        self._strings: dict[str, str] = {}  # one copy of each path, status and tensor name

    # -- packets in ----------------------------------------------------------------------
    def packet(self, pkt: Packet) -> list[Frame]:
        """Feed one TCP packet; returns the frames it completes."""
        self.last_ts = pkt.ts_ns
        a, b = (pkt.src, pkt.sport), (pkt.dst, pkt.dport)
        conn = self.conns.get((a, b)) or self.conns.get((b, a))
        if conn is None:
            conn = self._new_connection(pkt, a, b)
            if conn is None:
                return []
        from_client = a == conn.client
        side = conn.sides[from_client]
        syn = bool(pkt.flags & SYN)
        if syn and pkt.flags & ACK == 0 and not from_client:
            return []  # a SYN from the side we took for the server: ignore the oddity
        chunks = side.tcp.feed(pkt.ts_ns, pkt.seq, pkt.payload, syn=syn, missing=pkt.cut_bytes)
        if pkt.flags & (FIN | RST):
            chunks += side.tcp.flush(pkt.ts_ns)
        return self._parse(conn, from_client, chunks)

    def _new_connection(self, pkt: Packet, a: tuple[str, int], b: tuple[str, int]
                        ) -> _Connection | None:
        if pkt.flags & SYN:
            client, server = (a, b) if not pkt.flags & ACK else (b, a)
            handshake = not pkt.flags & ACK
        else:
            if self.ports is not None:
                server = a if a[1] in self.ports else b
            else:
                server = a if a[1] < b[1] else b
            client = b if server == a else a
            handshake = False
        if self.ports is not None and server[1] not in self.ports:
            return None
        if len(self.order) >= self.max_connections:
            self.untracked_packets += 1
            return None
        conn = _Connection(len(self.order), client, server, handshake)
        self.conns[(client, server)] = conn
        self.order.append(conn)
        return conn

    def _parse(self, conn: _Connection, from_client: bool, chunks: list) -> list[Frame]:
        side = conn.sides[from_client]
        out: list[Frame] = []
        for chunk in chunks:
            if side.h2 is None:
                start = None
                if conn.handshake:
                    start = "client" if from_client else "server"
                elif from_client and chunk.data.startswith(h2.PREFACE[: len(chunk.data)]):
                    start = "client"
                # a request's first message is decoded; of a response only the size counts
                side.h2 = h2.H2Direction(start, data_prefix=REQUEST_KEEP_BYTES + 1
                                         if from_client else 1)
            for f in side.h2.feed(chunk.ts_ns, chunk.data, chunk.gap_before):
                out.append(self._frame(conn, from_client, f))
        return out

    def flush(self) -> list[Frame]:
        """End of capture: deliver what reassembly still held back."""
        out: list[Frame] = []
        for conn in self.order:
            for from_client, side in conn.sides.items():
                out += self._parse(conn, from_client, side.tcp.flush(self.last_ts))
        return out

    # -- frames and streams --------------------------------------------------------------
    def _frame(self, conn: _Connection, from_client: bool, f: h2.H2Frame) -> Frame:
        src, dst = (conn.client, conn.server) if from_client else (conn.server, conn.client)
        hdrs = dict(f.headers) if f.headers else {}
        inc = settings = err = None
        if f.type == h2.WINDOW_UPDATE and f.length == 4:
            inc = int.from_bytes(f.payload, "big") & 0x7FFFFFFF
        elif f.type == h2.SETTINGS and not f.flags & 0x1:
            settings = tuple((int.from_bytes(f.payload[i : i + 2], "big"),
                              int.from_bytes(f.payload[i + 2 : i + 6], "big"))
                             for i in range(0, f.length - f.length % 6, 6))
        elif f.type == h2.RST_STREAM and f.length == 4:
            err = int.from_bytes(f.payload, "big")
        elif f.type == h2.GOAWAY and f.length >= 8:
            err = int.from_bytes(f.payload[4:8], "big")
        if f.stream_id:
            self._track(conn, from_client, f, hdrs)
        return Frame(ts_ns=f.ts_ns, conn=conn.index, src=endpoint(*src), dst=endpoint(*dst),
                     stream_id=f.stream_id, type=f.type, flags=f.flags, length=f.length,
                     window_increment=inc, settings=settings, path=hdrs.get(":path"),
                     status=hdrs.get(":status") or hdrs.get("grpc-status"), error_code=err)

    def _intern(self, text: str | None) -> str | None:
        """One shared copy of a repeated string (paths, statuses, tensor names)."""
        if text is None:
            return None
        if len(self._strings) < self.max_streams:
            return self._strings.setdefault(text, text)
        return self._strings.get(text, text)

    def _stream(self, conn: _Connection, sid: int) -> _StreamState | None:
        """The state of stream ``sid``, created while fewer than ``max_streams`` are tracked;
        None (and counted once per stream) past that."""
        st = conn.streams.get(sid)
        if st is None:
            if self.tracked_streams >= self.max_streams:
                if sid > conn.untracked_above:
                    conn.untracked_above = sid
                    self.untracked_streams += 1
                return None
            st = conn.streams[sid] = _StreamState()
            self.tracked_streams += 1
        return st

    def _track(self, conn: _Connection, from_client: bool, f: h2.H2Frame,
               hdrs: dict[str, str]) -> None:
        st = conn.streams.get(f.stream_id) or self._stream(conn, f.stream_id)
        side = conn.sides[from_client]
        if st is None:
            if f.type == h2.DATA:
                side.last_data_stream = f.stream_id
            return
        if f.type in (h2.HEADERS, h2.CONTINUATION):
            if from_client and st.request_ns is None:
                st.request_ns = f.start_ns
            if ":path" in hdrs:
                st.path = self._intern(hdrs[":path"])
                if st.path != RECV_TENSOR_PATH:
                    st.request_buf = None  # only a RecvTensor request is decoded
            st.status = self._intern(hdrs.get("grpc-status") or hdrs.get(":status")) or st.status
        elif f.type == h2.DATA:
            size = h2.data_content_length(f.flags, f.length, f.payload)
            if from_client:
                st.request_bytes += size
                if st.step_id is None and st.path in (None, RECV_TENSOR_PATH):
                    if st.request_buf is None:
                        st.request_buf = bytearray()
                    if len(st.request_buf) < REQUEST_KEEP_BYTES:
                        st.request_buf += h2.data_content_prefix(f.flags, f.length, f.payload)
                        self._decode_request(st)
            else:
                st.response_bytes += size
                st.first_data_ns = st.first_data_ns or f.start_ns
                st.last_data_ns = f.ts_ns
                if side.last_data_stream == f.stream_id and st.intervals:
                    st.intervals[-1][1] = f.ts_ns
                elif st.intervals is None:
                    st.intervals = [[f.start_ns, f.ts_ns]]
                else:
                    st.intervals.append([f.start_ns, f.ts_ns])
            side.last_data_stream = f.stream_id
        if (f.type == h2.RST_STREAM or (not from_client and f.flags & h2.FLAG_END_STREAM
                                        and f.type in (h2.DATA, h2.HEADERS))):
            st.end_ns = f.ts_ns

    def _decode_request(self, st: _StreamState) -> None:
        """Decode the first gRPC message of a RecvTensor request once it is complete (looks
        at its 5-byte prefix only until then: no copy per DATA frame)."""
        buf = st.request_buf
        if buf is None or len(buf) < 5 or len(buf) - 5 < int.from_bytes(buf[1:5], "big"):
            return
        messages, _ = grpc_messages(bytes(buf))
        st.step_id, tensor = decode_recv_tensor_request(messages[0])
        st.tensor = self._intern(tensor)
        st.request_buf = None

    def streams(self) -> list[Stream]:
        """One record per stream of every connection, in connection then stream order."""
        out = []
        for conn in self.order:
            for sid in sorted(conn.streams):
                st = conn.streams[sid]
                out.append(Stream(
                    conn=conn.index, client=endpoint(*conn.client), server=endpoint(*conn.server),
                    stream_id=sid, path=st.path, status=st.status, tensor=st.tensor,
                    step_id=st.step_id, request_ns=st.request_ns, first_data_ns=st.first_data_ns,
                    last_data_ns=st.last_data_ns, end_ns=st.end_ns,
                    request_bytes=st.request_bytes, response_bytes=st.response_bytes,
                    intervals_ns=tuple((a, b) for a, b in st.intervals or ())))
        return out

    def stats(self) -> dict[str, int]:
        """Counts over all connections: frames, gaps, resyncs, HPACK errors, non-HTTP/2, and
        what the bounds on tracked state left out (``tcp_pending_overflows``: holes given up
        on because a direction held too much out-of-order data; ``untracked_streams``,
        ``untracked_packets``, ``oversized_header_blocks``)."""
        sides = [s for c in self.order for s in c.sides.values()]
        parsers = [s.h2 for s in sides if s.h2 is not None]
        return {
            "connections": len(self.order),
            "frames": sum(p.frames for p in parsers),
            "tcp_gaps": sum(s.tcp.gaps for s in sides),
            "tcp_gap_bytes": sum(s.tcp.gap_bytes for s in sides),
            "retransmitted_bytes": sum(s.tcp.retransmitted_bytes for s in sides),
            "resyncs": sum(p.resyncs for p in parsers),
            "skipped_bytes": sum(p.skipped_bytes for p in parsers),
            "hpack_errors": sum(p.hpack_errors for p in parsers),
            "not_http2_connections": sum(1 for c in self.order if any(
                s.h2 is not None and s.h2.not_h2 for s in c.sides.values())),
            "tcp_pending_overflows": sum(s.tcp.overflows for s in sides),
            "untracked_streams": self.untracked_streams,
            "untracked_packets": self.untracked_packets,
            "oversized_header_blocks": sum(p.oversized_header_blocks for p in parsers),
        }


def capture_streams(path: str | Path, ports: Iterable[int] | None = None,
                    settings: list[Frame] | None = None,
                    transport: TransportCounter | None = None,
                    capture: H2Capture | None = None,
                    pings: PingLog | None = None) -> list[Stream]:
    """Every HTTP/2 stream of a pcap/pcapng file (decodes all frames, keeps only streams);
    ``settings``: a list that receives the frames carrying SETTINGS (a few per connection:
    the advertised windows a WIN fit needs); ``transport``: a counter fed every TCP data
    segment of the same pass (retransmissions, queueing delays: collector/transport.py);
    ``capture``: the decoder to use (its ``truncated`` then says whether the file was cut
    short); ``pings``: a log fed every frame, for the PINGs the capturing host was sent
    (``collector/h2pings.py``)."""
    cap = capture or H2Capture(ports)
    for frame in iter_frames(path, capture=cap, transport=transport):
        if settings is not None and frame.settings:
            settings.append(frame)
        if pings is not None:
            pings.frame(frame)
    return cap.streams()


def iter_frames(path: str | Path, ports: Iterable[int] | None = None,
                capture: H2Capture | None = None,
                transport: TransportCounter | None = None) -> Iterator[Frame]:
    """Every HTTP/2 frame of a pcap/pcapng file, streaming; pass ``capture`` to keep state,
    ``transport`` to count the TCP data segments in the same pass."""
    cap = capture or H2Capture(ports)
    reader = PcapReader(path) if transport is None else TransportReader(path, transport)
    for pkt in reader:
        yield from cap.packet(pkt)
    cap.truncated = reader.stats.truncated
    yield from cap.flush()
