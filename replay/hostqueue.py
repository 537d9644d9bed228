"""TCP connections through their sending host's own egress queue: a drop-tail byte FIFO under
TCP Small Queues, packet by packet (Reno).

Why: a parameter server's pulls leave through a queue on the PS itself (a NIC's or a shaper's).
The lab's samples (``scripts/lab/tcpsample.py``, docs/notes/issue22-sync-stagger.md) show how
Linux fills it: each busy connection keeps two GSO packets there (TCP Small Queues' floor),
a FIFO serves the connections in proportion to what each keeps queued, and when the queue
cannot take every connection's two packets, the one whose packet finds it full has that packet
dropped *locally*: it is not counted as sent, and the connection enters CWR (its window
halved, ``tcp_enter_cwr``). A Reno connection cut so regrows one segment per round trip, a few
hundred milliseconds for a 45-segment packet at a 10 ms queue, so the connections that filled
the queue first keep the bigger shares for a whole transfer. Equal sharing (the replay's
links) holds while every connection's two packets fit; this model is what happens when not.

What is modelled, each step as Linux 6.x does it (net/ipv4/tcp_output.c, tcp_cong.c):

- **Send** (``tcp_write_xmit``): while the window has room, TCP Small Queues lets the
  connection queue more (``tcp_small_queue_check``: fewer bytes queued than
  ``max(2 packets, pacing rate x 2^-pacing_shift s)``, capped by ``tcp_limit_output_bytes``;
  not checked while at most one packet is in flight) and data waits, one GSO packet of up to
  ``gso_segments`` segments is offered to the queue. A byte FIFO (``bfifo``) refuses it when
  the bytes queued plus the packet exceed its limit.
- **Local drop**: the packet stays unsent and the connection enters CWR once per window
  (``tcp_enter_cwr``: ssthresh = max(cwnd / 2, 2), reached at once here where Linux's
  proportional rate reduction takes a round trip); a connection left with nothing in flight
  waits for its probe timer, one RTO (the lab's *held* flows), or, given its receiver's
  HTTP/2 PINGs (``pings``), for the next one answered, which makes TCP try again
  (``replay/pings.py``).
- **Departure**: the FIFO serves packets in order at the link's rate; the departing packet's
  ACK comes back ``base_rtt`` later; TSQ lets its connection send again at the departure.
  A shaper's token bucket (``bucket`` bytes, HTB's ``burst``; 0: a plain rate) lets the head
  packet leave as soon as its tokens cover it; the tokens refill at the rate up to the bucket,
  so a queue that was idle sends a bucket's worth at once, and a busy one runs at the rate.
- **ACK**: Reno's window growth (``tcp_reno_cong_avoid``): slow start adds the segments acked
  up to ssthresh, congestion avoidance one segment per window acked, only while the window is
  the limit (``tcp_is_cwnd_limited``). The RTT estimate is RFC 6298's; RTO = srtt + rto_min,
  Linux's floor on the variance term.
- **Restart after idle** (``tcp_cwnd_restart``, ``tcp_slow_start_after_idle`` = 1): a
  connection that sends after more than one RTO idle with nothing in flight halves its window
  per RTO idle, down to the initial window, and keeps ssthresh at least 3/4 of the old window.

**BBR** (``cc="bbr"``, net/ipv4/tcp_bbr.c), in what differs from Reno here:

- the window: BBR sets it on each ACK to ``min(cwnd + acked, target)``, the target being
  its bandwidth-delay product (2 x the estimate x the minimum RTT) plus its quantisation
  budget, three of its TSO goal's packets (``bbr_quantization_budget``), rounded up to even.
  On a LAN the TSO goal is a whole GSO packet (``tcp_tso_autosize`` adds one when the minimum
  RTT is under 512 us, ``tcp_tso_rtt_log``), so the target is about three GSO packets
  (the lab's samples: 138-150 segments at 250 Mbit/s). The BDP term is taken at the link's
  rate and ``base_rtt`` (a few segments);
- TCP Small Queues: BBR paces itself (``SK_PACING_NEEDED``: no ``tcp_limit_output_bytes``
  cap), and its limit is a millisecond of its pacing rate. Behind a shaper whose bucket lets
  two packets or more leave at the host's speed, the delivery-rate samples see that speed:
  the lab's estimates read 0.7-11.6 Gbit/s on a 250 Mbit/s link, so the limit is at least the
  window and does not bind. Without such a bucket the estimate is the link's rate;
- no restart after idle (``tcp_slow_start_after_idle_check`` skips a congestion control
  with its own ``cong_control``): a connection idle for a while sends its whole window again;
- a local drop does not cut the window (``tcp_enter_cwr`` asks BBR's ``ssthresh``, which
  leaves it, and BBR's own ``cong_control`` skips Linux's rate reduction); the hold rule is
  Reno's (nothing in flight: the probe timer). So a BBR connection that restarts first keeps
  about its window in the queue, and one that starts next into a full queue is held.

Not modelled by that first BBR: its probing cycles and startup (the window's target is its
steady one). **BBR whole** (``cc="bbr-v1"``, ``--tcp bbr-v1``) runs Linux's BBR function for
function (``replay/bbr.py``): its pacing (a packet leaves no earlier than its departure time,
the pacing rate apart), the bandwidth filter over its delivery-rate samples, STARTUP and
DRAIN, the gain cycle, PROBE_RTT, the long-term policer estimate and Recovery's window; TSQ
then allows a millisecond of its own pacing rate. Not modelled here at all: the receiver's
window, delayed ACKs, and the reverse direction's queue (ACKs come back after ``base_rtt``
whatever the other direction carries; the kernel adds it, ``replay/hqkernel.py``).

Units: times in microseconds, sizes in bytes on the wire (a segment of ``segment`` bytes
carries an MSS of payload), rates in bytes per microsecond, windows in segments.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

__all__ = ["BASE_RTT_US", "BBR_V1", "CONGESTION_CONTROLS", "Connection", "HostQueue", "Outcome",
           "Transfer", "bbr_seed", "bbr_window", "fits_every_connection", "lab_queue_bytes",
           "simulate"]

# Linux defaults, each from the kernel's source or sysctl documentation:
MSS_WIRE = 1514  # bytes one full segment takes in the queue: 1448 payload, TCP 32 (timestamps),
# IP 20, Ethernet 14 (the lab's samples: 2 GSO packets = 136.3 kB = 90 x 1514)
MSS = 1448  # of those, the payload: the unit of the replay's links (rates x GOODPUT)
GSO_SEGMENTS = 45  # segments per GSO packet: the 64 KiB GSO limit over a 1448-byte MSS
INITIAL_WINDOW = 10  # segments (RFC 6928, TCP_INIT_CWND)
RTO_MIN_US = 200_000.0  # TCP_RTO_MIN
LIMIT_OUTPUT = 4 << 20  # net.ipv4.tcp_limit_output_bytes (4 MiB since Linux 6.0)
PACING_SHIFT = 10  # sk_pacing_shift: TSQ allows about 1 ms (2^-10 s) of the pacing rate
PACING_SS, PACING_CA = 2.0, 1.2  # tcp_pacing_ss_ratio, tcp_pacing_ca_ratio (percent / 100)
BBR_QUANTA = 3  # bbr_quantization_budget: 3 x the TSO goal (packets) on top of the BDP
BBR_CWND_GAIN = 2  # bbr_cwnd_gain in PROBE_BW
CONGESTION_CONTROLS = ("reno", "bbr", "bbr-v1")
# the hosts' congestion controls that cut their window on loss, as --tcp reno's connections
# do: an asynchronous PS profile whose PSes ran one takes the PS's own queue by default
LOSS_BASED_CCS = ("cubic", "reno")
# a BBR window target (``bbr_target``, the kernel's ``link_bbr``, ``bbr_window_bytes``) that is
# none: the connections run Linux's BBR whole (replay/bbr.py), ``cc`` ``bbr-v1``
BBR_V1 = -1.0
# A round trip with every queue empty: a LAN's or the lab's veth pair, about 0.1 ms. It only
# has to be small beside the queue's delay (10 ms at the lab's default): it clocks the ACKs.
BASE_RTT_US = 100.0
# the lab's bottleneck queue (replay/netns.py takes it from lab_queue_bytes): 10 ms of
# the rate, and at least four 64 KiB GSO packets
LAB_QUEUE_S, LAB_MIN_QUEUE = 0.010, 256 * 1024


def _pings():
    """replay/pings.py, imported on first use (as ``_bbr``: it loads numpy)."""
    from gradwire.replay import pings

    return pings


def _bbr():
    """replay/bbr.py, imported on first use: the command line's parser imports this module
    for its names and must not load numpy or numba (tests/test_cli_convention.py)."""
    from gradwire.replay import bbr

    return bbr


def bbr_seed(queue: int, conn: int) -> int:
    """The random draws' seed of connection ``conn`` on host queue ``queue`` (BBR whole's gain
    cycle start, ``bbr._rand_below``): the kernel's and the oracle's alike."""
    return (queue * 7919 + conn * 104729 + 1) % 2147483647


def lab_queue_bytes(bandwidth_bps: float) -> float:
    """The lab's default bottleneck queue at ``bandwidth_bps``, bytes on the wire: 10 ms of
    the rate, at least 256 KiB (``replay/netns.py queue_bytes``)."""
    return float(max(LAB_MIN_QUEUE, int(LAB_QUEUE_S * bandwidth_bps / 8)))


@dataclass(frozen=True)
class HostQueue:
    """One egress queue and the constants of the connections through it.

    ``rate``: the link's rate (bytes/us). ``buffer``: the queue's limit (bytes, a ``bfifo``'s
    ``limit``; the lab's is 10 ms of the rate). ``base_rtt``: a round trip with the queue
    empty (us). ``bucket``: the shaper's token bucket (bytes, full at the start; 0: a plain
    rate; the lab's HTB burst, which a profile's capture measures,
    ``collector/transport.py link_burst``). ``cc``: the connections' congestion control,
    ``reno`` or ``bbr`` (module docstring); ``bbr_target``: BBR's window target (segments;
    0: ``bbr_window``'s). ``tsq``: the queue is on the connections' own host, so TCP Small
    Queues limit what each keeps in it; False: a switch's queue, each connection from a host
    of its own whose NIC is idle and fast (no TSQ here), and a packet it drops is lost on the
    way: its segments count as in flight until the sender learns of the loss a round trip
    later (the smoothed RTT: the SACK of a later packet, RACK), then leave the window to be
    sent again, and a Reno connection halves its window then, once per window (BBR keeps
    it). ``pings``: the intervals the receivers' HTTP/2 PINGs come apart (us), each
    connection's cycle its own (``replay/pings.py``): a held connection tries again at the
    earlier of its probe timer and its next PING plus ``ping_answer`` (us, the sender's
    answer); empty: at its timer. The rest are Linux's defaults (module constants)."""

    rate: float
    buffer: float
    base_rtt: float = BASE_RTT_US
    bucket: float = 0.0
    cc: str = "reno"
    bbr_target: float = 0.0
    tsq: bool = True
    segment: int = MSS_WIRE
    gso_segments: int = GSO_SEGMENTS
    initial_window: int = INITIAL_WINDOW
    rto_min: float = RTO_MIN_US
    limit_output: int = LIMIT_OUTPUT
    pings: tuple[float, ...] = ()
    ping_answer: float = 0.0

    def __post_init__(self) -> None:
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError(f"rate must be a positive number of bytes/us, got {self.rate!r}")
        if not self.buffer >= self.segment:
            raise ValueError(f"buffer must hold at least one segment ({self.segment} bytes), "
                             f"got {self.buffer!r}")
        if not self.base_rtt >= 0:
            raise ValueError(f"base_rtt must be >= 0 us, got {self.base_rtt!r}")
        if not (self.bucket >= 0 and math.isfinite(self.bucket)):
            raise ValueError(f"bucket must be >= 0 bytes, got {self.bucket!r}")
        if not (self.bbr_target >= 0 and math.isfinite(self.bbr_target)):
            raise ValueError(f"bbr_target must be >= 0 segments, got {self.bbr_target!r}")
        if not all(x >= 0 and math.isfinite(x) for x in self.pings):
            raise ValueError(f"pings must be intervals >= 0 us, got {self.pings!r}")
        if not (self.ping_answer >= 0 and math.isfinite(self.ping_answer)):
            raise ValueError(f"ping_answer must be >= 0 us, got {self.ping_answer!r}")
        if self.cc not in CONGESTION_CONTROLS:
            raise ValueError(f"cc must be one of {', '.join(CONGESTION_CONTROLS)}, got "
                             f"{self.cc!r}")

    @property
    def packet(self) -> int:
        """Bytes of one full GSO packet in the queue."""
        return self.segment * self.gso_segments


@dataclass
class Connection:
    """One TCP connection's sender state (windows in segments, times in us)."""

    cwnd: float = INITIAL_WINDOW
    ssthresh: float = math.inf
    cwnd_cnt: float = 0.0  # segments acked toward the next +1 in congestion avoidance
    queued: int = 0  # bytes of its packets in the queue
    in_flight: int = 0  # segments sent and not yet acked
    max_in_flight: int = 0  # the most in flight since the last window's start (slow start)
    unsent: int = 0  # segments waiting to be sent
    sent: int = 0  # segments ever sent
    acked: int = 0  # segments ever acked
    departed: int = 0  # segments that ever left the queue
    last_send: float = -math.inf
    cwr_until: int = -1  # in CWR until ``acked`` passes this (segments sent at entry)
    cwnd_limited: bool = False  # the window stopped the last send
    srtt: float = 0.0
    probe_at: float = math.inf  # when a held connection tries again (its timer or a PING)
    probe_timer: float = math.inf  # a held connection's probe timer
    drops: int = 0
    holds: int = 0
    pace_at: float = math.inf  # BBR whole's pacing timer
    state: np.ndarray | None = None  # BBR whole's (replay/bbr.py); None for the others
    targets: deque = field(default_factory=deque)  # (departed count that ends it, transfer)


@dataclass(frozen=True)
class Transfer:
    """``size`` bytes (as the queue counts them, headers included; rounded up to whole
    segments) handed to connection ``conn`` at ``start`` us."""

    conn: int
    start: float
    size: float


@dataclass
class Outcome:
    """What ``simulate`` measured: each transfer's end (us: its last segment left the queue),
    the packets the queue dropped, and the held
    episodes (a connection left with nothing in flight waited for its probe timer)."""

    ends: list[float]
    drops: int
    holds: int
    connections: list[Connection]


def _rto(q: HostQueue, c: Connection) -> float:
    return (c.srtt if c.srtt > 0 else q.base_rtt) + q.rto_min


def _pacing_rate(q: HostQueue, c: Connection) -> float:
    """Bytes/us Linux sets as the pacing rate (``tcp_update_pacing_rate``)."""
    rtt = c.srtt if c.srtt > 0 else max(q.base_rtt, 1.0)
    ratio = PACING_SS if c.cwnd < c.ssthresh / 2 else PACING_CA
    return ratio * max(c.cwnd, c.in_flight) * q.segment / rtt


def bbr_window(rate: float, base_rtt: float, segment: float, gso_segments: int) -> float:
    """BBR's steady window target (segments): 2 x the BDP at ``rate`` (bytes/us) over
    ``base_rtt`` (us), plus three GSO packets, rounded up to even (``bbr_set_cwnd``)."""
    cwnd = math.ceil(BBR_CWND_GAIN * rate * base_rtt / segment) + BBR_QUANTA * gso_segments
    return float(cwnd + cwnd % 2)


@dataclass(frozen=True)
class HostQueueSpec:
    """``--link hostqueue``'s settings for a prediction: each PS's egress queue,
    ``queue_bytes`` on the wire (None: the lab's default at the rate, ``lab_queue_bytes``),
    and its connections: Reno (``bbr_window_bytes`` None) or BBR with this window target,
    TCP payload bytes (0: ``bbr_window`` at the rate; ``BBR_V1``: Linux's BBR whole,
    ``replay/bbr.py``). ``standing``: two-way traffic on
    shared links (``--link-windows``): ``off``, the one-window rule; ``queue``, every
    connection counted, a direction's standing queue at most that queue; ``unbounded``,
    counted with no limit (a queue nobody knows). ``uplink``: the pushes, too, through a
    drop-tail queue of the same size packet by packet (the switch's toward the PS,
    ``--uplink-queue``). ``share_windows``: on shared links, the windows (bytes; downlink,
    uplink, then each PS link's where known) a transfer's share is drawn in proportion to
    (``SimConfig.share_windows``,
    ``--link-shares windows``); empty: equal shares. ``pings_us``: the intervals the
    workers' HTTP/2 PINGs come apart on the pull connections, and ``ping_answer_us`` the
    PS's answer (us; ``--pings``, ``replay/pings.py``); empty: a held pull waits for its
    probe timer."""

    queue_bytes: float | None = None
    bbr_window_bytes: float | None = None
    standing: str = "off"
    uplink: bool = False
    share_windows: tuple[tuple[float, ...], ...] = ((), ())
    pings_us: tuple[float, ...] = ()
    ping_answer_us: float = 0.0

    def standing_bytes(self, bandwidth_bps: float) -> float:
        """``SimConfig.standing_bytes`` at ``bandwidth_bps``: 0 (``off``), inf
        (``unbounded``) or the queue as the replay counts it."""
        if self.standing == "off":
            return 0.0
        return math.inf if self.standing == "unbounded" else self.payload_queue_bytes(
            bandwidth_bps)

    def wire_queue_bytes(self, bandwidth_bps: float) -> float:
        """The queue at ``bandwidth_bps`` (bits per second), bytes on the wire: the one given,
        else the lab's default at that rate."""
        return lab_queue_bytes(bandwidth_bps) if self.queue_bytes is None else self.queue_bytes

    def payload_queue_bytes(self, bandwidth_bps: float) -> float:
        """The queue at ``bandwidth_bps`` (bits per second) as the replay counts it: TCP
        payload, ``MSS / MSS_WIRE`` of its bytes on the wire."""
        return MSS / MSS_WIRE * self.wire_queue_bytes(bandwidth_bps)

    def bbr_segments(self, bandwidth_bps: float) -> float:
        """The connections' BBR window target at ``bandwidth_bps``, segments; 0 for Reno."""
        if self.bbr_window_bytes is None:
            return 0.0
        if self.bbr_window_bytes == BBR_V1:  # BBR whole: no window target
            return BBR_V1
        if self.bbr_window_bytes > 0:
            return self.bbr_window_bytes / MSS
        return bbr_window(bandwidth_bps / 8e6, BASE_RTT_US, MSS_WIRE, GSO_SEGMENTS)


LAB_HOST_QUEUE = HostQueueSpec()  # the lab's default queue at each rate, Reno connections

# packets each busy connection keeps in its host's queue at the least: TCP Small Queues' floor
# (``tcp_small_queue_check``: max(2 packets, 1 ms of the pacing rate))
TSQ_FLOOR_PACKETS = 2


def fits_every_connection(connections: int, queue_wire_bytes: float) -> bool:
    """Whether a host queue of ``queue_wire_bytes`` (bytes on the wire) takes TCP Small
    Queues' floor of every one of ``connections`` busy connections at once: two full GSO
    packets each. While it does, nothing is dropped on the host and a FIFO serves the
    connections equally (what the replay's shared links assume); where it cannot, the packet
    that finds it full is dropped locally and the shares part (the module's docstring)."""
    return connections * TSQ_FLOOR_PACKETS * MSS_WIRE * GSO_SEGMENTS <= queue_wire_bytes


def bbr_paces_above_the_link(bucket: float, packet: float) -> bool:
    """Whether BBR's bandwidth estimate reads the host's speed, not the link's: its shaper's
    bucket lets two packets or more leave at once, so a delivery-rate sample over them spans
    next to no time."""
    return bucket >= 2 * packet


def _tsq_allows(q: HostQueue, c: Connection) -> bool:
    """``tcp_small_queue_check``: may the connection queue another packet? (Always, where the
    queue is a switch's: ``q.tsq`` False.)"""
    if not q.tsq:
        return True
    if c.in_flight <= q.gso_segments:  # nothing or one packet out: never throttled
        return True
    if q.cc == "bbr-v1":  # a millisecond of its own pacing rate, uncapped
        return _under_a_ms_of(q, c, _bbr().pacing_rate(c.state, q.segment))
    if q.cc == "bbr":  # a millisecond of its pacing rate, uncapped (SK_PACING_NEEDED)
        return bbr_paces_above_the_link(q.bucket, q.packet) or _under_a_ms_of(q, c, q.rate)
    limit = max(2 * q.packet, _pacing_rate(q, c) * 1e6 / (1 << PACING_SHIFT))
    return c.queued < min(limit, q.limit_output)


def _under_a_ms_of(q: HostQueue, c: Connection, rate: float) -> bool:
    """TCP Small Queues for a paced connection: fewer bytes queued than a millisecond
    (2^-10 s) of ``rate`` (bytes/us), at least two packets, uncapped (``SK_PACING_NEEDED``)."""
    return c.queued < max(2 * q.packet, rate * 1e6 / (1 << PACING_SHIFT))


def _restart_after_idle(q: HostQueue, c: Connection, now: float) -> None:
    """``tcp_cwnd_restart``: halve the window per RTO idle, down to the initial window (not
    for BBR, ``tcp_slow_start_after_idle_check``)."""
    if q.cc != "reno":
        return
    rto = _rto(q, c)
    idle = now - c.last_send
    if c.in_flight or not idle > rto or not math.isfinite(c.last_send):
        return
    c.ssthresh = max(c.ssthresh if math.isfinite(c.ssthresh) else 0.0, 0.75 * c.cwnd)
    restart = min(float(q.initial_window), c.cwnd)
    cwnd = c.cwnd
    idle -= rto
    while idle > 0 and cwnd > restart:
        cwnd = math.floor(cwnd / 2)
        idle -= rto
    c.cwnd = max(cwnd, restart)


def _rtt_sample(c: Connection, rtt: float) -> None:
    """RFC 6298's smoothed RTT from one sample (us); its variation term is not kept, since
    the RTO here is srtt + rto_min (Linux's floor on that term)."""
    c.srtt = rtt if c.srtt == 0 else 0.875 * c.srtt + 0.125 * rtt


def _on_ack(c: Connection, segs: int, bbr_target: float = 0.0) -> None:
    """Reno's window growth for ``segs`` segments acked (``tcp_reno_cong_avoid``); with a
    ``bbr_target`` (segments), BBR's: the window plus the segments acked, up to the target."""
    c.acked += segs
    c.in_flight -= segs
    if bbr_target:
        c.cwnd = max(4.0, min(c.cwnd + segs, bbr_target))  # bbr_cwnd_min_target: 4
        return
    if c.cwr_until >= 0:
        if c.acked < c.cwr_until:
            return  # CWR: no growth until the window sent at entry is acked
        c.cwr_until = -1
    limited = c.cwnd < 2 * c.max_in_flight if c.cwnd < c.ssthresh else c.cwnd_limited
    if not limited:
        return
    if c.cwnd < c.ssthresh:  # slow start, up to ssthresh
        grow = min(float(segs), c.ssthresh - c.cwnd)
        c.cwnd += grow
        segs -= int(grow)
        if segs <= 0:
            return
    c.cwnd_cnt += segs  # congestion avoidance: +1 per window acked (tcp_cong_avoid_ai)
    if c.cwnd_cnt >= c.cwnd:
        inc = math.floor(c.cwnd_cnt / c.cwnd)
        c.cwnd_cnt -= inc * c.cwnd
        c.cwnd += inc


def _enter_cwr(c: Connection) -> None:
    """Reno's cut, once per window (``tcp_enter_cwr``; a loss's recovery reaches the same
    ``ssthresh``, here at once): the window halved, no growth until what was sent is acked."""
    if c.cwr_until >= 0:
        return
    c.ssthresh = max(math.floor(c.cwnd / 2), 2.0)
    c.cwnd = c.ssthresh
    c.cwr_until = c.sent
    c.cwnd_cnt = 0.0


def _on_loss(c: Connection, lost: int, cut: bool) -> None:
    """The sender learns that ``lost`` segments it sent were dropped on the way (a switch's
    queue): they leave the window and are sent again; with ``cut`` (Reno), ``_enter_cwr``."""
    c.in_flight -= lost
    c.sent -= lost
    c.unsent += lost
    if cut:
        _enter_cwr(c)


class _Sim:
    """The event loop behind ``simulate``."""

    def __init__(self, q: HostQueue, n: int) -> None:
        self.q = q
        self.conns = [Connection(cwnd=float(q.initial_window)) for _ in range(n)]
        self.full = q.cc == "bbr-v1"  # BBR whole
        self.pings = _pings().ping_row(q.pings, max(1, len(q.pings)))
        for k, c in enumerate(self.conns if self.full else ()):
            c.state = _bbr().state_vector()
            _bbr().init(c.state, 0.0, max(q.base_rtt, 1.0), float(bbr_seed(0, k)))
        # conn, bytes, segs, sent at, BBR whole's rate fields (bbr.on_send; else None)
        self.fifo: deque[tuple[int, int, int, float, np.ndarray | None]] = deque()
        # on their way: conn, segs, sent at, rate fields (the RTT sample runs from the send to
        # the ACK's arrival); a switch's loss notice: conn, -segs lost, ...
        self.acks: deque[tuple[int, int, float, np.ndarray | None]] = deque()
        self.last_ack = -math.inf  # when the newest of them arrives (they keep their order)
        self.backlog = 0
        self.busy_until = -math.inf
        self.tokens, self.tokens_at = q.bucket, 0.0  # the shaper's bucket (bytes) at a time (us)
        self.bbr_target = 0.0 if q.cc != "bbr" else (
            q.bbr_target or bbr_window(q.rate, q.base_rtt, q.segment, q.gso_segments))
        self.events: list[tuple[float, int, int, int, int]] = []  # time, seq, kind, a, b
        self.seq = 0
        self.drops = 0
        self.transfers: list[Transfer] = []
        self.ends: list[float] = []  # each transfer's end (us), nan until it ends

    def outcome(self) -> Outcome:
        """What happened so far."""
        return Outcome(ends=list(self.ends), drops=self.drops,
                       holds=sum(c.holds for c in self.conns), connections=self.conns)

    def push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, a, b))

    def serve(self, now: float, size: float) -> None:
        """The head packet (``size`` bytes) is at the head from ``now``: it leaves once the
        bucket's tokens, refilled at the rate since they were last counted, cover it."""
        q = self.q
        tokens = min(q.bucket, self.tokens + (now - self.tokens_at) * q.rate)
        if tokens >= size:
            self.busy_until, self.tokens = now, tokens - size
        else:
            self.busy_until, self.tokens = now + (size - tokens) / q.rate, 0.0
        self.tokens_at = self.busy_until
        self.push(self.busy_until, 0, 0)

    def try_send(self, k: int, now: float) -> None:
        q, c = self.q, self.conns[k]
        bbr = _bbr() if self.full else None
        _restart_after_idle(q, c, now)
        while c.unsent > 0:
            room = math.floor(c.cwnd) - c.in_flight
            if room <= 0:
                c.cwnd_limited = True
                return
            if self.full and now < c.state[bbr.B_NEXT]:  # paced: its timer, once
                if c.pace_at != c.state[bbr.B_NEXT]:
                    c.pace_at = c.state[bbr.B_NEXT]
                    self.push(c.pace_at, 4, k)
                return
            if not _tsq_allows(q, c):
                c.cwnd_limited = False
                return
            head = next(t for t, _ in c.targets if t > c.sent)  # a packet is one transfer's
            segs = min(q.gso_segments, room, head - c.sent)
            size = segs * q.segment
            dropped = self.backlog + size > q.buffer
            rate = bbr.rate_fields() if bbr is not None else None
            if bbr is not None and not (dropped and q.tsq):  # it leaves the host: BBR's send
                if c.in_flight == 0:
                    c.cwnd = bbr.tx_start(c.state, now, c.cwnd)
                bbr.on_send(c.state, now, float(c.in_flight), float(segs), rate)
                bbr.after_send(c.state, now, float(size), float(q.segment))
            if dropped:  # the bfifo drops it
                self.drops += 1
                c.drops += 1
                if not q.tsq:  # a switch's: lost on the way, learned of a round trip later
                    c.unsent -= segs
                    c.sent += segs
                    c.in_flight += segs
                    c.max_in_flight = max(c.max_in_flight, c.in_flight)
                    c.last_send = now
                    rtt = c.srtt if c.srtt > 0 else q.base_rtt + q.buffer / q.rate
                    self.ack_at(now + rtt, k, -segs, now, rate)
                    continue
                # the host's own: not sent
                if q.cc == "reno":
                    _enter_cwr(c)
                if c.in_flight == 0 and c.probe_at == math.inf:  # held: the probe timer
                    if not now < c.probe_timer < math.inf:  # a new hold, or its timer failed
                        c.holds += 1
                        c.probe_timer = now + _rto(q, c)
                    c.probe_at = min(c.probe_timer,
                                     _pings().next_ping(now, self.pings, _pings().ping_seed(0, k))
                                     + q.ping_answer)
                    self.push(c.probe_at, 2, k)
                return
            c.unsent -= segs
            c.sent += segs
            c.in_flight += segs
            c.max_in_flight = max(c.max_in_flight, c.in_flight)
            c.queued += size
            c.last_send = now
            c.probe_timer = math.inf  # sent: no longer held
            self.backlog += size
            self.fifo.append((k, size, segs, now, rate))
            if len(self.fifo) == 1:
                self.serve(now, size)

    def ack_at(self, t: float, k: int, segs: int, sent_at: float,
               rate: np.ndarray | None) -> None:
        """An ACK of ``segs`` segments sent at ``sent_at`` (negative: a loss notice; ``rate``:
        its packet's BBR rate fields) on its way to connection ``k``, arriving at ``t`` or
        after the ones before it: its RTT sample is from ``sent_at`` to its arrival."""
        t = max(t, self.last_ack)
        self.last_ack = t
        self.acks.append((k, segs, sent_at, rate))
        self.push(t, 1, k)

    def add(self, tr: Transfer) -> int:
        """Hand ``tr`` to its connection at ``tr.start``; returns its index in ``ends``."""
        self.transfers.append(tr)
        self.ends.append(math.nan)
        self.push(tr.start, 3, len(self.transfers) - 1)
        return len(self.transfers) - 1

    def run(self, wait_for: Sequence[int] = ()) -> None:
        """Process events until none is left (every transfer ended, every ACK back), or with
        ``wait_for`` (transfer indices) until those have ended, the rest left pending."""
        q, ends = self.q, self.ends
        bbr = _bbr() if self.full else None
        while self.events:
            if wait_for and all(ends[j] == ends[j] for j in wait_for):  # none is nan
                return
            now, _, kind, a, b = heapq.heappop(self.events)
            if kind == 0:  # the head packet left the queue
                k, size, segs, sent_at, rate = self.fifo.popleft()
                c = self.conns[k]
                self.backlog -= size
                c.queued -= size
                c.departed += segs
                while c.targets and c.departed >= c.targets[0][0]:
                    ends[c.targets.popleft()[1]] = now
                self.ack_at(now + q.base_rtt, k, segs, sent_at, rate)
                if self.fifo:
                    self.serve(now, self.fifo[0][1])
                self.try_send(k, now)  # TSQ: room for this connection again
            elif kind == 1:  # the oldest packet's ACK (ACKs come back in departure order)
                k, segs, sent_at, rate = self.acks.popleft()
                rtt = now - sent_at  # taken as it arrives, at the time ack_at gave it
                c = self.conns[k]
                if segs < 0:  # a loss notice: the lost segments are to be sent again
                    _on_loss(c, -segs, q.cc == "reno")
                    if bbr is not None:
                        bbr.on_loss(c.state, float(-segs), float(c.in_flight), c.cwnd)
                else:
                    _rtt_sample(c, rtt)
                    if bbr is not None:
                        prior = c.in_flight
                        c.acked += segs
                        c.in_flight -= segs
                        c.cwnd = bbr.on_ack(c.state, now, float(segs), rtt, sent_at, rate,
                                            float(prior), float(c.in_flight), c.cwnd,
                                            float(q.segment))
                    else:
                        _on_ack(c, segs, self.bbr_target)
                if c.in_flight == 0:
                    c.max_in_flight = 0
                self.try_send(k, now)
            elif kind == 2:  # a held connection's probe timer
                c = self.conns[a]
                if c.probe_at == now:
                    c.probe_at = math.inf
                    self.try_send(a, now)
            elif kind == 4:  # a paced connection's timer (BBR whole)
                c = self.conns[a]
                if c.pace_at == now:
                    c.pace_at = math.inf
                    self.try_send(a, now)
            else:  # a transfer handed to its connection
                tr = self.transfers[a]
                c = self.conns[tr.conn]
                if bbr is not None:  # the application writes
                    bbr.app_limited_check(c.state, float(c.unsent), float(c.queued),
                                          float(c.in_flight), c.cwnd)
                segs = max(1, math.ceil(tr.size / q.segment))
                c.targets.append((c.sent + c.unsent + segs, a))
                c.unsent += segs
                self.try_send(tr.conn, now)


def simulate(q: HostQueue, transfers: list[Transfer], connections: int | None = None
             ) -> Outcome:
    """Run ``transfers`` through queue ``q``, each on its connection (0..connections-1; a
    connection's transfers go in order, one after another), and return when each ended.

    Connections start with the initial window and no RTT estimate; their state carries over
    from one transfer to the next (restart after idle applies). Deterministic: ties go to the
    event queued first."""
    n = connections if connections is not None else 1 + max((t.conn for t in transfers),
                                                            default=-1)
    for t in transfers:
        if not 0 <= t.conn < n:
            raise ValueError(f"transfer on connection {t.conn}: expected 0..{n - 1}")
        if not (t.size > 0 and math.isfinite(t.start)):
            raise ValueError(f"transfer of {t.size!r} bytes at {t.start!r} us: expected "
                             "a positive size and a finite start")
    sim = _Sim(q, n)
    for t in transfers:
        sim.add(t)
    sim.run()
    return sim.outcome()
