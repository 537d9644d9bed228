"""The replay kernel: one compiled event loop that runs any task graph (``replay/taskgraph.py``).

Lanes (workers) run step graphs, picked at random per step, on the slots of a resource table:
serial slots, pools of cores, shared links (processor-shared on a virtual clock, FIFO, or
one chunk at a time to the lowest lane first, non-preemptive;
with a token bucket, a chunk that finds its link idle has the bucket's bytes sent at once;
a processor-shared link paired with its reverse direction runs below its rate while the
reverse carries the bigger window, ``_duplex``),
coupled groups of ports (max-min fair rates) and joins (barriers). Events sit in one heap of
``(time us, seq, key)``; the sequence number, incremented at fixed places, breaks ties, so a
seed fixes the output to the bit. Priority queues compare whole keys, so any binary heap pops
one order:

- events ``(time, seq, kind << 59 | a << 39 | b)``;
- per lane and slot ``(class, priority, seq, task)``: class 0 a first service, 1 the rest of
  a transfer after its first chunk;
- per link ``(finish tag in virtual bytes | 0.0 for FIFO | the lane for lane order, seq)``
  with the chunk's bytes (lane order pins the chunk in service at -1.0).

With ``record``, every task's ready, start and end times, the task whose end made it ready
(its *cause*) and, when it waited for its slot or a core, the task that held it (its
*blocker*) are kept as rows: the timeline and the critical path (``replay/critical.py``).

The kernel never grows an array: at the top of each loop iteration it checks that one more
iteration fits (template picks, step slots, event heap, record rows) and otherwise returns a
code; Python grows the arrays and calls again, which resumes exactly where it stopped. It also
returns once a call has done ``BUDGET`` work units, so that a long run is many short calls and
Ctrl-C or SIGTERM (whose Python handlers never run inside compiled code) act between two of
them; the results are the same whatever the budget. Without numba the same function runs as
Python (``gradwire.jit``): correct, and about a hundred times slower.

The Python event loop it replaced is kept in ``tests/pyloop.py`` as the reference oracle of
the differential and property tests.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from gradwire.jit import AVAILABLE, drop_stale_cache, njit
from gradwire.replay import bbr, hostqueue, hqkernel, pings, taskgraph
from gradwire.replay.hostqueue import MSS
from gradwire.replay.hqkernel import (
    NFW,
    NHA,
    NHQ,
    NHX,
    PACE_AT,
    PROBE_AT,
    QUEUED_BYTES,
    UNSENT,
    ack_ring,
    app_limited,
    hq_ack,
    hq_depart,
    hq_send,
    init_connections,
    packet_ring,
)
from gradwire.replay.taskgraph import (
    JOIN,
    LINK,
    NET,
    POOL,
    ReplayError,
    ResourceTable,
    TaskGraph,
    check,
)

__all__ = ["AVAILABLE", "BUDGET", "Kernel"]

# the loop inlines hqkernel's functions and freezes these modules' constants: their changes
# must reach the on-disk cache too (gradwire.jit.drop_stale_cache)
drop_stale_cache(__file__, hqkernel.__file__, hostqueue.__file__, taskgraph.__file__,
                 bbr.__file__, pings.__file__)

# event kinds (their order breaks ties between events of one instant and one seq)
_DONE, _LINK, _RELEASE, _NOTIFY, _NET, _START = 0, 1, 2, 3, 4, 5
_ACK, _PROBE = 6, 7  # host-queue links (replay/hqkernel.py): an ACK back, a probe or pacing timer
_KSHIFT, _ASHIFT, _BMASK, _AMASK = 59, 39, (1 << 39) - 1, (1 << 20) - 1
# KState.iv: int64 scalars
_SEQ, _EVENTS, _PICK, _HN, _NK, _MARGIN, _NREC, _NCOMP = range(8)
# KState.fv: float64 scalars
_NOW = 0
# kernel results
OK, NEED_PICKS, NEED_STEPS, NEED_HEAP, BUDGET_SPENT, NEED_ROWS, STALLED = 0, 1, 2, 3, 4, 5, 6
# work units (actions run, events popped, 16 ports or flows scanned by max-min) per kernel
# call: the call then returns, and Python's signal handlers (Ctrl-C, SIGTERM) run before the
# next one. 2^18 units are 5-20 ms of loop on a 2-core machine (5-8 units per op-event); a
# call costs 14 us more in Python (scripts/bench_replay.py --budgets). 0: one call.
BUDGET = 1 << 18
# spare room given to the arrays that grow (heap entries, step slots, picks, rows)
SLACK = 64


class KState(NamedTuple):
    """The loop's state between calls (W lanes, R slots, L links, P pools, J joins, G
    coupled groups; n the most tasks of a step graph)."""

    iv: np.ndarray  # int64 scalars (_SEQ..)
    fv: np.ndarray  # float64 scalars (_NOW: us)
    acc: np.ndarray  # float64 (A,): busy time of each accumulator (us)
    picks: np.ndarray  # int64: step graph of the k-th step started
    ht: np.ndarray  # float64: event heap times (us)
    hs: np.ndarray  # int64: event seq
    hk: np.ndarray  # int64: kind << 59 | a << 39 | b
    wt: np.ndarray  # int64 (W,): each lane's current step graph
    left: np.ndarray  # int64 (W,): tasks of the current step not yet done
    ns: np.ndarray  # int64 (W,): steps started
    ne: np.ndarray  # int64 (W,): steps ended
    starts: np.ndarray  # float64 (W, S): step start times (us)
    ends: np.ndarray  # float64 (W, S): step end times (us)
    erow: np.ndarray  # int64 (W, S): record: the row whose end ended the step
    pend: np.ndarray  # int64 (W, n): predecessors not yet done
    rem: np.ndarray  # float64 (W, n): bytes of a transfer left after its first chunk
    has: np.ndarray  # bool (W, n): transfer had its first chunk
    busy: np.ndarray  # bool (W, R)
    qoff: np.ndarray  # int64 (R,): where slot r's queue starts in a lane's row
    qn: np.ndarray  # int64 (W, R): queue lengths
    qc: np.ndarray  # int64 (W, Q): queue class (0 first service, 1 the rest of a transfer)
    qp: np.ndarray  # float64 (W, Q): priority
    qs: np.ndarray  # int64 (W, Q): seq
    qo: np.ndarray  # int64 (W, Q): task
    kw: np.ndarray  # int64 (W R,): kicked (idle link slot, chunk released) lane
    kr: np.ndarray  # int64 (W R,): kicked slot
    lv: np.ndarray  # float64 (L,): virtual bytes served to every active flow
    lt: np.ndarray  # float64 (L,): when lv was last advanced (us)
    lbusy: np.ndarray  # float64 (L,): busy time (us)
    lhead: np.ndarray  # float64 (L,): fifo: when the head chunk started (us)
    ltok: np.ndarray  # float64 (L,): bytes in the link's token bucket when it last went idle
    lcur: np.ndarray  # float64 (L,): the link's rate now (bytes/us): below link_cap while the
    # reverse direction carries the bigger window (_duplex)
    lsw: np.ndarray  # float64 (L,): the weights of the chunks on each link, added up
    ln: np.ndarray  # int64 (L,): active flows (lanes: one chunk per lane and slot at a time)
    lver: np.ndarray  # int64 (L,)
    fn: np.ndarray  # int64 (L,): flows in the link's heap
    ft: np.ndarray  # float64 (L, F): finish tag (fair) or 0.0 (fifo)
    fs: np.ndarray  # int64 (L, F): seq
    fw: np.ndarray  # float64 (L, F, NFW): lane, task, slot, chunk bytes, and a host queue's slot
    # freed or a shared link's share weight
    sk: np.ndarray  # int64 (K, 3): the action stack (see loop)
    # coupled groups: their active chunks, in no order
    nf: np.ndarray  # int64 (G,): active chunks
    nver: np.ndarray  # int64 (G,)
    nt: np.ndarray  # float64 (G,): when their bytes left were last advanced (us)
    nkey: np.ndarray  # int64 (G, F): seq when the chunk started (ties)
    nw: np.ndarray  # int64 (G, F): lane
    nop: np.ndarray  # int64 (G, F): task
    nr: np.ndarray  # int64 (G, F): slot
    np1: np.ndarray  # int64 (G, F): first port
    np2: np.ndarray  # int64 (G, F): second port
    nleft: np.ndarray  # float64 (G, F): bytes left
    nrate: np.ndarray  # float64 (G, F): bytes/us
    mrem: np.ndarray  # float64 (Pmax,): max-min scratch: port capacity not yet taken
    mcnt: np.ndarray  # int64 (Pmax,): flows not yet frozen
    mshare: np.ndarray  # float64 (Pmax,): level at which the port saturates
    mdec: np.ndarray  # int64 (Pmax,): flows frozen this round
    msat: np.ndarray  # bool (Pmax,): saturated this round
    # pools: free cores and the (lane, slot) pairs waiting for one, first come first served
    pfree: np.ndarray  # int64 (P,)
    phead: np.ndarray  # int64 (P,)
    pn: np.ndarray  # int64 (P,)
    pw: np.ndarray  # int64 (P, C): ring of waiting lanes
    pr: np.ndarray  # int64 (P, C): their slots
    # joins: arrivals so far (lane, task)
    jn: np.ndarray  # int64 (J,)
    jw: np.ndarray  # int64 (J, W)
    ji: np.ndarray  # int64 (J, W)
    # host-queue links (replay/hqkernel.py; X of them, 1 when none)
    lhq: np.ndarray  # int64 (L,): the link's host-queue index, -1 not one
    hc: np.ndarray  # float64 (X, W, NHC): each lane's connection
    hq: np.ndarray  # float64 (X, Q, 5): the queue's packets, a ring
    ha: np.ndarray  # float64 (X, A, 3): ACKs on their way, a ring
    hx: np.ndarray  # float64 (X, NHX): the rings' heads and counts, bytes queued, times (us)
    hfree: np.ndarray  # int64 (R,): scratch, slots freed by a send
    # record: per lane and task, and one row per task run
    rowof: np.ndarray  # int64 (W, n): the task's row in this step
    tready: np.ndarray  # float64 (W, n): when it became ready (us)
    tcause: np.ndarray  # int64 (W, n): the row whose end made it ready (-1: none)
    qlast: np.ndarray  # int64 (W, R): the row last served on the slot
    plast: np.ndarray  # int64 (P,): the row that last freed a core of the pool
    lastrow: np.ndarray  # int64 (W,): the row that ended the lane's last step
    ri: np.ndarray  # int64 (rows, 6): lane, step graph, task, cause, blocker, completion order
    rf: np.ndarray  # float64 (rows, 3): ready, start, end (us)


# -- priority queues ----------------------------------------------------------------------
# Inlined into the loop by numba: as calls, each counted a reference to every array it takes,
# per call and per heap level, which halved the loop's speed (scripts/bench_replay.py).


@njit(cache=True, inline='always')
def _hpush(ht, hs, hk, n, t, seq, key):
    """Push event ``(t, seq, key)`` on a heap of ``n``; returns n + 1."""
    pos = n
    while pos > 0:
        up = (pos - 1) >> 1
        ut, us, uk = ht[up], hs[up], hk[up]
        if t < ut or (t == ut and (seq < us or (seq == us and key < uk))):
            ht[pos], hs[pos], hk[pos] = ut, us, uk
            pos = up
        else:
            break
    ht[pos], hs[pos], hk[pos] = t, seq, key
    return n + 1


@njit(cache=True, inline='always')
def _hpop(ht, hs, hk, n):
    """Remove the least event of a heap of ``n``: (time, key); the heap has n - 1 left."""
    top_t, top_k = ht[0], hk[0]
    n -= 1
    if n > 0:
        t, seq, key = ht[n], hs[n], hk[n]
        pos = 0
        while True:
            c = 2 * pos + 1
            if c >= n:
                break
            d = c + 1
            if d < n and (ht[d] < ht[c] or (ht[d] == ht[c] and (
                    hs[d] < hs[c] or (hs[d] == hs[c] and hk[d] < hk[c])))):
                c = d
            if ht[c] < t or (ht[c] == t and (hs[c] < seq or (hs[c] == seq and hk[c] < key))):
                ht[pos], hs[pos], hk[pos] = ht[c], hs[c], hk[c]
                pos = c
            else:
                break
        ht[pos], hs[pos], hk[pos] = t, seq, key
    return top_t, top_k


@njit(cache=True, inline='always')
def _qbefore(qc, qp, qs, qo, w, x, y):
    """Whether entry x of lane ``w``'s queues is before entry y: (class, priority, seq, op)."""
    if qc[w, x] != qc[w, y]:
        return qc[w, x] < qc[w, y]
    if qp[w, x] != qp[w, y]:
        return qp[w, x] < qp[w, y]
    if qs[w, x] != qs[w, y]:
        return qs[w, x] < qs[w, y]
    return qo[w, x] < qo[w, y]


@njit(cache=True, inline='always')
def _qswap(qc, qp, qs, qo, w, x, y):
    qc[w, x], qc[w, y] = qc[w, y], qc[w, x]
    qp[w, x], qp[w, y] = qp[w, y], qp[w, x]
    qs[w, x], qs[w, y] = qs[w, y], qs[w, x]
    qo[w, x], qo[w, y] = qo[w, y], qo[w, x]


@njit(cache=True, inline='always')
def _qpush(qc, qp, qs, qo, w, base, n, cls, prio, seq, op):
    """Queue ``op`` on lane ``w``'s heap of ``n`` entries at ``base``."""
    pos = base + n
    qc[w, pos], qp[w, pos], qs[w, pos], qo[w, pos] = cls, prio, seq, op
    while pos > base:
        up = base + ((pos - base - 1) >> 1)
        if not _qbefore(qc, qp, qs, qo, w, pos, up):
            break
        _qswap(qc, qp, qs, qo, w, pos, up)
        pos = up


@njit(cache=True, inline='always')
def _qpop(qc, qp, qs, qo, w, base, n):
    """Dequeue the first op of lane ``w``'s heap of ``n`` entries at ``base``."""
    op = qo[w, base]
    n -= 1
    if n > 0:
        _qswap(qc, qp, qs, qo, w, base, base + n)
        pos = 0
        while True:
            c = 2 * pos + 1
            if c >= n:
                break
            if c + 1 < n and _qbefore(qc, qp, qs, qo, w, base + c + 1, base + c):
                c += 1
            if not _qbefore(qc, qp, qs, qo, w, base + c, base + pos):
                break
            _qswap(qc, qp, qs, qo, w, base + c, base + pos)
            pos = c
    return op


@njit(cache=True, inline='always')
def _fbefore(ft, fs, li, x, y):
    """Whether flow x of link ``li`` is before flow y: (tag, seq)."""
    if ft[li, x] != ft[li, y]:
        return ft[li, x] < ft[li, y]
    return fs[li, x] < fs[li, y]


@njit(cache=True, inline='always')
def _fswap(ft, fs, fw, li, x, y):
    ft[li, x], ft[li, y] = ft[li, y], ft[li, x]
    fs[li, x], fs[li, y] = fs[li, y], fs[li, x]
    for k in range(NFW):  # lane, task, slot, chunk bytes, slot freed or weight (as float64)
        fw[li, x, k], fw[li, y, k] = fw[li, y, k], fw[li, x, k]


@njit(cache=True, inline='always')
def _fpush(ft, fs, fw, li, n, tag, seq):
    """Sift up flow ``n`` of link ``li`` (its lane, task, slot, bytes already in fw)."""
    ft[li, n], fs[li, n] = tag, seq
    pos = n
    while pos > 0:
        up = (pos - 1) >> 1
        if not _fbefore(ft, fs, li, pos, up):
            break
        _fswap(ft, fs, fw, li, pos, up)
        pos = up


@njit(cache=True, inline='always')
def _fpop(ft, fs, fw, li, n):
    """Remove the first of the ``n`` flows of link ``li``."""
    n -= 1
    if n > 0:
        _fswap(ft, fs, fw, li, 0, n)
        pos = 0
        while True:
            c = 2 * pos + 1
            if c >= n:
                break
            if c + 1 < n and _fbefore(ft, fs, li, c + 1, c):
                c += 1
            if not _fbefore(ft, fs, li, c, pos):
                break
            _fswap(ft, fs, fw, li, c, pos)
            pos = c


@njit(cache=True)
def _maxmin(nf, p1, p2, nn, cap, rate, rem, cnt, share, dec, sat):
    """Max-min fair rates (``sharing.maxmin_rates``, to the bit) of the ``nf`` flows of a
    coupled group, flow k crossing ports ``p1[k]`` and ``p2[k]`` of the ``nn`` ports of
    capacities ``cap`` (bytes/us; inf: unconstrained), into ``rate``; returns the ports and
    flows it scanned (16 count as one work unit of the loop's budget).

    Progressive filling: each round the level rises to the least share of a port (never below
    the last level), every port at or below it saturates and its flows freeze at it, and the
    ports those flows cross give up that much. The result does not depend on the flows' order,
    bit for bit."""
    for x in range(nn):
        cnt[x] = 0
        dec[x] = 0
    for k in range(nf):
        cnt[p1[k]] += 1
        cnt[p2[k]] += 1
    for x in range(nn):
        rem[x] = cap[x]
        share[x] = rem[x] / cnt[x] if cnt[x] > 0 else np.inf
    for k in range(nf):
        rate[k] = -1.0
    left = nf
    prev = 0.0
    scanned = 2 * (nn + nf)
    while left > 0:
        scanned += 3 * nn + nf
        s = np.inf
        for x in range(nn):
            if share[x] < s:
                s = share[x]
        if s == np.inf:  # only unconstrained ports left
            for k in range(nf):
                if rate[k] < 0.0:
                    rate[k] = np.inf
            break
        level = s if s > prev else prev
        prev = level
        for x in range(nn):
            sat[x] = share[x] <= level
            if sat[x]:
                share[x] = np.inf
        for k in range(nf):
            if rate[k] < 0.0 and (sat[p1[k]] or sat[p2[k]]):
                rate[k] = level
                left -= 1
                dec[p1[k]] += 1
                dec[p2[k]] += 1
        for x in range(nn):
            d = dec[x]
            if d:
                dec[x] = 0
                c = cnt[x] - d
                cnt[x] = c
                if c:
                    r = rem[x] - d * level
                    rem[x] = r
                    share[x] = r / c
                else:
                    share[x] = np.inf
    return scanned >> 4


@njit(cache=True)
def _net_advance(S, R, g, now):
    """Advance group ``g``'s chunks to ``now``: bytes left, and the busy time of the links
    its busy ports count in."""
    dt = now - S.nt[g]
    n = S.nf[g]
    if dt > 0 and n:
        act = S.msat  # scratch: which ports carry a chunk
        nn = R.nports[g]
        for x in range(nn):
            act[x] = False
        for k in range(n):
            S.nleft[g, k] -= S.nrate[g, k] * dt
            act[S.np1[g, k]] = True
            act[S.np2[g, k]] = True
        for x in range(nn):
            li = R.port_link[g, x]
            if act[x] and li >= 0:
                S.lbusy[li] += dt
    S.nt[g] = now


@njit(cache=True, inline='always')
def _duplex(lv, lt, lbusy, ln, lsw, lcur, lcap, lwin, lsq, li, ri, now):
    """Two-way traffic on links ``li`` and ``ri`` (the two directions of one link) once ``li``
    gained or lost a connection (between none, one and two, or any with ``lsq``): ``ri``'s
    virtual clock advanced to ``now`` at its rate so far, then both rates set from the bytes
    a connection keeps on its way (``lwin``, one per direction) and how many connections
    each direction carries (``ln``: a lane has one chunk on a link at a time, and a lane's
    transfers to one PS are one TCP connection).

    A direction whose connection keeps more bytes on its way than the other's (the bigger
    window) fills its bottleneck with a standing queue; a direction carrying a single
    connection with the smaller window has its ACKs wait behind that queue, so it completes
    a window per the big direction's round trip and runs at ``cap x small / big``. With
    windows measured as in-flight plus queued bytes of a flow running alone (its rate times
    its own RTT), this is the fluid model of window-limited flows sharing a FIFO each way. Two
    or more connections keep twice the bytes on their way and fill the link: a W = 6 capture
    shows a direction at the full rate beside reverse traffic once it carries two workers'
    flows, at 0.82 with one (docs/predict.md, "Two-way traffic"). A direction with no flows,
    or whose reverse has none, runs at its rate. Where the links have a standing limit
    (``lsq`` > 0, ``--link-windows same``) every connection is counted instead
    (``_window_rate``). ``lsw``: each link's chunks' weights added up (its virtual clock's
    divisor)."""
    if ln[ri]:
        lv[ri] += (now - lt[ri]) * lcur[ri] / lsw[ri]
        lbusy[ri] += now - lt[ri]
        lt[ri] = now
    lcur[li] = _window_rate(lcap[li], lwin[li], lwin[ri], ln[li], ln[ri], lsq[ri])
    lcur[ri] = _window_rate(lcap[ri], lwin[ri], lwin[li], ln[ri], ln[li], lsq[li])


@njit(cache=True, inline='always')
def _share_pick(w, step, li, k):
    """Which of link ``li``'s ``k`` share weights lane ``w``'s transfers on it take in the
    step ``step`` (the steps it started, this one included): a hash of the three (Lehmer's
    multiplier modulo 2^31 - 1, three rounds; every product fits int64), the same in the
    kernel and in Python."""
    if k == 1:
        return 0
    h = ((w * 1000003 + step) % 2147483647 * 48271 + li) % 2147483647
    h = h * 48271 % 2147483647
    h = h * 48271 % 2147483647
    return h % k


@njit(cache=True, inline='always')
def _window_rate(cap, mine, theirs, nmine, ntheirs, standing):
    """A direction's rate beside its reverse (``_duplex``); ``standing``: the most bytes the
    reverse's connections keep standing in its queue (its ``link_standing``). 0, the
    one-window rule: ``cap x mine / theirs`` while this direction carries one connection with
    the smaller window and the reverse carries any, else ``cap``. Above 0, every connection
    counts: the reverse's standing queue is its connections' windows added up, at most
    ``standing`` (inf: unbounded), and this direction's connections complete their windows
    once per that queue's delay, ``cap x nmine x mine / queue``, at most ``cap``."""
    if standing > 0.0:
        if nmine == 0 or ntheirs == 0:
            return cap
        own, queue = nmine * mine, ntheirs * theirs
        if queue > standing:
            queue = standing
        return cap * own / queue if own < queue else cap
    if nmine == 1 and ntheirs >= 1 and theirs > mine:
        return cap * mine / theirs
    return cap


@njit(cache=True, inline='always')
def _hq_send(H, F, L, ltok, ht, hs, hk, hn, seq, sk, sp, li, x, w, now):
    """Lane ``w``'s connection on host-queue link ``li`` (index ``x``) sends what it may
    (``hqkernel.hq_send``; ``H``: hc, hq, ha, hx, hfree; ``F``: the links' flows fn, fw, ft, fs;
    ``L``: the links' round trips, queues, BBR targets, rates, buckets, TCP Small
    Queues flags, the workers' PING intervals and the PS's answer); then the
    departure and probe timer it asks for are scheduled and the slots whose transfer sent its
    last segment are served next. Returns (seq, hn, sp)."""
    hfree = H[4]
    nfree, dep, probe, nmark, mark_at = hq_send(
        H[0], H[1], H[2], H[3], F[0], F[1], F[2], F[3], ltok, hfree, li, x, w, now, L[0][li],
        L[1][li], L[2][li], L[3][li], L[4][li], L[5][li], L[6][li], L[7][li])
    for _ in range(nmark):  # a switch's loss notices, each an ACK event of its own
        seq += 1
        hn = _hpush(ht, hs, hk, hn, mark_at, seq, (_ACK << _KSHIFT) | (li << _ASHIFT))
    if dep >= 0.0:
        seq += 1
        hn = _hpush(ht, hs, hk, hn, dep, seq, (_LINK << _KSHIFT) | (li << _ASHIFT))
    if probe >= 0.0:
        seq += 1
        hn = _hpush(ht, hs, hk, hn, probe, seq,
                    (_PROBE << _KSHIFT) | (li << _ASHIFT) | w)
    for k in range(nfree):
        sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_SERVE, w, hfree[k]
        sp += 1
    return seq, hn, sp


@njit(cache=True, inline='always')
def _pool_wait(pw, pr, phead, pn, p, w, r):
    """Lane ``w``'s slot ``r`` waits for a core of pool ``p``: the end of its ring."""
    k = (phead[p] + pn[p]) % pw.shape[1]
    pw[p, k], pr[p, k] = w, r
    pn[p] += 1


@njit(cache=True, inline='always')
def _reverse(sk, lo, hi):
    """Reverse rows lo..hi-1 of the action stack."""
    hi -= 1
    while lo < hi:
        for k in range(3):
            sk[lo, k], sk[hi, k] = sk[hi, k], sk[lo, k]
        lo += 1
        hi -= 1


@njit(cache=True)
def _row(S, w, i, now):
    """A record row for lane ``w``'s task ``i``, starting ``now``; returns its index."""
    x = S.iv[_NREC]
    S.iv[_NREC] = x + 1
    S.ri[x, 0], S.ri[x, 1], S.ri[x, 2] = w, S.wt[w], i
    S.ri[x, 3], S.ri[x, 4], S.ri[x, 5] = S.tcause[w, i], -1, -1
    S.rf[x, 0], S.rf[x, 1], S.rf[x, 2] = S.tready[w, i], now, -1.0
    S.rowof[w, i] = x
    return x


# -- the loop ---------------------------------------------------------------------------------
# Actions on an explicit stack, run depth-first in call order (ready -> release -> serve ->
# reschedule ...), so the whole loop is one function: calls between big njit functions cost
# more than the work.
_A_READY, _A_RELEASE, _A_SERVE, _A_RESCHED, _A_FINISH, _A_COMPLETE = 0, 1, 2, 3, 4, 5
_A_NOTIFY, _A_STEP_END, _A_START_STEP, _A_START_AT, _A_NRESCHED = 6, 7, 8, 9, 10


@njit(cache=True)
def loop(T, R, S, target, offsets, budget, rec, hq):  # noqa: C901 - one loop on purpose (above)
    """Advance until every lane has ended ``target`` steps (OK), until an array is full
    (NEED_PICKS, NEED_STEPS, NEED_HEAP, NEED_ROWS: grow it and call again to resume), or,
    with ``budget`` > 0, until the call has done at least ``budget`` work units
    (BUDGET_SPENT: call again to resume; a unit is an action run, an event popped, or 16
    ports or flows scanned by max-min; the call stops only between events, where it would
    resume unchanged, so the results do not depend on the budget). With ``target`` < 0,
    start the lanes instead (at time 0 or at their ``offsets``, us) and return. ``rec``: True
    to keep the record rows, None not to: a type, so numba compiles one machine code with
    them and one without, whose tests are gone (as run-time tests of a flag they cost 2-5% of
    the loop's speed). ``hq``: True where a link is a host queue, None where none is: a type
    too, so that the host queues' branches are compiled only where there are some (in the
    loop without them they cost it a fifth of its speed, scripts/bench_mechanisms.py)."""
    base, nops, kept, slot = T.base, T.nops, T.kept, T.slot
    amount, prio, quantum, pre, post = T.amount, T.prio, T.quantum, T.pre, T.post
    weight, indeg = T.weight, T.indeg
    succ_ptr, succ_idx, root_ptr, root_idx = T.succ_ptr, T.succ_idx, T.root_ptr, T.root_idx
    rkind, racc, rgroup, dest, port2 = R.kind, R.acc, R.group, R.dest, R.port2
    lcap, lfifo, jneed, gcap, nports = R.link_cap, R.link_fifo, R.join_need, R.port_cap, R.nports
    lburst, lrev, lwin, lsq = R.link_burst, R.link_rev, R.link_win, R.link_standing
    iv, fv, acc, picks, ht, hs, hk = S.iv, S.fv, S.acc, S.picks, S.ht, S.hs, S.hk
    wt, left, ns, ne, starts, ends, erow = S.wt, S.left, S.ns, S.ne, S.starts, S.ends, S.erow
    pend, rem, has, busy, qoff, qn = S.pend, S.rem, S.has, S.busy, S.qoff, S.qn
    qc, qp, qs, qo, kw, kr = S.qc, S.qp, S.qs, S.qo, S.kw, S.kr
    lv, lt, lbusy, lhead, ln, lver, ltok = S.lv, S.lt, S.lbusy, S.lhead, S.ln, S.lver, S.ltok
    lcur, lsw, lsh = S.lcur, S.lsw, R.link_shares
    lreq = R.link_request
    fn, ft, fs, fw, sk = S.fn, S.ft, S.fs, S.fw, S.sk
    # the host queues' packets as hqa: ``hq`` stays the type-level switch (None: no host
    # queue, their branches compiled out)
    lhq, hc, hqa, ha, hx, hfree = S.lhq, S.hc, S.hq, S.ha, S.hx, S.hfree
    lrtt, lbuf, lbbr, ltsq = R.link_rtt, R.link_buf, R.link_bbr, R.link_tsq
    # the host queues' arrays, their links' flows and parameters (_hq_send)
    H, F, L = (hc, hqa, ha, hx, hfree), (fn, fw, ft, fs), (lrtt, lbuf, lbbr, lcap, lburst,
                                                          ltsq, R.link_pings, R.link_answer)
    nf, nver, nkey, nwk, nop, nr = S.nf, S.nver, S.nkey, S.nw, S.nop, S.nr
    np1, np2, nleft, nrate = S.np1, S.np2, S.nleft, S.nrate
    pfree, phead, pn, pw, pr = S.pfree, S.phead, S.pn, S.pw, S.pr
    jn, jw, ji = S.jn, S.jw, S.ji
    rowof, tready, tcause, qlast, plast, lastrow = (S.rowof, S.tready, S.tcause, S.qlast,
                                                    S.plast, S.lastrow)
    ri, rf = S.ri, S.rf
    margin = iv[_MARGIN]
    seq, events, pick, hn, nk, maxs = iv[_SEQ], iv[_EVENTS], iv[_PICK], iv[_HN], iv[_NK], 0
    now = fv[_NOW]
    nw = ns.shape[0]
    for w in range(nw):
        maxs = max(maxs, ns[w])
    sp = 0  # actions on the stack sk: (action, a, b)
    short = 0
    work = 0  # work units done in this call (budget)
    if target < 0:
        for k in range(nw - 1, -1, -1):
            sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_START_AT, k, 0
            sp += 1
    else:
        for w in range(nw):
            if ne[w] < target:
                short += 1
    status = OK
    while True:
        if sp:  # the next action
            sp -= 1
            work += 1
            act, w, i = sk[sp, 0], sk[sp, 1], sk[sp, 2]
            if act == _A_READY:
                seq += 1
                g = base[wt[w]] + i
                wait = pre[g]
                r = slot[g]
                if hq is not None and r >= 0 and rkind[r] == LINK:
                    q = lreq[dest[w, r]]
                    if q >= 0:  # its request, sent now, waits behind the bytes queued there
                        qw = hx[lhq[q], QUEUED_BYTES] / lcap[q]
                        wait += qw
                        if rec is not None:  # ready once its request is through
                            tready[w, i] = now + qw
                if wait != 0.0:  # a folded delay (or a request's wait) first
                    hn = _hpush(ht, hs, hk, hn, now + wait, seq,
                                (_RELEASE << _KSHIFT) | (w << _ASHIFT) | i)
                else:
                    sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_RELEASE, w, i
                    sp += 1
            elif act == _A_RELEASE:
                g = base[wt[w]] + i
                r = slot[g]
                if r < 0:  # a delay
                    if rec is not None:
                        _row(S, w, i, now)
                    hn = _hpush(ht, hs, hk, hn, now + amount[g], seq,
                                (_DONE << _KSHIFT) | (w << _ASHIFT) | i)
                    continue
                kd = rkind[r]
                if kd <= POOL:  # compute
                    _qpush(qc, qp, qs, qo, w, qoff[r], qn[w, r], 0, 0.0, seq, i)
                    qn[w, r] += 1
                    if not busy[w, r]:
                        sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_SERVE, w, r
                        sp += 1
                elif kd == JOIN:  # a barrier: all arrivals end when the last one comes
                    j = dest[w, r]
                    xr = _row(S, w, i, now) if rec is not None else -1
                    k = jn[j]
                    jw[j, k], ji[j, k] = w, i
                    jn[j] = k + 1
                    if k + 1 == jneed[j]:
                        jn[j] = 0
                        for q in range(k, -1, -1):  # in arrival order
                            if rec is not None and q < k:  # the others waited for the last to come
                                ri[rowof[jw[j, q], ji[j, q]], 4] = xr
                            sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_COMPLETE, jw[j, q], ji[j, q]
                            sp += 1
                else:  # a transfer
                    _qpush(qc, qp, qs, qo, w, qoff[r], qn[w, r], 0, prio[g], seq, i)
                    qn[w, r] += 1
                    if not busy[w, r]:  # starts once everything released now is queued
                        busy[w, r] = True
                        kw[nk], kr[nk] = w, r
                        nk += 1
            elif act == _A_SERVE:  # start lane w's next task or chunk on idle slot r
                r = i
                if qn[w, r] == 0:
                    busy[w, r] = False
                    continue
                busy[w, r] = True
                kd = rkind[r]
                if kd == POOL:  # the task needs one of the pool's cores
                    p = dest[w, r]
                    if pfree[p] == 0:
                        _pool_wait(pw, pr, phead, pn, p, w, r)
                        continue
                    pfree[p] -= 1
                i = _qpop(qc, qp, qs, qo, w, qoff[r], qn[w, r])
                qn[w, r] -= 1
                g = base[wt[w]] + i
                if kd <= POOL:  # compute
                    if rec is not None:
                        xr = _row(S, w, i, now)
                        if now > tready[w, i]:  # it waited for its slot, or a core
                            br = qlast[w, r]
                            if kd == POOL:
                                yr = plast[dest[w, r]]
                                if yr >= 0 and (br < 0 or rf[yr, 2] > rf[br, 2]):
                                    br = yr
                            ri[xr, 4] = br
                    a = amount[g]
                    if racc[r] >= 0:
                        acc[racc[r]] += a
                    seq += 1
                    hn = _hpush(ht, hs, hk, hn, now + a, seq,
                                (_DONE << _KSHIFT) | (w << _ASHIFT) | i)
                    continue
                if has[w, i]:
                    chunk = rem[w, i]
                    rem[w, i] = 0.0
                else:  # first service of this transfer
                    if rec is not None:
                        xr = _row(S, w, i, now)
                        if now > tready[w, i]:
                            ri[xr, 4] = qlast[w, r]
                    size = amount[g]
                    chunk = size
                    if quantum[g] > 0.0 and size > quantum[g] and not (
                            hq is not None and kd == LINK
                            and lfifo[dest[w, r]] == 3):  # a host queue: whole
                        chunk = quantum[g]
                    rem[w, i] = size - chunk
                    has[w, i] = True
                if kd == NET:  # one more chunk in its group's max-min sharing
                    if racc[r] >= 0:  # compute on a shared host: its work at traced speed
                        acc[racc[r]] += chunk
                    gr = rgroup[r]
                    _net_advance(S, R, gr, now)
                    seq += 1
                    k = nf[gr]
                    nkey[gr, k], nwk[gr, k], nop[gr, k], nr[gr, k] = seq, w, i, r
                    np1[gr, k], np2[gr, k] = dest[w, r], port2[w, r]
                    nleft[gr, k], nrate[gr, k] = chunk, 0.0
                    nf[gr] = k + 1
                    sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_NRESCHED, gr, -1
                    sp += 1
                    continue
                li = dest[w, r]
                if hq is not None and lfifo[li] == 3:  # a host queue: to the connection, whole
                    if ln[li]:
                        lbusy[li] += now - lt[li]
                    lt[li] = now
                    ln[li] += 1
                    lsw[li] += 1.0
                    seq += 1
                    n = fn[li]
                    segs = float(max(1, int(np.ceil(chunk / MSS))))
                    fw[li, n, 0], fw[li, n, 1], fw[li, n, 2], fw[li, n, 3] = w, i, r, segs
                    fw[li, n, 4] = 0.0
                    ft[li, n], fs[li, n] = segs, seq
                    fn[li] = n + 1
                    x = lhq[li]
                    if lbbr[li] < 0.0:  # BBR whole: the application writes
                        app_limited(hc, x, w)
                    hc[x, w, UNSENT] += segs
                    seq, hn, sp = _hq_send(H, F, L, ltok, ht, hs, hk, hn, seq, sk, sp, li, x, w,
                                           now)
                    rv = lrev[li]
                    if rv >= 0 and (ln[li] <= 2 or lsq[li] > 0.0):
                        _duplex(lv, lt, lbusy, ln, lsw, lcur, lcap, lwin, lsq, li, rv, now)
                        sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_RESCHED, rv, -1
                        sp += 1
                    continue
                cap = lcap[li]
                sent = 0.0  # bytes the token bucket lets through at once
                # the link's clock advance, written out here and at _LINK: as one inlined
                # helper it cost 25% of the whole loop's speed (scripts/bench_replay.py)
                if ln[li]:
                    lv[li] += (now - lt[li]) * lcur[li] / lsw[li]
                    lbusy[li] += now - lt[li]
                elif lburst[li] > 0.0:  # idle since lt: the bucket refilled at the rate
                    tok = ltok[li] + (now - lt[li]) * cap
                    if tok > lburst[li]:
                        tok = lburst[li]
                    sent = chunk if chunk < tok else tok
                    ltok[li] = tok - sent
                lt[li] = now
                ln[li] += 1
                seq += 1
                n = fn[li]
                fw[li, n, 0], fw[li, n, 1], fw[li, n, 2], fw[li, n, 3] = w, i, r, chunk
                # its share of the link: the weight its lane's step drew (1: equal sharing)
                wg = lsh[li, _share_pick(w, ns[w], li, lsh.shape[1])]
                fw[li, n, 4] = wg
                lsw[li] += wg
                if lfifo[li]:  # 1: in arrival order; 2: the lowest lane first
                    if n == 0:
                        lhead[li] = now - sent / cap
                    _fpush(ft, fs, fw, li, n, 0.0 if lfifo[li] == 1 else float(w), seq)
                else:
                    # (chunk - sent) / wg, summed as before weights (to the bit at 1)
                    _fpush(ft, fs, fw, li, n, lv[li] + chunk / wg - sent / wg, seq)
                fn[li] = n + 1
                sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_RESCHED, li, -1
                sp += 1
                rv = lrev[li]
                if rv >= 0 and (ln[li] <= 2 or lsq[li] > 0.0):  # two-way: its 1st or 2nd flow
                    _duplex(lv, lt, lbusy, ln, lsw, lcur, lcap, lwin, lsq, li, rv, now)
                    sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_RESCHED, rv, -1
                    sp += 1
            elif act == _A_RESCHED:  # link w; i >= 0: only if its version is still i
                li = w
                if i >= 0 and lver[li] != i:
                    continue
                if hq is not None and lfifo[li] == 3:  # a host queue: by packet
                    continue
                lver[li] += 1
                if fn[li] == 0:
                    continue
                seq += 1
                if lfifo[li]:
                    if lfifo[li] == 2:  # the head is in service: no later lane preempts it
                        ft[li, 0] = -1.0  # (the root's key lowered: still a heap)
                    at = lhead[li] + fw[li, 0, 3] / lcap[li]
                else:
                    d = ft[li, 0] - lv[li]
                    if not d > 0.0:  # max(0.0, d)
                        d = 0.0
                    at = lt[li] + d * lsw[li] / lcur[li]
                hn = _hpush(ht, hs, hk, hn, at, seq,
                            (_LINK << _KSHIFT) | (li << _ASHIFT) | lver[li])
            elif act == _A_NRESCHED:  # group w's chunks; i >= 0: only if its version is i
                gr = w
                if i >= 0 and nver[gr] != i:
                    continue
                nver[gr] += 1
                n = nf[gr]
                if n == 0:
                    continue
                work += _maxmin(n, np1[gr], np2[gr], nports[gr], gcap[gr], nrate[gr], S.mrem,
                                S.mcnt, S.mshare, S.mdec, S.msat)
                seq += 1
                at = np.inf
                for k in range(n):
                    x = nleft[gr, k]
                    if not x > 0.0:  # max(0.0, x)
                        x = 0.0
                    x = x / nrate[gr, k]
                    if x < at:
                        at = x
                hn = _hpush(ht, hs, hk, hn, now + at, seq,
                            (_NET << _KSHIFT) | (gr << _ASHIFT) | nver[gr])
            elif act == _A_FINISH:  # a transfer's last chunk left its link
                has[w, i] = False
                sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_COMPLETE, w, i
                sp += 1
            elif act == _A_COMPLETE:
                g = base[wt[w]] + i
                events += weight[g]
                if rec is not None:
                    xr = rowof[w, i]
                    rf[xr, 2] = now
                    ri[xr, 5] = iv[_NCOMP]
                    iv[_NCOMP] += 1
                if post[g] != 0.0:
                    seq += 1
                    hn = _hpush(ht, hs, hk, hn, now + post[g], seq,
                                (_NOTIFY << _KSHIFT) | (w << _ASHIFT) | i)
                else:
                    sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_NOTIFY, w, i
                    sp += 1
            elif act == _A_NOTIFY:  # then STEP_END, after the successors made ready
                sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_STEP_END, w, i
                sp += 1
                first = sp
                g = base[wt[w]] + i
                for j in range(succ_ptr[g], succ_ptr[g + 1]):
                    s = succ_idx[j]
                    pend[w, s] -= 1
                    if pend[w, s] == 0:
                        if rec is not None:
                            tcause[w, s] = rowof[w, i]
                            tready[w, s] = now
                        sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_READY, w, s
                        sp += 1
                _reverse(sk, first, sp)  # run in successor order
            elif act == _A_STEP_END:
                left[w] -= 1
                if left[w] == 0:
                    if rec is not None:
                        lastrow[w] = rowof[w, i]
                        erow[w, ne[w]] = rowof[w, i]
                    ends[w, ne[w]] = now
                    ne[w] += 1
                    if ne[w] == target:
                        short -= 1
                    sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_START_STEP, w, 0
                    sp += 1
            elif act == _A_START_STEP:
                ti = picks[pick]
                pick += 1
                wt[w] = ti
                b = base[ti]
                for j in range(nops[ti]):
                    pend[w, j] = indeg[b + j]
                    has[w, j] = False
                left[w] = kept[ti]
                starts[w, ns[w]] = now
                ns[w] += 1
                maxs = max(maxs, ns[w])
                for j in range(root_ptr[ti + 1] - 1, root_ptr[ti] - 1, -1):
                    s = root_idx[j]
                    if rec is not None:
                        tcause[w, s] = lastrow[w]
                        tready[w, s] = now
                    sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_READY, w, s
                    sp += 1
            else:  # _A_START_AT: lane w's first step, now or at its offset
                if offsets[w] > 0:
                    seq += 1
                    hn = _hpush(ht, hs, hk, hn, offsets[w], seq,
                                (_START << _KSHIFT) | (w << _ASHIFT))
                else:
                    sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_START_STEP, w, 0
                    sp += 1
            continue
        # the last event's actions are all done
        if target < 0 or short == 0:
            break
        if pick + nw > picks.shape[0]:  # a barrier can start a step in every lane at once
            status = NEED_PICKS
            break
        if maxs >= starts.shape[1]:
            status = NEED_STEPS
            break
        if hn + margin > ht.shape[0]:
            status = NEED_HEAP
            break
        if rec is not None and iv[_NREC] + margin > ri.shape[0]:
            status = NEED_ROWS
            break
        if budget > 0 and work >= budget:  # back to Python (signals), to resume from here
            status = BUDGET_SPENT
            break
        if nk and (hn == 0 or ht[0] > now):
            for k in range(nk - 1, -1, -1):  # this instant is over: idle link slots start
                sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_SERVE, kw[k], kr[k]
                sp += 1
            nk = 0
            continue
        if hn == 0:  # lanes short of their steps and nothing left to happen
            status = STALLED
            break
        now, key = _hpop(ht, hs, hk, hn)
        hn -= 1
        work += 1
        kind = key >> _KSHIFT
        a = (key >> _ASHIFT) & _AMASK
        b = key & _BMASK
        if kind == _DONE:
            r = slot[base[wt[a]] + b]
            sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_COMPLETE, a, b
            sp += 1
            if r >= 0:  # compute (transfers end on _LINK or _NET)
                if rec is not None:
                    xr = rowof[a, b]
                    rf[xr, 2] = now
                    qlast[a, r] = xr
                if rkind[r] == POOL:  # its core goes to who waited, first come first
                    p = dest[a, r]
                    if rec is not None:
                        plast[p] = rowof[a, b]
                    pfree[p] += 1
                    if qn[a, r]:
                        _pool_wait(pw, pr, phead, pn, p, a, r)
                    else:
                        busy[a, r] = False
                    c = min(pfree[p], pn[p])
                    for q in range(c - 1, -1, -1):
                        k = (phead[p] + q) % pw.shape[1]
                        sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_SERVE, pw[p, k], pr[p, k]
                        sp += 1
                    phead[p] = (phead[p] + c) % pw.shape[1]
                    pn[p] -= c
                elif qn[a, r]:
                    sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_SERVE, a, r
                    sp += 1
                else:
                    busy[a, r] = False
        elif hq is not None and kind == _LINK and lfifo[a] == 3:  # a host queue's packet left
            li = a
            if ln[li]:
                lbusy[li] += now - lt[li]
            lt[li] = now
            x = lhq[li]
            delay = lrtt[li]  # the ACK's: the round trip, and the other direction's queue
            rv = lrev[li]
            if rv >= 0 and lfifo[rv] == 3:  # behind the bytes the other queue holds
                delay += hx[lhq[rv], QUEUED_BYTES] / lcap[rv]
            elif rv >= 0 and ln[rv] > 0:
                qb = ln[rv] * lwin[rv]
                if qb > lbuf[li]:
                    qb = lbuf[li]
                delay += qb / lcap[rv]
            w, k, at, nxt = hq_depart(hc, hqa, ha, hx, fn, fw, fs, ltok, li, x, now, delay,
                                      lcap[li], lburst[li])
            seq += 1
            hn = _hpush(ht, hs, hk, hn, at, seq, (_ACK << _KSHIFT) | (li << _ASHIFT))
            if nxt >= 0.0:
                seq += 1
                hn = _hpush(ht, hs, hk, hn, nxt, seq, (_LINK << _KSHIFT) | (li << _ASHIFT))
            seq, hn, sp = _hq_send(H, F, L, ltok, ht, hs, hk, hn, seq, sk, sp, li, x, w, now)
            if k >= 0:  # its transfer's last segment: the transfer ends
                w, i, r = int(fw[li, k, 0]), int(fw[li, k, 1]), int(fw[li, k, 2])
                n = fn[li] - 1  # the last entry takes its place
                ft[li, k], fs[li, k] = ft[li, n], fs[li, n]
                for q in range(NFW):
                    fw[li, k, q] = fw[li, n, q]
                fn[li] = n
                ln[li] -= 1
                lsw[li] -= 1.0
                if rec is not None:
                    qlast[w, r] = rowof[w, i]
                sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_FINISH, w, i
                sp += 1
                if lrev[li] >= 0 and (ln[li] <= 1 or lsq[li] > 0.0):  # the reverse's new rate
                    _duplex(lv, lt, lbusy, ln, lsw, lcur, lcap, lwin, lsq, li, lrev[li], now)
                    sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_RESCHED, lrev[li], -1
                    sp += 1
        elif hq is not None and kind == _ACK:  # the oldest ACK on a host queue's way back
            x = lhq[a]
            w = hq_ack(hc, ha, hx, fn, ft, fs, a, x, lbbr[a], now)
            seq, hn, sp = _hq_send(H, F, L, ltok, ht, hs, hk, hn, seq, sk, sp, a, x, w, now)
        elif hq is not None and kind == _PROBE:  # a held connection's probe or pacing timer
            x = lhq[a]
            armed = False
            if hc[x, b, PROBE_AT] == now:  # still armed for now
                hc[x, b, PROBE_AT] = np.inf
                armed = True
            if hc[x, b, PACE_AT] == now:
                hc[x, b, PACE_AT] = np.inf
                armed = True
            if armed:
                seq, hn, sp = _hq_send(H, F, L, ltok, ht, hs, hk, hn, seq, sk, sp, a, x, b, now)
        elif kind in (_LINK, _NET):  # a chunk left its link or its coupled group
            dup = False  # two-way traffic: the link dropped to one flow or none
            if kind == _LINK:
                li = a
                if b != lver[li]:
                    continue
                if ln[li]:
                    lv[li] += (now - lt[li]) * lcur[li] / lsw[li]
                    lbusy[li] += now - lt[li]
                lt[li] = now
                w, i, r = int(fw[li, 0, 0]), int(fw[li, 0, 1]), int(fw[li, 0, 2])
                wg = fw[li, 0, 4]
                _fpop(ft, fs, fw, li, fn[li])
                fn[li] -= 1
                ln[li] -= 1
                lsw[li] = lsw[li] - wg if ln[li] else 0.0  # none left: no rounding kept
                dup = lrev[li] >= 0 and (ln[li] <= 1 or lsq[li] > 0.0)
                if dup:  # two-way traffic: down to one flow or none (or any, counted)
                    _duplex(lv, lt, lbusy, ln, lsw, lcur, lcap, lwin, lsq, li, lrev[li], now)
                if lfifo[li]:
                    lhead[li] = now
                again, owner, version = _A_RESCHED, li, lver[li]
            else:  # the chunk that finishes first in group a
                gr = a
                if b != nver[gr]:
                    continue
                _net_advance(S, R, gr, now)
                n = nf[gr]
                best = 0
                for k in range(1, n):  # least (bytes left / rate, seq)
                    x, y = nleft[gr, k] / nrate[gr, k], nleft[gr, best] / nrate[gr, best]
                    if x < y or (x == y and nkey[gr, k] < nkey[gr, best]):
                        best = k
                w, i, r = nwk[gr, best], nop[gr, best], nr[gr, best]
                n -= 1  # the last chunk takes its place
                nkey[gr, best], nwk[gr, best], nop[gr, best], nr[gr, best] = (
                    nkey[gr, n], nwk[gr, n], nop[gr, n], nr[gr, n])
                np1[gr, best], np2[gr, best] = np1[gr, n], np2[gr, n]
                nleft[gr, best], nrate[gr, best] = nleft[gr, n], nrate[gr, n]
                nf[gr] = n
                again, owner, version = _A_NRESCHED, gr, nver[gr]
            if rec is not None:
                qlast[w, r] = rowof[w, i]
            # the rest queues again or the transfer completes; the next chunk starts, then
            # the owner is rescheduled unless serving did it (its version moved)
            finished = rem[w, i] <= 1e-9
            if not finished:  # after a first quantum-sized chunk: behind other firsts
                seq += 1
                _qpush(qc, qp, qs, qo, w, qoff[r], qn[w, r], 1, 0.0, seq, i)
                qn[w, r] += 1
            if finished:
                sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_FINISH, w, i
                sp += 1
            sk[sp, 0], sk[sp, 1], sk[sp, 2] = again, owner, version
            sk[sp + 1, 0], sk[sp + 1, 1], sk[sp + 1, 2] = _A_SERVE, w, r
            sp += 2
            if kind == _LINK and dup:  # first: the reverse's new rate
                sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_RESCHED, lrev[a], -1
                sp += 1
        elif kind == _RELEASE:
            sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_RELEASE, a, b
            sp += 1
        elif kind == _NOTIFY:
            sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_NOTIFY, a, b
            sp += 1
        else:  # _START: a lane's first step, at its start offset
            sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_START_STEP, a, 0
            sp += 1
    iv[_SEQ], iv[_EVENTS], iv[_PICK], iv[_HN], iv[_NK] = seq, events, pick, hn, nk
    fv[_NOW] = now
    return status


# -- the Python side ------------------------------------------------------------------------


def queue_room(graph: TaskGraph, slots: int) -> np.ndarray:
    """Per slot, the most tasks of one step graph on it: a lane's queue room (int64 (R,))."""
    room = np.zeros(slots, dtype=np.int64)
    for b, n in zip(graph.base.tolist(), graph.nops.tolist(), strict=True):
        s = graph.slot[b:b + n]
        room = np.maximum(room, np.bincount(s[s >= 0], minlength=slots)[:slots])
    return room


def _count_per(values: np.ndarray, size: int) -> int:
    """The most (lane, slot) pairs naming one of ``size`` things (at least 1)."""
    if size == 0 or values.size == 0:
        return 1
    return max(1, int(np.bincount(values, minlength=size).max()))


def _grow(a: np.ndarray, axis: int, size: int) -> np.ndarray:
    shape = list(a.shape)
    shape[axis] = size
    out = np.zeros(shape, dtype=a.dtype)
    out[tuple(slice(0, n) for n in a.shape)] = a
    return out


_TABLE_FLOATS = frozenset({"link_cap", "link_burst", "link_win", "port_cap", "link_buf",
                           "link_rtt", "link_bbr", "link_standing", "link_tsq",
                           "link_shares", "link_pings", "link_answer"})


def _typed(table: ResourceTable) -> ResourceTable:
    """``table`` with every array C-contiguous float64 (``_TABLE_FLOATS``) or int64 (the rest),
    whatever the caller built it with: numba compiles the loop once per argument type, a minute
    each on a fresh cache, so an int array where a float one is meant would cost a second
    machine code of the whole loop."""
    return table._replace(**{
        name: np.ascontiguousarray(value, dtype=np.float64 if name in _TABLE_FLOATS
                                   else np.int64)
        for name, value in table._asdict().items() if isinstance(value, np.ndarray)})


def _ack_room(table: ResourceTable, li: int) -> int:
    """``ack_ring``'s room for host-queue link ``li``: its ACKs wait behind its reverse's
    estimate, at most its own queue, or behind a host-queue reverse's bytes, at most that
    queue (``link_buf`` both; ``link_rev`` the reverse); a switch's queue (``link_tsq`` 0)
    adds its loss notices: within a round trip, at most a lane's window of drops, which
    its queue and slow start's doubling bound (twice the queue's packets)."""
    rv = int(table.link_rev[li])
    behind = float(table.link_buf[li])
    if rv >= 0 and table.link_fifo[rv] == 3:
        behind = max(behind, float(table.link_buf[rv]))
    room = ack_ring(table.link_rtt[li], table.link_cap[li], behind,
                    table.link_cap[rv] if rv >= 0 else table.link_cap[li],
                    table.link_burst[li])
    if table.link_tsq is not None and table.link_tsq[li] == 0.0:  # a switch's loss notices:
        room += 2 * table.lanes * packet_ring(table.link_buf[li])  # a window's drops a lane
    return room


class Kernel:
    """One run of ``graph`` on ``table``: its state, and the template picks.

    ``pick(k)`` draws the step graph of each step started, in start order (a seeded
    ``random.Random.randrange``); ``offsets_us``: when each lane starts (missing: 0);
    ``record``: keep a row per task run (``rows``); ``room``: ``queue_room`` of the graph,
    when the caller keeps it. Starts every lane.
    """

    def __init__(self, graph: TaskGraph, table: ResourceTable, pick: random.Random | None,
                 offsets_us: Sequence[float] = (), record: bool = False,
                 room: np.ndarray | None = None) -> None:
        check(graph, table)
        nl = len(table.link_cap)
        if table.link_buf is None or table.link_rtt is None:  # no host queue: zeros, typed
            table = table._replace(link_buf=np.zeros(nl), link_rtt=np.zeros(nl))
        if table.link_bbr is None:  # Reno on every host queue
            table = table._replace(link_bbr=np.zeros(nl))
        if table.link_standing is None:  # two-way traffic by the one-window rule
            table = table._replace(link_standing=np.zeros(nl))
        if table.link_tsq is None:  # every host queue on its senders' own host
            table = table._replace(link_tsq=np.ones(nl))
        if table.link_shares is None:  # equal sharing: one weight, 1, on every link
            table = table._replace(link_shares=np.ones((nl, 1)))
        if table.link_pings is None or table.link_answer is None:  # no worker pings
            table = table._replace(link_pings=np.zeros((nl, 1)), link_answer=np.zeros(nl))
        if table.link_request is None:  # no request crosses a queue
            table = table._replace(link_request=np.full(nl, -1, dtype=np.int64))
        table = _typed(table)
        w, r = table.lanes, table.slots
        if record and (np.any(graph.pre != 0.0) or np.any(graph.post != 0.0)):
            raise ReplayError("a recorded replay needs a graph without folded delays (pre and "
                              "post waits): each task keeps a row of its own")
        if w > _AMASK or len(table.link_cap) > _AMASK:  # event keys hold them in 20 bits
            raise ReplayError(f"at most {_AMASK:,} lanes and links, got {w:,} lanes")
        self.T, self.R = graph, table
        self._pick = (pick or random.Random(0)).randrange
        self._n_graphs = len(graph.nops)
        room = queue_room(graph, r) if room is None else room
        qoff = np.zeros(r, dtype=np.int64)
        qoff[1:] = np.cumsum(room)[:-1]
        qtot = max(1, int(room.sum()))
        nmax = max(1, int(graph.nops.max()))
        outdeg = int(np.diff(graph.succ_ptr).max(initial=0))
        roots = int(np.diff(graph.root_ptr).max(initial=0))
        kinds = table.kind
        npool, nj = len(table.pool_cores), len(table.join_need)
        hql = np.flatnonzero(table.link_fifo == 3)
        lhq = np.full(nl, -1, dtype=np.int64)
        lhq[hql] = np.arange(len(hql))
        qroom = max((packet_ring(table.link_buf[li]) for li in hql), default=1)
        aroom = max((_ack_room(table, li) for li in hql), default=1)
        nx = max(1, len(hql))
        ng = len(table.nports)
        pmax = max(1, int(table.nports.max(initial=0)))
        link_slots, net_slots = kinds == LINK, kinds == NET
        flows_l = _count_per(table.dest[:, link_slots].ravel(), nl)
        if len(hql):  # a host queue also keeps transfers sent whole but still queued
            flows_l += qroom
        flows_g = _count_per(np.repeat(table.group[net_slots][None, :], w, 0).ravel(), ng)
        waiting = _count_per(table.dest[:, kinds == POOL].ravel(), npool)
        # events (and rows) one loop iteration can push: kicks served, or successors, roots
        # and links; a join ends a task of every lane at once, a freed core serves waiters
        margin = w * r + outdeg + roots + 8
        if nj:
            margin += w * (outdeg + roots + 2)
        if npool:
            margin += w
        if np.any(table.link_rev >= 0):  # a served chunk reschedules its link and the reverse
            margin += w * r
        iv = np.zeros(8, dtype=np.int64)
        iv[_MARGIN] = margin
        self._record = True if record else None  # a type to numba: see loop
        heap = 16 * SLACK + 2 * (w * (roots + 1) + margin)
        rows = (4 * w * nmax + margin + SLACK) if record else 0
        f8, i8, b1 = np.float64, np.int64, np.bool_
        rec_shape = (w, nmax) if record else (1, 1)  # per lane and task: read only to record
        self.S = KState(
            iv=iv, fv=np.zeros(1, dtype=f8), acc=np.zeros(max(1, table.nacc), dtype=f8),
            picks=np.zeros(0, dtype=i8),
            ht=np.zeros(heap, dtype=f8), hs=np.zeros(heap, dtype=i8), hk=np.zeros(heap, dtype=i8),
            wt=np.zeros(w, dtype=i8), left=np.zeros(w, dtype=i8),
            ns=np.zeros(w, dtype=i8), ne=np.zeros(w, dtype=i8),
            starts=np.zeros((w, 1 + SLACK), dtype=f8), ends=np.zeros((w, 1 + SLACK), dtype=f8),
            erow=np.full((w, 1 + SLACK), -1, dtype=i8),
            pend=np.zeros((w, nmax), dtype=i8), rem=np.zeros((w, nmax), dtype=f8),
            has=np.zeros((w, nmax), dtype=b1), busy=np.zeros((w, r), dtype=b1),
            qoff=qoff, qn=np.zeros((w, r), dtype=i8),
            qc=np.zeros((w, qtot), dtype=i8), qp=np.zeros((w, qtot), dtype=f8),
            qs=np.zeros((w, qtot), dtype=i8), qo=np.zeros((w, qtot), dtype=i8),
            kw=np.zeros(w * r, dtype=i8), kr=np.zeros(w * r, dtype=i8),
            lv=np.zeros(nl, dtype=f8), lt=np.zeros(nl, dtype=f8), lbusy=np.zeros(nl, dtype=f8),
            lhead=np.zeros(nl, dtype=f8), ltok=table.link_burst.astype(f8).copy(),
            lcur=table.link_cap.astype(f8).copy(),
            lsw=np.zeros(nl, dtype=f8), ln=np.zeros(nl, dtype=i8),
            lver=np.zeros(nl, dtype=i8),
            fn=np.zeros(nl, dtype=i8), ft=np.zeros((nl, flows_l), dtype=f8),
            fs=np.zeros((nl, flows_l), dtype=i8), fw=np.zeros((nl, flows_l, NFW), dtype=f8),
            sk=np.zeros((margin + w + 8, 3), dtype=i8),
            nf=np.zeros(ng, dtype=i8), nver=np.zeros(ng, dtype=i8), nt=np.zeros(ng, dtype=f8),
            nkey=np.zeros((ng, flows_g), dtype=i8), nw=np.zeros((ng, flows_g), dtype=i8),
            nop=np.zeros((ng, flows_g), dtype=i8), nr=np.zeros((ng, flows_g), dtype=i8),
            np1=np.zeros((ng, flows_g), dtype=i8), np2=np.zeros((ng, flows_g), dtype=i8),
            nleft=np.zeros((ng, flows_g), dtype=f8), nrate=np.zeros((ng, flows_g), dtype=f8),
            mrem=np.zeros(pmax, dtype=f8), mcnt=np.zeros(pmax, dtype=i8),
            mshare=np.zeros(pmax, dtype=f8), mdec=np.zeros(pmax, dtype=i8),
            msat=np.zeros(pmax, dtype=b1),
            pfree=table.pool_cores.astype(i8).copy(), phead=np.zeros(npool, dtype=i8),
            pn=np.zeros(npool, dtype=i8), pw=np.zeros((npool, waiting), dtype=i8),
            pr=np.zeros((npool, waiting), dtype=i8),
            jn=np.zeros(nj, dtype=i8), jw=np.zeros((nj, w), dtype=i8),
            ji=np.zeros((nj, w), dtype=i8),
            lhq=lhq, hc=init_connections(len(hql), w, table.link_rtt[hql], table.link_bbr[hql]),
            hq=np.zeros((nx, qroom, NHQ), dtype=f8),
            ha=np.zeros((nx, aroom, NHA), dtype=f8), hx=np.zeros((nx, NHX), dtype=f8),
            hfree=np.zeros(max(1, r), dtype=i8),
            rowof=np.full(rec_shape, -1, dtype=i8), tready=np.zeros(rec_shape, dtype=f8),
            tcause=np.full(rec_shape, -1, dtype=i8), qlast=np.full((w, r), -1, dtype=i8),
            plast=np.full(npool, -1, dtype=i8), lastrow=np.full(w, -1, dtype=i8),
            ri=np.zeros((rows, 6), dtype=i8), rf=np.zeros((rows, 3), dtype=f8))
        self._more_picks(w * (1 + SLACK))
        offsets = np.zeros(w, dtype=np.float64)
        for k, at in enumerate(tuple(offsets_us)[:w]):
            offsets[k] = at
        self._offsets = offsets
        self._hq = True if len(hql) else None  # loop's type-level switch
        loop(graph, table, self.S, -1, offsets, 0, self._record, self._hq)

    def _more_picks(self, n: int) -> None:
        """Draw ``n`` more step-graph picks, in start order."""
        pick, k = self._pick, self._n_graphs
        new = np.fromiter((pick(k) for _ in range(n)), dtype=np.int64, count=n)
        self.S = self.S._replace(picks=np.concatenate([self.S.picks, new]))

    def run(self, steps_per_lane: int) -> None:
        """Advance until every lane has ended ``steps_per_lane`` steps, in kernel calls of at
        most about ``BUDGET`` work units each (module-level, read at every call; 0: one call),
        so that Python's signal handlers run between them."""
        S = self.S
        want = S.ns.shape[0] * (steps_per_lane + SLACK) - len(S.picks) + int(S.iv[_PICK])
        if want > 0:
            self._more_picks(want)
        if S.starts.shape[1] <= steps_per_lane + SLACK:
            self._grow_steps(steps_per_lane + 1 + SLACK)
        while True:
            status = loop(self.T, self.R, self.S, steps_per_lane, self._offsets, BUDGET,
                          self._record, self._hq)
            S = self.S
            if status == OK:
                return
            if status == BUDGET_SPENT:
                continue
            if status == STALLED:
                short = [w for w in range(len(S.ne)) if S.ne[w] < steps_per_lane]
                raise ReplayError(
                    f"the replay stalled at {self.now:,.1f} us: lane {short[0]} ended "
                    f"{int(S.ne[short[0]])} of {steps_per_lane} steps and nothing is left to "
                    "happen (a join that never fills, or a task waiting for more predecessors "
                    "than it has)")
            if status == NEED_PICKS:
                self._more_picks(max(1, S.ns.shape[0], len(S.picks)))
            elif status == NEED_STEPS:
                self._grow_steps(2 * S.starts.shape[1])
            elif status == NEED_ROWS:
                n = 2 * len(S.ri)
                self.S = S._replace(ri=_grow(S.ri, 0, n), rf=_grow(S.rf, 0, n))
            else:
                n = 2 * len(S.ht)
                self.S = S._replace(ht=_grow(S.ht, 0, n), hs=_grow(S.hs, 0, n),
                                    hk=_grow(S.hk, 0, n))

    def _grow_steps(self, n: int) -> None:
        S = self.S
        self.S = S._replace(starts=_grow(S.starts, 1, n), ends=_grow(S.ends, 1, n),
                            erow=_grow(S.erow, 1, n))

    # -- results --------------------------------------------------------------------------

    @property
    def now(self) -> float:
        """Simulated time (us)."""
        return float(self.S.fv[_NOW])

    @property
    def events(self) -> int:
        """Op-events so far (tasks ended, folded ones counted by their weight)."""
        return int(self.S.iv[_EVENTS])

    def busy_us(self) -> list[float]:
        """Compute time added to each busy-time accumulator (us)."""
        return self.S.acc.tolist()

    def link_busy_us(self) -> list[float]:
        """Time each link carried a chunk (us)."""
        return self.S.lbusy.tolist()

    def sync_steps(self, starts: list[list[float]], ends: list[list[float]]) -> None:
        """Append the steps started and ended since the last call to the per-lane lists."""
        S = self.S
        for w in range(len(starts)):
            starts[w].extend(S.starts[w, len(starts[w]):S.ns[w]].tolist())
            ends[w].extend(S.ends[w, len(ends[w]):S.ne[w]].tolist())

    def step_end_rows(self, worker: int) -> list[int]:
        """Record: the row whose end ended each of lane ``worker``'s steps so far."""
        return self.S.erow[worker, :self.S.ne[worker]].tolist()

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The record rows so far, in start order: int64 (n, 6) lane, step graph, task,
        cause row, blocker row, completion order (-1: still running), and float64 (n, 3)
        ready, start, end (us; end -1: still running)."""
        n = int(self.S.iv[_NREC])
        return self.S.ri[:n].copy(), self.S.rf[:n].copy()
