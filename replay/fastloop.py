"""The replayer's event loop compiled with numba, bit-identical to ``engine.Simulator``'s.

The same loop as the Python closure in ``replay/engine.py`` (same floating-point operations in
the same order, the same sequence counter incremented at the same places, so ties break the
same way), on flat numpy arrays: templates as CSR arrays (``FastTemplates``), the loop's state
as arrays held by ``FastLoop`` between ``run`` calls (``FastState``). Priority queues compare
whole keys, so any binary heap pops the same order as ``heapq`` on the Python tuples:

- events ``(time us, seq, kind, a, b)``, with ``(kind, a, b)`` packed into one int64;
- per worker and resource ``(class, priority, seq, op)``;
- per link ``(finish tag in virtual bytes | 0.0 for fifo, seq)`` with the chunk's bytes.

Covers links 'fair' and 'fifo', WIN on and off, every order and start offsets, the links of
several PSes independent or coupled by finite worker NICs (max-min fair sharing over the PS and
worker NICs of each direction, as ``sharing.maxmin_rates``, to the bit); not ``record``
(timelines) nor a limit on PS cores (both stay in Python). Without numba the module imports
(``AVAILABLE`` is False) and is not used.

The kernel never grows an array: at the top of each loop iteration it checks that one more
iteration fits (template picks, step slots, event heap) and otherwise returns a code; Python
grows the arrays and calls again, which resumes exactly where it stopped. At the same point it
returns once a call has done ``BUDGET`` work units, so that a long run is many short calls and
Ctrl-C or SIGTERM (whose Python handlers never run inside compiled code) acts between two of
them; the results are the same whatever the budget.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from gradwire.jit import AVAILABLE, njit

if TYPE_CHECKING:
    from gradwire.replay.engine import SimConfig, _Compiled



# event kinds, as engine._DONE.. (their order breaks ties)
_DONE, _LINK, _RELEASE, _NOTIFY, _NET, _START = 0, 1, 2, 3, 4, 5
_KSHIFT, _ASHIFT, _BMASK, _AMASK = 59, 39, (1 << 39) - 1, (1 << 20) - 1
# FastState.iv: int64 scalars
_SEQ, _EVENTS, _PICK, _HN, _NK, _M, _FIFO, _WINON, _MARGIN, _COUPLED = range(10)
# FastState.fv: float64 scalars
_NOW, _WBUSY, _WIN, _CAP, _WCAP = range(5)
# kernel results
OK, NEED_PICKS, NEED_STEPS, NEED_HEAP, BUDGET_SPENT = 0, 1, 2, 3, 4
# work units (actions run, events popped, 16 NICs or flows scanned by max-min) per kernel call:
# the call then returns, and Python's signal handlers (Ctrl-C, SIGTERM) run before the next
# one. 2^18 units are 5-20 ms of loop on this 2-core machine (5-8 units per op-event; median
# calls of 9-19 ms at W=2000, 4.6 ms with coupled NICs at W=500, M=2); a call costs 14 us
# more in Python: no difference measured (scripts/bench_replay.py --budgets). 0: one call.
BUDGET = 1 << 18
# spare room given to the arrays that grow (heap entries, step slots, picks per worker)
SLACK = 64


class FastTemplates(NamedTuple):
    """Compiled templates, ops of template t at ``base[t]..base[t] + nops[t]`` (CSR)."""

    base: np.ndarray  # int64 (T,)
    nops: np.ndarray  # int64 (T,): ops before folding (indices)
    kept: np.ndarray  # int64 (T,): ops left after folding
    code: np.ndarray  # int64 (N,): 0 delay, 1 worker, 2 PS, 3 down, 4 up
    res: np.ndarray  # int64 (N,): resource (-1 delay, 0 worker, PS_i, DOWN_i, UP_i)
    link: np.ndarray  # int64 (N,): link (down_i, up_i) of a transfer, else -1
    amount: np.ndarray  # float64 (N,): us (delay, compute) or bytes (transfer)
    prio: np.ndarray  # float64 (N,): queue order of a transfer (lower first)
    pre: np.ndarray  # float64 (N,): us waited before the op queues
    post: np.ndarray  # float64 (N,): us waited before successors learn it is done
    weight: np.ndarray  # int64 (N,): template ops the op stands for
    indeg: np.ndarray  # int64 (N,)
    succ_ptr: np.ndarray  # int64 (N + 1,)
    succ_idx: np.ndarray  # int64: successors, template-local indices
    root_ptr: np.ndarray  # int64 (T + 1,)
    root_idx: np.ndarray  # int64: roots, template-local indices


class FastState(NamedTuple):
    """The loop's state between calls (W workers, R = 1 + 3M resources, L = 2M links)."""

    iv: np.ndarray  # int64 scalars (_SEQ..)
    fv: np.ndarray  # float64 scalars (_NOW: us, _WBUSY: us, _WIN: bytes, _CAP, _WCAP: bytes/us)
    picks: np.ndarray  # int64: template of the k-th step started
    ht: np.ndarray  # float64: event heap times (us)
    hs: np.ndarray  # int64: event seq
    hk: np.ndarray  # int64: kind << 59 | a << 39 | b
    wt: np.ndarray  # int64 (W,): each worker's current template
    left: np.ndarray  # int64 (W,): ops of the current step not yet done
    ns: np.ndarray  # int64 (W,): steps started
    ne: np.ndarray  # int64 (W,): steps ended
    starts: np.ndarray  # float64 (W, S): step start times (us)
    ends: np.ndarray  # float64 (W, S): step end times (us)
    pend: np.ndarray  # int64 (W, n): predecessors not yet done
    rem: np.ndarray  # float64 (W, n): bytes of a stream left after its first service
    has: np.ndarray  # bool (W, n): stream had its first service
    busy: np.ndarray  # bool (W, R)
    qoff: np.ndarray  # int64 (R,): where resource r's queue starts in a worker's row
    qn: np.ndarray  # int64 (W, R): queue lengths
    qc: np.ndarray  # int64 (W, Q): queue class (0 first service, 1 the rest of a stream)
    qp: np.ndarray  # float64 (W, Q): priority
    qs: np.ndarray  # int64 (W, Q): seq
    qo: np.ndarray  # int64 (W, Q): op
    kw: np.ndarray  # int64 (W R,): kicked (idle link, chunk released) worker
    kr: np.ndarray  # int64 (W R,): kicked resource
    lv: np.ndarray  # float64 (L,): virtual bytes served to every active flow
    lt: np.ndarray  # float64 (L,): when lv was last advanced (us)
    lbusy: np.ndarray  # float64 (L,): busy time (us)
    pbusy: np.ndarray  # float64 (M,): PS compute time, summed over updates at once (us)
    lhead: np.ndarray  # float64 (L,): fifo: when the head chunk started (us)
    ln: np.ndarray  # int64 (L,): active flows
    lver: np.ndarray  # int64 (L,)
    fn: np.ndarray  # int64 (L,): flows in the link's heap
    ft: np.ndarray  # float64 (L, W): finish tag (fair) or 0.0 (fifo)
    fs: np.ndarray  # int64 (L, W): seq
    fw: np.ndarray  # float64 (L, W, 4): worker, op, resource, chunk bytes
    sk: np.ndarray  # int64 (K, 3): the action stack (see loop)
    # coupled worker NICs: per direction (0 down, 1 up) the active chunks, in no order
    nf: np.ndarray  # int64 (2,): active chunks
    nver: np.ndarray  # int64 (2,)
    nt: np.ndarray  # float64 (2,): when their bytes left were last advanced (us)
    nkey: np.ndarray  # int64 (2, F): seq when the chunk started (ties)
    nw: np.ndarray  # int64 (2, F): worker
    nop: np.ndarray  # int64 (2, F): op
    nr: np.ndarray  # int64 (2, F): resource
    nps: np.ndarray  # int64 (2, F): PS
    nleft: np.ndarray  # float64 (2, F): bytes left
    nrate: np.ndarray  # float64 (2, F): bytes/us
    mrem: np.ndarray  # float64 (M + W,): max-min scratch: NIC capacity not yet taken
    mcnt: np.ndarray  # int64 (M + W,): flows not yet frozen
    mshare: np.ndarray  # float64 (M + W,): level at which the NIC saturates
    mdec: np.ndarray  # int64 (M + W,): flows frozen this round
    msat: np.ndarray  # bool (M + W,): saturated this round


# -- priority queues (inlined into the loop: LLVM inlines the pushes, numba the pops) -------


@njit(cache=True)
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


@njit(cache=True)
def _qbefore(qc, qp, qs, qo, w, x, y):
    """Whether entry x of worker ``w``'s queues is before entry y: (class, priority, seq, op)."""
    if qc[w, x] != qc[w, y]:
        return qc[w, x] < qc[w, y]
    if qp[w, x] != qp[w, y]:
        return qp[w, x] < qp[w, y]
    if qs[w, x] != qs[w, y]:
        return qs[w, x] < qs[w, y]
    return qo[w, x] < qo[w, y]


@njit(cache=True)
def _qswap(qc, qp, qs, qo, w, x, y):
    qc[w, x], qc[w, y] = qc[w, y], qc[w, x]
    qp[w, x], qp[w, y] = qp[w, y], qp[w, x]
    qs[w, x], qs[w, y] = qs[w, y], qs[w, x]
    qo[w, x], qo[w, y] = qo[w, y], qo[w, x]


@njit(cache=True)
def _qpush(qc, qp, qs, qo, w, base, n, cls, prio, seq, op):
    """Queue ``op`` on worker ``w``'s heap of ``n`` entries at ``base``."""
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
    """Dequeue the first op of worker ``w``'s heap of ``n`` entries at ``base``."""
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


@njit(cache=True)
def _fbefore(ft, fs, li, x, y):
    """Whether flow x of link ``li`` is before flow y: (tag, seq)."""
    if ft[li, x] != ft[li, y]:
        return ft[li, x] < ft[li, y]
    return fs[li, x] < fs[li, y]


@njit(cache=True)
def _fswap(ft, fs, fw, li, x, y):
    ft[li, x], ft[li, y] = ft[li, y], ft[li, x]
    fs[li, x], fs[li, y] = fs[li, y], fs[li, x]
    for k in range(4):  # worker, op, resource, chunk bytes (as float64)
        fw[li, x, k], fw[li, y, k] = fw[li, y, k], fw[li, x, k]


@njit(cache=True)
def _fpush(ft, fs, fw, li, n, tag, seq):
    """Sift up flow ``n`` of link ``li`` (its worker, op, resource, bytes already in fw)."""
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
def _maxmin(nf, wk, ps, m, nw, pcap, wcap, rate, rem, cnt, share, dec, sat):
    """``sharing.maxmin_rates`` of the ``nf`` flows (worker ``wk[k]``, PS ``ps[k]``) over M
    PS NICs of ``pcap`` and W worker NICs of ``wcap`` (bytes/us, finite) into ``rate``;
    returns the NICs and flows it scanned (16 count as one work unit of the loop's budget:
    such a scan is that much quicker than an action of the loop).

    The same progressive filling: each round the level rises to the least share of a NIC
    (never below the last level), every NIC at or below it saturates and its flows freeze at
    it, and the NICs those flows cross give up that much. The result does not depend on the
    flows' order, bit for bit, so a scan for the least share here gives what the heap of
    lower bounds gives there."""
    nn = m + nw
    for x in range(nn):
        cnt[x] = 0
        dec[x] = 0
    for k in range(nf):
        cnt[ps[k]] += 1
        cnt[m + wk[k]] += 1
    for x in range(nn):
        rem[x] = pcap if x < m else wcap
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
        if s == np.inf:  # only unconstrained NICs left
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
            if rate[k] < 0.0 and (sat[ps[k]] or sat[m + wk[k]]):
                rate[k] = level
                left -= 1
                dec[ps[k]] += 1
                dec[m + wk[k]] += 1
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
def _net_advance(S, d, now, m):
    """Advance direction ``d``'s coupled chunks to ``now``: bytes left, PS links' busy time."""
    dt = now - S.nt[d]
    n = S.nf[d]
    if dt > 0 and n:
        act = S.msat  # scratch: which PS links carry a chunk
        for x in range(m):
            act[x] = False
        for k in range(n):
            S.nleft[d, k] -= S.nrate[d, k] * dt
            act[S.nps[d, k]] = True
        for x in range(m):
            if act[x]:
                S.lbusy[d * m + x] += dt
    S.nt[d] = now


@njit(cache=True)
def _reverse(sk, lo, hi):
    """Reverse rows lo..hi-1 of the action stack."""
    hi -= 1
    while lo < hi:
        for k in range(3):
            sk[lo, k], sk[hi, k] = sk[hi, k], sk[lo, k]
        lo += 1
        hi -= 1


# -- the loop ---------------------------------------------------------------------------------
# The closures of engine._build_loop call each other (notify -> ready -> release -> serve ->
# reschedule); here they are actions on an explicit stack, run depth-first in call order, so
# the whole loop is one function (calls between big njit functions cost more than the work).
_A_READY, _A_RELEASE, _A_SERVE, _A_RESCHED, _A_FINISH, _A_COMPLETE = 0, 1, 2, 3, 4, 5
_A_NOTIFY, _A_STEP_END, _A_START_STEP, _A_START_AT, _A_NRESCHED = 6, 7, 8, 9, 10


@njit(cache=True)
def loop(T, S, target, offsets, budget):  # noqa: C901 - one loop on purpose (see above)
    """Advance until every worker has ended ``target`` steps (OK), until an array is full
    (NEED_PICKS, NEED_STEPS, NEED_HEAP: grow it and call again to resume), or, with
    ``budget`` > 0, until the call has done at least ``budget`` work units (BUDGET_SPENT:
    call again to resume; a unit is an action run, an event popped, or 16 NICs or flows
    scanned by max-min; the call stops only between events, where it would resume unchanged,
    so the results do not depend on the budget). With ``target`` < 0, start the workers
    instead (at time 0 or at their ``offsets``, us) and return."""
    base, nops, kept, code, res, link = T.base, T.nops, T.kept, T.code, T.res, T.link
    amount, prio, pre, post, weight, indeg = T.amount, T.prio, T.pre, T.post, T.weight, T.indeg
    succ_ptr, succ_idx, root_ptr, root_idx = T.succ_ptr, T.succ_idx, T.root_ptr, T.root_idx
    iv, fv, picks, ht, hs, hk = S.iv, S.fv, S.picks, S.ht, S.hs, S.hk
    wt, left, ns, ne, starts, ends = S.wt, S.left, S.ns, S.ne, S.starts, S.ends
    pend, rem, has, busy, qoff, qn = S.pend, S.rem, S.has, S.busy, S.qoff, S.qn
    qc, qp, qs, qo, kw, kr = S.qc, S.qp, S.qs, S.qo, S.kw, S.kr
    lv, lt, lbusy, lhead, ln, lver = S.lv, S.lt, S.lbusy, S.lhead, S.ln, S.lver
    pbusy = S.pbusy
    fn, ft, fs, fw, sk = S.fn, S.ft, S.fs, S.fw, S.sk
    m, fifo, win_on, margin = iv[_M], iv[_FIFO] != 0, iv[_WINON] != 0, iv[_MARGIN]
    win, cap, wcap, coupled = fv[_WIN], fv[_CAP], fv[_WCAP], iv[_COUPLED] != 0
    nf, nver, nkey, nwk, nop, nr, nps = S.nf, S.nver, S.nkey, S.nw, S.nop, S.nr, S.nps
    nleft, nrate = S.nleft, S.nrate
    seq, events, pick, hn, nk, maxs = iv[_SEQ], iv[_EVENTS], iv[_PICK], iv[_HN], iv[_NK], 0
    now, wbusy = fv[_NOW], fv[_WBUSY]
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
                if pre[g] != 0.0:  # a folded delay first
                    hn = _hpush(ht, hs, hk, hn, now + pre[g], seq,
                                (_RELEASE << _KSHIFT) | (w << _ASHIFT) | i)
                else:
                    sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_RELEASE, w, i
                    sp += 1
            elif act == _A_RELEASE:
                g = base[wt[w]] + i
                r = res[g]
                if r < 0:  # a delay
                    hn = _hpush(ht, hs, hk, hn, now + amount[g], seq,
                                (_DONE << _KSHIFT) | (w << _ASHIFT) | i)
                elif code[g] < 3:  # compute: worker or PS share
                    _qpush(qc, qp, qs, qo, w, qoff[r], qn[w, r], 0, 0.0, seq, i)
                    qn[w, r] += 1
                    if not busy[w, r]:
                        sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_SERVE, w, r
                        sp += 1
                else:
                    _qpush(qc, qp, qs, qo, w, qoff[r], qn[w, r], 0, prio[g], seq, i)
                    qn[w, r] += 1
                    if not busy[w, r]:  # starts once everything released now is queued
                        busy[w, r] = True
                        kw[nk], kr[nk] = w, r
                        nk += 1
            elif act == _A_SERVE:  # start worker w's next op or chunk on idle resource r
                r = i
                if qn[w, r] == 0:
                    busy[w, r] = False
                    continue
                i = _qpop(qc, qp, qs, qo, w, qoff[r], qn[w, r])
                qn[w, r] -= 1
                busy[w, r] = True
                g = base[wt[w]] + i
                if r <= m:  # compute
                    a = amount[g]
                    if r == 0:
                        wbusy += a
                    else:
                        pbusy[r - 1] += a
                    seq += 1
                    hn = _hpush(ht, hs, hk, hn, now + a, seq,
                                (_DONE << _KSHIFT) | (w << _ASHIFT) | i)
                    continue
                if has[w, i]:
                    chunk = rem[w, i]
                    rem[w, i] = 0.0
                else:  # first service of this stream
                    size = amount[g]
                    chunk = size
                    if win_on and size > win:
                        chunk = win
                    rem[w, i] = size - chunk
                    has[w, i] = True
                li = link[g]
                if coupled:  # one more chunk in its direction's max-min sharing
                    dn = 0 if li < m else 1
                    _net_advance(S, dn, now, m)
                    seq += 1
                    k = nf[dn]
                    nkey[dn, k], nwk[dn, k], nop[dn, k], nr[dn, k] = seq, w, i, r
                    nps[dn, k], nleft[dn, k], nrate[dn, k] = li - dn * m, chunk, 0.0
                    nf[dn] = k + 1
                    sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_NRESCHED, dn, -1
                    sp += 1
                    continue
                if ln[li]:
                    lv[li] += (now - lt[li]) * cap / ln[li]
                    lbusy[li] += now - lt[li]
                lt[li] = now
                ln[li] += 1
                seq += 1
                n = fn[li]
                fw[li, n, 0], fw[li, n, 1], fw[li, n, 2], fw[li, n, 3] = w, i, r, chunk
                if fifo:
                    if n == 0:
                        lhead[li] = now
                    _fpush(ft, fs, fw, li, n, 0.0, seq)
                else:
                    _fpush(ft, fs, fw, li, n, lv[li] + chunk, seq)
                fn[li] = n + 1
                sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_RESCHED, li, -1
                sp += 1
            elif act == _A_RESCHED:  # link w; i >= 0: only if its version is still i
                li = w
                if i >= 0 and lver[li] != i:
                    continue
                lver[li] += 1
                if fn[li] == 0:
                    continue
                seq += 1
                if fifo:
                    at = lhead[li] + fw[li, 0, 3] / cap
                else:
                    d = ft[li, 0] - lv[li]
                    if not d > 0.0:  # max(0.0, d)
                        d = 0.0
                    at = lt[li] + d * ln[li] / cap
                hn = _hpush(ht, hs, hk, hn, at, seq,
                            (_LINK << _KSHIFT) | (li << _ASHIFT) | lver[li])
            elif act == _A_NRESCHED:  # direction w's coupled chunks; i >= 0: if version i
                dn = w
                if i >= 0 and nver[dn] != i:
                    continue
                nver[dn] += 1
                n = nf[dn]
                if n == 0:
                    continue
                work += _maxmin(n, nwk[dn], nps[dn], m, nw, cap, wcap, nrate[dn], S.mrem,
                                S.mcnt, S.mshare, S.mdec, S.msat)
                seq += 1
                at = np.inf
                for k in range(n):
                    x = nleft[dn, k]
                    if not x > 0.0:  # max(0.0, x)
                        x = 0.0
                    x = x / nrate[dn, k]
                    if x < at:
                        at = x
                hn = _hpush(ht, hs, hk, hn, now + at, seq,
                            (_NET << _KSHIFT) | (dn << _ASHIFT) | nver[dn])
            elif act == _A_FINISH:  # a stream's last chunk left its link
                has[w, i] = False
                sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_COMPLETE, w, i
                sp += 1
            elif act == _A_COMPLETE:
                g = base[wt[w]] + i
                events += weight[g]
                if post[g] != 0.0:
                    seq += 1
                    hn = _hpush(ht, hs, hk, hn, now + post[g], seq,
                                (_NOTIFY << _KSHIFT) | (w << _ASHIFT) | i)
                else:
                    sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_NOTIFY, w, i
                    sp += 1
            elif act == _A_NOTIFY:  # then STEP_END, after the successors made ready
                sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_STEP_END, w, 0
                sp += 1
                first = sp
                g = base[wt[w]] + i
                for j in range(succ_ptr[g], succ_ptr[g + 1]):
                    s = succ_idx[j]
                    pend[w, s] -= 1
                    if pend[w, s] == 0:
                        sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_READY, w, s
                        sp += 1
                _reverse(sk, first, sp)  # run in successor order
            elif act == _A_STEP_END:
                left[w] -= 1
                if left[w] == 0:
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
                    sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_READY, w, root_idx[j]
                    sp += 1
            else:  # _A_START_AT: worker w's first step, now or at its offset
                if offsets[w] > 0:
                    seq += 1
                    hn = _hpush(ht, hs, hk, hn, offsets[w], seq,
                                (_START << _KSHIFT) | (w << _ASHIFT))
                else:
                    sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_START_STEP, w, 0
                    sp += 1
            continue
        # an iteration of engine._build_loop's run(): the last one's actions are all done
        if target < 0 or short == 0:
            break
        if pick >= picks.shape[0]:
            status = NEED_PICKS
            break
        if maxs >= starts.shape[1]:
            status = NEED_STEPS
            break
        if hn + margin > ht.shape[0]:
            status = NEED_HEAP
            break
        if budget > 0 and work >= budget:  # back to Python (signals), to resume from here
            status = BUDGET_SPENT
            break
        if nk and (hn == 0 or ht[0] > now):
            for k in range(nk - 1, -1, -1):  # this instant is over: idle links start
                sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_SERVE, kw[k], kr[k]
                sp += 1
            nk = 0
            continue
        if hn == 0:
            break
        now, key = _hpop(ht, hs, hk, hn)
        hn -= 1
        work += 1
        kind = key >> _KSHIFT
        a = (key >> _ASHIFT) & _AMASK
        b = key & _BMASK
        if kind == _DONE:
            r = res[base[wt[a]] + b]
            sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_COMPLETE, a, b
            sp += 1
            if r >= 0:  # compute (transfers end on _LINK)
                if qn[a, r]:
                    sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_SERVE, a, r
                    sp += 1
                else:
                    busy[a, r] = False
        elif kind in (_LINK, _NET):  # a chunk left its link or its coupled direction
            if kind == _LINK:
                li = a
                if b != lver[li]:
                    continue
                if ln[li]:
                    lv[li] += (now - lt[li]) * cap / ln[li]
                    lbusy[li] += now - lt[li]
                lt[li] = now
                w, i, r = int(fw[li, 0, 0]), int(fw[li, 0, 1]), int(fw[li, 0, 2])
                _fpop(ft, fs, fw, li, fn[li])
                fn[li] -= 1
                ln[li] -= 1
                if fifo:
                    lhead[li] = now
                again, owner, version = _A_RESCHED, li, lver[li]
            else:  # the coupled chunk that finishes first in direction a
                dn = a
                if b != nver[dn]:
                    continue
                _net_advance(S, dn, now, m)
                n = nf[dn]
                best = 0
                for k in range(1, n):  # least (bytes left / rate, seq)
                    x, y = nleft[dn, k] / nrate[dn, k], nleft[dn, best] / nrate[dn, best]
                    if x < y or (x == y and nkey[dn, k] < nkey[dn, best]):
                        best = k
                w, i, r = nwk[dn, best], nop[dn, best], nr[dn, best]
                n -= 1  # the last chunk takes its place
                nkey[dn, best], nwk[dn, best], nop[dn, best], nr[dn, best] = (
                    nkey[dn, n], nwk[dn, n], nop[dn, n], nr[dn, n])
                nps[dn, best], nleft[dn, best] = nps[dn, n], nleft[dn, n]
                nrate[dn, best] = nrate[dn, n]
                nf[dn] = n
                again, owner, version = _A_NRESCHED, dn, nver[dn]
            # chunk_done: the rest queues again or the stream completes; the next chunk starts,
            # then the owner is rescheduled unless serving did it (its version moved)
            finished = rem[w, i] <= 1e-9
            if not finished:  # after a first WIN-sized chunk: behind other firsts
                seq += 1
                _qpush(qc, qp, qs, qo, w, qoff[r], qn[w, r], 1, 0.0, seq, i)
                qn[w, r] += 1
            if finished:
                sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_FINISH, w, i
                sp += 1
            sk[sp, 0], sk[sp, 1], sk[sp, 2] = again, owner, version
            sk[sp + 1, 0], sk[sp + 1, 1], sk[sp + 1, 2] = _A_SERVE, w, r
            sp += 2
        elif kind == _RELEASE:
            sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_RELEASE, a, b
            sp += 1
        elif kind == _NOTIFY:
            sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_NOTIFY, a, b
            sp += 1
        else:  # _START: a worker's first step, at its start offset
            sk[sp, 0], sk[sp, 1], sk[sp, 2] = _A_START_STEP, a, 0
            sp += 1
    iv[_SEQ], iv[_EVENTS], iv[_PICK], iv[_HN], iv[_NK] = seq, events, pick, hn, nk
    fv[_NOW], fv[_WBUSY] = now, wbusy
    return status


# -- the Python side ------------------------------------------------------------------------


def unsupported(cfg: SimConfig) -> str | None:
    """Why the compiled loop cannot run ``cfg`` (None: it can)."""
    if not AVAILABLE:
        return "numba is not installed"
    if cfg.record:
        return "record=True (timelines) runs in Python"
    if cfg.ps_cores is not None:
        return "a limit on PS cores runs in Python"
    if max(cfg.workers, 2 * cfg.ps) > _AMASK:  # event keys hold them in 20 bits
        return f"more than {_AMASK:,} workers or links"
    return None


def compile_templates(compiled: Sequence[_Compiled]) -> FastTemplates:
    """The engine's compiled templates as CSR arrays."""
    i64 = np.int64
    nops = np.array([len(c.code) for c in compiled], dtype=i64)
    base = np.zeros(len(compiled), dtype=i64)
    base[1:] = np.cumsum(nops)[:-1]
    succ = [s for c in compiled for s in c.succ]
    ptr = np.zeros(len(succ) + 1, dtype=i64)
    ptr[1:] = np.cumsum([len(s) for s in succ])
    roots = [c.roots for c in compiled]
    rptr = np.zeros(len(roots) + 1, dtype=i64)
    rptr[1:] = np.cumsum([len(r) for r in roots])

    def cat(name: str, dtype: type) -> np.ndarray:
        return np.array([x for c in compiled for x in getattr(c, name)], dtype=dtype)

    return FastTemplates(
        base=base, nops=nops, kept=np.array([c.ops for c in compiled], dtype=i64),
        code=cat("code", i64), res=cat("res", i64), link=cat("link", i64),
        amount=cat("amount", np.float64), prio=cat("prio", np.float64),
        pre=cat("pre", np.float64), post=cat("post", np.float64),
        weight=cat("weight", i64), indeg=cat("indeg", i64), succ_ptr=ptr,
        succ_idx=np.array([x for s in succ for x in s], dtype=i64), root_ptr=rptr,
        root_idx=np.array([x for r in roots for x in r], dtype=i64))


def _grow(a: np.ndarray, axis: int, size: int) -> np.ndarray:
    shape = list(a.shape)
    shape[axis] = size
    out = np.zeros(shape, dtype=a.dtype)
    out[tuple(slice(0, n) for n in a.shape)] = a
    return out


class LoopTables(NamedTuple):
    """The compiled loop's read-only arrays of a set of compiled templates."""

    T: FastTemplates
    qcap: np.ndarray  # int64 (R,): most ops of one template on each resource


def loop_tables(compiled: Sequence[_Compiled], ps: int) -> LoopTables:
    """``compile_templates`` of ``compiled`` and the queue room each of the 1 + 3 ``ps``
    resources needs."""
    nres = 1 + 3 * ps
    qcap = np.zeros(nres, dtype=np.int64)
    for c in compiled:
        qcap = np.maximum(qcap, np.bincount([r for r in c.res if r >= 0], minlength=nres))
    return LoopTables(compile_templates(compiled), qcap)


class FastLoop:
    """The compiled loop for one simulator: its templates, state and RNG for template picks.

    ``rng`` must be the simulator's RNG after compiling (``order='random'`` drew priorities
    from it): the k-th step started, in start order, takes the k-th ``rng.randrange`` pick.
    Starts every worker, as the Python loop does when it is built.
    """

    def __init__(self, compiled: Sequence[_Compiled], cfg: SimConfig,
                 rng: random.Random, tables: LoopTables | None = None) -> None:
        T, qcap = tables or loop_tables(compiled, cfg.ps)
        self.T = T
        self._pick = rng.randrange
        self._n_tpl = len(compiled)
        w, m = cfg.workers, cfg.ps
        nres, nlinks = 1 + 3 * m, 2 * m
        nmax = int(T.nops.max())
        qoff = np.zeros(nres, dtype=np.int64)
        qoff[1:] = np.cumsum(qcap)[:-1]
        qtot = max(1, int(qcap.sum()))
        outdeg = int(np.diff(T.succ_ptr).max(initial=0))
        roots = int(np.diff(T.root_ptr).max(initial=0))
        # events one loop iteration can push (kicks served, or successors, roots and links);
        # the action stack holds at most as many actions, and the workers' starts
        margin = w * nres + outdeg + roots + 8
        win = cfg.win_bytes
        iv = np.zeros(10, dtype=np.int64)
        iv[_M], iv[_FIFO], iv[_WINON], iv[_MARGIN] = m, cfg.link == "fifo", win is not None, margin
        wcap = float(cfg.worker_rate_bytes_per_us)
        iv[_COUPLED] = m > 1 and wcap < float("inf") and cfg.link != "fifo"  # as engine's
        fv = np.array([0.0, 0.0, 0.0 if win is None else float(win),
                       float(cfg.rate_bytes_per_us), wcap], dtype=np.float64)
        heap = 16 * SLACK + 2 * (w * (roots + 1) + margin)
        f8, i8 = np.float64, np.int64
        self.S = FastState(
            iv=iv, fv=fv, picks=np.zeros(0, dtype=i8),
            ht=np.zeros(heap, dtype=f8), hs=np.zeros(heap, dtype=i8),
            hk=np.zeros(heap, dtype=i8),
            wt=np.zeros(w, dtype=i8), left=np.zeros(w, dtype=i8),
            ns=np.zeros(w, dtype=i8), ne=np.zeros(w, dtype=i8),
            starts=np.zeros((w, 1 + SLACK), dtype=f8), ends=np.zeros((w, 1 + SLACK), dtype=f8),
            pend=np.zeros((w, nmax), dtype=i8), rem=np.zeros((w, nmax), dtype=f8),
            has=np.zeros((w, nmax), dtype=np.bool_), busy=np.zeros((w, nres), dtype=np.bool_),
            qoff=qoff, qn=np.zeros((w, nres), dtype=i8),
            qc=np.zeros((w, qtot), dtype=i8), qp=np.zeros((w, qtot), dtype=f8),
            qs=np.zeros((w, qtot), dtype=i8), qo=np.zeros((w, qtot), dtype=i8),
            kw=np.zeros(w * nres, dtype=i8), kr=np.zeros(w * nres, dtype=i8),
            lv=np.zeros(nlinks, dtype=f8), lt=np.zeros(nlinks, dtype=f8),
            lbusy=np.zeros(nlinks, dtype=f8), pbusy=np.zeros(m, dtype=f8),
            lhead=np.zeros(nlinks, dtype=f8),
            ln=np.zeros(nlinks, dtype=i8), lver=np.zeros(nlinks, dtype=i8),
            fn=np.zeros(nlinks, dtype=i8), ft=np.zeros((nlinks, w), dtype=f8),
            fs=np.zeros((nlinks, w), dtype=i8), fw=np.zeros((nlinks, w, 4), dtype=f8),
            sk=np.zeros((margin + w + 8, 3), dtype=i8),
            nf=np.zeros(2, dtype=i8), nver=np.zeros(2, dtype=i8), nt=np.zeros(2, dtype=f8),
            nkey=np.zeros((2, w * m), dtype=i8), nw=np.zeros((2, w * m), dtype=i8),
            nop=np.zeros((2, w * m), dtype=i8), nr=np.zeros((2, w * m), dtype=i8),
            nps=np.zeros((2, w * m), dtype=i8), nleft=np.zeros((2, w * m), dtype=f8),
            nrate=np.zeros((2, w * m), dtype=f8), mrem=np.zeros(m + w, dtype=f8),
            mcnt=np.zeros(m + w, dtype=i8), mshare=np.zeros(m + w, dtype=f8),
            mdec=np.zeros(m + w, dtype=i8), msat=np.zeros(m + w, dtype=np.bool_))
        self._more_picks(w * (1 + SLACK))
        offsets = np.zeros(w, dtype=np.float64)
        for k, at in enumerate(cfg.start_offsets_us[:w]):
            offsets[k] = at
        self._offsets = offsets
        loop(T, self.S, -1, offsets, 0)

    def _more_picks(self, n: int) -> None:
        """Draw ``n`` more template picks, in start order."""
        pick, k = self._pick, self._n_tpl
        new = np.fromiter((pick(k) for _ in range(n)), dtype=np.int64, count=n)
        self.S = self.S._replace(picks=np.concatenate([self.S.picks, new]))

    def run(self, steps_per_worker: int) -> None:
        """Advance until every worker has ended ``steps_per_worker`` steps, in kernel calls of
        at most about ``BUDGET`` work units each (module-level, read at every call; 0: one
        call), so that Python's signal handlers run between them: compiled code runs none, and
        a single call could otherwise last minutes (W = 100,000)."""
        S = self.S
        want = S.ns.shape[0] * (steps_per_worker + SLACK) - len(S.picks) + int(S.iv[_PICK])
        if want > 0:
            self._more_picks(want)
        if S.starts.shape[1] <= steps_per_worker + SLACK:
            self._grow_steps(steps_per_worker + 1 + SLACK)
        while True:
            status = loop(self.T, self.S, steps_per_worker, self._offsets, BUDGET)
            S = self.S
            if status == OK:
                return
            if status == BUDGET_SPENT:
                continue
            if status == NEED_PICKS:
                self._more_picks(max(1, S.ns.shape[0], len(S.picks)))
            elif status == NEED_STEPS:
                self._grow_steps(2 * S.starts.shape[1])
            else:
                n = 2 * len(S.ht)
                self.S = S._replace(ht=_grow(S.ht, 0, n), hs=_grow(S.hs, 0, n),
                                    hk=_grow(S.hk, 0, n))

    def _grow_steps(self, n: int) -> None:
        S = self.S
        self.S = S._replace(starts=_grow(S.starts, 1, n), ends=_grow(S.ends, 1, n))

    # -- results, as the Python loop leaves them on the simulator ---------------------------

    @property
    def now(self) -> float:
        """Simulated time (us)."""
        return float(self.S.fv[_NOW])

    @property
    def events(self) -> int:
        """Op-events so far (template ops completed, folded delays included)."""
        return int(self.S.iv[_EVENTS])

    @property
    def worker_busy_us(self) -> float:
        """Compute time of every worker's WORKER resource (us)."""
        return float(self.S.fv[_WBUSY])

    def ps_busy_us(self) -> list[float]:
        """Compute time of each PS's updates, summed over those running at once (us)."""
        return self.S.pbusy.tolist()

    def link_busy_us(self) -> list[float]:
        """Busy time of each link, down_0.., up_0.. (us)."""
        return self.S.lbusy.tolist()

    def sync_steps(self, starts: list[list[float]], ends: list[list[float]]) -> None:
        """Append the steps started and ended since the last call to the per-worker lists."""
        S = self.S
        for w in range(len(starts)):
            starts[w].extend(S.starts[w, len(starts[w]):S.ns[w]].tolist())
            ends[w].extend(S.ends[w, len(ends[w]):S.ne[w]].tolist())
