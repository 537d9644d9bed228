"""The reference oracle: the replayer's event loop in plain Python (ICPE'20 Algorithm 3.1),
as gradwire ran it before the compiled kernel (replay/kernel.py) replaced it.

Only tests use it: the differential and property tests run the same step graphs (from
``replay/generators.py``) through this loop and through the kernel and compare every output
to the bit. Resources per worker: 0 its compute, 1..M its share of PS_i, then DOWN_i and UP_i;
shared per PS i the DOWNLINK_i and UPLINK_i links, processor-shared on a virtual clock (or
FIFO), coupled by finite worker NICs (``sharing.maxmin_rates``) when there are several PSes.
HTTP/2 multiplexing: a stream's first service is at most WIN bytes, after which it waits
behind the first services of the others. Events sit in one heap of ``(time, seq, ...)``.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from heapq import heappop, heappush

from gradwire.replay.engine import SimConfig, Timeline
from gradwire.replay.generators import async_ps_step_graph, link_share_rows, transfer_priorities
from gradwire.replay.kernel import _share_pick
from gradwire.replay.sharing import maxmin_rates
from gradwire.replay.taskgraph import StepGraph
from gradwire.replay.template import StepTemplate, written_in_order

_DONE, _LINK, _RELEASE, _NOTIFY, _NET, _START = 0, 1, 2, 3, 4, 5


@dataclass
class _Link:
    capacity: float  # bytes per microsecond
    v: float = 0.0  # virtual bytes served to every active flow so far
    t: float = 0.0  # when v was last advanced
    n: int = 0  # active flows
    sw: float = 0.0  # their share weights added up (n with equal shares)
    shares: tuple = (1.0,)  # the weights a lane's step draws from (kernel._share_pick)
    version: int = 0
    flows: list = field(default_factory=list)  # heap of (finish tag | arrival, seq, w, op, res)
    busy_us: float = 0.0
    fifo: bool = False
    sizes: dict = field(default_factory=dict)  # fifo: chunk bytes by seq
    head_start: float = 0.0  # fifo: when the head chunk started
    burst: float = 0.0  # token-bucket depth, bytes
    tokens: float = 0.0  # bytes in the bucket when the link last went idle
    rev: int = -1  # the link of the other direction (two-way traffic), -1 none
    win: float = 0.0  # bytes this direction's flows keep on their way (two-way traffic)
    standing: float = 0.0  # > 0: every connection counted, its standing queue at most this
    cur: float = 0.0  # the rate now: below capacity while the reverse has the bigger window
    dup: bool = False  # the last chunk to leave dropped the link to one flow or none

    def __post_init__(self) -> None:
        self.cur = self.capacity


@dataclass
class _Net:
    """One direction of all PS links when worker NICs couple them: active chunks by sequence
    number as [worker, op, resource, PS, bytes left, rate]."""

    flows: dict = field(default_factory=dict)
    t: float = 0.0
    version: int = 0


@dataclass(frozen=True)
class _Compiled:
    """A generator's step graph as this loop reads it: per op a kind code (0 delay, 1
    worker, 2 PS, 3 down, 4 up), a resource (-1 delay, 0 the worker, then PS_i, DOWN_i, UP_i),
    a link (-1 unless a transfer) and the step graph's fields."""

    code: list[int]
    res: list[int]
    link: list[int]
    amount: list[float]
    succ: list[list[int]]
    indeg: list[int]
    roots: list[int]
    prio: list[float]
    pre: list[float]
    post: list[float]
    weight: list[int]
    ops: int


def _as_loop_graph(g: StepGraph, m: int) -> _Compiled:
    code, link = [], []
    for r in g.slot:
        c = 0 if r < 0 else 1 if r == 0 else 2 if r <= m else 3 if r <= 2 * m else 4
        code.append(c)
        link.append(r - 1 - m if c in (3, 4) else -1)
    return _Compiled(code, list(g.slot), link, g.amount, g.succ, g.indeg, g.roots, g.prio,
                     g.pre, g.post, g.weight, g.ops)


class PythonSimulator:
    """The oracle (module docstring): the same inputs and outputs as ``engine.Simulator``."""

    def __init__(self, templates: Sequence[StepTemplate], cfg: SimConfig,
                 ps_map: Sequence[Sequence[int]] | None = None, cache: object = None) -> None:
        self.templates = list(templates)  # cache: accepted as engine.Simulator's, unused
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.now = 0.0
        self.events = 0
        m = cfg.ps
        self.links = [_Link(cfg.rate_bytes_per_us, fifo=cfg.link == "fifo",
                            burst=cfg.burst_bytes[d], tokens=cfg.burst_bytes[d],
                            win=cfg.window_bytes[d],
                            standing=cfg.standing_bytes if cfg.link == "fair" else 0.0)
                      for d in (0, 1) for _ in range(m)]  # down_i, up_i
        maps = ps_map or [t.ps for t in self.templates]
        # the pulls floored in the order replayed, as the engine does (template.py's
        # written_in_order, tested on its own: the oracle checks the kernel)
        prios = [transfer_priorities(t, cfg.order, self.rng) for t in self.templates]
        self.compiled = [_as_loop_graph(async_ps_step_graph(
            written_in_order(t, p, q), p, q, m, cfg.win_bytes, cfg.record), m)
            for t, p, q in zip(self.templates, maps, prios, strict=True)]
        w = cfg.workers
        self.step_ends: list[list[float]] = [[] for _ in range(w)]
        self.step_starts: list[list[float]] = [[] for _ in range(w)]
        self.timeline: list[Timeline] = []
        self.worker_busy_us = 0.0
        self.ps_busy_us = [0.0] * m  # PS compute, summed over the updates running at once
        self._run = self._build_loop()

    def run(self, steps_per_worker: int) -> None:
        """Advance until every worker has completed ``steps_per_worker`` steps."""
        self._run(steps_per_worker)

    def link_busy_share(self) -> list[float]:
        """Busy fraction of each link (down_0.., up_0..) over the whole simulated time."""
        return [link.busy_us / max(self.now, 1e-9) for link in self.links]

    def _build_loop(self) -> Callable[[int], None]:  # noqa: C901 - one closure on purpose
        """The event loop and its helpers as closures over local state; starts every worker."""
        cfg = self.cfg
        templates, compiled, links = self.templates, self.compiled, self.links
        rng_pick = self.rng.randrange
        n_tpl = len(compiled)
        record, win, m = cfg.record, cfg.win_bytes, cfg.ps
        fifo = cfg.link == "fifo"
        coupled = m > 1 and cfg.worker_rate_bytes_per_us < math.inf and not fifo
        if not fifo and not coupled and min(cfg.window_bytes) > 0.0:
            for i in range(m):  # each PS's two directions: two-way traffic
                links[i].rev, links[m + i].rev = m + i, i
        rows = link_share_rows(cfg.share_windows if cfg.link == "fair" and not coupled
                               else ((), ()), m, 0, cfg.seed)
        for li, row in enumerate(rows.tolist() if rows is not None else []):
            links[li].shares = tuple(row)
        nets = [_Net(), _Net()]  # down, up (coupled only)
        ps_caps = [cfg.rate_bytes_per_us] * m
        worker_cap = cfg.worker_rate_bytes_per_us
        nres = 1 + 3 * m
        w_count = cfg.workers
        cores = cfg.ps_cores  # None: no limit (a core per worker's update)
        ps_free = [cores or 0] * m  # free cores of PS i
        ps_wait: list[deque[int]] = [deque() for _ in range(m)]  # workers waiting for one
        ps_busy = self.ps_busy_us
        heap: list = []
        kicks: list[tuple[int, int]] = []  # idle links with chunks released at this instant
        tpl = [0] * w_count
        cur: list[_Compiled] = [compiled[0]] * w_count
        pending: list[list[int]] = [[] for _ in range(w_count)]
        left = [0] * w_count
        remaining: list[dict[int, float]] = [{} for _ in range(w_count)]
        queues = [[[] for _ in range(nres)] for _ in range(w_count)]
        busy = [[False] * nres for _ in range(w_count)]
        step_ends, step_starts = self.step_ends, self.step_starts
        timeline = self.timeline
        started_at: dict[tuple[int, int], float] = {}
        now = 0.0
        seq = 0
        events = 0
        worker_busy = 0.0
        target = 0
        short = 0

        def start_step(w: int) -> None:
            ti = rng_pick(n_tpl)
            c = compiled[ti]
            tpl[w] = ti
            cur[w] = c
            pending[w] = c.indeg[:]
            left[w] = c.ops
            remaining[w] = {}
            step_starts[w].append(now)
            for i in c.roots:
                ready(w, i, c)

        def ready(w: int, i: int, c: _Compiled) -> None:
            nonlocal seq
            seq += 1
            if c.pre[i]:  # a folded delay first
                heappush(heap, (now + c.pre[i], seq, _RELEASE, w, i))
                return
            release(w, i, c)

        def release(w: int, i: int, c: _Compiled) -> None:
            nonlocal seq
            r = c.res[i]
            if r < 0:  # a delay
                if record:
                    started_at[(w, i)] = now
                heappush(heap, (now + c.amount[i], seq, _DONE, w, i))
                return
            q = queues[w][r]
            if c.code[i] < 3:  # compute: worker or PS share
                heappush(q, (0, 0.0, seq, i))
                if not busy[w][r]:
                    serve(w, r)
                return
            heappush(q, (0, c.prio[i], seq, i))
            if not busy[w][r]:
                # start once everything released at this instant is queued, so order decides
                busy[w][r] = True
                kicks.append((w, r))

        def serve(w: int, r: int) -> None:
            """Start the next queued op or chunk of worker ``w`` on resource ``r`` (idle)."""
            nonlocal seq, worker_busy
            q = queues[w][r]
            if not q:
                busy[w][r] = False
                return
            busy[w][r] = True
            if cores is not None and 0 < r <= m:  # an update needs one of the PS's cores
                if not ps_free[r - 1]:
                    ps_wait[r - 1].append(w)
                    return
                ps_free[r - 1] -= 1
            i = heappop(q)[3]
            c = cur[w]
            if r <= m:  # compute
                if record:
                    started_at[(w, i)] = now
                a = c.amount[i]
                if r == 0:
                    worker_busy += a
                else:
                    ps_busy[r - 1] += a
                seq += 1
                heappush(heap, (now + a, seq, _DONE, w, i))
                return
            rem = remaining[w]
            chunk = rem.get(i)
            if chunk is None:  # first service of this stream
                chunk = size = c.amount[i]
                if record:
                    started_at[(w, i)] = now
                if win is not None and size > win:
                    chunk = win
                rem[i] = size - chunk
            else:
                rem[i] = 0.0
            li = c.link[i]
            if coupled:
                d = 0 if li < m else 1
                net = nets[d]
                net_advance(net, d)
                seq += 1
                net.flows[seq] = [w, i, r, li - d * m, chunk, 0.0]
                net_reschedule(net, d)
                return
            link = links[li]
            sent = 0.0  # the token bucket's bytes, sent at once by an idle link
            if link.n:
                link.v += (now - link.t) * link.cur / link.sw
                link.busy_us += now - link.t
            elif link.burst > 0.0:
                tokens = min(link.burst, link.tokens + (now - link.t) * link.capacity)
                sent = min(chunk, tokens)
                link.tokens = tokens - sent
            link.t = now
            link.n += 1
            seq += 1
            wg = link.shares[_share_pick(w, len(step_starts[w]), li, len(link.shares))]
            link.sw += wg
            if fifo:
                link.sizes[seq] = chunk
                if not link.flows:
                    link.head_start = now - sent / link.capacity
                heappush(link.flows, (seq, seq, w, i, r, wg))
            else:
                heappush(link.flows, (link.v + chunk / wg - sent / wg, seq, w, i, r, wg))
            if link.rev >= 0 and (link.n <= 2 or link.standing > 0):  # 1st or 2nd, or any
                duplex(link, links[link.rev])
                reschedule(link.rev, links[link.rev])
            reschedule(li, link)

        def duplex(link: _Link, other: _Link) -> None:
            """Two-way traffic (kernel._duplex): ``other``'s clock advanced at its rate so
            far, then both rates from the windows of their flows."""
            if other.n:
                other.v += (now - other.t) * other.cur / other.sw
                other.busy_us += now - other.t
                other.t = now
            link.cur = window_rate(link, other)
            other.cur = window_rate(other, link)

        def window_rate(link: _Link, other: _Link) -> float:
            if other.standing > 0:  # every connection counted (kernel._window_rate)
                if not link.n or not other.n:
                    return link.capacity
                own, queue = link.n * link.win, min(other.n * other.win, other.standing)
                return link.capacity * own / queue if own < queue else link.capacity
            if link.n == 1 and other.n and other.win > link.win:
                return link.capacity * link.win / other.win
            return link.capacity

        def reschedule(li: int, link: _Link) -> None:
            nonlocal seq
            link.version += 1
            if not link.flows:
                return
            seq += 1
            if fifo:
                head = link.flows[0][1]
                at = link.head_start + link.sizes[head] / link.capacity
            else:
                tag = link.flows[0][0]
                at = link.t + max(0.0, tag - link.v) * link.sw / link.cur
            heappush(heap, (at, seq, _LINK, li, link.version))

        def net_advance(net: _Net, d: int) -> None:
            dt = now - net.t
            if dt > 0 and net.flows:
                active = set()
                for f in net.flows.values():
                    f[4] -= f[5] * dt
                    active.add(f[3])
                for ps in active:
                    links[d * m + ps].busy_us += dt
            net.t = now

        def net_reschedule(net: _Net, d: int) -> None:
            nonlocal seq
            net.version += 1
            flows = list(net.flows.values())
            if not flows:
                return
            rates = maxmin_rates([(f[0], f[3]) for f in flows], ps_caps, worker_cap)
            for f, x in zip(flows, rates, strict=True):
                f[5] = x
            seq += 1
            at = now + min(max(0.0, f[4]) / f[5] for f in flows)
            heappush(heap, (at, seq, _NET, d, net.version))

        def chunk_done(w: int, i: int, r: int, owner: _Link | _Net,
                       again: Callable[..., None], *args: object) -> None:
            """A chunk of worker ``w``'s stream ``i`` left ``owner`` (a link or a coupled
            direction): the stream's rest queues again or it completes; a paired link's
            reverse is rescheduled (its rate changed); the next chunk starts, and
            ``again(*args)`` reschedules the owner if serving did not."""
            nonlocal seq
            rem = remaining[w]
            # decided before the next chunk is served: that may be this stream's rest
            finished = rem[i] <= 1e-9
            if not finished:  # after a first WIN-sized chunk: behind other firsts
                seq += 1
                heappush(queues[w][r], (1, 0.0, seq, i))
            if isinstance(owner, _Link) and owner.dup:
                reschedule(owner.rev, links[owner.rev])
            version = owner.version
            serve(w, r)
            if owner.version == version:
                again(*args)
            if finished:
                del rem[i]
                complete(w, i, cur[w])

        def complete(w: int, i: int, c: _Compiled) -> None:
            nonlocal seq, events
            events += c.weight[i]
            if record:
                t = templates[tpl[w]]
                timeline.append(Timeline(w, t.kind[i], t.name[i], started_at.pop((w, i), now), now))
            if c.post[i]:
                seq += 1
                heappush(heap, (now + c.post[i], seq, _NOTIFY, w, i))
                return
            notify(w, i, c)

        def notify(w: int, i: int, c: _Compiled) -> None:
            nonlocal short
            pend = pending[w]
            for s in c.succ[i]:
                n = pend[s] - 1
                pend[s] = n
                if n == 0:
                    ready(w, s, c)
            left[w] -= 1
            if left[w] == 0:
                ends = step_ends[w]
                ends.append(now)
                if len(ends) == target:
                    short -= 1
                start_step(w)

        def run(steps_per_worker: int) -> None:
            nonlocal now, seq, events, target, short
            target = steps_per_worker
            short = sum(1 for e in step_ends if len(e) < steps_per_worker)
            while short:
                if kicks and (not heap or heap[0][0] > now):
                    todo = kicks[:]
                    kicks.clear()
                    for w, r in todo:  # this instant is over: idle links start
                        serve(w, r)
                    continue
                if not heap:
                    break
                ev = heappop(heap)
                now = ev[0]
                kind = ev[2]
                if kind == _DONE:
                    w, i = ev[3], ev[4]
                    c = cur[w]
                    r = c.res[i]
                    if r >= 0:  # compute (transfers end on _LINK)
                        if cores is not None and 0 < r <= m:  # its core goes to who waited
                            ps_free[r - 1] += 1
                            if queues[w][r]:
                                ps_wait[r - 1].append(w)
                            else:
                                busy[w][r] = False
                            waiting = ps_wait[r - 1]
                            while ps_free[r - 1] and waiting:
                                serve(waiting.popleft(), r)
                        elif queues[w][r]:
                            serve(w, r)
                        else:
                            busy[w][r] = False
                    complete(w, i, c)
                elif kind == _LINK:
                    li = ev[3]
                    link = links[li]
                    if ev[4] != link.version:
                        continue
                    if link.n:
                        link.v += (now - link.t) * link.cur / link.sw
                        link.busy_us += now - link.t
                    link.t = now
                    sq, w, i, r, wg = heappop(link.flows)[1:]
                    link.n -= 1
                    link.sw = link.sw - wg if link.n else 0.0
                    link.dup = link.rev >= 0 and (link.n <= 1 or link.standing > 0)
                    if link.dup:
                        duplex(link, links[link.rev])
                    if fifo:
                        del link.sizes[sq]
                        link.head_start = now
                    chunk_done(w, i, r, link, reschedule, li, link)
                elif kind == _NET:
                    d = ev[3]
                    net = nets[d]
                    if ev[4] != net.version:
                        continue
                    net_advance(net, d)
                    key = min(net.flows, key=lambda k: (net.flows[k][4] / net.flows[k][5], k))
                    w, i, r = net.flows.pop(key)[:3]
                    chunk_done(w, i, r, net, net_reschedule, net, d)
                elif kind == _RELEASE:
                    w = ev[3]
                    release(w, ev[4], cur[w])
                elif kind == _NOTIFY:
                    w = ev[3]
                    notify(w, ev[4], cur[w])
                else:  # _START: a worker's first step, at its start offset
                    start_step(ev[3])
            self.now = now
            self.events = events
            self.worker_busy_us = worker_busy

        offsets = cfg.start_offsets_us
        for k in range(w_count):
            at = offsets[k] if k < len(offsets) else 0.0
            if at > 0:
                seq += 1
                heappush(heap, (at, seq, _START, k, 0))
            else:
                start_step(k)
        self.worker_busy_us = worker_busy  # the compute started at time 0
        return run

