"""The discrete-event replayer (ICPE'20 Algorithm 3.1), deterministic.

Each worker runs profiled step templates sampled with replacement. Resources: per worker its
WORKER (serial compute) and, per PS i, its PS_i share (serial; updates of different workers run
on separate PS cores, as in the paper); shared per PS i the DOWNLINK_i and UPLINK_i links, split
equally among the workers active on them (each worker transmits at most one chunk per link at a
time). A link is a processor-sharing server run on a virtual clock, so an event costs O(log n)
whatever the number of workers. HTTP/2 multiplexing: with flow control on, a stream's first
service is at most WIN bytes, after which it waits behind the first services of the others and
then runs to completion; with flow control off, whole streams in queue order. Events sit in one
heap of ``(time, seq, ...)``; the sequence number breaks ties, so a seed fixes the output.

The event loop is one closure over local state (no attribute lookups on the hot path): ops and
resources are small integers precomputed per template. ``replay/fastloop.py`` has the same loop
compiled with numba, bit-identical, and runs it where it applies (see ``_choose_engine``).
"""

from __future__ import annotations

import logging
import math
import os
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from heapq import heappop, heappush
from typing import Any

from gradwire.replay.sharing import maxmin_rates
from gradwire.replay.template import DELAY, DOWN, PS, UP, WORKER, StepTemplate

log = logging.getLogger(__name__)

_DONE, _LINK, _RELEASE, _NOTIFY, _NET, _START = 0, 1, 2, 3, 4, 5
ENGINES = ("auto", "python", "fast")
_CODE = {DELAY: 0, WORKER: 1, PS: 2, DOWN: 3, UP: 4}


@dataclass(frozen=True)
class SimConfig:
    """One configuration to simulate.

    ``rate_bytes_per_us``: goodput of each PS link in each direction; ``win_bytes``: the HTTP/2
    window for the first service of a stream (None: flow control off, whole streams);
    ``order``: queue order of transfers, ``observed``, ``tic``, ``earliest``, ``reverse`` or
    ``random``;
    ``worker_rate_bytes_per_us``: each worker's NIC per direction; when finite and there are
    several PSes, a worker's flows to different PSes share it (ICPE'20 section 5, as max-min
    fair sharing, ``replay.sharing``), else links of different PSes are independent.
    ``ps_cores``: cores of each PS for the updates (None: every worker's update runs on a core
    of its own, as in ICPE'20; N: at most N updates at once per PS, the others wait in order).
    """

    workers: int
    ps: int
    rate_bytes_per_us: float
    win_bytes: float | None = None
    order: str = "observed"
    link: str = "fair"  # 'fair': equal shares (the paper); 'fifo': one chunk at a time
    seed: int = 0
    record: bool = False
    worker_rate_bytes_per_us: float = math.inf
    start_offsets_us: tuple[float, ...] = ()  # per worker: when its first step starts
    ps_cores: int | None = None


@dataclass
class _Link:
    capacity: float  # bytes per microsecond
    v: float = 0.0  # virtual bytes served to every active flow so far
    t: float = 0.0  # when v was last advanced
    n: int = 0  # active flows
    version: int = 0
    flows: list = field(default_factory=list)  # heap of (finish tag | arrival, seq, w, op, res)
    busy_us: float = 0.0
    fifo: bool = False
    sizes: dict = field(default_factory=dict)  # fifo: chunk bytes by seq
    head_start: float = 0.0  # fifo: when the head chunk started


@dataclass
class _Net:
    """One direction of all PS links when worker NICs couple them: active chunks by sequence
    number as [worker, op, resource, PS, bytes left, rate]."""

    flows: dict = field(default_factory=dict)
    t: float = 0.0
    version: int = 0


@dataclass(frozen=True)
class _Compiled:
    """A template as the event loop reads it: per op a kind code, a resource index (-1 for a
    delay; 0 the worker; then PS_i, DOWN_i, UP_i), a link index (-1 unless a transfer);
    ``pre``/``post``: delays folded into the op (waited before it queues / before its
    successors learn it is done); ``weight``: template ops it stands for (itself + folded);
    ``ops``: ops left after folding."""

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


def fold_delays(t: StepTemplate) -> tuple[list[list[int]], list[int], list[float],
                                            list[float], list[int], list[bool]]:
    """Fold delays into their neighbours where that is exact: a delay that is the only
    predecessor of its only successor becomes that successor's ``pre`` wait; a delay that is
    the only successor of its only predecessor becomes that predecessor's ``post`` wait.

    Returns successors, in-degrees, pre and post waits (us), weights (template ops each op
    stands for) and which ops are gone.
    """
    n = len(t.kind)
    succ = [list(x) for x in t.succ]
    indeg = list(t.indeg)
    preds: list[list[int]] = [[] for _ in range(n)]
    for a in range(n):
        for b in succ[a]:
            preds[b].append(a)
    pre, post = [0.0] * n, [0.0] * n
    weight = [1] * n
    gone = [False] * n
    for d in range(n):
        if t.kind[d] != DELAY:
            continue
        wait = t.amount[d] + pre[d] + post[d]
        if len(succ[d]) == 1 and indeg[succ[d][0]] == 1:
            s = succ[d][0]
            pre[s] += wait
            weight[s] += weight[d]
            preds[s] = preds[d]
            indeg[s] = indeg[d]
            for p in preds[d]:
                succ[p] = [s if x == d else x for x in succ[p]]
        elif len(preds[d]) == 1 and len(succ[preds[d][0]]) == 1:
            p = preds[d][0]
            post[p] += wait
            weight[p] += weight[d]
            succ[p] = succ[d]
            for x in succ[d]:
                preds[x] = [p if y == d else y for y in preds[x]]
        else:
            continue
        gone[d] = True
    return succ, indeg, pre, post, weight, gone


def _choose_engine(cfg: SimConfig, engine: str | None) -> str:
    """``python`` or ``fast`` (the compiled loop, ``replay/fastloop.py``) for ``cfg``.

    ``engine`` (else ``$GRADWIRE_ENGINE``, else ``auto``): ``auto`` takes the compiled loop
    where it applies and numba imports, else Python (logged at debug level); ``python`` forces
    Python; ``fast`` as an argument fails if the compiled loop cannot run ``cfg``, and from the
    environment fails only without numba (timelines and PS core limits still run in Python).
    """
    from gradwire.replay import fastloop

    strict = engine is not None
    want = engine or os.environ.get("GRADWIRE_ENGINE") or "auto"
    if want not in ENGINES:
        raise ValueError(f"unknown replay engine {want!r}: use {', '.join(ENGINES)}")
    if want == "python":
        return "python"
    why = fastloop.unsupported(cfg)
    if why is None:
        return "fast"
    if want == "fast" and (strict or not fastloop.AVAILABLE):
        raise ValueError(f"the fast replay engine cannot run this configuration: {why}")
    log.debug("replaying in Python: %s", why)
    return "python"


Folded = tuple[list[list[int]], list[int], list[float], list[float], list[int], list[bool]]


class CompileCache:
    """What the replications of one configuration share: each template's folded delays and,
    unless priorities are random (drawn per replication), the compiled templates themselves
    and the compiled loop's arrays. Set-up was most of a replication's time on large profiles
    (ResNet-50: 0.1 s of folding against 0.06 s of replay). Results are the same to the bit.

    One cache serves simulators of the same templates and PS map whose configurations differ
    at most in seed and start offsets.
    """

    def __init__(self, templates: Sequence[StepTemplate]) -> None:
        self.folds: dict[int, Folded] = {k: fold_delays(t) for k, t in enumerate(templates)}
        self.compiled: list[_Compiled] | None = None
        self._tables: Any = None
        self._key: tuple | None = None

    def check(self, cfg: SimConfig, n_templates: int) -> None:
        """Refuse a configuration the cached set-up was not made for."""
        key = (n_templates, cfg.ps, cfg.record, cfg.order, cfg.workers, cfg.link)
        if self._key is None:
            self._key = key
        elif key != self._key:
            raise ValueError(f"a compile cache made for {self._key} used for {key}")

    def keep(self, cfg: SimConfig, compiled: list[_Compiled]) -> None:
        """Keep the compiled templates when every replication compiles them alike."""
        if cfg.order != "random":
            self.compiled = compiled

    def tables(self, compiled: list[_Compiled], ps: int) -> Any:
        """The compiled loop's arrays of ``compiled`` (built once when they are shared)."""
        from gradwire.replay.fastloop import loop_tables

        if self.compiled is not compiled:
            return loop_tables(compiled, ps)
        if self._tables is None:
            self._tables = loop_tables(compiled, ps)
        return self._tables


class Simulator:
    """Replays step templates for ``cfg.workers`` workers (see the module docstring).

    ``engine``: ``auto``, ``python`` or ``fast`` (see ``_choose_engine``); ``self.engine`` says
    which loop runs. Both give the same results to the bit.
    """

    def __init__(self, templates: Sequence[StepTemplate], cfg: SimConfig,
                 ps_map: Sequence[Sequence[int]] | None = None,
                 engine: str | None = None, cache: CompileCache | None = None) -> None:
        if not templates:
            raise ValueError("no step templates to replay")
        if cfg.link not in ("fair", "fifo"):
            raise ValueError(f"unknown link discipline {cfg.link!r}")
        self.templates = list(templates)
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.now = 0.0
        self.events = 0
        m = cfg.ps
        self.links = [_Link(cfg.rate_bytes_per_us, fifo=cfg.link == "fifo")
                      for _ in range(2 * m)]  # down_i, up_i
        # ps_map[template][op] -> PS index under this configuration (default: as profiled)
        maps = ps_map or [t.ps for t in self.templates]
        if cache is not None:
            cache.check(cfg, len(self.templates))
        if cache is not None and cache.compiled is not None:
            self.compiled = cache.compiled  # priorities drawn from no RNG: the same each time
        else:
            folds = cache.folds if cache is not None else {}
            self.compiled = [self._compile(t, p, self._priorities(t), folds.get(k))
                             for k, (t, p) in enumerate(zip(self.templates, maps, strict=True))]
            if cache is not None:
                cache.keep(cfg, self.compiled)
        w = cfg.workers
        self.step_ends: list[list[float]] = [[] for _ in range(w)]
        self.step_starts: list[list[float]] = [[] for _ in range(w)]
        self.timeline: list[tuple[int, str, str, float, float]] = []
        self.worker_busy_us = 0.0
        self.ps_busy_us = [0.0] * m  # PS compute, summed over the updates running at once
        self.engine = _choose_engine(cfg, engine)
        self._fast = None
        if self.engine == "fast":
            from gradwire.replay.fastloop import FastLoop

            self._fast = FastLoop(self.compiled, cfg, self.rng,
                                  cache.tables(self.compiled, m) if cache is not None else None)
            self._fast.sync_steps(self.step_starts, self.step_ends)
            self.ps_busy_us[:] = self._fast.ps_busy_us()  # updates started at time 0
            self._run = self._run_fast
        else:
            self._run = self._build_loop()

    # -- set-up ------------------------------------------------------------------------------

    def _priorities(self, t: StepTemplate) -> list[float]:
        order = self.cfg.order
        if order == "observed":
            return list(t.prio)
        if order == "reverse":
            return [-p for p in t.prio]
        if order in ("tic", "earliest"):
            given = t.tic if order == "tic" else t.earliest
            return list(given) if given else list(t.prio)
        if order == "random":
            return [self.rng.random() for _ in t.prio]
        raise ValueError(f"unknown transfer order {order!r}")

    def _compile(self, t: StepTemplate, ps_of: Sequence[int], prio: list[float],
                 folded: Folded | None = None) -> _Compiled:
        m = self.cfg.ps
        code = [_CODE[k] for k in t.kind]
        res, link = [], []
        for c, p in zip(code, ps_of, strict=True):
            res.append((-1, 0, 1 + p, 1 + m + p, 1 + 2 * m + p)[c])
            link.append(p if c == 3 else m + p if c == 4 else -1)
        amount = [float(a) for a in t.amount]
        if self.cfg.record:  # keep every op for the timeline
            n = len(code)
            return _Compiled(code, res, link, amount, t.succ, list(t.indeg), t.roots, prio,
                             [0.0] * n, [0.0] * n, [1] * n, n)
        succ, indeg, pre, post, weight, gone = folded or fold_delays(t)
        pre = list(pre)  # a folded template may be shared: its waits are not changed here
        for i, c in enumerate(code):
            if c == 0 and not gone[i]:  # a delay that stays: its waits join its duration
                amount[i] += pre[i]
                pre[i] = 0.0
        roots = [i for i, d in enumerate(indeg) if d == 0 and not gone[i]]
        return _Compiled(code, res, link, amount, succ, indeg, roots, prio, pre, post, weight,
                         gone.count(False))

    # -- the event loop -------------------------------------------------------------------------

    def run(self, steps_per_worker: int) -> None:
        """Advance until every worker has completed ``steps_per_worker`` steps."""
        self._run(steps_per_worker)

    def _run_fast(self, steps_per_worker: int) -> None:
        """The compiled loop; its results copied where the Python loop leaves them (of the
        links, only ``busy_us``: their other fields stay as built)."""
        fast = self._fast
        fast.run(steps_per_worker)
        fast.sync_steps(self.step_starts, self.step_ends)
        self.now = fast.now
        self.events = fast.events
        self.worker_busy_us = fast.worker_busy_us
        self.ps_busy_us[:] = fast.ps_busy_us()
        for link, busy in zip(self.links, fast.link_busy_us(), strict=True):
            link.busy_us = busy

    def _build_loop(self) -> Callable[[int], None]:  # noqa: C901 - one closure on purpose
        """The event loop and its helpers as closures over local state; starts every worker."""
        cfg = self.cfg
        templates, compiled, links = self.templates, self.compiled, self.links
        rng_pick = self.rng.randrange
        n_tpl = len(compiled)
        record, win, m = cfg.record, cfg.win_bytes, cfg.ps
        fifo = cfg.link == "fifo"
        coupled = m > 1 and cfg.worker_rate_bytes_per_us < math.inf and not fifo
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
            if link.n:
                link.v += (now - link.t) * link.capacity / link.n
                link.busy_us += now - link.t
            link.t = now
            link.n += 1
            seq += 1
            if fifo:
                link.sizes[seq] = chunk
                if not link.flows:
                    link.head_start = now
                heappush(link.flows, (seq, seq, w, i, r))
            else:
                heappush(link.flows, (link.v + chunk, seq, w, i, r))
            reschedule(li, link)

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
                at = link.t + max(0.0, tag - link.v) * link.n / link.capacity
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
            direction): the stream's rest queues again or it completes; the next chunk starts,
            and ``again(*args)`` reschedules the owner if serving did not."""
            nonlocal seq
            rem = remaining[w]
            # decided before the next chunk is served: that may be this stream's rest
            finished = rem[i] <= 1e-9
            if not finished:  # after a first WIN-sized chunk: behind other firsts
                seq += 1
                heappush(queues[w][r], (1, 0.0, seq, i))
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
                timeline.append((w, t.kind[i], t.name[i], started_at.pop((w, i), now), now))
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
                        link.v += (now - link.t) * link.capacity / link.n
                        link.busy_us += now - link.t
                    link.t = now
                    sq, w, i, r = heappop(link.flows)[1:]
                    link.n -= 1
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
        return run

    def link_busy_share(self) -> list[float]:
        """Busy fraction of each link (down_0.., up_0..) over the whole simulated time."""
        return [link.busy_us / max(self.now, 1e-9) for link in self.links]
