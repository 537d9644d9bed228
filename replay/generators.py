"""Generators: a profile's step templates and a configuration in, the kernel's task graph and
resource table out (``replay/taskgraph.py``). One per mechanism gradwire predicts.

``async_ps``: asynchronous parameter servers (ICPE'20 Algorithm 3.1). Each lane is a worker;
its slots are, for M PSes: 0 the worker's compute (serial); 1..M its share of PS i's compute
(serial: every worker's update on a core of its own, as in the paper; or a pool of
``ps_cores`` cores per PS that the workers' updates wait for); then the downlink and uplink
of each PS, links of ``rate_bytes_per_us`` (processor-shared, or FIFO), where a pull or push
goes in chunks: a first chunk of at most WIN bytes (HTTP/2 flow control; none when it is off)
and the rest behind the other firsts (ICPE'20 section 3.3), in ``order``. With several PSes
and finite worker NICs, each direction is one coupled group: a chunk crosses its PS's port
and its worker's port and rates are max-min fair (ICPE'20 section 5, ``replay.sharing``).

The synchronous mechanisms (``replay/mechanisms.py``) are template transforms run before this
generator: it gives their barriers JOIN slots (one per join a step's ops name) and, where their
transfers use each worker's own NIC (ring all-reduce, multicast, in-network aggregation), a
slot for the NIC out and one for the NIC in, links of their own per lane.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np

from gradwire.errors import ReplayError
from gradwire.replay.hostcores import HostShare
from gradwire.replay.hostqueue import BASE_RTT_US
from gradwire.replay.options import ORDERS
from gradwire.replay.pings import ping_row
from gradwire.replay.taskgraph import JOIN, LINK, NET, POOL, SERIAL, ResourceTable, StepGraph
from gradwire.replay.template import (
    BARRIER,
    DELAY,
    DOWN,
    NIC_IN,
    NIC_OUT,
    PS,
    UP,
    WORKER,
    StepTemplate,
)
from gradwire.replay.transforms import Folded, fold_delays

_CODE = {DELAY: 0, WORKER: 1, PS: 2, DOWN: 3, UP: 4, BARRIER: 5, NIC_OUT: 6, NIC_IN: 7}
_NAME = {DELAY: "delay", WORKER: "worker", PS: "compute ps:{}", DOWN: "downlink ps:{}",
         UP: "uplink ps:{}", BARRIER: "barrier", NIC_OUT: "worker NIC out",
         NIC_IN: "worker NIC in"}


def async_ps_slots(ps: int, joins: int = 0, nics: bool = False) -> int:
    """Slots of a worker lane with ``ps`` PSes: worker, PS_i, DOWN_i, UP_i; then, for
    synchronous mechanisms (``replay/mechanisms.py``), ``joins`` barriers and, with ``nics``,
    the worker's own NIC out and in."""
    return 1 + 3 * ps + joins + 2 * int(nics)


def ps_of_slot(slot: int, ps: int) -> int:
    """The PS a slot of ``async_ps_slots(ps)`` belongs to (0 for the worker and delays)."""
    return (slot - 1) % ps if slot > 0 else 0


def resource_name(kind: str, ps: int) -> str:
    """What a template op of ``kind`` on PS ``ps`` runs on, as predict's bottleneck column
    and critical path name it: ``worker`` (its compute), ``delay`` (request latency,
    parsing), ``compute ps:i`` (PS i's updates), ``downlink ps:i``, ``uplink ps:i``."""
    return _NAME[kind].format(ps)


def transfer_priorities(t: StepTemplate, order: str, rng: random.Random) -> list[float]:
    """Queue priority of each op of ``t`` under ``order`` (lower first); ``random`` draws one
    per op from ``rng``."""
    if order == "observed":
        return list(t.prio)
    if order == "reverse":
        return [-p for p in t.prio]
    if order in ("tic", "earliest"):
        given = t.tic if order == "tic" else t.earliest
        return list(given) if given else list(t.prio)
    if order == "random":
        return [rng.random() for _ in t.prio]
    raise ReplayError(f"unknown transfer order {order!r}: use {', '.join(ORDERS)}")


def async_ps_step_graph(t: StepTemplate, ps_of: Sequence[int], prio: list[float], ps: int,
                        win_bytes: float | None, keep_all: bool,
                        folded: Folded | None = None, joins: int = 0) -> StepGraph:
    """``t`` as a worker lane's step graph with ``ps`` PSes, op i's PS ``ps_of[i]`` (a
    barrier's: which of the ``joins``); ``keep_all``: no folding (every op keeps a task of
    its own, for timelines). Slots as ``async_ps_slots(ps, joins, nics)``."""
    slot = []
    b = 1 + 3 * ps  # the first barrier's slot, then the NICs'
    for kind, p in zip(t.kind, ps_of, strict=True):
        c = _CODE[kind]
        slot.append((-1, 0, 1 + p, 1 + ps + p, 1 + 2 * ps + p, b + p, b + joins,
                     b + joins + 1)[c])
    amount = [float(a) for a in t.amount]
    q = float(win_bytes) if win_bytes is not None else 0.0
    quantum = [q if k in (DOWN, UP) else 0.0 for k in t.kind]  # NIC transfers: whole
    n = len(slot)
    if keep_all:
        return StepGraph(slot, amount, prio, quantum, [0.0] * n, [0.0] * n, [1] * n,
                         list(t.indeg), t.succ, t.roots, n)
    succ, indeg, pre, post, weight, gone = folded or fold_delays(t)
    pre = list(pre)  # a folded template may be shared: its waits are not changed here
    for i, s in enumerate(slot):
        if s < 0 and not gone[i]:  # a delay that stays: its waits join its duration
            amount[i] += pre[i]
            pre[i] = 0.0
    roots = [i for i, d in enumerate(indeg) if d == 0 and not gone[i]]
    return StepGraph(slot, amount, prio, quantum, pre, post, weight, indeg, succ, roots,
                     gone.count(False))


def async_ps_resources(workers: int, ps: int, rate_bytes_per_us: float, link: str = "fair",
                       worker_rate_bytes_per_us: float = math.inf,
                       ps_cores: int | None = None,
                       burst_bytes: tuple[float, float] = (0.0, 0.0),
                       window_bytes: tuple[float, float] = (0.0, 0.0),
                       joins: int = 0, nic_rate_bytes_per_us: float | None = None,
                       host_queue_bytes: float = 0.0, bbr_segments: float = 0.0,
                       standing_bytes: float = 0.0,
                       host: HostShare | None = None,
                       uplink_queue: bool = False,
                       share_windows: Sequence[Sequence[float]] = ((), ()),
                       share_seed: int = 0, pull_requests: bool = False,
                       pings_us: Sequence[float] = (), ping_answer_us: float = 0.0
                       ) -> ResourceTable:
    """The resource table of ``workers`` worker lanes and ``ps`` PSes (module docstring);
    busy-time accumulators: 0 the workers' compute, 1 + i PS i's updates. ``burst_bytes``:
    the token-bucket depth of every PS link, (downlink, uplink), and of every worker NIC's
    lanes (out, in); ``window_bytes``: the bytes each pull and each push keeps on its way,
    which pair each PS's downlink and uplink as two-way traffic when both are > 0
    (``kernel._duplex``), every connection counted where ``standing_bytes`` > 0 (the most a
    direction keeps standing, TCP payload; shared links only, ``kernel._window_rate``).
    Coupled NICs (several PSes with a finite ``worker_rate_bytes_per_us``) have neither, FIFO
    links no pairing. ``link``:
    ``fair`` (processor-shared), ``fifo`` (one chunk at a time in arrival order) or ``block``
    (the downlinks one chunk at a time to the lowest worker first, not preempted: one
    worker's pulls, then the next's, Chang et al.'s block distribution order; the uplinks
    processor-shared; no pairing, no coupled NICs) or ``hostqueue`` (each downlink the PS's
    own drop-tail queue of ``host_queue_bytes``, TCP payload, each worker one Reno connection
    through it, ``replay/hostqueue.py``, BBR with a window target of ``bbr_segments`` if
    above 0, Linux's BBR whole if ``hostqueue.BBR_V1``; the uplinks processor-shared, or
    with ``uplink_queue`` a switch's drop-tail queue of the same size toward the PS, each
    worker one connection from a host of its own (no TCP Small Queues there, ``link_tsq``
    0), each direction's ACKs behind the other's queue; paired as ``fair``, and always
    with ``uplink_queue``, where with ``pull_requests`` (the asynchronous PS) a pull's
    request, sent as the pull becomes ready, crosses that queue, ``link_request``; no
    coupled NICs). Synchronous
    mechanisms add ``joins`` barrier slots, each a join of all ``workers`` lanes, and with
    ``nic_rate_bytes_per_us`` each lane's own NIC, out and in, links at that rate: link
    ``2 M + w`` (out) and ``2 M + W + w`` (in) of lane w, processor-shared. ``host``: every
    worker's compute and (without ``ps_cores``) every PS's updates share one host's cores,
    a coupled group of their own (``replay/hostcores.py``; amounts stay us at traced
    speed, so the host's port carries ``host.chunks_at_full_speed`` and each lane's one).
    ``share_windows``: the windows (bytes) a pull's and a push's transfers drew in the
    profile, (downlink, uplink, then each PS link's where the profile's PS count is M:
    ``link_share_rows``, ``link_windows``): a processor-shared PS link shares
    itself among its chunks in proportion to them, each lane's step drawing one; empty:
    equal shares. ``pings_us``: with ``hostqueue``, the intervals the workers' HTTP/2
    PINGs come apart on the pull connections (us; the profile's PS captures,
    ``Profile.ps_pings``): a held pull tries again at its worker's next one, the PS's
    answer ``ping_answer_us`` later (``link_pings``, ``replay/pings.py``); empty: at its
    probe timer."""
    w, m = workers, ps
    nics = nic_rate_bytes_per_us is not None
    r = async_ps_slots(m, joins, nics)
    i8 = np.int64
    fifo, block, hq = link == "fifo", link == "block", link == "hostqueue"
    up = hq and uplink_queue  # the uplinks a switch's queue, packet by packet
    coupled = (m > 1 and worker_rate_bytes_per_us < math.inf and not fifo and not block
               and not hq)
    kind = np.full(r, SERIAL, dtype=i8)
    acc = np.full(r, -1, dtype=i8)
    group = np.full(r, -1, dtype=i8)
    dest = np.full((w, r), -1, dtype=i8)
    port2 = np.full((w, r), -1, dtype=i8)
    acc[:1 + m] = np.arange(1 + m)
    b = 1 + 3 * m
    kind[b:b + joins] = JOIN
    dest[:, b:b + joins] = np.arange(joins)
    if ps_cores is not None:
        kind[1:1 + m] = POOL
        dest[:, 1:1 + m] = np.arange(m)
    lanes = np.arange(w)[:, None]
    for d in (0, 1):  # down, up
        cols = slice(1 + (1 + d) * m, 1 + (2 + d) * m)
        if coupled:
            kind[cols], group[cols] = NET, d
            dest[:, cols] = np.arange(m)
            port2[:, cols] = m + lanes
        else:
            kind[cols] = LINK
            dest[:, cols] = d * m + np.arange(m)
    nl = 2 * m
    lanes_cap = np.zeros(0)
    if nics:
        kind[b + joins:b + joins + 2] = LINK
        dest[:, b + joins] = nl + np.arange(w)
        dest[:, b + joins + 1] = nl + w + np.arange(w)
        lanes_cap = np.full(2 * w, float(nic_rate_bytes_per_us))
    caps: list[list[float]] = []
    links: list[list[int]] = []
    if coupled:
        caps = [[rate_bytes_per_us] * m + [worker_rate_bytes_per_us] * w] * 2
        links = [[d * m + i for i in range(m)] + [-1] * w for d in (0, 1)]
    if host is not None:
        _share_host(kind, group, dest, port2, len(caps), m, ps_cores is None)
        caps.append([host.chunks_at_full_speed] + [1.0] * (w * (1 + m)))
        links.append([-1] * (1 + w * (1 + m)))
    nports = np.array([len(c) for c in caps], dtype=i8)
    width = max(1, int(nports.max(initial=1)))
    port_cap = np.zeros((len(caps), width))
    port_link = np.full((len(caps), width), -1, dtype=i8)
    for gi, (c, li) in enumerate(zip(caps, links, strict=True)):
        port_cap[gi, :len(c)], port_link[gi, :len(li)] = c, li
    return ResourceTable(
        kind=kind, acc=acc, group=group, dest=dest, port2=port2,
        link_cap=np.concatenate([np.full(nl, float(rate_bytes_per_us)), lanes_cap]),
        link_fifo=np.concatenate([np.full(m, 3 if hq else 2 if block else int(fifo), dtype=i8),
                                  np.full(m, 3 if up else int(fifo), dtype=i8),
                                  np.zeros(len(lanes_cap), dtype=i8)]),
        # a worker NIC's lanes (out, in) are shaped as the PS links' two directions are
        link_burst=np.concatenate([np.repeat(np.array(burst_bytes, dtype=np.float64), m),
                                   np.repeat(np.array(burst_bytes, dtype=np.float64),
                                             len(lanes_cap) // 2)]),
        link_rev=np.concatenate([_pairs(m, up or (not fifo and not block and not coupled
                                              and min(window_bytes) > 0.0)),
                                 np.full(len(lanes_cap), -1, dtype=i8)]),
        link_win=np.concatenate([np.repeat(np.array(window_bytes, dtype=np.float64), m),
                                 np.zeros(len(lanes_cap))]),
        pool_cores=np.full(m if ps_cores is not None else 0, ps_cores or 1, dtype=i8),
        join_need=np.full(joins, w, dtype=i8), port_cap=port_cap.astype(np.float64),
        port_link=port_link, nports=nports, nacc=1 + m,
        link_buf=np.concatenate([np.full(m, float(host_queue_bytes) if hq else 0.0),
                                 np.full(m, float(host_queue_bytes) if up else 0.0),
                                 np.zeros(len(lanes_cap))]),
        link_rtt=np.concatenate([np.full(m, BASE_RTT_US if hq else 0.0),
                                 np.full(m, BASE_RTT_US if up else 0.0),
                                 np.zeros(len(lanes_cap))]),
        link_bbr=np.concatenate([np.full(m, float(bbr_segments) if hq else 0.0),
                                 np.full(m, float(bbr_segments) if up else 0.0),
                                 np.zeros(len(lanes_cap))]),
        link_tsq=np.concatenate([np.ones(m), np.zeros(m) if up else np.ones(m),
                                 np.ones(len(lanes_cap))]),
        link_standing=np.concatenate([np.full(2 * m, float(standing_bytes) if link == "fair"
                                              else 0.0), np.zeros(len(lanes_cap))]),
        link_shares=link_share_rows(share_windows if link == "fair" and not coupled
                                    else ((), ()), m, len(lanes_cap), share_seed),
        # the workers' HTTP/2 PINGs on the pull connections: the downlinks' (host queues)
        link_pings=np.concatenate([np.repeat(ping_row(pings_us if hq else (),
                                                      max(1, len(pings_us)))[None, :],
                                             m, 0),
                                   np.zeros((m + len(lanes_cap), max(1, len(pings_us))))]),
        link_answer=np.concatenate([np.full(m, float(ping_answer_us) if hq else 0.0),
                                    np.zeros(m + len(lanes_cap))]),
        # an asynchronous pull's request, sent as the pull becomes ready, crosses the
        # switch's queue toward its PS (a synchronous pull's went at the step's start)
        link_request=np.concatenate([np.arange(m, 2 * m) if up and pull_requests
                                     else np.full(m, -1), np.full(m + len(lanes_cap), -1)]
                                    ).astype(i8))


def link_share_rows(windows: Sequence[Sequence[float]], m: int, extra: int,
                    seed: int) -> np.ndarray | None:
    """``link_shares`` of M PSes' links (downlinks, uplinks, then ``extra`` more links at
    1): each PS's downlink the pull windows of ``windows`` (``grid.measured_share_windows``:
    pulls, pushes, then where it holds M PSes' each PS link's own; bytes, each an equally
    likely draw; ``link_windows``), its uplink the push ones, a link without any at 1;
    each row in an order of its own that ``seed`` shuffles, so that a replication's lanes draw
    others than another's (``kernel._share_pick`` picks by lane, step and link); None where
    neither direction has windows (equal shares)."""
    if not any(windows):
        return None
    per_link = link_windows(windows, m)
    k = max(len(x) for x in per_link)
    rng = random.Random(f"link shares {seed}")
    rows = []
    for x in per_link:
        row = [float(x[j * len(x) // k]) for j in range(k)] if x else [1.0] * k
        rng.shuffle(row)
        rows.append(row)
    rows += [[1.0] * k for _ in range(extra)]
    return np.array(rows, dtype=np.float64)


def link_windows(windows: Sequence[Sequence[float]], m: int) -> list[Sequence[float]]:
    """The windows each of M PSes' links draws from (``measured_share_windows``' order:
    every downlink, then every uplink): each PS's own where ``windows`` holds M PSes' (a
    profile of M PSes predicted at M), else the pooled pulls' and pushes'."""
    if len(windows) == 2 + 2 * m:
        return list(windows[2:])
    return [windows[0]] * m + [windows[1]] * m


def _share_host(kind: np.ndarray, group: np.ndarray, dest: np.ndarray, port2: np.ndarray,
                gi: int, m: int, ps_updates: bool) -> None:
    """Make the worker's compute slot (and, with ``ps_updates``, the M PS update slots) of
    every lane flows of coupled group ``gi``: port 0 the host's cores, port ``1 + w (1 + M)
    + s`` lane w's slot s (0 the worker, 1 + i PS i), a chunk at a time (in place)."""
    slots = list(range(1 + m)) if ps_updates else [0]
    w = dest.shape[0]
    for s in slots:
        kind[s], group[s] = NET, gi
        dest[:, s] = 0
        port2[:, s] = 1 + np.arange(w) * (1 + m) + s


def _pairs(m: int, paired: bool) -> np.ndarray:
    """``link_rev`` of M PSes' links (downlinks 0..M-1, uplinks M..2M-1): each PS's two
    directions paired when ``paired``, else none."""
    if not paired:
        return np.full(2 * m, -1, dtype=np.int64)
    return np.concatenate([np.arange(m, 2 * m), np.arange(m)]).astype(np.int64)
