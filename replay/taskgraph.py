"""What the replay kernel runs: step graphs of tasks, and a table of the resources they use.

A run has ``W`` *lanes* (a worker each). A lane runs steps one after another; each step is one
of the graph's *step graphs*, picked at random when the step starts. A step graph is a DAG of
tasks (CSR arrays, below), each with an amount of work, the *slot* it runs on, its successors,
a queue priority and, for transfers, a chunk quantum. A slot is a lane's queue on a resource:
the lane's tasks on it wait there in ``(class, priority, sequence)`` order and run one at a
time. The resource table says, per slot, what serves it:

- ``SERIAL``: the slot itself, one task at a time for ``amount`` us (a worker's compute, a
  worker's share of a PS, as in ICPE'20);
- ``POOL``: as SERIAL, but each task also holds one of a pool's ``k`` cores while it runs
  (``--ps-cores``); lanes waiting for a core are served first come, first served;
- ``LINK``: ``amount`` bytes over a shared link, processor-shared (max-min equal shares of
  its capacity, on a virtual clock) or FIFO, one chunk per lane and slot at a time; a first
  chunk is at most ``quantum`` bytes (HTTP/2 WIN), the rest queues again behind other firsts;
  two processor-shared links may be paired as the two directions of one link, each keeping
  a window of bytes on its way: while both carry flows, one carrying a single flow (a lane:
  one TCP connection) with the smaller window runs at its share of the other's (two-way
  traffic, ``kernel._duplex``);
- ``NET``: as LINK, but the chunk crosses two *ports* of a coupled group at once (a PS NIC
  and the lane's own NIC) and the group's flows get max-min fair rates over all its ports;
- ``JOIN``: a barrier: the task ends when ``need`` tasks (one per lane) have reached the
  join, all at that instant, in arrival order.

A delay (slot -1) needs no resource: it ends ``amount`` us after it is released. Every
mechanism gradwire predicts is a *generator* of these two objects (``replay/generators.py``):
asynchronous PS today; a barrier is a JOIN slot, a switch a resource. The arrays are plain
numpy so that one compiled kernel (``replay/kernel.py``) runs every configuration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from gradwire.errors import ReplayError
from gradwire.replay.hostqueue import BBR_V1, MSS

SERIAL, POOL, LINK, NET, JOIN = 0, 1, 2, 3, 4
SLOT_KINDS = ("serial", "pool", "link", "net", "join")
__all__ = ["JOIN", "LINK", "NET", "POOL", "SERIAL", "ReplayError", "ResourceTable", "StepGraph",
           "TaskGraph", "check", "graph_arrays"]


class TaskGraph(NamedTuple):
    """Step graphs as CSR arrays: the tasks of graph t are ``base[t] .. base[t] + nops[t]``.

    Per task (global index g): ``slot`` (-1: a delay), ``amount`` (us for delays and compute,
    bytes for transfers), ``prio`` (queue order on its slot, lower first), ``quantum`` (bytes of
    a transfer's first chunk; 0: the whole transfer), ``pre``/``post`` (us waited before the
    task queues / before its successors learn it ended: delays folded into it), ``weight``
    (tasks of the original graph it stands for, counted as op-events), ``indeg`` and
    successors (``succ_idx[succ_ptr[g]:succ_ptr[g + 1]]``, graph-local indices). Per graph:
    ``kept`` tasks that run (folded ones excluded) and its roots.
    """

    base: np.ndarray  # int64 (T,)
    nops: np.ndarray  # int64 (T,)
    kept: np.ndarray  # int64 (T,)
    slot: np.ndarray  # int64 (N,)
    amount: np.ndarray  # float64 (N,)
    prio: np.ndarray  # float64 (N,)
    quantum: np.ndarray  # float64 (N,)
    pre: np.ndarray  # float64 (N,)
    post: np.ndarray  # float64 (N,)
    weight: np.ndarray  # int64 (N,)
    indeg: np.ndarray  # int64 (N,)
    succ_ptr: np.ndarray  # int64 (N + 1,)
    succ_idx: np.ndarray  # int64
    root_ptr: np.ndarray  # int64 (T + 1,)
    root_idx: np.ndarray  # int64


class ResourceTable(NamedTuple):
    """What serves each slot, for ``W`` lanes (see the module docstring).

    Per slot r: ``kind`` (SERIAL..JOIN), ``acc`` (the busy-time accumulator its compute adds
    to, -1 none), ``group`` (NET: its coupled group, else -1). Per lane and slot: ``dest``
    (LINK: the link; NET: the first port; POOL: the pool; JOIN: the join; else -1) and
    ``port2`` (NET: the second port, else -1). Links: ``link_cap`` (bytes/us),
    ``link_fifo`` (0: processor-shared, 1: FIFO, 2: one chunk at a time, the lowest lane's
    first, not preempted: block order; 3: the sender's own drop-tail queue, each lane one
    TCP connection (Reno, or BBR: ``link_bbr``) packet by packet, ``replay/hostqueue.py``),
    ``link_burst`` (bytes: the depth of a token bucket in front of the link, refilled at its
    rate while it is idle; a chunk that finds the link idle has up to that many of its bytes
    sent at once; 0: a plain rate), ``link_rev`` (the link carrying the other direction, -1
    none; paired both ways, each processor-shared or a host queue), ``link_win`` (bytes the
    direction's flows keep on their way, for the pairing) and ``link_standing`` (bytes: the
    most a paired direction's connections keep standing in its queue, every connection
    counted, ``kernel._window_rate``; inf: unbounded; 0 or None: the one-window rule, where
    only a lone connection with the smaller window is slowed). Host-queue links: ``link_buf``
    (the queue's bytes) and ``link_rtt`` (a round trip with every queue empty, us); None:
    no link is one; ``link_bbr`` (its connections run BBR with this window target, segments;
    ``hostqueue.BBR_V1``: Linux's BBR whole, ``replay/bbr.py``; 0 or None: Reno);
    ``link_tsq`` (1: the queue is on its senders' own host, TCP Small Queues limit what each
    keeps there; 0: a switch's, its senders on hosts of their own;
    None: every host queue 1); ``link_shares`` (per link K > 0 weights: a lane's chunks on
    a processor-shared link take the weight its step draws, ``kernel._share_pick``, and
    share the link in proportion; None: equal shares); ``link_request`` (per link, the
    host-queue link its transfers' requests cross before the transfer may start, -1 none: a
    request sent while that queue holds bytes waits until they have left, bytes / its rate;
    None: none anywhere); ``link_pings`` (per host-queue link, the intervals its workers'
    HTTP/2 PINGs come apart, us, K values, zeros after them: a held connection tries again
    at the next one plus ``link_answer``, us, the PS's answer, ``replay/pings.py``; None or
    zeros: no PINGs, a held connection waits for its probe timer). Pools: ``pool_cores``.
    Joins: ``join_need``.
    Coupled groups: ``port_cap`` (bytes/us, inf: unconstrained), ``port_link`` (the link whose
    busy time a port's flows count in, -1 none), ``nports``. ``nacc``: accumulators.
    """

    kind: np.ndarray  # int64 (R,)
    acc: np.ndarray  # int64 (R,)
    group: np.ndarray  # int64 (R,)
    dest: np.ndarray  # int64 (W, R)
    port2: np.ndarray  # int64 (W, R)
    link_cap: np.ndarray  # float64 (L,)
    link_fifo: np.ndarray  # int64 (L,)
    link_burst: np.ndarray  # float64 (L,)
    link_rev: np.ndarray  # int64 (L,)
    link_win: np.ndarray  # float64 (L,)
    pool_cores: np.ndarray  # int64 (P,)
    join_need: np.ndarray  # int64 (J,)
    port_cap: np.ndarray  # float64 (G, Pmax)
    port_link: np.ndarray  # int64 (G, Pmax)
    nports: np.ndarray  # int64 (G,)
    nacc: int
    link_buf: np.ndarray | None = None  # float64 (L,)
    link_rtt: np.ndarray | None = None  # float64 (L,)
    link_bbr: np.ndarray | None = None  # float64 (L,)
    link_standing: np.ndarray | None = None  # float64 (L,)
    link_tsq: np.ndarray | None = None  # float64 (L,)
    link_shares: np.ndarray | None = None  # float64 (L, K)
    link_request: np.ndarray | None = None  # int64 (L,)
    link_pings: np.ndarray | None = None  # float64 (L, K)
    link_answer: np.ndarray | None = None  # float64 (L,)

    @property
    def lanes(self) -> int:
        return int(self.dest.shape[0])

    @property
    def slots(self) -> int:
        return int(self.kind.shape[0])


class StepGraph(NamedTuple):
    """One step graph as Python lists, as generators build it (``graph_arrays`` packs them);
    fields as ``TaskGraph``'s per task, ``ops``: tasks that run (folded ones excluded)."""

    slot: list[int]
    amount: list[float]
    prio: list[float]
    quantum: list[float]
    pre: list[float]
    post: list[float]
    weight: list[int]
    indeg: list[int]
    succ: list[list[int]]
    roots: list[int]
    ops: int


def graph_arrays(graphs: Sequence[StepGraph]) -> TaskGraph:
    """Pack step graphs into the kernel's CSR arrays."""
    i64, f64 = np.int64, np.float64
    nops = np.array([len(g.slot) for g in graphs], dtype=i64)
    base = np.zeros(len(graphs), dtype=i64)
    base[1:] = np.cumsum(nops)[:-1]
    succ = [s for g in graphs for s in g.succ]
    ptr = np.zeros(len(succ) + 1, dtype=i64)
    ptr[1:] = np.cumsum([len(s) for s in succ])
    rptr = np.zeros(len(graphs) + 1, dtype=i64)
    rptr[1:] = np.cumsum([len(g.roots) for g in graphs])

    def cat(name: str, dtype: type) -> np.ndarray:
        return np.array([x for g in graphs for x in getattr(g, name)], dtype=dtype)

    return TaskGraph(
        base=base, nops=nops, kept=np.array([g.ops for g in graphs], dtype=i64),
        slot=cat("slot", i64), amount=cat("amount", f64), prio=cat("prio", f64),
        quantum=cat("quantum", f64), pre=cat("pre", f64), post=cat("post", f64),
        weight=cat("weight", i64), indeg=cat("indeg", i64), succ_ptr=ptr,
        succ_idx=np.array([x for s in succ for x in s], dtype=i64), root_ptr=rptr,
        root_idx=np.array([x for g in graphs for x in g.roots], dtype=i64))


def check(graph: TaskGraph, table: ResourceTable) -> None:
    """Refuse a graph and table the kernel would misread (indices out of range, kinds
    unknown, negative amounts, a join no lane count can fill), with what is wrong."""
    r, w = table.slots, table.lanes
    if w < 1:
        raise ReplayError("a replay needs at least one lane (worker)")
    if len(graph.nops) == 0:
        raise ReplayError("no step graphs to replay")
    bad = graph.slot[(graph.slot < -1) | (graph.slot >= r)]
    if bad.size:
        raise ReplayError(f"a task names slot {int(bad[0])}, the table has {r}")
    for name in ("amount", "pre", "post", "quantum"):
        a = getattr(graph, name)
        if not np.all(np.isfinite(a)) or np.any(a < 0):
            raise ReplayError(f"task {name}s must be finite and >= 0")
    if np.any(np.isnan(graph.prio)):
        raise ReplayError("task priorities must not be NaN")
    _check_edges(graph)
    if np.any((table.kind < SERIAL) | (table.kind > JOIN)):
        raise ReplayError(f"unknown slot kind in {table.kind.tolist()}")
    limits = {LINK: len(table.link_cap), POOL: len(table.pool_cores), JOIN: len(table.join_need),
              NET: table.port_cap.shape[1] if table.port_cap.ndim == 2 else 0}
    for s in range(r):
        k = int(table.kind[s])
        if k == SERIAL:
            continue
        d = table.dest[:, s]
        if np.any((d < 0) | (d >= limits[k])):
            raise ReplayError(f"slot {s} ({SLOT_KINDS[k]}) names a {SLOT_KINDS[k]} out of range")
        if k == NET:
            g = int(table.group[s])
            if not 0 <= g < len(table.nports):
                raise ReplayError(f"slot {s} names coupled group {g} out of range")
            p2 = table.port2[:, s]
            if np.any((d >= table.nports[g]) | (p2 < 0) | (p2 >= table.nports[g])):
                raise ReplayError(f"slot {s} names a port out of its group's range")
    if np.any(table.link_cap <= 0) or np.any(np.isnan(table.link_cap)):
        raise ReplayError("link capacities must be > 0 bytes/us")
    if (table.link_burst.shape != table.link_cap.shape or np.any(table.link_burst < 0)
            or not np.all(np.isfinite(table.link_burst))):
        raise ReplayError("link bursts must be finite and >= 0 bytes, one per link")
    if table.link_fifo.shape != table.link_cap.shape or not np.all(
            np.isin(table.link_fifo, (0, 1, 2, 3))):
        raise ReplayError("link disciplines must be 0 (shared), 1 (FIFO), 2 (lane order) or "
                          "3 (host queue), one per link")
    _check_host_queues(table)
    _check_pairs(table)
    if np.any(table.port_cap <= 0) or np.any(np.isnan(table.port_cap)):
        raise ReplayError("port capacities must be > 0 bytes/us")
    if np.any(table.acc >= max(1, table.nacc)) or np.any(table.port_link >= len(table.link_cap)):
        raise ReplayError("a slot's busy-time accumulator or a port's link is out of range")
    if np.any(table.pool_cores < 1):
        raise ReplayError("a pool needs at least one core")
    if np.any(table.join_need < 1) or np.any(table.join_need > w):
        raise ReplayError(f"a join must wait for 1 to {w} lanes")


def _check_pairs(table: ResourceTable) -> None:
    """Links paired as two directions: each other's, processor-shared, windows >= 0."""
    rev, win, n = table.link_rev, table.link_win, len(table.link_cap)
    if rev.shape != (n,) or win.shape != (n,):
        raise ReplayError("link pairs and windows must be given one per link")
    if not np.issubdtype(rev.dtype, np.integer):
        raise ReplayError("link pairs must be link indices (integers)")
    if not np.all(np.isfinite(win)) or np.any(win < 0):
        raise ReplayError("link windows must be finite and >= 0 bytes")
    for li, ri in enumerate(rev.tolist()):
        if ri == -1:
            continue
        if not 0 <= ri < n or ri == li or rev[ri] != li:
            raise ReplayError(f"link {li} is paired with {ri}, which is not paired back")
        if table.link_fifo[li] in (1, 2):
            raise ReplayError(f"link {li} is FIFO or lane-ordered: only processor-shared "
                              "links and host queues pair")
        if not win[li] > 0 and not (table.link_fifo[li] == 3 and table.link_fifo[ri] == 3):
            raise ReplayError(f"link {li} is paired with a window of 0 bytes: it would stop")
    standing = table.link_standing
    if standing is not None and (standing.shape != (n,) or np.any(np.isnan(standing))
                                 or np.any(standing < 0)):
        raise ReplayError("link standing limits must be >= 0 bytes (inf: unbounded), one per "
                          "link")
    shares = table.link_shares
    if shares is not None and (shares.ndim != 2 or shares.shape[0] != n or shares.shape[1] < 1
                               or not np.all(np.isfinite(shares)) or np.any(shares <= 0)):
        raise ReplayError("link share weights must be finite and > 0, a row of one or more "
                          "per link")


def _check_host_queues(table: ResourceTable) -> None:
    """A host-queue link needs a queue of at least one segment and a finite round trip; a
    link's requests cross a host queue or nothing."""
    hq = table.link_fifo == 3
    req = table.link_request
    if req is not None:
        if req.shape != hq.shape or not np.issubdtype(req.dtype, np.integer):
            raise ReplayError("link_request must be one link index (or -1) per link")
        for li, q in enumerate(req.tolist()):
            if q == -1:
                continue
            if not 0 <= q < len(hq) or q == li:
                raise ReplayError(f"link {li}'s requests cross link {q}: not another link of "
                                  f"the {len(hq)} (or -1, none)")
            if not hq[q]:
                raise ReplayError(f"link {li}'s requests cross link {q}, which is not a host "
                                  "queue")
    if not np.any(hq):
        return
    buf, rtt = table.link_buf, table.link_rtt
    if buf is None or rtt is None or buf.shape != hq.shape or rtt.shape != hq.shape:
        raise ReplayError("host-queue links need link_buf and link_rtt, one per link")
    if np.any(buf[hq] < MSS) or np.any(~np.isfinite(buf[hq])):
        raise ReplayError(f"a host queue must hold at least one segment ({MSS} bytes)")
    if np.any(rtt[hq] < 0) or np.any(~np.isfinite(rtt[hq])):
        raise ReplayError("a host queue's round trip must be finite and >= 0 us")
    bbr = table.link_bbr
    if bbr is not None and (bbr.shape != hq.shape
                            or np.any((bbr[hq] < 0) & (bbr[hq] != BBR_V1))
                            or np.any(~np.isfinite(bbr[hq]))):
        raise ReplayError(f"a host queue's BBR window must be finite and >= 0 segments, or "
                          f"{BBR_V1} (BBR whole), one per link")
    tsq = table.link_tsq
    if tsq is not None and (tsq.shape != hq.shape or not np.all(np.isin(tsq, (0.0, 1.0)))):
        raise ReplayError("link_tsq must be 1 (the senders' own host) or 0 (a switch's "
                          "queue), one per link")
    pings, answer = table.link_pings, table.link_answer
    if (pings is None) != (answer is None):
        raise ReplayError("link_pings and link_answer come together")
    if pings is not None and answer is not None and (
            pings.ndim != 2 or pings.shape[0] != len(hq) or pings.shape[1] < 1
            or answer.shape != hq.shape or np.any(~np.isfinite(pings)) or np.any(pings < 0)
            or np.any(~np.isfinite(answer)) or np.any(answer < 0)):
        raise ReplayError("link_pings must be one row of finite intervals >= 0 us per link "
                          "and link_answer one finite delay >= 0 us per link")


def _check_edges(graph: TaskGraph) -> None:
    """Successors and roots within their step graph (the kernel does not check its indices).
    An in-degree above the edges that reach a task leaves it waiting forever: the kernel
    says so (it stalls) rather than this check, which cannot tell folded tasks apart."""
    for t, (b, n) in enumerate(zip(graph.base.tolist(), graph.nops.tolist(), strict=True)):
        lo, hi = graph.succ_ptr[b], graph.succ_ptr[b + n]
        succ = graph.succ_idx[lo:hi]
        roots = graph.root_idx[graph.root_ptr[t]:graph.root_ptr[t + 1]]
        if np.any((succ < 0) | (succ >= n)) or np.any((roots < 0) | (roots >= n)):
            raise ReplayError(f"step graph {t} names a task out of its {n}")
