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
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from gradwire.replay.template import DELAY, PS, UP, WORKER, StepTemplate

_DONE, _LINK, _KICK = 0, 1, 2


@dataclass(frozen=True)
class SimConfig:
    """One configuration to simulate.

    ``rate_bytes_per_us``: goodput of each PS link in each direction; ``win_bytes``: the HTTP/2
    window for the first service of a stream (None: flow control off, whole streams);
    ``order``: queue order of transfers, ``observed``, ``tic``, ``reverse`` or ``random``.
    """

    workers: int
    ps: int
    rate_bytes_per_us: float
    win_bytes: float | None = None
    order: str = "observed"
    link: str = "fair"  # 'fair': equal shares (the paper); 'fifo': one chunk at a time
    seed: int = 0
    record: bool = False


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

    def advance(self, now: float) -> None:
        if self.n:
            self.v += (now - self.t) * self.capacity / self.n
            self.busy_us += now - self.t
        self.t = now


class Simulator:
    """Replays step templates for ``cfg.workers`` workers (see the module docstring)."""

    def __init__(self, templates: Sequence[StepTemplate], cfg: SimConfig,
                 ps_map: Sequence[Sequence[int]] | None = None) -> None:
        if not templates:
            raise ValueError("no step templates to replay")
        self.templates = list(templates)
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.now = 0.0
        self.seq = 0
        self.heap: list = []
        self.events = 0
        m = cfg.ps
        if cfg.link not in ("fair", "fifo"):
            raise ValueError(f"unknown link discipline {cfg.link!r}")
        self.links = [_Link(cfg.rate_bytes_per_us, fifo=cfg.link == "fifo")
                      for _ in range(2 * m)]  # down_i, up_i
        # ps_map[template][op] -> PS index under this configuration (default: as profiled)
        self.ps_map = ps_map or [t.ps for t in self.templates]
        self.prio = [self._priorities(t) for t in self.templates]
        # the resource each op queues on, (kind, PS index), precomputed per template
        self.res_of = [[(k, m[i] if k != WORKER else 0) for i, k in enumerate(t.kind)]
                       for t, m in zip(self.templates, self.ps_map, strict=True)]
        w = cfg.workers
        self.tpl = [0] * w
        self.pending: list[list[int]] = [[] for _ in range(w)]
        self.left = [0] * w
        self.remaining: list[dict[int, float]] = [{} for _ in range(w)]
        self.served: list[set[int]] = [set() for _ in range(w)]
        self.queues: list[dict[tuple[str, int], list]] = [{} for _ in range(w)]
        self.busy: list[set[tuple[str, int]]] = [set() for _ in range(w)]
        self.step_ends: list[list[float]] = [[] for _ in range(w)]
        self.step_starts: list[list[float]] = [[] for _ in range(w)]
        self.timeline: list[tuple[int, str, str, float, float]] = []
        self.started_at: dict[tuple[int, int], float] = {}
        self.target = 0
        self.short = 0
        self.worker_busy_us = 0.0
        for k in range(w):
            self._start_step(k)

    # -- set-up ------------------------------------------------------------------------------

    def _priorities(self, t: StepTemplate) -> list[float]:
        order = self.cfg.order
        if order == "observed":
            return list(t.prio)
        if order == "reverse":
            return [-p for p in t.prio]
        if order == "tic":
            return list(t.tic) if t.tic else list(t.prio)
        if order == "random":
            return [self.rng.random() for _ in t.prio]
        raise ValueError(f"unknown transfer order {order!r}")

    def _push(self, time: float, *event: object) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (time, self.seq, *event))

    def _start_step(self, w: int) -> None:
        ti = self.rng.randrange(len(self.templates))
        t = self.templates[ti]
        self.tpl[w] = ti
        self.pending[w] = list(t.indeg)
        self.left[w] = len(t.kind)
        self.remaining[w] = {}
        self.served[w] = set()
        self.step_starts[w].append(self.now)
        for i in t.roots:
            self._ready(w, i)

    # -- readiness and resources ----------------------------------------------------------------

    def _ready(self, w: int, i: int) -> None:
        ti = self.tpl[w]
        t = self.templates[ti]
        kind = t.kind[i]
        self.seq += 1
        if kind == DELAY:
            if self.cfg.record:
                self.started_at[(w, i)] = self.now
            heapq.heappush(self.heap, (self.now + t.amount[i], self.seq, _DONE, w, i))
            return
        res = self.res_of[ti][i]
        q = self.queues[w].get(res)
        if q is None:
            q = self.queues[w][res] = []
        if kind in (WORKER, PS):
            heapq.heappush(q, (0, 0.0, self.seq, i))
            if res not in self.busy[w]:
                self._serve(w, res)
            return
        heapq.heappush(q, (0, self.prio[ti][i], self.seq, i))
        if res not in self.busy[w]:
            # start once everything released at this instant is queued, so order decides
            self.busy[w].add(res)
            self.seq += 1
            heapq.heappush(self.heap, (self.now, self.seq, _KICK, w, res))

    def _serve(self, w: int, res: tuple[str, int]) -> None:
        """Start the next queued op or chunk of worker ``w`` on ``res`` (which is idle)."""
        q = self.queues[w].get(res)
        if not q:
            self.busy[w].discard(res)
            return
        _round, _key, _s, i = heapq.heappop(q)
        self.busy[w].add(res)
        t = self.templates[self.tpl[w]]
        kind = res[0]
        if kind in (WORKER, PS):
            self._begin(w, i)
            if kind == WORKER:
                self.worker_busy_us += t.amount[i]
            self._push(self.now + t.amount[i], _DONE, w, i)
            return
        left = self.remaining[w].get(i, t.amount[i])
        chunk = left
        win = self.cfg.win_bytes
        if i not in self.served[w]:
            self._begin(w, i)
            self.served[w].add(i)
            if win is not None and left > win:
                chunk = win
        self.remaining[w][i] = left - chunk
        link = self.links[res[1] + (self.cfg.ps if kind == UP else 0)]
        link.advance(self.now)
        link.n += 1
        self.seq += 1
        if link.fifo:
            link.sizes[self.seq] = chunk
            if not link.flows:
                link.head_start = self.now
            heapq.heappush(link.flows, (self.seq, self.seq, w, i, res))
        else:
            heapq.heappush(link.flows, (link.v + chunk, self.seq, w, i, res))
        self._reschedule(res[1] + (self.cfg.ps if kind == UP else 0))

    def _reschedule(self, li: int) -> None:
        link = self.links[li]
        link.version += 1
        if link.fifo:
            if link.flows:
                head = link.flows[0][1]
                self._push(link.head_start + link.sizes[head] / link.capacity, _LINK, li,
                           link.version)
            return
        if link.flows:
            tag = link.flows[0][0]
            self._push(link.t + max(0.0, tag - link.v) * link.n / link.capacity, _LINK, li,
                       link.version)

    def _begin(self, w: int, i: int) -> None:
        if self.cfg.record:
            self.started_at[(w, i)] = self.now

    # -- the event loop -------------------------------------------------------------------------

    def run(self, steps_per_worker: int) -> None:
        """Advance until every worker has completed ``steps_per_worker`` steps."""
        heap = self.heap
        self.target = steps_per_worker
        self.short = sum(1 for e in self.step_ends if len(e) < steps_per_worker)
        while heap and self.short:
            ev = heapq.heappop(heap)
            self.now = ev[0]
            if ev[2] == _DONE:
                self.events += 1
                w, i = ev[3], ev[4]
                res = self.res_of[self.tpl[w]][i]
                if res[0] == WORKER or res[0] == PS:
                    if self.queues[w][res]:
                        self._serve(w, res)
                    else:
                        self.busy[w].discard(res)
                self._complete(w, i)
            elif ev[2] == _KICK:
                self._serve(ev[3], ev[4])
            else:
                li, version = ev[3], ev[4]
                link = self.links[li]
                if version != link.version:
                    continue
                link.advance(self.now)
                _tag, sq, w, i, res = heapq.heappop(link.flows)
                link.n -= 1
                if link.fifo:
                    del link.sizes[sq]
                    link.head_start = self.now
                # decided before the next chunk is served: that may be this stream's rest
                finished = self.remaining[w].get(i, 0.0) <= 1e-9
                if not finished:
                    self._requeue(w, i, res)
                self._serve(w, res)
                self._reschedule(li)
                if finished and self._stream_done(w, i):
                    self.events += 1
                    self._complete(w, i)

    def _requeue(self, w: int, i: int, res: tuple[str, int]) -> None:
        """After a first WIN-sized chunk, the stream waits behind other first services."""
        self.seq += 1
        heapq.heappush(self.queues[w].setdefault(res, []), (1, 0.0, self.seq, i))

    def _stream_done(self, w: int, i: int) -> bool:
        return self.remaining[w].pop(i, None) is not None

    def _complete(self, w: int, i: int) -> None:
        t = self.templates[self.tpl[w]]
        if self.cfg.record:
            self.timeline.append((w, t.kind[i], t.name[i], self.started_at.pop((w, i), self.now),
                                  self.now))
        pending = self.pending[w]
        ready = self._ready
        for s in t.succ[i]:
            n = pending[s] - 1
            pending[s] = n
            if n == 0:
                ready(w, s)
        self.left[w] -= 1
        if self.left[w] == 0:
            self.step_ends[w].append(self.now)
            if len(self.step_ends[w]) == self.target:
                self.short -= 1
            self._start_step(w)

    def link_busy_share(self) -> list[float]:
        """Busy fraction of each link (down_0.., up_0..) over the whole simulated time."""
        return [link.busy_us / max(self.now, 1e-9) for link in self.links]
