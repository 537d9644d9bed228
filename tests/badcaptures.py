"""Crafted bad captures, built in code: the fuzz audit's corpus (issue 19, "Bad input").

Small builders of pcap and pcapng files (Ethernet / IPv4 / TCP frames, HTTP/2 frames) and one
function per crafted case. Every case is a ``bytes`` value a test writes to a file; no binary
is shipped. Sizes are parameters, so a test can pick one that takes seconds if the parser is
quadratic and well under a second if it is linear.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

SYN, ACK, PSH, FIN = 0x02, 0x10, 0x08, 0x01
CLIENT, SERVER = ("10.0.0.1", 40000), ("10.0.0.2", 2222)
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
LINKTYPE_ETHERNET, LINKTYPE_NFLOG = 1, 239
MAX_IP_PAYLOAD = 65535 - 40  # what one IPv4 packet's TCP segment can carry, bytes


def tcp_frame(seq: int, payload: bytes = b"", flags: int = ACK | PSH,
              src: tuple[str, int] = CLIENT, dst: tuple[str, int] = SERVER) -> bytes:
    """One Ethernet / IPv4 / TCP frame (no options) from ``src`` to ``dst`` (address, port)."""
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 40 + len(payload), 0, 0, 64, 6, 0,
                     bytes(map(int, src[0].split("."))), bytes(map(int, dst[0].split("."))))
    tcp = struct.pack(">HHIIBBHHH", src[1], dst[1], seq % (1 << 32), 0, 0x50, flags, 65535, 0, 0)
    return b"\0" * 12 + b"\x08\x00" + ip + tcp + payload


def pcap_header(linktype: int = LINKTYPE_ETHERNET, snaplen: int = 262144) -> bytes:
    """The 24-byte header of a little-endian, microsecond pcap file."""
    return struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, linktype)


def pcap_record(ts_ns: int, frame: bytes, incl: int | None = None,
                orig: int | None = None) -> bytes:
    """One pcap record; ``incl``/``orig`` override the captured/original lengths (bytes)."""
    us = ts_ns // 1000
    return struct.pack("<IIII", us // 1_000_000, us % 1_000_000,
                       len(frame) if incl is None else incl,
                       len(frame) if orig is None else orig) + frame


def pcap(frames: Iterable[tuple[int, bytes]], linktype: int = LINKTYPE_ETHERNET) -> bytes:
    """A pcap file of ``(ts_ns, frame)`` records."""
    return pcap_header(linktype) + b"".join(pcap_record(ts, f) for ts, f in frames)


def block(kind: int, body: bytes, length: int | None = None) -> bytes:
    """One pcapng block, body padded to 4 bytes; ``length`` overrides the stated length."""
    body += b"\0" * (-len(body) % 4)
    n = len(body) + 12
    return struct.pack("<II", kind, n if length is None else length) + body + struct.pack("<I", n)


def shb() -> bytes:
    """A little-endian pcapng Section Header Block, section length unknown."""
    return block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))


def idb(linktype: int = LINKTYPE_ETHERNET) -> bytes:
    """An Interface Description Block (microsecond timestamps)."""
    return block(1, struct.pack("<HHI", linktype, 0, 65535))


def epb(iface: int, ts_us: int, frame: bytes) -> bytes:
    """An Enhanced Packet Block of interface ``iface`` at ``ts_us`` microseconds."""
    return block(6, struct.pack("<IIIII", iface, ts_us >> 32, ts_us & 0xFFFFFFFF, len(frame),
                                len(frame)) + frame)


def h2_frame(ftype: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame: 9-byte header and payload."""
    n = len(payload)
    return struct.pack(">HBBBI", n >> 8, n & 0xFF, ftype, flags, stream_id) + payload


def _handshake(ts_ns: int = 1_000_000_000) -> list[tuple[int, bytes]]:
    return [(ts_ns, tcp_frame(999, flags=SYN)),
            (ts_ns, tcp_frame(4999, flags=SYN | ACK, src=SERVER, dst=CLIENT))]


# -- the crafted cases -----------------------------------------------------------------------

def reversed_segments(n: int) -> bytes:
    """A handshake, then ``n`` one-byte client segments, last byte first (all held back until
    the first arrives; quadratic with a linear search for the lowest held segment)."""
    ts = 1_000_000_000
    return pcap([*_handshake(ts), *((ts, tcp_frame(1000 + k, bytes([k & 0xFF])))
                                    for k in range(n - 1, -1, -1))])


def unfilled_holes(n: int) -> bytes:
    """A handshake, then ``n`` one-byte client segments each with a one-byte hole before it
    that never fills (within one capture millisecond: no hole times out)."""
    ts = 1_000_000_000
    return pcap([*_handshake(ts), *((ts, tcp_frame(1001 + 2 * k, b"x")) for k in range(n))])


def many_interfaces(n: int, packets: int = 2000) -> bytes:
    """A pcapng file with ``n`` interfaces of a link type gradwire does not read and one
    Ethernet interface last, then ``packets`` packets on the unread ones and one on Ethernet."""
    frame = tcp_frame(1000, b"x")
    return (shb() + b"".join(idb(LINKTYPE_NFLOG) for _ in range(n)) + idb()
            + b"".join(epb(k % n, k, b"\x02\0\0\0" + frame) for k in range(packets))
            + epb(n, packets, frame))


def many_streams(n: int) -> bytes:
    """One HTTP/2 connection (handshake and preface) whose client opens ``n`` streams of one
    HEADERS frame each (``:method GET``, END_STREAM | END_HEADERS), packed into full segments."""
    ts = 1_000_000_000
    frames = [*_handshake(ts)]
    head = PREFACE + h2_frame(4, 0, 0)
    frames.append((ts, tcp_frame(1000, head)))
    seq = 1000 + len(head)
    one = [h2_frame(1, 0x5, 1 + 2 * k, b"\x82") for k in range(n)]
    per_segment = MAX_IP_PAYLOAD // len(one[0])
    for k in range(0, n, per_segment):
        payload = b"".join(one[k : k + per_segment])
        frames.append((ts, tcp_frame(seq, payload)))
        seq += len(payload)
    return pcap(frames)


def many_connections(n: int) -> bytes:
    """``n`` connections (client ports 1024...) each opened by a SYN and sending one byte."""
    ts = 1_000_000_000
    out = []
    for k in range(n):
        client = (f"10.{1 + (k >> 16) % 250}.{(k >> 8) & 0xFF}.{k & 0xFF}", 1024 + k % 60000)
        out += [(ts, tcp_frame(0, flags=SYN, src=client)), (ts, tcp_frame(1, b"x", src=client))]
    return pcap(out)


def huge_pcap_record(claim: int = 0xFFFFFFF0) -> bytes:
    """A 100-byte pcap whose first record claims ``claim`` captured bytes."""
    body = pcap_header() + pcap_record(0, b"", incl=claim, orig=claim)
    return body + b"\0" * (100 - len(body))


def huge_pcapng_block(claim: int = 0xFFFFFFF0) -> bytes:
    """A ~100-byte pcapng file whose block after the interface claims ``claim`` bytes."""
    body = shb() + idb() + struct.pack("<II", 6, claim)
    return body + b"\0" * (100 - len(body))


def huge_shb(claim: int = 0xFFFFFFF0) -> bytes:
    """A pcapng file whose section header block claims ``claim`` bytes."""
    return struct.pack("<III", 0x0A0D0D0A, claim, 0x1A2B3C4D) + bytes(88)


def huge_epb_captured_length(claim: int = 0xFFFFFF00) -> bytes:
    """A pcapng packet block of normal size whose captured length field claims ``claim``."""
    frame = tcp_frame(1000, b"x")
    body = struct.pack("<IIIII", 0, 0, 1, claim, claim) + frame
    return shb() + idb() + block(6, body)


def damaged_block_length(stated: int | None = None, longer_by: int = 0) -> bytes:
    """Two packet blocks, the first's stated length damaged: ``stated``, or the true length
    plus ``longer_by`` (its trailing length left true)."""
    frame = tcp_frame(1000, b"x")
    first = epb(0, 1, frame)
    damaged = struct.pack("<I", stated if stated is not None else len(first) + longer_by)
    return shb() + idb() + first[:4] + damaged + first[8:] + epb(0, 2, frame)


def endless_continuation(n: int, size: int = 16000) -> bytes:
    """A connection whose header block never ends: HEADERS without END_HEADERS, then ``n``
    CONTINUATION frames of ``size`` bytes, none with END_HEADERS."""
    ts = 1_000_000_000
    frames = [*_handshake(ts)]
    seq = 1000
    chunks = [PREFACE + h2_frame(4, 0, 0) + h2_frame(1, 0, 1, b"\x82")]
    chunks += [h2_frame(9, 0, 1, b"\x82" * size) for _ in range(n)]
    for c in chunks:
        frames.append((ts, tcp_frame(seq, c)))
        seq += len(c)
    return pcap(frames)


def trickled_request(n: int) -> bytes:
    """A RecvTensor-like request whose gRPC message header claims 60000 bytes, followed by
    ``n`` one-byte DATA frames of the same stream (the message never completes)."""
    ts = 1_000_000_000
    frames = [*_handshake(ts)]
    seq = 1000
    head = PREFACE + h2_frame(4, 0, 0) + h2_frame(1, 0x4, 1, b"\x82")
    data = h2_frame(0, 0, 1, b"\0" + struct.pack(">I", 60000))
    payload = head + data + b"".join(h2_frame(0, 0, 1, b"z") for _ in range(n))
    for k in range(0, len(payload), MAX_IP_PAYLOAD):
        part = payload[k : k + MAX_IP_PAYLOAD]
        frames.append((ts, tcp_frame(seq, part)))
        seq += len(part)
    return pcap(frames)
