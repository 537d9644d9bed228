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
* the depth of a token bucket on the link (``TransportStats.burst_bytes``): a shaper that lets
  an idle link send its first bytes above the rate (Linux HTB's ``burst``, a cloud VM's burst
  credits; a plain switch port has none) shows in the capture as data running ahead of the
  link rate after an idle spell. The captured segments of each direction (sent by the host,
  received by it) are kept as (time, new bytes); given the rate, ``link_burst`` measures how
  far ahead of it each busy episode ended.
* the window of the capturing host's flows (``TransportStats.window_bytes``): the bytes a
  sending connection keeps on its way, the in-flight bytes the capture sees (sent and not yet
  acknowledged by the peer) plus the ones still queued before the capture point (the egress
  queueing delay below, times the rate). Where the bottleneck is the sender's own egress (a
  PS's shaped link) the capture sees about a GSO segment in flight (65 KB on the lab) and the
  rest as queueing delay; where it is further on (a worker's pushes, queued at the switch
  port toward the PS) all of it is in flight (260-300 KB on the lab's profiles at 100 Mbit/s
  to 2 Gbit/s). A flow's window over the rate is its RTT when it runs alone: the time its
  ACKs take to come back. A flow whose ACKs wait behind another flow's standing queue the
  other way runs at most at window / (that queue's delay): ``replay`` couples the two
  directions of a link with it (docs/predict.md, "Two-way traffic"). Transfer by transfer
  (``TransportStats.transfer_windows``: the segments a host sent with no idle spell of a
  given length between them) the window wanders: BBR's estimates and Reno's sawtooth move
  from one step to the next. Through a FIFO flows share in proportion to their windows, so
  ``predict --link-shares windows`` shares a direction among its transfers by windows drawn from
  these (docs/predict.md, "Shares by window").
* the queueing delay of the data the capturing host sends: the capture sees a segment after
  the host's egress queue (``dev_queue_xmit``), so capture time minus the segment's TCP
  timestamp (TSval, stamped when TCP sent it, 1 ms ticks on Linux) is the queueing delay plus
  a constant per connection, removed by subtracting the connection's minimum. With the
  bottleneck elsewhere (a switch), this delay is about 0.
"""

from __future__ import annotations

import statistics
import struct
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gradwire.collector.pcapfile import PcapReader, tcp_header, tcp_packet
from gradwire.records import Packet

__all__ = ["TransportCounter", "TransportReader", "TransportStats", "transport_stats"]

_TS_OPTION = 8
_MASK = 0xFFFFFFFF
_HALF = 1 << 31
_ACK_FLAG = 0x10


def _unwrap(delta: int, near: int) -> int:
    """The 32-bit sequence offset ``delta`` (mod 2^32) as the unwrapped value nearest
    ``near``."""
    v = near - (near & _MASK) + (delta & _MASK)
    if v < near - _HALF:
        v += _MASK + 1
    elif v > near + _HALF:
        v -= _MASK + 1
    return v


@dataclass(frozen=True)
class TransportStats:
    """TCP facts of one capture.

    ``data_segments``: captured TCP segments carrying payload (of the given ports);
    ``retransmitted``: how many of them resent bytes already seen; ``queue_delays_ms``: per data
    segment sent by the capturing host, its egress queueing delay in milliseconds (empty when
    the segments carry no TCP timestamps); ``arrivals``: per capture, per direction (0: sent
    by the host, 1: received), the capture times (ns) and new payload bytes of its data
    segments, retransmissions left out (for ``burst_bytes``; empty without host addresses);
    ``in_flight``: per capture, for each new data segment the host sent once the peer had
    acknowledged some of that connection's data, its in-flight bytes (its end less the peer's
    highest ACK), its egress queueing delay (ms, NaN without a timestamp) and its payload
    bytes (for ``window_bytes``); ``sent_ns``: per capture, the capture time (ns) of each of
    those segments, in the same order (for ``transfer_windows``; empty where not kept);
    ``sent_conn``: per capture, the connection each of them was sent on (an index, in the
    same order; empty where not kept: one connection); ``conn_peers``: per capture, each
    connection's peer address (by that index); ``hosts``: per capture, the capturing host's
    addresses (both for ``transfer_windows``' ``among``; empty where not kept).
    """

    path: str
    data_segments: int
    retransmitted: int
    queue_delays_ms: tuple[float, ...]
    arrivals: tuple[tuple[tuple[Sequence[int], Sequence[int]], ...], ...] = field(
        default=(), repr=False, compare=False)
    in_flight: tuple[tuple[Sequence[float], Sequence[float], Sequence[int]], ...] = field(
        default=(), repr=False, compare=False)
    sent_ns: tuple[Sequence[int], ...] = field(default=(), repr=False, compare=False)
    sent_conn: tuple[Sequence[int], ...] = field(default=(), repr=False, compare=False)
    conn_peers: tuple[tuple[str, ...], ...] = field(default=(), repr=False, compare=False)
    hosts: tuple[tuple[str, ...], ...] = field(default=(), repr=False, compare=False)

    def window_bytes(self, rate_bytes_per_s: float) -> float:
        """The window of the capturing hosts' sending flows at ``rate_bytes_per_s`` (TCP
        payload), bytes: per capture, the byte-weighted median over the data segments it sent
        of in-flight bytes plus egress queueing delay x rate (a segment without a timestamp
        counts its in-flight bytes alone); the median over the captures; 0 without samples.
        Byte-weighted, so that the big transfers a step moves decide, not its small
        messages."""
        per = [_weighted_median([_window(f, d, rate_bytes_per_s)
                                 for f, d in zip(fl, dl, strict=True)], w)
               for fl, dl, w in self.in_flight if len(w)]
        return statistics.median(per) if per else 0.0

    def transfer_windows(self, rate_bytes_per_s: float, gap_s: float,
                         among: frozenset[str] | None = None) -> list[tuple[float, int]]:
        """Per transfer the capturing hosts sent, (window bytes, payload bytes): a transfer
        is the data segments a capture's host sent on one connection with no spell longer
        than ``gap_s`` seconds between two of them (a worker's pushes to two PSes at once are
        two transfers, each with its connection's window), its window the byte-weighted mean
        of its segments' (in flight plus queueing delay x ``rate_bytes_per_s``, as
        ``window_bytes``); by capture, then connection, then time; empty without ``sent_ns``.
        ``among``: only the connections whose peer, or whose capturing host, has one of these
        addresses (one PS's: its own capture's pulls, a worker's pushes to it); None: all.
        The transfers are worked out once per (rate, gap) and kept on the instance, ``among``
        only choosing among them: a sweep asks once per mechanism group and per PS, and a
        capture can hold millions of segments."""
        kept = self.__dict__.setdefault("_kept_transfers", {})
        if (rate_bytes_per_s, gap_s) not in kept:
            kept[(rate_bytes_per_s, gap_s)] = self._transfers(rate_bytes_per_s, gap_s)
        return [(window, nbytes) for i, c, window, nbytes in kept[(rate_bytes_per_s, gap_s)]
                if among is None or self._among(i, c, among)]

    def _among(self, capture: int, conn: int, among: frozenset[str]) -> bool:
        """Whether connection ``conn`` of capture ``capture`` has its capturing host or its
        peer among ``among`` (a capture without them kept: no)."""
        hosts = self.hosts[capture] if capture < len(self.hosts) else ()
        peers = self.conn_peers[capture] if capture < len(self.conn_peers) else ()
        return bool(among.intersection(hosts)) or (conn < len(peers) and peers[conn] in among)

    def _transfers(self, rate_bytes_per_s: float, gap_s: float
                   ) -> list[tuple[int, int, float, int]]:
        """Every transfer of ``transfer_windows``, (capture, connection, window bytes, payload
        bytes), in its order: one pass over the segments, whatever ``among`` is asked later."""
        out: list[tuple[int, int, float, int]] = []
        # per (capture, connection, first segment's ns): window x bytes summed, bytes; in the
        # order the transfers began
        acc: dict[tuple[int, int, int], list[float]] = {}
        for i, c, start, _, window, w in self.sent_segments(rate_bytes_per_s, gap_s):
            cur = acc.get((i, c, start))
            if cur is None:
                cur = acc[(i, c, start)] = [0.0, 0.0]
            cur[0] += window * w
            cur[1] += w
        # by capture, then connection (a stable sort keeps each one's transfers in time order)
        for (i, c, _), (wb, nb) in sorted(acc.items(), key=lambda x: x[0][:2]):
            if nb:
                out.append((i, c, wb / nb, int(nb)))
        return out

    def sent_segments(self, rate_bytes_per_s: float, gap_s: float
                      ) -> Iterator[tuple[int, int, int, int, float, int]]:
        """Per data segment the capturing hosts sent (``in_flight``'s, by capture, then in
        time order): (capture, connection, the capture time of its transfer's first segment,
        its own capture time (both ns), its window bytes (``window_bytes``' at
        ``rate_bytes_per_s``), its payload bytes); a transfer is one connection's segments
        with no spell longer than ``gap_s`` seconds between two of them. Nothing without
        ``sent_ns``."""
        gap_ns = gap_s * 1e9
        for i, ((fl, dl, wl), ts) in enumerate(zip(self.in_flight, self.sent_ns, strict=False)):
            conns = self.sent_conn[i] if i < len(self.sent_conn) else [0] * len(ts)
            start: dict[int, int] = {}
            last: dict[int, int] = {}
            for f, d, w, t, c in zip(fl, dl, wl, ts, conns, strict=True):
                if c not in last or t - last[c] > gap_ns:
                    start[c] = t
                last[c] = t
                yield i, c, start[c], t, _window(f, d, rate_bytes_per_s), w

    def burst_bytes(self, rate_bytes_per_s: float) -> tuple[float, float]:
        """The token-bucket depth of the captured links at ``rate_bytes_per_s`` (TCP payload),
        (sent by the host, received), bytes: the median lead of the qualifying episodes of
        what every capturing host sent (``burst_leads``, each PS its own link), pooled; 0 with
        fewer than ``MIN_EPISODES`` in all. Pooled, not a median of each link's estimate: a PS
        whose transfers are all too short to show the bucket (a recommendation model's
        embedding PS, its 0.1 MB of rows a step) has no evidence of it, not evidence of none,
        and its 0 would halve the estimate of a 2-PS profile. The links are taken to be shaped
        alike, as the lab's and one cloud VM type's are.

        Both directions get the depth measured on the host's own sending: the capture stamps
        a sent segment as it leaves, but a received one after the receive path, which
        delivers segments in clumps (on the lab's 20 Mbit/s sample, ~40 KB every ~16 ms at
        the right average rate), which say more about the receiving host than the link. So
        a link is taken to be shaped alike both ways, as the lab's and a cloud VM's are."""
        depth = _median_lead([lead for a in self.arrivals
                              for lead in burst_leads(a[0][0], a[0][1], rate_bytes_per_s)])
        return depth, depth

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
                   tuple(d for p in parts for d in p.queue_delays_ms),
                   tuple(a for p in parts for a in p.arrivals),
                   tuple(f for p in parts for f in p.in_flight),
                   tuple(t for p in parts for t in p.sent_ns),
                   tuple(c for p in parts
                         for c in (p.sent_conn or tuple([0] * len(t) for t in p.sent_ns))),
                   tuple(c for p in parts for c in (p.conn_peers or ((),) * len(p.sent_ns))),
                   tuple(h for p in parts for h in (p.hosts or ((),) * len(p.sent_ns))))


def _window(in_flight: float, delay_ms: float, rate_bytes_per_s: float) -> float:
    """A sent segment's window, bytes: its in-flight bytes plus its egress queueing delay
    (ms; NaN without a timestamp: none counted) times the rate."""
    return in_flight + (0.0 if delay_ms != delay_ms else delay_ms * 1e-3 * rate_bytes_per_s)


def _weighted_median(values: Sequence[float], weights: Sequence[int]) -> float:
    """The lower weighted median: the first of the sorted values at which the cumulative
    weight reaches half the total (``values`` not empty)."""
    pairs = sorted(zip(values, weights, strict=True))
    half, acc = sum(weights) / 2, 0
    for v, w in pairs:
        acc += w
        if acc >= half:
            return v
    return pairs[-1][0]


MIN_EPISODES = 3  # busy episodes a direction needs before link_burst estimates a bucket


def link_burst(ts_ns: Sequence[int], nbytes: Sequence[int], rate_bytes_per_s: float) -> float:
    """The token-bucket depth a link's captured departures show at rate ``rate_bytes_per_s``,
    bytes: how much sooner than the rate a transfer after an idle spell ends (0 when they show
    none, or fewer than ``MIN_EPISODES`` episodes qualify).

    The captured data (times ``ts_ns``, in order, and ``nbytes`` per segment) fill a fluid
    backlog drained at the rate: ``q = max(0, q - rate * dt) + bytes``. Without a bucket the
    backlog stays within about a segment; a bucket of depth b lets an idle link send b bytes
    at once, and the transfer keeps that lead over the rate. A busy episode runs from a
    segment that finds the backlog empty until it empties again; its lead is the backlog
    just after its last segment: its bytes less the rate times its span, what the bucket
    saved the whole transfer. Not its peak: HTB lets a packet go while its tokens are not
    negative, so the backlog peaks at the bucket plus a segment (a 64 KiB GSO segment on the
    lab), and an ideal shaper would keep that lead to the end; but on the lab's captures a
    transfer's last bytes leave later than the bucket alone would let them (the sender's
    tail), so transfers end nearer the bucket (the peak 189 KB, the lead at an episode's end
    a median of about 130 KB, on the lab's profiles).
    The estimate is the median lead of the episodes that moved at least twice their peak (a
    smaller transfer may have ended before the bucket did). An idle spell too short to refill
    the bucket caps an episode's lead too; the idle spells are not used to pick the episodes,
    since the small messages a step sends (requests, headers, small tensors) end an idle
    spell without draining the bucket. Short spells can only pull the median down: the
    estimate errs towards a plain rate. Cost O(segments).
    """
    return _median_lead(burst_leads(ts_ns, nbytes, rate_bytes_per_s))


def _median_lead(leads: list[float]) -> float:
    """The bucket ``leads`` (bytes) show: their median, or 0 with fewer than ``MIN_EPISODES``."""
    return statistics.median(leads) if len(leads) >= MIN_EPISODES else 0.0


def burst_leads(ts_ns: Sequence[int], nbytes: Sequence[int], rate_bytes_per_s: float
                ) -> list[float]:
    """The leads, bytes, of the busy episodes of a link's captured departures that moved at
    least twice their peak backlog (``link_burst``, which takes their median), in order."""
    if rate_bytes_per_s <= 0 or len(ts_ns) < 2:
        return []
    per_ns = rate_bytes_per_s / 1e9
    leads: list[float] = []
    q = peak = moved = 0.0
    last = ts_ns[0]
    for t, b in zip(ts_ns, nbytes, strict=True):
        drained = max(0.0, (t - last) * per_ns)  # a capture's times may step back a little
        if q > 0.0 and drained >= q:  # the backlog emptied between the two segments
            if moved:
                _episode(leads, peak, q, moved)
            q = peak = moved = 0.0
        q = max(0.0, q - drained)
        q += b
        moved += b
        peak = max(peak, q)
        last = t
    if moved:
        _episode(leads, peak, q, moved)
    return leads


def _episode(leads: list[float], peak: float, lead: float, moved: float) -> None:
    """Keep an episode's lead at its end if its size could not have capped its peak."""
    if moved >= 2 * peak:
        leads.append(lead)


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
        self.acked: dict[tuple, int] = {}  # sent direction -> the peer's highest ACK (relative)
        # per new data segment the host sent: in-flight bytes, its delay's index in raw (-1:
        # no timestamp), payload bytes
        self.flight = (array("d"), array("q"), array("q"))
        self.flight_ns = array("q")  # when each of them was captured
        self.flight_conn = array("q")  # the connection each was sent on (index in conns)
        self.conns: dict[tuple, int] = {}  # sent direction -> its index
        self.data = self.retrans = 0
        # per direction (0 sent by the host, 1 received): capture ns and new bytes
        self.arr = ((array("q"), array("q")), (array("q"), array("q")))

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
        rel = _unwrap(seq - self.first[key], hi)
        sent = src in self.mine
        raw = None
        if tsval >= 0 and sent:
            raw = ts_ns / 1e6 - tsval
            self.base[key] = min(self.base.get(key, raw), raw)
            self.raw.append((key, raw))
        if rel < hi:
            self.retrans += 1
        elif self.mine:
            ts, nb = self.arr[0 if sent else 1]
            ts.append(ts_ns)
            nb.append(payload)
            ack = self.acked.get(key)
            if sent and ack is not None:
                fl, dl, wl = self.flight
                fl.append(float(rel + payload - ack))
                dl.append(-1 if raw is None else len(self.raw) - 1)
                wl.append(payload)
                self.flight_ns.append(ts_ns)
                self.flight_conn.append(self.conns.setdefault(key, len(self.conns)))
        self.top[key] = max(hi, rel + payload)

    def ack(self, src: str, sport: int, dst: str, dport: int, ack: int) -> None:
        """A segment from ``src`` acknowledging ``ack``: the peer's ACK of the data the host
        sent on that connection (segments the host sends itself are left out)."""
        if src in self.mine or not self.mine:
            return
        key = (dst, dport, src, sport)
        if key in self.first:  # relative to the data's first byte; a late, lower ACK is old
            rel = _unwrap(ack - self.first[key], self.top[key])
            self.acked[key] = max(rel, self.acked.get(key, rel))

    def stats(self, path: str | Path) -> TransportStats:
        """The statistics of the segments seen so far, as those of the capture at ``path``."""
        delays = tuple(d - self.base[k] for k, d in self.raw)
        arrivals = (self.arr,) if self.mine else ()
        fl, dl, wl = self.flight
        nan = float("nan")
        flight = ((fl, [delays[i] if i >= 0 else nan for i in dl], wl),) if self.mine else ()
        sent = (self.flight_ns,) if self.mine else ()
        conn = (self.flight_conn,) if self.mine else ()
        # a sent direction's key is (host, port, peer, port): its peer, by connection index
        peers = (tuple(k[2] for k in self.conns),) if self.mine else ()
        hosts = (tuple(sorted(self.mine)),) if self.mine else ()
        return TransportStats(str(path), self.data, self.retrans, delays, arrivals, flight,
                              sent, conn, peers, hosts)


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
        if pkt.flags & _ACK_FLAG:
            self.counter.ack(pkt.src, pkt.sport, pkt.dst, pkt.dport, pkt.ack)
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
