"""The replayer: a configuration of the asynchronous-PS mechanism (ICPE'20 Algorithm 3.1),
replayed by the compiled kernel, deterministic.

Each worker runs profiled step templates sampled with replacement. ``replay/generators.py``
turns the templates into the kernel's step graphs and the configuration into its resource
table (worker compute, each worker's share of each PS, the PS links in each direction, coupled
by finite worker NICs); ``replay/kernel.py`` runs them. Same templates, configuration and seed,
same output, to the bit.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from gradwire.replay.generators import (
    async_ps_resources,
    async_ps_slots,
    async_ps_step_graph,
    transfer_priorities,
)
from gradwire.replay.hostcores import HostShare
from gradwire.replay.kernel import Kernel, queue_room
from gradwire.replay.mechanisms import (
    ASYNC_PS,
    NIC_MECHANISMS,
    PEER_MECHANISMS,
    base_mechanism,
    hop_line_at,
    mechanism_templates,
)
from gradwire.replay.options import LINKS
from gradwire.replay.taskgraph import ReplayError, StepGraph, TaskGraph, graph_arrays
from gradwire.replay.template import BARRIER, DOWN, UP, StepTemplate, written_in_order
from gradwire.replay.transforms import Folded, fold_delays


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
    ``burst_bytes``: the token-bucket depth of each PS link, (downlink, uplink), bytes: an idle
    link refills it at its rate, and a transfer that finds it idle sends that many bytes at
    once (the profile's captures measure it: ``TransportStats.burst_bytes``; 0: plain rate).
    ``window_bytes``: the bytes a pull and a push keep on their way (in flight and queued),
    (downlink, uplink); when both are > 0, each PS link's two directions are two-way traffic:
    a direction carrying one worker's connection with the smaller window runs at its share
    of the other's (``kernel._duplex``; the profile's captures measure the windows:
    ``TransportStats.window_bytes``; 0: independent directions). ``standing_bytes`` > 0
    counts every connection instead: a direction's standing queue is its connections'
    windows added up, at most this many bytes (TCP payload; inf: unbounded), and the other
    direction's connections complete their windows once per its delay (``kernel._window_rate``,
    ``--link-windows same``; shared links only).
    ``mechanism``: how the workers synchronise (``replay/mechanisms.py``): ``async-ps``, the
    profile's templates as they are; ``sync-ps``, every worker's step ends at a barrier;
    with multicast and in-network aggregation, the workers' own NICs as links too (at
    ``worker_rate_bytes_per_us``, or ``rate_bytes_per_us`` where that is unlimited);
    ``ring-allreduce``, no PS (``ps`` unused): the workers' own NICs only, likewise.
    ``host``: every worker's compute and every PS's updates share one host's cores
    (``replay/hostcores.py``; None: each node a machine of its own).
    """

    workers: int
    ps: int
    rate_bytes_per_us: float
    win_bytes: float | None = None
    order: str = "observed"
    link: str = "fair"  # 'fair': equal shares (the paper); 'fifo': one chunk at a time;
    # 'block': the PS downlinks serve the lowest worker's pulls first (Chang et al. 9.4);
    # 'hostqueue': each PS's downlink its own drop-tail queue, Reno per worker (hostqueue.py)
    seed: int = 0
    record: bool = False
    worker_rate_bytes_per_us: float = math.inf
    start_offsets_us: tuple[float, ...] = ()  # per worker: when its first step starts
    ps_cores: int | None = None
    burst_bytes: tuple[float, float] = (0.0, 0.0)
    window_bytes: tuple[float, float] = (0.0, 0.0)
    mechanism: str = ASYNC_PS  # one of replay/mechanisms.py MECHANISMS
    host_queue_bytes: float = 0.0  # link 'hostqueue': each PS's egress queue (TCP payload)
    # its connections: BBR with this window target (segments), hostqueue.BBR_V1 BBR whole,
    # 0 Reno
    bbr_segments: float = 0.0
    standing_bytes: float = 0.0  # two-way traffic: every connection counted, its queue at most
    host: HostShare | None = None  # every node's compute on one host's cores (hostcores.py)
    uplink_queue: bool = False  # link 'hostqueue': the uplinks a switch's drop-tail queue too
    # link 'fair': each transfer's share of its PS link in proportion to a window drawn from
    # these (bytes; downlink, uplink, then each PS link's where known: the profile's
    # transfers', ``grid.measured_share_windows``)
    share_windows: tuple[tuple[float, ...], ...] = ((), ())
    # link 'hostqueue': the intervals the workers' HTTP/2 PINGs come apart on the pull
    # connections (us; Profile.ps_pings) and the PS's answer (us): a held pull tries again
    # at the next one answered (replay/pings.py); empty: at its probe timer
    pings_us: tuple[float, ...] = ()
    ping_answer_us: float = 0.0

    @property
    def nic_rate_bytes_per_us(self) -> float:
        """Each worker's own link per direction where a mechanism uses it (ring, multicast,
        INA): ``worker_rate_bytes_per_us``, or ``rate_bytes_per_us`` where that is
        unlimited."""
        return (self.worker_rate_bytes_per_us if math.isfinite(self.worker_rate_bytes_per_us)
                else self.rate_bytes_per_us)


class Timeline(NamedTuple):
    """One task run of a recorded replay: lane, template kind and name, start and end (us)."""

    worker: int
    kind: str
    name: str
    start_us: float
    end_us: float


class _Tables(NamedTuple):
    graph: TaskGraph
    room: np.ndarray


class _Prepared(NamedTuple):
    """Templates as the configuration's mechanism runs them, their ops' PS indices (a
    barrier's: its join) and how many joins they name."""

    templates: list[StepTemplate]
    maps: list[list[int]]
    joins: int


def _prepare(templates: Sequence[StepTemplate], maps: Sequence[Sequence[int]], ps: int,
             cfg: SimConfig) -> _Prepared:
    """``templates`` and their PS map as ``cfg.mechanism`` runs them (``replay/mechanisms.py``)
    for ``ps`` PSes and ``cfg.workers`` lanes; a ring hop timed across links
    (``StepTemplate.relay_links``) at the rate of the workers' own links."""
    nic = cfg.nic_rate_bytes_per_us
    templates = [dataclasses.replace(t, relay_us=hop_line_at(t.relay_links, t.relay_us, nic))
                 if t.relay_links else t for t in templates]
    out, out_maps = mechanism_templates(templates, maps, ps, cfg.mechanism, cfg.workers)
    joins = 1 + max((p for t, mp in zip(out, out_maps, strict=True)
                     for k, p in zip(t.kind, mp, strict=True) if k == BARRIER), default=-1)
    return _Prepared(out, out_maps, joins)


class CompileCache:
    """What the replications of one configuration share: the templates as its mechanism runs
    them (``replay/mechanisms.py``; 30 ms a replication for multicast with INA on ResNet-50),
    each template's folded delays and,
    unless priorities are random (drawn per replication), the step graphs themselves and
    their packed arrays. Set-up was most of a replication's time on large profiles (ResNet-50:
    0.1 s of folding against 0.06 s of replay). Results are the same to the bit.

    One cache serves simulators of the same templates and PS map whose configurations differ
    at most in seed and start offsets.
    """

    def __init__(self, templates: Sequence[StepTemplate]) -> None:
        self.folds: dict[int, Folded] = {}  # of the mechanism's templates, made on first use
        self.prepared: _Prepared | None = None  # the mechanism's templates, made on first use
        self.compiled: list[StepGraph] | None = None
        self._tables: _Tables | None = None
        self._key: tuple | None = None

    def check(self, cfg: SimConfig, n_templates: int, ps_map: tuple) -> None:
        """Refuse a configuration the cached set-up was not made for."""
        key = (n_templates, cfg.ps, cfg.record, cfg.order, cfg.workers, cfg.link, cfg.win_bytes,
               ps_map, cfg.mechanism)
        if self._key is None:
            self._key = key
        elif key != self._key:
            raise ReplayError(f"a compile cache made for {self._key} used for {key}")

    def fold(self, k: int, t: StepTemplate) -> Folded:
        """Template ``k``'s folded delays (``t``: that template as the mechanism runs it)."""
        if k not in self.folds:
            self.folds[k] = fold_delays(t)
        return self.folds[k]

    def keep(self, cfg: SimConfig, compiled: list[StepGraph]) -> None:
        """Keep the step graphs when every replication compiles them alike."""
        if cfg.order != "random":
            self.compiled = compiled

    def tables(self, compiled: list[StepGraph], slots: int) -> _Tables:
        """The kernel's arrays of ``compiled`` (built once when they are shared)."""
        if self.compiled is not compiled:
            return _pack(compiled, slots)
        if self._tables is None:
            self._tables = _pack(compiled, slots)
        return self._tables


def _pack(compiled: list[StepGraph], slots: int) -> _Tables:
    graph = graph_arrays(compiled)
    return _Tables(graph, queue_room(graph, slots))


def _step_graph(t: StepTemplate, ps_of: Sequence[int], prio: list[float], ps: int,
                cfg: SimConfig, cache: CompileCache | None, k: int, joins: int) -> StepGraph:
    """Template ``k`` (``t``) as one worker's step graph, its pulls written in the order
    ``prio`` to the PSes ``ps_of`` (``written_in_order``: the template itself under the
    capture's order and placement, whose folded delays ``cache`` keeps)."""
    ordered = written_in_order(t, ps_of, prio)
    fold = None  # async_ps_step_graph folds them itself
    if cache is not None:  # the template's own folds are kept; a refloored one's are made
        fold = cache.fold(k, t) if ordered is t else fold_delays(ordered)
    return async_ps_step_graph(ordered, ps_of, prio, ps, cfg.win_bytes, cfg.record, fold, joins)


class Simulator:
    """Replays step templates for ``cfg.workers`` workers (see the module docstring).

    ``ps_map[template][op]``: the PS of each op under this configuration (default: as
    profiled). ``cache``: shared by replications (``CompileCache``).
    """

    def __init__(self, templates: Sequence[StepTemplate], cfg: SimConfig,
                 ps_map: Sequence[Sequence[int]] | None = None,
                 cache: CompileCache | None = None) -> None:
        if not templates:
            raise ReplayError("no step templates to replay")
        if cfg.link not in LINKS:
            raise ReplayError(f"unknown link discipline {cfg.link!r}: use "
                              f"{', '.join(LINKS)}")
        if cfg.workers < 1 or cfg.ps < 1:
            raise ReplayError(f"a replay needs a worker and a PS, got W={cfg.workers}, "
                              f"M={cfg.ps}")
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        m = cfg.ps
        maps = ps_map or [t.ps for t in templates]
        if cache is not None:
            cache.check(cfg, len(templates), tuple(map(tuple, maps)))
        if base_mechanism(cfg.mechanism) in PEER_MECHANISMS:
            m = 1  # no PS: the generator's one set of slots, unused
        prepared = cache.prepared if cache is not None else None
        if prepared is None:  # the replications of a configuration share it
            prepared = _prepare(templates, maps, m, cfg)
            if cache is not None:
                cache.prepared = prepared
        self.templates, maps, joins = prepared
        self.ps_maps = maps  # each template op's PS under this configuration
        if cache is not None and cache.compiled is not None:
            self.compiled = cache.compiled  # priorities drawn from no RNG: the same each time
        else:
            self.compiled = [
                _step_graph(t, p, transfer_priorities(t, cfg.order, self.rng), m, cfg,
                            cache, k, joins)
                for k, (t, p) in enumerate(zip(self.templates, maps, strict=True))]
            if cache is not None:
                cache.keep(cfg, self.compiled)
        nic = None  # each worker's own NIC, a link of its own (ring, multicast, INA)
        if base_mechanism(cfg.mechanism) in NIC_MECHANISMS:
            nic = cfg.nic_rate_bytes_per_us
        slots = async_ps_slots(m, joins, nic is not None)
        tables = (cache.tables(self.compiled, slots) if cache is not None
                  else _pack(self.compiled, slots))
        table = async_ps_resources(cfg.workers, m, cfg.rate_bytes_per_us, cfg.link,
                                   cfg.worker_rate_bytes_per_us, cfg.ps_cores,
                                   cfg.burst_bytes, cfg.window_bytes, joins, nic,
                                   cfg.host_queue_bytes, cfg.bbr_segments,
                                   cfg.standing_bytes, cfg.host, cfg.uplink_queue,
                                   cfg.share_windows, cfg.seed,
                                   pull_requests=base_mechanism(cfg.mechanism) == ASYNC_PS,
                                   pings_us=cfg.pings_us, ping_answer_us=cfg.ping_answer_us)
        self.nic_links = (2 * m, 2 * m + 2 * cfg.workers) if nic is not None else None
        self.kernel = Kernel(tables.graph, table, self.rng, cfg.start_offsets_us, cfg.record,
                             tables.room)
        self.step_ends: list[list[float]] = [[] for _ in range(cfg.workers)]
        self.step_starts: list[list[float]] = [[] for _ in range(cfg.workers)]
        self.kernel.sync_steps(self.step_starts, self.step_ends)

    def run(self, steps_per_worker: int) -> None:
        """Advance until every worker has completed ``steps_per_worker`` steps."""
        self.kernel.run(steps_per_worker)
        self.kernel.sync_steps(self.step_starts, self.step_ends)

    @property
    def now(self) -> float:
        """Simulated time (us)."""
        return self.kernel.now

    @property
    def events(self) -> int:
        """Op-events so far (template ops completed, folded delays included)."""
        return self.kernel.events

    @property
    def worker_busy_us(self) -> float:
        """Compute time of every worker, summed (us)."""
        return self.kernel.busy_us()[0]

    @property
    def ps_busy_us(self) -> list[float]:
        """Compute time of each PS's updates, summed over those running at once (us)."""
        return self.kernel.busy_us()[1:1 + self.cfg.ps]

    def link_busy_share(self) -> list[float]:
        """Busy fraction of each link (down_0.., up_0.., then the workers' NICs out and in,
        ``nic_links``, where the mechanism has them) over the whole simulated time."""
        return [b / max(self.now, 1e-9) for b in self.kernel.link_busy_us()]

    def transfer_spans(self) -> list[tuple[int, str, int, float, float]]:
        """With ``cfg.record``: every pull and push chunk run (template kinds ``down`` and
        ``up``) as (lane, kind, PS index under this configuration, start us, end us), in the
        order they ended; empty without."""
        return [(row.worker, row.kind, int(self.ps_maps[k][i]), row.start_us, row.end_us)
                for row, k, i in self._recorded() if row.kind in (DOWN, UP)]

    def _recorded(self) -> list[tuple[Timeline, int, int]]:
        """With ``cfg.record``: every op run, in the order they ended, with its template and
        op index."""
        if not self.cfg.record:
            return []
        ri, rf = self.kernel.rows()
        done = np.flatnonzero(ri[:, 5] >= 0)
        out = []
        for x in done[np.argsort(ri[done, 5], kind="stable")].tolist():
            k, i = int(ri[x, 1]), int(ri[x, 2])
            t = self.templates[k]
            out.append((Timeline(int(ri[x, 0]), t.kind[i], t.name[i], float(rf[x, 1]),
                                 float(rf[x, 2])), k, i))
        return out

    @property
    def timeline(self) -> list[Timeline]:
        """With ``cfg.record``: every op run, in the order they ended."""
        return [row for row, _, _ in self._recorded()]
