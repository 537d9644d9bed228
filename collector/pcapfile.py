"""Streaming reader of pcap and pcapng files down to TCP segments.

Pure decoders (``decode_frame``) take bytes and return records; ``PcapReader`` is the thin I/O
shell that walks a file block by block, so memory stays flat whatever the capture's size.
Link types: NULL/LOOP (BSD loopback), Ethernet (with VLAN tags), RAW IPv4/IPv6, Linux cooked
SLL and SLL2. Network: IPv4 and IPv6 (extension headers skipped). Anything else is counted and
skipped, never misparsed. A file cut mid-record yields every complete packet and then sets
``truncated``.

Lengths read from the file are checked before anything is read with them: a record or block
claiming more than ``MAX_RECORD_BYTES`` is corrupt (CaptureError naming the byte offset), one
claiming more than what is left of the file is a file cut short (``truncated``), so a 100-byte
file claiming 4 GiB costs nothing. Only regular files are read (a FIFO, a device or a directory
is refused at once rather than blocking), and an I/O error while reading is a CaptureError
naming the file and the error.
"""

from __future__ import annotations

import ipaddress
import os
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from gradwire.errors import CaptureError, fault_of
from gradwire.records import Packet

LINKTYPE_NULL, LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LOOP = 0, 1, 101, 108
LINKTYPE_SLL, LINKTYPE_SLL2, LINKTYPE_IPV4, LINKTYPE_IPV6 = 113, 276, 228, 229
_PCAP_MAGIC = {
    b"\xd4\xc3\xb2\xa1": ("<", 1_000), b"\xa1\xb2\xc3\xd4": (">", 1_000),
    b"\x4d\x3c\xb2\xa1": ("<", 1), b"\xa1\xb2\x3c\x4d": (">", 1),
}
_PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"
SUPPORTED_LINKTYPES = {LINKTYPE_NULL: "BSD loopback", LINKTYPE_ETHERNET: "Ethernet",
                       LINKTYPE_RAW: "raw IP", LINKTYPE_LOOP: "OpenBSD loopback",
                       LINKTYPE_SLL: "Linux cooked", LINKTYPE_SLL2: "Linux cooked v2",
                       LINKTYPE_IPV4: "raw IPv4", LINKTYPE_IPV6: "raw IPv6"}
# smallest body (block length minus type and length, trailing length included) of a block
_PCAPNG_MIN_BODY = {1: 12, 3: 8, 6: 24, 5: 16}
_IPV6_EXT = {0, 43, 60, 51}
# largest pcap record or pcapng block read, bytes (libpcap's snap length is at most 256 KiB)
MAX_RECORD_BYTES = 64 << 20
_FILE_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO (named pipe)",
               stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
               stat.S_IFSOCK: "a socket"}


def _ip_version_from_af(af: int) -> int | None:
    if af == 2:
        return 4
    if af in (10, 24, 28, 30):  # AF_INET6 on Linux, BSDs, macOS
        return 6
    return None


def network_payload(linktype: int, frame: bytes) -> tuple[int, int] | None:
    """(IP version, offset of the IP header in ``frame``), or None if not IP."""
    if linktype in (LINKTYPE_NULL, LINKTYPE_LOOP):
        if len(frame) < 4:
            return None
        fmt = "<I" if linktype == LINKTYPE_NULL else ">I"
        af = struct.unpack_from(fmt, frame)[0]
        if af > 0xFFFF:  # written in the other byte order
            af = struct.unpack_from(">I" if fmt == "<I" else "<I", frame)[0]
        version = _ip_version_from_af(af)
        return (version, 4) if version else None
    if linktype == LINKTYPE_ETHERNET:
        off, ethertype = 12, None
        while len(frame) >= off + 2:
            ethertype = struct.unpack_from(">H", frame, off)[0]
            if ethertype in (0x8100, 0x88A8):
                off += 4
                continue
            break
        return _by_ethertype(ethertype, off + 2)
    if linktype == LINKTYPE_SLL:
        if len(frame) < 16:
            return None
        return _by_ethertype(struct.unpack_from(">H", frame, 14)[0], 16)
    if linktype == LINKTYPE_SLL2:
        if len(frame) < 20:
            return None
        return _by_ethertype(struct.unpack_from(">H", frame, 0)[0], 20)
    if linktype in (LINKTYPE_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6):
        if not frame:
            return None
        version = frame[0] >> 4
        return (version, 0) if version in (4, 6) else None
    return None


def _by_ethertype(ethertype: int | None, off: int) -> tuple[int, int] | None:
    if ethertype == 0x0800:
        return 4, off
    if ethertype == 0x86DD:
        return 6, off
    return None


_IPV4_NAMES: dict[bytes, str] = {}  # packed address -> its text: a capture has few hosts
_IPV4_NAMES_MAX = 1 << 16  # past this many (a scan), addresses are formatted each time


def _ipv4(packed: bytes) -> str:
    """The dotted text of a packed IPv4 address (``ipaddress``'s, remembered: formatting it
    anew for every packet took about 5% of reading a capture)."""
    name = _IPV4_NAMES.get(packed)
    if name is None:
        name = ipaddress.IPv4Address(packed).compressed
        if len(_IPV4_NAMES) < _IPV4_NAMES_MAX:
            _IPV4_NAMES[packed] = name
    return name


def tcp_header(linktype: int, frame: bytes) -> tuple[str, str, int, int] | None:
    """Where the TCP header of an IPv4/IPv6 frame starts: (source address, destination
    address, TCP header offset, IP payload end offset), or None when the frame is not TCP (or
    is a non-first IPv4 fragment, or too short to hold a TCP header)."""
    net = network_payload(linktype, frame)
    if net is None:
        return None
    version, off = net
    if version == 4:
        if len(frame) < off + 20:
            return None
        ihl = (frame[off] & 0x0F) * 4
        total = struct.unpack_from(">H", frame, off + 2)[0]
        frag = struct.unpack_from(">H", frame, off + 6)[0]
        if frame[off + 9] != 6 or frag & 0x1FFF or ihl < 20:
            return None
        src = _ipv4(frame[off + 12 : off + 16])
        dst = _ipv4(frame[off + 16 : off + 20])
        tcp_off, ip_end = off + ihl, off + total
    else:
        if len(frame) < off + 40:
            return None
        plen = struct.unpack_from(">H", frame, off + 4)[0]
        nxt = frame[off + 6]
        src = ipaddress.IPv6Address(frame[off + 8 : off + 24]).compressed
        dst = ipaddress.IPv6Address(frame[off + 24 : off + 40]).compressed
        tcp_off, ip_end = off + 40, off + 40 + plen
        while nxt in _IPV6_EXT and len(frame) >= tcp_off + 2:
            nxt, hlen = frame[tcp_off], frame[tcp_off + 1]
            tcp_off += (hlen + 2) * 4 if nxt == 51 else (hlen + 1) * 8
        if nxt != 6:
            return None
    if len(frame) < tcp_off + 20:
        return None
    return src, dst, tcp_off, ip_end


def decode_frame(linktype: int, ts_ns: int, frame: bytes, wire_len: int) -> Packet | None:
    """Decode one captured frame into a TCP Packet, or None when it is not IPv4/IPv6 TCP."""
    head = tcp_header(linktype, frame)
    return None if head is None else tcp_packet(head, ts_ns, frame, wire_len)


def tcp_packet(head: tuple[str, str, int, int], ts_ns: int, frame: bytes,
               wire_len: int) -> Packet:
    """The TCP Packet of a frame whose ``tcp_header`` is ``head``."""
    src, dst, tcp_off, ip_end = head
    sport, dport, seq, ack, data_off = struct.unpack_from(">HHIIB", frame, tcp_off)
    flags = frame[tcp_off + 13]
    payload_off = tcp_off + (data_off >> 4) * 4
    if ip_end < payload_off:  # IPv4 total length 0 (TSO) or a lie: trust the capture
        ip_end = wire_len if wire_len >= len(frame) else len(frame)
    payload_bytes = max(0, ip_end - payload_off)
    return Packet(
        ts_ns=ts_ns, src=src, dst=dst, sport=sport, dport=dport, seq=seq, ack=ack, flags=flags,
        wire_bytes=wire_len, payload_bytes=payload_bytes,
        payload=bytes(frame[payload_off : min(ip_end, len(frame))]),
    )


@dataclass
class ReaderStats:
    """What a pass over a capture file saw (counts of frames)."""

    frames: int = 0
    tcp_packets: int = 0
    skipped_frames: int = 0
    truncated: bool = False
    interface_drops: int | None = None


class PcapReader:
    """Iterate the TCP packets of a pcap or pcapng file; ``stats`` fills in as it goes.

    >>> # for pkt in PcapReader("capture.pcapng"): print(pkt.ts_ns, pkt.payload_bytes)
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.stats = ReaderStats()
        self.format = ""
        self._size = 0  # the file's size in bytes when last looked at

    def __iter__(self) -> Iterator[Packet]:
        fh = self._open()
        try:
            magic = fh.read(4)
            if magic in _PCAP_MAGIC:
                self.format = "pcap"
                yield from self._pcap(fh, *_PCAP_MAGIC[magic])
            elif magic == _PCAPNG_SHB:
                self.format = "pcapng"
                fh.seek(0)
                yield from self._pcapng(fh)
            elif not magic:
                raise CaptureError("capture file is empty", path=self.path)
            else:
                raise CaptureError(
                    f"not a pcap or pcapng file (starts with {magic.hex()})", path=self.path
                )
        except OSError as exc:
            raise CaptureError(f"cannot read capture: {fault_of(exc)}",
                               path=self.path) from None
        finally:
            fh.close()

    def _open(self) -> BinaryIO:
        """Open the capture for reading; refuse anything but a regular file (without blocking
        on a FIFO: opened non-blocking, checked, then read)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise CaptureError(f"cannot open capture: {fault_of(exc)}", path=self.path) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                kind = _FILE_KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
                raise CaptureError(f"cannot read capture: it is {kind}, not a regular file",
                                   path=self.path)
            os.set_blocking(fd, True)
            self._size = info.st_size
            return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise

    def _fits(self, fh: BinaryIO, nbytes: int, what: str, header: int, claim: int) -> bool:
        """Whether ``nbytes`` more bytes of ``what`` (whose ``header`` bytes were just read and
        which states its length as ``claim`` bytes) can be read at the file's current offset:
        CaptureError past ``MAX_RECORD_BYTES``; False past the end of the file (a file cut
        short: the caller sets ``truncated``)."""
        at = fh.tell()
        if nbytes > MAX_RECORD_BYTES:
            raise CaptureError(f"{what} at byte {at - header} claims {claim} bytes, more than the"
                               f" {MAX_RECORD_BYTES >> 20} MiB any capture writes (corrupt file)",
                               path=self.path)
        if at + nbytes > self._size and self._size:  # maybe still growing: look again
            self._size = os.fstat(fh.fileno()).st_size
        return at + nbytes <= self._size or not self._size

    def _check_linktype(self, linktype: int, others: list[int] = ()) -> None:
        """Raise when ``linktype`` cannot be read and no interface (``others``) can be."""
        if linktype not in SUPPORTED_LINKTYPES and not any(
                k in SUPPORTED_LINKTYPES for k in others):
            known = ", ".join(f"{name} {k}" for k, name in SUPPORTED_LINKTYPES.items())
            raise CaptureError(f"link type {linktype} is not supported (gradwire reads {known})",
                               path=self.path)

    def _emit(self, linktype: int, ts_ns: int, frame: bytes, wire: int) -> Packet | None:
        self.stats.frames += 1
        pkt = decode_frame(linktype, ts_ns, frame, wire)
        if pkt is None:
            self.stats.skipped_frames += 1
        else:
            self.stats.tcp_packets += 1
        return pkt

    def _pcap(self, fh: BinaryIO, endian: str, ns_per_frac: int) -> Iterator[Packet]:
        header = fh.read(20)
        if len(header) < 20:
            raise CaptureError("pcap header is truncated", path=self.path)
        linktype = struct.unpack(endian + "HHiIII", header)[5] & 0x0FFFFFFF
        self._check_linktype(linktype)
        rec = struct.Struct(endian + "IIII")
        at, size = 24, self._size  # offset of the next record, file size (bytes)
        while True:
            head = fh.read(16)
            if not head:
                return
            if len(head) < 16:
                self.stats.truncated = True
                return
            sec, frac, incl, orig = rec.unpack(head)
            at += 16 + incl
            if incl > MAX_RECORD_BYTES or at > size:  # the slow path: look closer
                if not self._fits(fh, incl, "pcap record", 16, incl):
                    self.stats.truncated = True
                    return
                size = self._size
            frame = fh.read(incl)
            if len(frame) < incl:
                self.stats.truncated = True
                return
            pkt = self._emit(linktype, sec * 1_000_000_000 + frac * ns_per_frac, frame, orig)
            if pkt is not None:
                yield pkt

    def _pcapng(self, fh: BinaryIO) -> Iterator[Packet]:
        endian = "<"
        links: list[tuple[int, int]] = []  # (linktype, ns per tick as a fraction denominator)
        readable = 0  # how many of ``links`` have a link type gradwire reads
        at, size = 0, self._size  # offset of the next block, file size (bytes)
        while True:
            head = fh.read(8)
            if not head:
                return
            if len(head) < 8:
                self.stats.truncated = True
                return
            btype = struct.unpack_from(endian + "I", head)[0]
            if btype == 0x0A0D0D0A:
                bom = fh.read(4)
                if len(bom) < 4:  # the file ends inside the section header
                    self.stats.truncated = True
                    return
                endian = "<" if bom == b"\x4d\x3c\x2b\x1a" else ">"
                if bom not in (b"\x4d\x3c\x2b\x1a", b"\x1a\x2b\x3c\x4d"):
                    raise CaptureError("pcapng section header has a bad byte-order magic",
                                       path=self.path)
                blen = struct.unpack_from(endian + "I", head, 4)[0]
                at += blen
                if blen > MAX_RECORD_BYTES or at > size:  # the slow path: look closer
                    if not self._fits(fh, blen - 12, "pcapng section header block", 12, blen):
                        self.stats.truncated = True
                        return
                    size = self._size
                body = bom + (fh.read(blen - 12) if blen >= 12 else b"")
                links = []
                readable = 0  # interfaces of the section gradwire reads
            else:
                blen = struct.unpack_from(endian + "I", head, 4)[0]
                at += blen
                if blen > MAX_RECORD_BYTES or at > size:  # the slow path: look closer
                    if not self._fits(fh, blen - 8, f"pcapng block of type {btype}", 8, blen):
                        self.stats.truncated = True
                        return
                    size = self._size
                body = fh.read(blen - 8) if blen >= 12 else b""
            start = at - blen  # the block's offset in the file (bytes)
            if btype == 0 and blen == 0:  # zeros where a block starts: a file a crash cut
                self.stats.truncated = True
                return
            if blen < 12 or blen % 4:
                raise CaptureError(f"corrupt pcapng block at byte {start}: its length {blen} is "
                                   "under 12 or not a multiple of 4", path=self.path)
            if len(body) < blen - 8:  # the file ends inside the block
                self.stats.truncated = True
                return
            trailer = struct.unpack_from(endian + "I", body, len(body) - 4)[0]
            if trailer != blen:
                raise CaptureError(f"corrupt pcapng block at byte {start}: it starts saying "
                                   f"{blen} bytes and ends saying {trailer}", path=self.path)
            if len(body) < _PCAPNG_MIN_BODY.get(btype, 0):
                raise CaptureError(f"corrupt pcapng block at byte {start}: type {btype} is only "
                                   f"{blen} bytes long", path=self.path)
            if btype == 1:  # Interface Description Block
                linktype, snap = struct.unpack_from(endian + "HxxI", body)
                links.append((linktype, _tsresol_per_second(body[8:-4], endian)))
                readable += linktype in SUPPORTED_LINKTYPES
            elif btype in (6, 3):  # Enhanced / Simple Packet Block
                pkt = self._pcapng_packet(btype, body, links, endian, readable, start)
                if pkt is not None:
                    yield pkt
            elif btype == 5:  # Interface Statistics Block
                drops = _isb_ifdrop(body[12:-4], endian)
                if drops is not None:
                    self.stats.interface_drops = (self.stats.interface_drops or 0) + drops

    def _pcapng_packet(self, btype: int, body: bytes, links: list[tuple[int, int]],
                       endian: str, readable: int, start: int) -> Packet | None:
        """The TCP packet of an Enhanced (6) or Simple (3) Packet Block at byte ``start`` of
        the file, or None; ``readable``: how many of the section's interfaces have a link
        type gradwire reads."""
        if btype == 3:
            if not links:
                raise CaptureError("packet block before any interface block", path=self.path)
            orig = struct.unpack_from(endian + "I", body)[0]
            self._check_linktype(links[0][0])
            # the packet, cut where the block ends (before its trailing length): a packet
            # longer than the snap length was stored cut
            return self._emit(links[0][0], 0, body[4 : min(4 + orig, len(body) - 4)], orig)
        iface, hi, lo, incl, orig = struct.unpack_from(endian + "IIIII", body)
        if incl > len(body) - 24:  # its fields, the packet, the trailing length
            raise CaptureError(f"corrupt pcapng packet block at byte {start}: it holds "
                               f"{len(body) - 24} bytes and says it captured {incl}",
                               path=self.path)
        if iface >= len(links):
            raise CaptureError(f"packet names interface {iface}, which is not described",
                               path=self.path)
        linktype, per_second = links[iface]
        if linktype not in SUPPORTED_LINKTYPES:  # another interface of a multi-interface file
            if not readable:
                self._check_linktype(linktype)
            self.stats.frames += 1
            self.stats.skipped_frames += 1
            return None
        ticks = (hi << 32) | lo
        ts_ns = ticks * 1_000_000_000 // per_second
        return self._emit(linktype, ts_ns, body[20 : 20 + incl], orig)


def _options(raw: bytes, endian: str) -> Iterator[tuple[int, bytes]]:
    off = 0
    while off + 4 <= len(raw):
        code, length = struct.unpack_from(endian + "HH", raw, off)
        if code == 0:
            return
        yield code, raw[off + 4 : off + 4 + length]
        off += 4 + ((length + 3) & ~3)


def _tsresol_per_second(raw: bytes, endian: str) -> int:
    for code, value in _options(raw, endian):
        if code == 9 and value:
            v = value[0]
            return 2 ** (v & 0x7F) if v & 0x80 else 10 ** v
    return 1_000_000


def _isb_ifdrop(raw: bytes, endian: str) -> int | None:
    for code, value in _options(raw, endian):
        if code == 5 and len(value) == 8:  # isb_ifdrop
            return struct.unpack(endian + "Q", value)[0]
    return None
