"""What a capture says of the transport: TCP retransmissions and egress queueing delay.

``gradwire predict`` reads these from the 1-worker profile's PS captures (docs/predict.md,
"Lossy links"), in the same pass that decodes their HTTP/2 streams: ``TransportCounter`` is the
state, fed a segment at a time by ``TransportReader`` (a ``PcapReader`` that yields the packets
as usual); ``transport_stats`` reads one capture for these alone.

* whether TCP loses packets on the way: a retransmitted data segment (one that starts below
  the highest sequence number already seen in its direction: Wireshark's
  ``tcp.analysis.retransmission``, plus the ones it guesses are ``out_of_order`` because they
  came within 3 ms of the highest; the lab's paths do not reorder) means a queue on the path
  overflowed. In the lab's 250 Mbit/s profiles 1.0-4.0% of the data segments are
  retransmitted (all of them pushes, dropped by the switch's 10 ms buffer), at 500 Mbit/s
  and 1 Gbit/s at most 0.05%. A queue on the capturing host's own egress seldom drops: TCP
  small queues hold the local sender back instead.
* the queueing delay of the data the capturing host sends: the capture sees a segment after
  the host's egress queue (``dev_queue_xmit``), so capture time minus the segment's TCP
  timestamp (TSval, stamped when TCP sent it, 1 ms ticks on Linux) is the queueing delay plus
  a constant per connection, removed by subtracting the connection's minimum. With the
  bottleneck elsewhere (a switch), this delay is about 0.
"""

from __future__ import annotations

import statistics
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gradwire.collector.pcapfile import PcapReader, tcp_header, tcp_packet
from gradwire.records import Packet

__all__ = ["TransportCounter", "TransportReader", "TransportStats", "transport_stats"]

_TS_OPTION = 8
_MASK = 0xFFFFFFFF
_HALF = 1 << 31


@dataclass(frozen=True)
class TransportStats:
    """TCP facts of one capture.

    ``data_segments``: captured TCP segments carrying payload (of the given ports);
    ``retransmitted``: how many of them resent bytes already seen; ``queue_delays_ms``: per data
    segment sent by the capturing host, its egress queueing delay in milliseconds (empty when
    the segments carry no TCP timestamps).
    """

    path: str
    data_segments: int
    retransmitted: int
    queue_delays_ms: tuple[float, ...]

    @property
    def retransmitted_share(self) -> float:
        """Retransmitted data segments over all data segments (0 with none)."""
        return self.retransmitted / self.data_segments if self.data_segments else 0.0

    @property
    def queue_delay_ms(self) -> float | None:
        """Median egress queueing delay of the sent data segments, milliseconds."""
        return statistics.median(self.queue_delays_ms) if self.queue_delays_ms else None

    def summary(self) -> dict[str, float | int | None]:
        """The counts, share and median delay as a JSON-ready dict."""
        return {"data_segments": self.data_segments, "retransmitted": self.retransmitted,
                "retransmitted_share": self.retransmitted_share,
                "queue_delay_ms": self.queue_delay_ms}

    @classmethod
    def merge(cls, parts: Iterable[TransportStats]) -> TransportStats:
        """One set of statistics over several captures."""
        parts = list(parts)
        return cls(", ".join(p.path for p in parts), sum(p.data_segments for p in parts),
                   sum(p.retransmitted for p in parts),
                   tuple(d for p in parts for d in p.queue_delays_ms))


class TransportCounter:
    """The state of ``transport_stats`` over one capture, fed a data segment at a time (no
    I/O), so that the pass that reads a capture for its HTTP/2 streams observes its transport
    too (``TransportReader``, ``h2capture.capture_streams(transport=...)``).

    ``host_addresses``: the capturing host's addresses, whose sent segments give queueing
    delays (none given: no delays); ``ports``: count only segments to or from these TCP ports
    (empty: every TCP segment).
    """

    def __init__(self, host_addresses: Iterable[str] = (), ports: Iterable[int] = ()) -> None:
        self.mine = set(host_addresses)
        self.want = set(ports)
        self.top: dict[tuple, int] = {}  # direction -> highest relative end seen
        self.first: dict[tuple, int] = {}  # direction -> first sequence number
        self.base: dict[tuple, float] = {}  # sent direction -> min(capture ms - TSval)
        self.raw: list[tuple[tuple, float]] = []
        self.data = self.retrans = 0

    def segment(self, ts_ns: int, src: str, sport: int, dst: str, dport: int, seq: int,
                payload: int, tsval: int) -> None:
        """One TCP segment carrying ``payload`` (> 0) bytes; ``tsval``: its TCP timestamp,
        or -1 without one."""
        want = self.want
        if want and sport not in want and dport not in want:
            return
        self.data += 1
        key = (src, sport, dst, dport)
        hi = self.top.get(key)
        if hi is None:
            self.first[key] = seq
            hi = 0
        # sequence number relative to the direction's first, unwrapped past 4 GiB
        rel = hi - (hi & _MASK) + ((seq - self.first[key]) & _MASK)
        if rel < hi - _HALF:
            rel += _MASK + 1
        elif rel > hi + _HALF:
            rel -= _MASK + 1
        if rel < hi:
            self.retrans += 1
        self.top[key] = max(hi, rel + payload)
        if tsval >= 0 and src in self.mine:
            d = ts_ns / 1e6 - tsval
            self.base[key] = min(self.base.get(key, d), d)
            self.raw.append((key, d))

    def stats(self, path: str | Path) -> TransportStats:
        """The statistics of the segments seen so far, as those of the capture at ``path``."""
        delays = tuple(d - self.base[k] for k, d in self.raw)
        return TransportStats(str(path), self.data, self.retrans, delays)


class TransportReader(PcapReader):
    """A ``PcapReader`` that also feeds every TCP segment with payload to ``counter``, with
    the TSval of its timestamp option: one pass over the file gives the packets and the
    transport statistics."""

    def __init__(self, path: str | Path, counter: TransportCounter) -> None:
        super().__init__(path)
        self.counter = counter

    def _emit(self, linktype: int, ts_ns: int, frame: bytes, wire: int) -> Packet | None:
        self.stats.frames += 1
        head = tcp_header(linktype, frame)
        if head is None:
            self.stats.skipped_frames += 1
            return None
        self.stats.tcp_packets += 1
        pkt = tcp_packet(head, ts_ns, frame, wire)
        if pkt.payload_bytes > 0:
            t = head[2]
            end = min(t + (frame[t + 12] >> 4) * 4, len(frame))
            self.counter.segment(ts_ns, pkt.src, pkt.sport, pkt.dst, pkt.dport, pkt.seq,
                                 pkt.payload_bytes, _tsval(frame, t + 20, end))
        return pkt


def _tsval(frame: bytes, o: int, end: int) -> int:
    """The TSval of the TCP options in ``frame[o:end]``, or -1 without a timestamp option."""
    while o < end:
        kind = frame[o]
        if kind == 0:
            return -1
        if kind == 1:
            o += 1
            continue
        if o + 1 >= end or frame[o + 1] < 2:
            return -1
        if kind == _TS_OPTION and o + 6 <= end:
            return struct.unpack_from(">I", frame, o + 2)[0]
        o += frame[o + 1]
    return -1


def transport_stats(path: str | Path, host_addresses: Iterable[str] = (),
                    ports: Iterable[int] = ()) -> TransportStats:
    """Retransmissions and egress queueing delay of the capture at ``path``.

    ``host_addresses``: the capturing host's addresses (a bundle manifest's ``host``), whose
    sent segments give queueing delays (none given: no delays); ``ports``: count only
    segments to or from these TCP ports (empty: every TCP segment). IPv4 and IPv6; raises
    CaptureError for an unreadable capture.
    """
    counter = TransportCounter(host_addresses, ports)
    for _ in TransportReader(path, counter):
        pass
    return counter.stats(path)
