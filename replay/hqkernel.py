"""The replay kernel's host-queue links (``link_fifo`` 3): ``replay/hostqueue.py``'s model,
compiled, on the kernel's arrays.

A host-queue link is its sender's own drop-tail queue; each lane is one TCP connection
through it, and a transfer on the link is handed to the lane's connection whole. The rules are
``hostqueue.py``'s (its docstring gives Linux's source for each), step for step, so that module
is this one's oracle (tests/test_hqkernel.py). The shaper's token bucket is the link's
``link_burst`` (its tokens ``ltok[link]``, counted at ``htk[x]``), and a link whose
``link_bbr`` is above 0 runs BBR with that window target (segments). What only the kernel has:

- sizes count TCP payload, as the kernel's links do (a segment is an MSS, a queue's size
  its bytes x GOODPUT);
- a packet carries segments of one transfer (the kernel's transfers are separate tasks; a
  transfer's slot is freed once its last segment is *sent*, so the lane's next transfer joins
  the connection while the last one drains, as gRPC's writes fill the socket);
- an ACK comes back after the link's round trip plus the standing queue of the other
  direction (``link_rev``): ``min(flows there x their window, this queue's size)`` at that
  direction's rate, the lab's two queues being of one size. ACKs keep their order.

State (``KState`` fields, ``x`` a host-queue link's index ``lhq[link]``):
``hc[x, lane, :]`` the connection (the ``_H*`` columns); ``hq[x, k, :]`` the queue, a ring
(lane, bytes, segments, sent at us, transfer's seq) from ``hqh[x]``, ``hqn[x]`` packets,
``hqb[x]`` bytes; ``ha[x, k, :]`` the ACKs on their way, a ring (lane, segments, RTT sample us)
from ``hah[x]``, ``han[x]`` of them, ``hal[x]`` the last one's time; ``hfree`` scratch: the
slots whose transfer just sent its last segment. A transfer on the link is a flow entry
(``fw[link, k]``: lane, task, slot, segments not yet departed; ``ft``: segments not yet sent;
``fs``: its seq), unordered.
"""

from __future__ import annotations

import math

import numpy as np

from gradwire.jit import njit
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

__all__ = ["NHC", "PROBE_AT", "UNSENT", "ack_ring", "connection_table", "connection_totals",
           "hq_ack", "hq_depart", "hq_send", "init_connections", "packet_ring"]

# hc columns: window, ssthresh, segments acked toward +1, bytes queued, in flight, most in
# flight since the window's start, unsent, sent, acked, last send (us), in CWR until this many
# acked (-1: not), the window stopped the last send (1/0), srtt (us), probe timer (us, inf:
# none), drops, held episodes. (A transfer's segments left to depart are its flow entry's.)
(_HCW, _HSST, _HCNT, _HQD, _HIF, _HMIF, _HUNS, _HSENT, _HACKD, _HLSND, _HCWR, _HCLIM,
 _HSRTT, _HPRB, _HDROP, _HHOLD) = range(16)
NHC = 16
UNSENT, PROBE_AT = _HUNS, _HPRB  # the columns the kernel's loop touches itself
# The kernel's links count TCP payload (their rates are goodput, replay/predict.py GOODPUT), so
# a segment here is an MSS and a queue's size is its bytes x GOODPUT: every time comes out as
# on the wire, where a segment takes MSS_WIRE bytes at the wire's rate.
_SEG = MSS
_PACKET = _SEG * GSO_SEGMENTS


def init_connections(links: int, lanes: int) -> np.ndarray:
    """``hc`` for ``links`` host-queue links of ``lanes`` fresh connections each."""
    hc = np.zeros((max(1, links), lanes, NHC), dtype=np.float64)
    hc[:, :, _HCW] = INITIAL_WINDOW
    hc[:, :, _HSST] = np.inf
    hc[:, :, _HCWR] = -1.0
    hc[:, :, _HLSND] = -np.inf
    hc[:, :, _HPRB] = np.inf
    return hc


def packet_ring(buffer: float) -> int:
    """Room for the packets a queue of ``buffer`` bytes can hold (one segment each at least)."""
    return int(math.ceil(buffer / _SEG)) + 2


def ack_ring(rtt: float, rate: float, buffer: float, reverse_rate: float) -> int:
    """Room for the ACKs on their way: departures, at most one per segment's time at ``rate``
    (bytes/us), within the longest ACK delay (``rtt`` plus ``buffer`` at ``reverse_rate``)."""
    return int(math.ceil((rtt + buffer / reverse_rate) * rate / _SEG)) + 2


@njit(cache=True)
def _rto(c, base):
    return (c[_HSRTT] if c[_HSRTT] > 0.0 else base) + RTO_MIN_US


@njit(cache=True)
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


@njit(cache=True)
def _tsq_allows(c, base):
    if c[_HIF] <= GSO_SEGMENTS:
        return True
    rtt = c[_HSRTT] if c[_HSRTT] > 0.0 else max(base, 1.0)
    ratio = PACING_SS if c[_HCW] < c[_HSST] / 2 else PACING_CA
    pacing = ratio * max(c[_HCW], c[_HIF]) * _SEG / rtt
    limit = max(2.0 * _PACKET, pacing * 1e6 / (1 << PACING_SHIFT))
    return c[_HQD] < min(limit, float(LIMIT_OUTPUT))


@njit(cache=True)
def _bbr_tsq_allows(c, burst, cap):
    """TCP Small Queues for BBR (``hostqueue._tsq_allows``): a millisecond of its pacing rate,
    uncapped; none where the shaper's bucket passes two packets at once (its estimate reads
    the host's speed), else the link's rate."""
    if c[_HIF] <= GSO_SEGMENTS or burst >= 2.0 * _PACKET:
        return True
    return c[_HQD] < max(2.0 * _PACKET, cap * 1e6 / (1 << PACING_SHIFT))


@njit(cache=True)
def _serve(S, R, li, x, now, size):
    """The head packet (``size`` bytes) of host-queue link ``li`` (index ``x``) is at the head
    from ``now``: when it leaves, once the shaper's tokens cover it (``hostqueue._Sim.serve``)."""
    cap = R.link_cap[li]
    tok = S.ltok[li] + (now - S.htk[x]) * cap
    if tok > R.link_burst[li]:
        tok = R.link_burst[li]
    if tok >= size:
        at = now
        S.ltok[li] = tok - size
    else:
        at = now + (size - tok) / cap
        S.ltok[li] = 0.0
    S.htk[x] = at
    return at


@njit(cache=True)
def hq_send(S, R, li, w, now):
    """Lane ``w``'s connection on host-queue link ``li`` sends what its window, TCP Small
    Queues and the queue let it (``hostqueue._Sim.try_send``). Returns (slots freed into
    ``S.hfree``, the time of a departure to schedule (-1: none), a probe timer to schedule
    (-1: none))."""
    x = S.lhq[li]
    c = S.hc[x, w]
    base, buf, bbr = R.link_rtt[li], R.link_buf[li], R.link_bbr[li]
    nfree, dep, probe = 0, -1.0, -1.0
    if bbr == 0.0:  # BBR does not restart after idle
        _restart_after_idle(c, base, now)
    ring = S.hq.shape[1]
    while c[_HUNS] > 0.0:
        room = math.floor(c[_HCW]) - c[_HIF]
        if room <= 0:
            c[_HCLIM] = 1.0
            break
        if not (_bbr_tsq_allows(c, R.link_burst[li], R.link_cap[li]) if bbr > 0.0
                else _tsq_allows(c, base)):
            c[_HCLIM] = 0.0
            break
        k = -1  # the lane's oldest transfer with segments to send
        for j in range(S.fn[li]):
            if S.fw[li, j, 0] == w and S.ft[li, j] > 0.0 and (k < 0 or S.fs[li, j] < S.fs[li, k]):
                k = j
        segs = min(float(GSO_SEGMENTS), room, S.ft[li, k])
        size = segs * _SEG
        if S.hqb[x] + size > buf:  # the queue drops it: not sent
            c[_HDROP] += 1.0
            if c[_HCWR] < 0.0 and bbr == 0.0:  # tcp_enter_cwr, once per window
                c[_HSST] = max(math.floor(c[_HCW] / 2), 2.0)
                c[_HCW] = c[_HSST]
                c[_HCWR] = c[_HSENT]
                c[_HCNT] = 0.0
            if c[_HIF] == 0.0 and not np.isfinite(c[_HPRB]):  # held: the probe timer
                c[_HHOLD] += 1.0
                c[_HPRB] = now + _rto(c, base)
                probe = c[_HPRB]
            break
        S.ft[li, k] -= segs
        if S.ft[li, k] <= 0.0:  # its last segment is sent: the slot takes the next transfer
            S.hfree[nfree] = int(S.fw[li, k, 2])
            nfree += 1
        c[_HUNS] -= segs
        c[_HSENT] += segs
        c[_HIF] += segs
        c[_HMIF] = max(c[_HMIF], c[_HIF])
        c[_HQD] += size
        c[_HLSND] = now
        t = (S.hqh[x] + S.hqn[x]) % ring
        S.hq[x, t, 0], S.hq[x, t, 1], S.hq[x, t, 2] = w, size, segs
        S.hq[x, t, 3], S.hq[x, t, 4] = now, S.fs[li, k]
        S.hqn[x] += 1
        S.hqb[x] += size
        if S.hqn[x] == 1:
            dep = _serve(S, R, li, x, now, size)
    return nfree, dep, probe


@njit(cache=True)
def hq_depart(S, R, li, now):
    """The head packet of host-queue link ``li`` leaves. Returns (its lane, the flow entry
    whose transfer it ended or -1 (still in ``fw``: the caller removes it), when its ACK
    arrives, when the next packet leaves (-1: none))."""
    x = S.lhq[li]
    h = S.hqh[x]
    w = int(S.hq[x, h, 0])
    size, segs, sent, cseq = S.hq[x, h, 1], S.hq[x, h, 2], S.hq[x, h, 3], S.hq[x, h, 4]
    S.hqh[x] = (h + 1) % S.hq.shape[1]
    S.hqn[x] -= 1
    S.hqb[x] -= size
    c = S.hc[x, w]
    c[_HQD] -= size
    delay = R.link_rtt[li]
    rv = R.link_rev[li]
    if rv >= 0 and S.ln[rv] > 0:  # the ACK waits behind the other direction's queue
        qb = S.ln[rv] * R.link_win[rv]
        if qb > R.link_buf[li]:
            qb = R.link_buf[li]
        delay += qb / R.link_cap[rv]
    at = now + delay
    if at < S.hal[x]:
        at = S.hal[x]
    S.hal[x] = at
    t = (S.hah[x] + S.han[x]) % S.ha.shape[1]
    S.ha[x, t, 0], S.ha[x, t, 1], S.ha[x, t, 2] = w, segs, at - sent
    S.han[x] += 1
    nxt = -1.0
    if S.hqn[x]:
        nxt = _serve(S, R, li, x, now, S.hq[x, S.hqh[x], 1])
    done = -1
    for j in range(S.fn[li]):
        if S.fs[li, j] == cseq:
            S.fw[li, j, 3] -= segs
            if S.fw[li, j, 3] <= 0.0:
                done = j
            break
    return w, done, at, nxt


@njit(cache=True)
def hq_ack(S, R, li):
    """The oldest ACK on host-queue link ``li``'s way back arrives: the RTT sample, Reno's
    or BBR's growth (``hostqueue._on_ack``). Returns its lane."""
    x = S.lhq[li]
    h = S.hah[x]
    w = int(S.ha[x, h, 0])
    segs, rtt = S.ha[x, h, 1], S.ha[x, h, 2]
    S.hah[x] = (h + 1) % S.ha.shape[1]
    S.han[x] -= 1
    c = S.hc[x, w]
    c[_HSRTT] = rtt if c[_HSRTT] == 0.0 else 0.875 * c[_HSRTT] + 0.125 * rtt
    c[_HACKD] += segs
    c[_HIF] -= segs
    bbr = R.link_bbr[li]
    grow = True  # Reno's growth
    if bbr > 0.0:  # BBR: the window plus what was acked, up to the target (at least 4)
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
