"""The replay kernel's host-queue links (``link_fifo`` 3): ``replay/hostqueue.py``'s model,
compiled, on the kernel's arrays.

A host-queue link is its sender's own drop-tail queue; each lane is one TCP connection
through it, and a transfer on the link is handed to the lane's connection whole. The rules are
``hostqueue.py``'s (its docstring gives Linux's source for each), step for step, so that module
is this one's oracle (tests/test_hqkernel.py). The shaper's token bucket is the link's
``link_burst`` (its tokens ``ltok[link]``, counted at ``hx[x, _XTK]``), and a link whose
``link_bbr`` is above 0 runs BBR with that window target (segments), and one whose ``link_bbr``
is ``hostqueue.BBR_V1`` runs Linux's BBR whole (``replay/bbr.py``: pacing, its bandwidth
filter, gain cycle, PROBE_RTT, long-term policer estimate and recovery; its state in the
connection's row after ``_HB``, its packets' rate fields in the rings). What only the kernel
has:

- sizes count TCP payload, as the kernel's links do (a segment is an MSS, a queue's size
  its bytes x GOODPUT);
- a packet carries segments of one transfer (the kernel's transfers are separate tasks; a
  transfer's slot is freed once its last segment is *sent*, so the lane's next transfer joins
  the connection while the last one drains, as gRPC's writes fill the socket);
- an ACK comes back after the link's round trip plus the standing queue of the other
  direction (``link_rev``): ``min(flows there x their window, this queue's size)`` at that
  direction's rate, the lab's two queues being of one size; where the other direction is a
  host-queue link too (``--uplink-queue``), the bytes its queue holds at the departure.
  ACKs keep their order;
- a host-queue link whose ``link_tsq`` is 0 is a switch's queue, its lanes' connections
  from hosts of their own: no TCP Small Queues (each sender's own NIC is idle and fast), and
  a packet the queue drops is lost on the way: its segments stay in flight until a loss
  notice on the ACK ring, a round trip later, puts them back to be sent (``hq_ack``).

State (``KState`` fields, ``x`` a host-queue link's index ``lhq[link]``):
``hc[x, lane, :]`` the connection (the ``_H*`` columns); ``hq[x, k, :]`` the queue, a ring
(lane, bytes, segments, sent at us, transfer's seq); ``ha[x, k, :]`` the ACKs on their way, a
ring (lane, segments, sent at us, transfer's seq; negative segments: a switch's loss
notice); ``hx[x, :]`` each ring's head and count, the queue's
bytes, the last ACK's time and when the tokens were counted (the ``_X*`` columns); ``hfree``
scratch: the slots whose transfer just sent its last segment. A transfer on the link is a flow
entry (``fw[link, k]``: lane, task, slot, segments not yet departed, slot freed; ``ft``:
segments not yet sent; ``fs``: its seq), unordered. The functions take these arrays one by
one, never the kernel's state tuple: passing a tuple counts a reference to every array in
it, twice per call, and on a packet-by-packet link that made the loop 8-15 times slower
(scripts/bench_hostqueue.py).
"""

from __future__ import annotations

import math

import numpy as np

from gradwire.jit import drop_stale_cache, njit
from gradwire.replay import bbr as bbrmod
from gradwire.replay import hostqueue
from gradwire.replay import pings as pingmod
from gradwire.replay.bbr import B_NEXT, NB
from gradwire.replay.hostqueue import (
    GSO_SEGMENTS,
    INITIAL_WINDOW,
    LIMIT_OUTPUT,
    MSS,
    PACING_CA,
    PACING_SHIFT,
    PACING_SS,
    RTO_MIN_US,
)
from gradwire.replay.pings import next_ping, ping_seed

# its functions freeze hostqueue's constants (gradwire.jit.drop_stale_cache)
drop_stale_cache(__file__, hostqueue.__file__, bbrmod.__file__, pingmod.__file__)

__all__ = ["NFW", "NHA", "NHC", "NHQ", "NHX", "PACE_AT", "PROBE_AT", "QUEUED_BYTES", "UNSENT",
           "ack_ring", "app_limited", "connection_table", "connection_totals", "hq_ack",
           "hq_depart", "hq_send", "init_connections", "packet_ring"]

# hc columns: window, ssthresh, segments acked toward +1, bytes queued, in flight, most in
# flight since the window's start, unsent, sent, acked, last send (us), in CWR until this many
# acked (-1: not), the window stopped the last send (1/0), srtt (us), probe timer (us, inf:
# none: when a held connection tries again, the earlier of its probe timer and its worker's
# next PING answered, replay/pings.py), drops, held episodes, the pacing timer (us, inf: none;
# BBR whole), the held connection's probe timer itself (us, inf: none); then BBR's state
# (replay/bbr.py, NB columns from _HB). (A transfer's segments left to depart are its flow
# entry's.)
(_HCW, _HSST, _HCNT, _HQD, _HIF, _HMIF, _HUNS, _HSENT, _HACKD, _HLSND, _HCWR, _HCLIM,
 _HSRTT, _HPRB, _HDROP, _HHOLD, _HPACE, _HPTO) = range(18)
_HB = 18
NHC = _HB + NB
UNSENT, PROBE_AT, PACE_AT = _HUNS, _HPRB, _HPACE  # the columns the kernel's loop touches
# The kernel's links count TCP payload (their rates are goodput, replay/predict.py GOODPUT), so
# a segment here is an MSS and a queue's size is its bytes x GOODPUT: every time comes out as
# on the wire, where a segment takes MSS_WIRE bytes at the wire's rate.
_SEG = MSS
_PACKET = _SEG * GSO_SEGMENTS


def init_connections(links: int, lanes: int, rtts: np.ndarray | None = None,
                     bbrs: np.ndarray | None = None) -> np.ndarray:
    """``hc`` for ``links`` host-queue links of ``lanes`` fresh connections each; on each link
    whose ``bbrs`` (``link_bbr``) is ``hostqueue.BBR_V1``, BBR whole's state, its first RTT
    estimate the link's empty round trip of ``rtts`` (us)."""
    hc = np.zeros((max(1, links), lanes, NHC), dtype=np.float64)
    hc[:, :, _HCW] = INITIAL_WINDOW
    hc[:, :, _HSST] = np.inf
    hc[:, :, _HCWR] = -1.0
    hc[:, :, _HLSND] = -np.inf
    hc[:, :, _HPRB] = np.inf
    hc[:, :, _HPACE] = np.inf
    hc[:, :, _HPTO] = np.inf
    for x in range(len(bbrs) if bbrs is not None and rtts is not None else 0):
        if bbrs[x] != hostqueue.BBR_V1:
            continue
        for w in range(lanes):
            bbrmod.init(hc[x, w, _HB:], 0.0, max(float(rtts[x]), 1.0),
                        float(hostqueue.bbr_seed(x, w)))
    return hc


def packet_ring(buffer: float) -> int:
    """Room for the packets a queue of ``buffer`` bytes can hold (one segment each at least)."""
    return int(math.ceil(buffer / _SEG)) + 2


def ack_ring(rtt: float, rate: float, buffer: float, reverse_rate: float,
             burst: float = 0.0) -> int:
    """Room for the ACKs on their way: departures, at most one per segment's time at ``rate``
    (bytes/us) and a shaper's bucket of ``burst`` bytes at once, within the longest ACK delay
    (``rtt`` plus ``buffer``, the most bytes an ACK waits behind, at ``reverse_rate``)."""
    return int(math.ceil(((rtt + buffer / reverse_rate) * rate + burst) / _SEG)) + 2


@njit(cache=True, inline='always')
def _rto(c, base):
    return (c[_HSRTT] if c[_HSRTT] > 0.0 else base) + RTO_MIN_US


@njit(cache=True, inline='always')
def _restart_after_idle(c, base, now):
    rto = _rto(c, base)
    idle = now - c[_HLSND]
    if c[_HIF] > 0.0 or not idle > rto or not np.isfinite(c[_HLSND]):
        return
    sst = c[_HSST] if np.isfinite(c[_HSST]) else 0.0
    c[_HSST] = max(sst, 0.75 * c[_HCW])
    restart = min(float(INITIAL_WINDOW), c[_HCW])
    cwnd = c[_HCW]
    idle -= rto
    while idle > 0 and cwnd > restart:
        cwnd = math.floor(cwnd / 2)
        idle -= rto
    c[_HCW] = max(cwnd, restart)


@njit(cache=True, inline='always')
def _enter_cwr(c):
    """Reno's cut, once per window (``hostqueue._enter_cwr``)."""
    if c[_HCWR] >= 0.0:
        return
    c[_HSST] = max(math.floor(c[_HCW] / 2), 2.0)
    c[_HCW] = c[_HSST]
    c[_HCWR] = c[_HSENT]
    c[_HCNT] = 0.0


@njit(cache=True, inline='always')
def _tsq_allows(c, base):
    if c[_HIF] <= GSO_SEGMENTS:
        return True
    rtt = c[_HSRTT] if c[_HSRTT] > 0.0 else max(base, 1.0)
    ratio = PACING_SS if c[_HCW] < c[_HSST] / 2 else PACING_CA
    pacing = ratio * max(c[_HCW], c[_HIF]) * _SEG / rtt
    limit = max(2.0 * _PACKET, pacing * 1e6 / (1 << PACING_SHIFT))
    return c[_HQD] < min(limit, float(LIMIT_OUTPUT))


@njit(cache=True, inline='always')
def _under_a_ms_of(c, rate):
    """TCP Small Queues for a paced connection (``SK_PACING_NEEDED``): fewer bytes queued
    than a millisecond (2^-10 s) of ``rate`` (bytes/us), at least two packets, uncapped."""
    return c[_HQD] < max(2.0 * _PACKET, rate * 1e6 / (1 << PACING_SHIFT))


@njit(cache=True, inline='always')
def _paced_tsq_allows(c):
    """TCP Small Queues for BBR whole: a millisecond of its own pacing rate; never throttled
    while at most one packet is out."""
    return c[_HIF] <= GSO_SEGMENTS or _under_a_ms_of(c, bbrmod.pacing_rate(c[_HB:], _SEG))


@njit(cache=True, inline='always')
def app_limited(hc, x, w):
    """BBR whole: lane ``w``'s application writes to its connection on host queue ``x``
    (``bbr.app_limited_check`` before the new segments count)."""
    c = hc[x, w]
    bbrmod.app_limited_check(c[_HB:], c[_HUNS], c[_HQD], c[_HIF], c[_HCW])


@njit(cache=True, inline='always')
def _bbr_tsq_allows(c, burst, cap):
    """TCP Small Queues for BBR (``hostqueue._tsq_allows``): a millisecond of its pacing rate,
    uncapped; none where the shaper's bucket passes two packets at once (its estimate reads
    the host's speed), else the link's rate."""
    if c[_HIF] <= GSO_SEGMENTS or burst >= 2.0 * _PACKET:
        return True
    return _under_a_ms_of(c, cap)


# hq columns (a packet in the queue): lane, bytes, segments, sent at (us), the transfer's seq,
# then BBR's rate fields (bbr.on_send: delivered, its time, the send phase's start, app-limited)
NHQ = 9
# ha columns: lane, segments (negative: a loss notice), the packet's send time (us: its RTT
# sample runs from there to the ACK's arrival), the transfer's seq, BBR's rate fields as the
# packet's
NHA = 8
# fw columns (the kernel's flow entries): lane, task, slot, segments (a host queue's) or bytes
# not yet departed, whether a host queue's transfer has freed its slot (1.0)
NFW = 5
# hx columns: the queue's head (ring index), its packets, its bytes; the ACK ring's head, its
# ACKs, when the last one arrives (us); when the queue's tokens (ltok[link]) were counted (us)
_XQH, _XQN, _XQB, _XAH, _XAN, _XAL, _XTK = range(7)
NHX = 7
QUEUED_BYTES = _XQB  # the column the kernel reads for the ACKs that wait behind the queue


@njit(cache=True, inline='always')
def _serve(ltok, hx, li, x, now, size, cap, burst):
    """The head packet (``size`` bytes) of host-queue link ``li`` (index ``x``; rate ``cap``
    bytes/us, bucket ``burst`` bytes) is at the head from ``now``: when it leaves, once the
    shaper's tokens cover it (``hostqueue._Sim.serve``)."""
    tok = ltok[li] + (now - hx[x, _XTK]) * cap
    if tok > burst:
        tok = burst
    if tok >= size:
        at = now
        ltok[li] = tok - size
    else:
        at = now + (size - tok) / cap
        ltok[li] = 0.0
    hx[x, _XTK] = at
    return at


@njit(cache=True, inline='always')
def hq_send(hc, hq, ha, hx, fn, fw, ft, fs, ltok, hfree, li, x, w, now, base, buf, bbr, cap,
            burst, tsq, pings, answer):
    """Lane ``w``'s connection on host-queue link ``li`` (index ``x``: its round trip
    ``base`` us, queue ``buf`` bytes, BBR's window target ``bbr`` segments, ``BBR_V1`` for
    BBR whole or 0 for Reno, rate ``cap`` bytes/us, bucket ``burst`` bytes) sends what its
    window, its pacing (BBR whole), TCP Small Queues (``tsq`` > 0: the queue is on the
    senders' own host; 0: on a switch, where each sender's TSQ limits only its own idle NIC)
    and the queue let it (``hostqueue._Sim.try_send``). Held, it tries again at the earlier
    of its probe timer and its worker's next PING (``pings``: their intervals, us,
    ``replay/pings.py``) plus the PS's ``answer`` (us). Returns (slots freed into
    ``hfree``, the time of a departure to schedule (-1: none), a probe or pacing timer to
    schedule (-1: none), the loss notices put on the ACK ring ``ha`` (a switch's drops) and
    when they arrive). The kernel's arrays come one by one, not in its state tuple (the
    module's docstring says why)."""
    c = hc[x, w]
    nfree, dep, probe, nmark, mark_at = 0, -1.0, -1.0, 0, -1.0
    full = bbr < 0.0  # BBR whole
    if bbr == 0.0:  # BBR does not restart after idle
        _restart_after_idle(c, base, now)
    ring = hq.shape[1]
    while c[_HUNS] > 0.0:
        room = math.floor(c[_HCW]) - c[_HIF]
        if room <= 0:
            c[_HCLIM] = 1.0
            break
        if full and now < c[_HB + B_NEXT]:  # paced: its timer, once
            if c[_HPACE] != c[_HB + B_NEXT]:
                c[_HPACE] = c[_HB + B_NEXT]
                probe = c[_HPACE]
            break
        if tsq > 0.0 and not (_paced_tsq_allows(c) if full else _bbr_tsq_allows(c, burst, cap)
                              if bbr > 0.0 else _tsq_allows(c, base)):
            c[_HCLIM] = 0.0
            break
        k = -1  # the lane's oldest transfer with segments to send
        for j in range(fn[li]):
            if fw[li, j, 0] == w and ft[li, j] > 0.0 and (k < 0 or fs[li, j] < fs[li, k]):
                k = j
        segs = min(float(GSO_SEGMENTS), room, ft[li, k])
        size = segs * _SEG
        n = int(hx[x, _XQN])
        t = (int(hx[x, _XQH]) + n) % ring  # the tail slot (``packet_ring`` keeps 2 spare):
        # a dropped packet's rate fields are written there and left
        dropped = hx[x, _XQB] + size > buf
        if full and not (dropped and tsq > 0.0):  # it leaves the host: BBR's send
            if c[_HIF] == 0.0:
                c[_HCW] = bbrmod.tx_start(c[_HB:], now, c[_HCW])
            bbrmod.on_send(c[_HB:], now, c[_HIF], segs, hq[x, t, 5:])
            bbrmod.after_send(c[_HB:], now, size, _SEG)
        if dropped:  # the queue drops it
            c[_HDROP] += 1.0
            if tsq == 0.0:  # a switch's: lost on the way, learned of a round trip later
                ft[li, k] -= segs
                if ft[li, k] <= 0.0 and fw[li, k, 4] == 0.0:  # its slot, once
                    hfree[nfree] = int(fw[li, k, 2])
                    nfree += 1
                    fw[li, k, 4] = 1.0
                c[_HUNS] -= segs
                c[_HSENT] += segs
                c[_HIF] += segs
                c[_HMIF] = max(c[_HMIF], c[_HIF])
                c[_HLSND] = now
                rtt = c[_HSRTT] if c[_HSRTT] > 0.0 else base + buf / cap
                mark_at = _ack_entry(ha, hx, x, now + rtt, w, -segs, now, fs[li, k],
                                     hq[x, t, 5:])
                nmark += 1
                continue
            # the host's own: not sent
            if bbr == 0.0:
                _enter_cwr(c)
            if c[_HIF] == 0.0 and not np.isfinite(c[_HPRB]):  # held: the probe timer
                if not now < c[_HPTO] < np.inf:  # a new hold, or its timer's try failed
                    c[_HHOLD] += 1.0
                    c[_HPTO] = now + _rto(c, base)
                c[_HPRB] = min(c[_HPTO], next_ping(now, pings, ping_seed(x, w)) + answer)
                probe = c[_HPRB]
            break
        ft[li, k] -= segs
        if ft[li, k] <= 0.0 and fw[li, k, 4] == 0.0:  # its last segment is sent: the slot
            hfree[nfree] = int(fw[li, k, 2])  # takes the next transfer (once: a switch's
            nfree += 1  # lost segments, sent again, end it a second time)
            fw[li, k, 4] = 1.0
        c[_HUNS] -= segs
        c[_HSENT] += segs
        c[_HIF] += segs
        c[_HMIF] = max(c[_HMIF], c[_HIF])
        c[_HQD] += size
        c[_HLSND] = now
        c[_HPTO] = np.inf  # sent: no longer held
        hq[x, t, 0], hq[x, t, 1], hq[x, t, 2] = w, size, segs
        hq[x, t, 3], hq[x, t, 4] = now, fs[li, k]
        hx[x, _XQN] = n + 1
        hx[x, _XQB] += size
        if n == 0:
            dep = _serve(ltok, hx, li, x, now, size, cap, burst)
    return nfree, dep, probe, nmark, mark_at


@njit(cache=True, inline='always')
def _ack_entry(ha, hx, x, at, w, segs, sent, cseq, rate):
    """Put an ACK (``segs`` segments of lane ``w``'s transfer ``cseq``, sent at ``sent`` us;
    negative ``segs``: a loss notice; ``rate``: its packet's BBR rate fields) on host queue
    ``x``'s ring, arriving at ``at`` or after the ones before it, its RTT sample from
    ``sent`` to then (``hostqueue._Sim.ack_at``; ``hq_ack`` takes it as the ACK arrives);
    returns when it arrives."""
    if at < hx[x, _XAL]:
        at = hx[x, _XAL]
    hx[x, _XAL] = at
    t = (int(hx[x, _XAH]) + int(hx[x, _XAN])) % ha.shape[1]
    ha[x, t, 0], ha[x, t, 1], ha[x, t, 2], ha[x, t, 3] = w, segs, sent, cseq
    ha[x, t, 4], ha[x, t, 5], ha[x, t, 6], ha[x, t, 7] = rate[0], rate[1], rate[2], rate[3]
    hx[x, _XAN] += 1.0
    return at


@njit(cache=True, inline='always')
def hq_depart(hc, hq, ha, hx, fn, fw, fs, ltok, li, x, now, delay, cap, burst):
    """The head packet of host-queue link ``li`` (index ``x``; rate ``cap``, bucket
    ``burst``) leaves; its ACK arrives ``delay`` us later (the round trip and the other
    direction's standing queue), and after the ACKs before it. Returns (its lane, the flow
    entry whose transfer it ended or -1 (still in ``fw``: the caller removes it), when its
    ACK arrives, when the next packet leaves (-1: none))."""
    h = int(hx[x, _XQH])
    w = int(hq[x, h, 0])
    size, segs, sent, cseq = hq[x, h, 1], hq[x, h, 2], hq[x, h, 3], hq[x, h, 4]
    hx[x, _XQH] = (h + 1) % hq.shape[1]
    hx[x, _XQN] -= 1.0
    hx[x, _XQB] -= size
    hc[x, w, _HQD] -= size
    at = _ack_entry(ha, hx, x, now + delay, w, segs, sent, cseq, hq[x, h, 5:])
    nxt = -1.0
    if hx[x, _XQN] > 0.0:
        nxt = _serve(ltok, hx, li, x, now, hq[x, int(hx[x, _XQH]), 1], cap, burst)
    done = -1
    for j in range(fn[li]):
        if fs[li, j] == cseq:
            fw[li, j, 3] -= segs
            if fw[li, j, 3] <= 0.0:
                done = j
            break
    return w, done, at, nxt


@njit(cache=True, inline='always')
def hq_ack(hc, ha, hx, fn, ft, fs, li, x, bbr, now):
    """The oldest ACK on host-queue ``x``'s (link ``li``'s) way back arrives at ``now`` (BBR's
    window target ``bbr`` segments, ``BBR_V1`` for BBR whole, 0 for Reno): the RTT sample,
    Reno's or BBR's growth (``hostqueue._on_ack``, ``bbr.on_ack``); a loss notice puts its
    segments back to be sent, in their transfer (``hostqueue._on_loss``, ``bbr.on_loss``).
    Returns its lane."""
    h = int(hx[x, _XAH])
    w = int(ha[x, h, 0])
    segs, sent, cseq = ha[x, h, 1], ha[x, h, 2], ha[x, h, 3]
    hx[x, _XAH] = (h + 1) % ha.shape[1]
    hx[x, _XAN] -= 1.0
    c = hc[x, w]
    if segs < 0.0:  # a switch's loss notice
        lost = -segs
        c[_HIF] -= lost
        c[_HSENT] -= lost
        c[_HUNS] += lost
        for j in range(fn[li]):
            if fs[li, j] == cseq:
                ft[li, j] += lost
                break
        if bbr == 0.0:  # Reno halves its window
            _enter_cwr(c)
        elif bbr < 0.0:
            bbrmod.on_loss(c[_HB:], lost, c[_HIF], c[_HCW])
        if c[_HIF] == 0.0:
            c[_HMIF] = 0.0
        return w
    rtt = now - sent  # the ACK is taken as it arrives, at the time _ack_entry gave it
    c[_HSRTT] = rtt if c[_HSRTT] == 0.0 else 0.875 * c[_HSRTT] + 0.125 * rtt
    c[_HACKD] += segs
    prior = c[_HIF]
    c[_HIF] -= segs
    grow = True  # Reno's growth
    if bbr < 0.0:  # BBR whole
        c[_HCW] = bbrmod.on_ack(c[_HB:], now, segs, rtt, sent, ha[x, h, 4:8], prior,
                                c[_HIF], c[_HCW], _SEG)
        grow = False
    elif bbr > 0.0:  # BBR: the window plus what was acked, up to the target (at least 4)
        c[_HCW] = max(4.0, min(c[_HCW] + segs, bbr))
        grow = False
    elif c[_HCWR] >= 0.0:
        if c[_HACKD] < c[_HCWR]:
            grow = False
        else:
            c[_HCWR] = -1.0
    if grow:
        limited = c[_HCW] < 2 * c[_HMIF] if c[_HCW] < c[_HSST] else c[_HCLIM] > 0.0
        if limited:
            if c[_HCW] < c[_HSST]:
                g = min(segs, c[_HSST] - c[_HCW])
                c[_HCW] += g
                segs -= math.floor(g)
            if segs > 0:
                c[_HCNT] += segs
                if c[_HCNT] >= c[_HCW]:
                    inc = math.floor(c[_HCNT] / c[_HCW])
                    c[_HCNT] -= inc * c[_HCW]
                    c[_HCW] += inc
    if c[_HIF] == 0.0:
        c[_HMIF] = 0.0
    return w


def connection_table(hc: np.ndarray) -> np.ndarray:
    """Each host-queue link's connections (link, lane) as window and ssthresh (segments;
    ssthresh inf until the first cut), smoothed RTT (us), drops and held episodes so far."""
    return hc[:, :, [_HCW, _HSST, _HSRTT, _HDROP, _HHOLD]]


def connection_totals(hc: np.ndarray) -> tuple[int, int]:
    """Drops and held episodes over every host-queue connection."""
    return int(hc[:, :, _HDROP].sum()), int(hc[:, :, _HHOLD].sum())
