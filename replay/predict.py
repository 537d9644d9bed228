"""Predict throughput for configurations (W workers, M PSes, bandwidth, order, flow control).

Throughput follows ICPE'20 section 4: warm-up steps are dropped, then steps completed by all
workers are time-averaged over the window in which every worker is past its warm-up and none
has finished.

Two ways to run a configuration:

- ``simulate_phases`` (``gradwire predict``'s default, ``--start random``): R replications of
  ``steps`` steps per worker, each with the workers starting at independent random phases (uniform
  within one worker's step at the configuration, ``start_period_us``) and its own seed, averaged;
  the 95% confidence interval comes from the spread of the replications, which are doubled until it
  is within ``ci_target`` of the mean. Why: under equal sharing the replayer is deterministic, and
  over hundreds of steps its workers drift into lock-step (all pulling, then all pushing: at W=4 on
  the lab's MLP 20 MB at 250 Mbit/s, one long run gives 26 ex/s, W=1's throughput) from whatever
  phases they start at, while the real cluster's noise keeps reshuffling the phases (a 60-step lab
  run at W=2 held alternation, was knocked out of it and drifted back; the measured W=4 was 38.9
  ex/s, the median of 5 runs; docs/predict.md, "Where the prediction falls short"). Averaging short
  runs from random phases is the expectation over the phase patterns a real cluster goes through;
  the CI is the mean's, and ``Prediction.phase_range`` (the replications' 5th-95th percentile) says
  where one run can land depending on its phases. With ``stratified=True`` (``--start stratified``,
  and ``--start auto`` at the rate of a profile whose queue overflowed) each worker starts in its
  own 1/W slot of the step: on such a link a transfer that joins a busy direction starts behind the
  one already running, the lead holds, and the lab's workers settle into taking turns
  (docs/predict.md, "Lossy links").
- ``simulate`` (``--start together``): one run with every worker starting at once, the paper's
  setting, extended (doubling the steps) until the CI from 10 batch means is within
  ``ci_target`` or ``max_steps`` is reached. That interval is one run's: a synchronous run
  through the PS's own queue can settle on a rate of its own, which another seed's run does
  not share. ``simulate_phases`` with ``aligned=True`` (``--start aligned``) averages
  replications that all start together, each with its own template draws.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gradwire.replay.controlchain import with_control_chain
from gradwire.replay.engine import CompileCache, SimConfig, Simulator
from gradwire.replay.generators import resource_name
from gradwire.replay.hostcores import HostShare
from gradwire.replay.hostqueue import LAB_HOST_QUEUE, HostQueueSpec
from gradwire.replay.mechanisms import ASYNC_PS, PEER_MECHANISMS, base_mechanism
from gradwire.replay.placement import creation_order, place
from gradwire.replay.template import DELAY, DOWN, NIC_IN, NIC_OUT, PS, UP, StepTemplate
from gradwire.throughput import batch_rates, summed_worker_rates

GOODPUT = 1448 / 1514  # TCP payload per Ethernet frame (1500 MTU, timestamps): 0.956
_T95_DOF = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
            9: 2.262, 10: 2.228, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000, 120: 1.980}


# a lone worker's steps replayed to time the step that start phases spread over
# (start_period_us): the mean of that many, the first left out
PERIOD_STEPS = 12
CI_TARGET = 0.02  # the 95% interval's half-width the sweeps aim for, as a share of the mean


def t95(dof: int) -> float:
    """Two-sided 95% Student t quantile for ``dof`` degrees of freedom (table, rounded down to
    the nearest tabulated dof, so the interval errs wide)."""
    return _T95_DOF[max(k for k in _T95_DOF if k <= max(1, dof))]


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """One configuration's predicted throughput.

    ``examples_per_s`` with its 95% confidence interval ``ci``; ``steps`` simulated per worker;
    ``bottleneck`` the busiest resource and ``utilisation`` its busy fraction; ``events`` the
    op-events simulated. ``phase_range`` (replications only, else None): the 5th and 95th
    percentiles of the replications' examples/s, i.e. what one run of ``steps`` steps per
    worker can land on depending on how the workers' phases fall (the CI is the mean's).
    ``start`` (sim only): how its workers started: ``random`` or ``stratified`` phases
    (replications), or ``together`` (one run). ``ps_cores_busy`` (sim only): how many cores
    the busiest PS keeps busy applying updates, on average; with ``SimConfig.ps_cores`` set,
    the PS counts as a resource for the bottleneck (``compute ps:i``, busy cores over its
    cores). ``mechanism``: how the workers synchronise (``replay/mechanisms.py``; each
    baseline row names the mechanism its model is of); ``ps`` is 0 for ring all-reduce.
    """

    model: str
    workers: int
    ps: int
    bandwidth_bps: float
    order: str
    flow_control: bool
    examples_per_s: float
    steps_per_s: float
    ci: tuple[float, float]
    steps: int
    bottleneck: str
    utilisation: float
    events: int
    phase_range: tuple[float, float] | None = None
    ps_cores_busy: float | None = None
    start: str | None = None
    mechanism: str = ASYNC_PS


def assign_ps(templates: Sequence[StepTemplate], ps: int, placement: str = "greedy"
              ) -> list[list[int]]:
    """PS index of every op for ``ps`` servers: as profiled when the counts agree, else each
    variable where ``placement`` (replay/placement.py: TensorFlow's greedy or round-robin
    strategy in creation order, or balanced) puts it (and so at the profile's own count when
    tensor partition changed the variables: ``StepTemplate.placed_again``), a pull and a
    push on their variable's PS; a PS op on the PS of the first push it waits for.
    Transfers of no known variable (and every transfer of a profile without variable
    records) go to the least-loaded PS by bytes, biggest first, pulls and pushes each on
    their own."""
    out = []
    placed: dict[tuple, list[int]] = {}  # a profile's templates share one list of variables
    for t in templates:
        prof = max(t.ps) + 1 if t.ps else 1
        if prof == ps and not t.placed_again:
            out.append(list(t.ps))
            continue
        m = list(t.ps)
        where: list[int] = []
        if t.var_bytes and len(t.var) == len(t.kind):
            key = (tuple(t.var_ps), tuple(t.var_bytes), prof)
            if key not in placed:
                order = creation_order(t.var_ps, t.var_bytes, placement, prof)
                placed[key] = place(t.var_bytes, order, ps, placement)
            where = placed[key]
        for kind in (DOWN, UP):
            load = [0.0] * ps
            rest = []
            for i, k in enumerate(t.kind):
                if k == kind and where and t.var[i] >= 0:
                    m[i] = where[t.var[i]]
                    load[m[i]] += t.amount[i]
                elif k == kind:
                    rest.append(i)
            # transfers of no known variable: biggest first onto the least loaded
            for i, p in zip(rest, place([t.amount[i] for i in rest], range(len(rest)), ps,
                                        "balanced", load), strict=True):
                m[i] = p
        _ps_ops_follow_pushes(t, m, ps)
        out.append(m)
    return out


def placed_templates(templates: Sequence[StepTemplate], ps: int, placement: str = "greedy",
                     mechanism: str = ASYNC_PS) -> tuple[list[StepTemplate], list[list[int]]]:
    """``templates`` on ``ps`` PSes and the PS of each one's ops (``assign_ps``); for
    asynchronous PS training, each with the train op's control chain as TensorFlow has it on
    those PSes (``controlchain.with_control_chain``)."""
    maps = assign_ps(templates, ps, placement)
    if base_mechanism(mechanism) != ASYNC_PS:
        return list(templates), maps
    pairs = [with_control_chain(t, m) for t, m in zip(templates, maps, strict=True)]
    return [t for t, _ in pairs], [m for _, m in pairs]


def _ps_ops_follow_pushes(t: StepTemplate, m: list[int], ps: int) -> None:
    """Put each PS op of ``t`` (in ``m``, the ops' PS indices) on the PS of the first push it
    waits for (through the push's parsing delay), else on its PS-op predecessor's, else its
    profiled PS modulo ``ps``."""
    preds = t.predecessors()
    for i, k in enumerate(t.kind):  # ops are added after what they wait for: index order
        if k != PS:
            continue
        ups = [u for d in preds[i] if t.kind[d] == DELAY for u in preds[d] if t.kind[u] == UP]
        before = [p for p in preds[i] if t.kind[p] == PS]
        m[i] = m[min(ups)] if ups else m[before[0]] if before else t.ps[i] % ps


def throughput_window(sim: Simulator, warmup: int) -> tuple[float, float]:
    """The common window of ``sim``'s run (us): from when every worker has ended its
    ``warmup`` steps to when the first ends its last."""
    return (max(e[warmup - 1] if warmup else 0.0 for e in sim.step_ends),
            min(e[-1] for e in sim.step_ends))


def _window_throughput(sim: Simulator, warmup: int) -> tuple[float, tuple[float, float]]:
    """Steps per second over the common window, and its 95% CI.

    The window opens when every worker has ended its ``warmup`` steps and closes when the first
    ends its last; the rate is each worker's between its own step ends in the window, summed
    (``summed_worker_rates``, the lab's estimator). The CI's relative half-width is that of 10
    batch means: the steps done in equal slices of the window, a step in progress counted by
    its share past (``batch_rates``). Counting only the step ends in each slice made a slice
    of lock-step workers gain or lose W steps at once: on the ResNet-50 profile's sync-ps row
    (W = 32, 25 Gbit/s) that read a 6.2% half-width after 60 steps where 8 seeds' rates
    spread 0.04% (sd), so the run doubled to 240 steps for nothing; the shares read 0.08%
    (README, "Speed of every mechanism")."""
    t0, t1 = throughput_window(sim, warmup)
    per_us = summed_worker_rates(sim.step_ends, [1.0] * len(sim.step_ends), t0, t1)
    if per_us is None:
        return 0.0, (0.0, 0.0)
    rate = per_us * 1e6
    batch = batch_rates(sim.step_ends, t0, t1)
    relative = t95(9) * statistics.stdev(batch) / math.sqrt(10) / statistics.fmean(batch)
    return rate, (rate * (1 - relative), rate * (1 + relative))


def warmup(steps: int) -> int:
    """Warm-up steps per worker of a run of ``steps``: 10%, at least 3, fewer than all."""
    return min(steps - 1, max(3, steps // 10))


def sim_config(workers: int, ps: int, bandwidth_bps: float, order: str,
                win_bytes: float | None, seed: int, record: bool, link: str,
                worker_bandwidth_bps: float | None,
                start_offsets_us: tuple[float, ...] = (),
                ps_cores: int | None = None,
                burst_bytes: tuple[float, float] = (0.0, 0.0),
                window_bytes: tuple[float, float] = (0.0, 0.0),
                mechanism: str = ASYNC_PS, host_queue: HostQueueSpec = LAB_HOST_QUEUE,
                host: HostShare | None = None) -> SimConfig:
    """The replayer's configuration of a prediction (rates in bits per second; ``burst_bytes``:
    each PS link's token bucket, downlink and uplink, bytes; ``window_bytes``: the bytes a
    pull and a push keep on their way, for two-way traffic, ``SimConfig``;
    ``host_queue``: with ``link`` ``hostqueue``, the PS's egress queue and its connections;
    on shared links, whether two-way traffic counts every connection, ``HostQueueSpec``;
    ``host``: every node's compute on one host's cores, ``replay/hostcores.py``)."""
    hq = link == "hostqueue"
    return SimConfig(workers=workers, ps=ps, rate_bytes_per_us=bandwidth_bps * GOODPUT / 8e6,
                     win_bytes=win_bytes, order=order, seed=seed, record=record, link=link,
                     worker_rate_bytes_per_us=math.inf if worker_bandwidth_bps is None
                     else worker_bandwidth_bps * GOODPUT / 8e6,
                     start_offsets_us=start_offsets_us, ps_cores=ps_cores, host=host,
                     burst_bytes=burst_bytes, window_bytes=window_bytes, mechanism=mechanism,
                     host_queue_bytes=host_queue.payload_queue_bytes(bandwidth_bps) if hq
                     else 0.0,
                     bbr_segments=host_queue.bbr_segments(bandwidth_bps) if hq else 0.0,
                     standing_bytes=host_queue.standing_bytes(bandwidth_bps) if link == "fair"
                     else 0.0, uplink_queue=hq and host_queue.uplink,
                     share_windows=host_queue.share_windows if link == "fair" else ((), ()),
                     pings_us=host_queue.pings_us if hq else (),
                     ping_answer_us=host_queue.ping_answer_us if hq else 0.0)


def _prediction(sims: Sequence[Simulator], batch_size: int, cfg: SimConfig,
                bandwidth_bps: float, rate: float, ci: tuple[float, float], steps: int,
                phase_range: tuple[float, float] | None = None, start: str = "together"
                ) -> Prediction:
    """The prediction row of ``sims`` (one run, or replications) at ``rate`` steps/s."""
    m, w = cfg.ps, cfg.workers
    shares = [sim.link_busy_share() for sim in sims]
    peer = base_mechanism(cfg.mechanism) in PEER_MECHANISMS
    if peer:  # the workers' own links out and in, alike: their mean per direction
        out = sims[0].nic_links[0]  # the W out links, then the W in links
        into = out + w
        util = [statistics.fmean(s[k] for s in shares for k in range(out, out + w)),
                statistics.fmean(s[k] for s in shares for k in range(into, into + w))]
        names = [resource_name(NIC_OUT, 0), resource_name(NIC_IN, 0)]
        m = 1
    else:
        util = [statistics.fmean(s[k] for s in shares) for k in range(2 * m)]
        names = ([resource_name(DOWN, i) for i in range(m)]
                 + [resource_name(UP, i) for i in range(m)])
    wbusy = statistics.fmean(sim.worker_busy_us / max(sim.now * w, 1e-9) for sim in sims)
    cores = [statistics.fmean(sim.ps_busy_us[i] / max(sim.now, 1e-9) for sim in sims)
             for i in range(m)]
    if cfg.ps_cores is not None:  # a PS with few cores is a resource the workers share
        util += [c / cfg.ps_cores for c in cores]
        names += [resource_name(PS, i) for i in range(m)]
    best = max(range(len(util)), key=lambda i: util[i])
    bottleneck, u = (names[best], util[best]) if util[best] >= wbusy else ("worker", wbusy)
    return Prediction(model="sim", workers=w, ps=0 if peer else m,
                      bandwidth_bps=bandwidth_bps,
                      order=cfg.order, flow_control=cfg.win_bytes is not None,
                      examples_per_s=rate * batch_size, steps_per_s=rate,
                      ci=(ci[0] * batch_size, ci[1] * batch_size), steps=steps,
                      bottleneck=bottleneck, utilisation=min(1.0, u),
                      events=sum(sim.events for sim in sims),
                      phase_range=None if phase_range is None
                      else (phase_range[0] * batch_size, phase_range[1] * batch_size),
                      ps_cores_busy=max(cores), start=start, mechanism=cfg.mechanism)


def phase_percentiles(rates: Sequence[float]) -> tuple[float, float]:
    """The 5th and 95th percentiles of replication throughputs (inclusive method: within
    [min, max], and min/max themselves for two replications)."""
    q = statistics.quantiles(rates, n=20, method="inclusive")
    return q[0], q[-1]


#: Called with each replication's simulator, its throughput window (us,
#: ``throughput_window``) and its throughput (steps/s) as ``simulate_phases`` finishes it; for
#: diagnostics that look inside the replications (``scripts/diag_same_phase.py``). Only
#: replications run in this process are seen: ``gradwire predict --jobs 1``.
REPLICATION_OBSERVERS: list[Callable[[Simulator, tuple[float, float], float], None]] = []
#: Set by such a diagnostic to have ``simulate_phases`` record every op of its replications
#: (``Simulator.timeline``, ``transfer_spans``); slower, and the same throughputs.
RECORD_REPLICATIONS = False


def replication_seed(seed: int, r: int) -> int:
    """The seed of replication ``r`` of a run seeded ``seed``."""
    return seed * 1_000_003 + r


def start_offsets(templates: Sequence[StepTemplate], workers: int, seed: int,
                  stratified: bool = False, period_us: float | None = None
                  ) -> tuple[float, ...]:
    """Each worker's start offset, us, within [0, ``period_us``), seeded; ``period_us`` None:
    the mean profiled step (``start_period_us`` gives the step at another configuration).

    Independent uniform phases; or ``stratified``: worker k uniform within its own slot
    [k/W, (k+1)/W) of the step, all turned by one common uniform offset, so that no two
    workers start in the same slot (how workers settle on a link whose queue overflows:
    docs/predict.md, "Lossy links").
    """
    if period_us is None:
        period_us = statistics.fmean(max(t.observed_us, 0.0) for t in templates)
    rng = random.Random(seed)
    if not stratified:
        return tuple(rng.uniform(0.0, period_us) for _ in range(workers))
    turn = rng.uniform(0.0, period_us)
    return tuple((turn + period_us * (k + rng.random()) / workers) % period_us
                 for k in range(workers))


def start_period_us(templates: Sequence[StepTemplate], ps_map: Sequence[Sequence[int]],
                    cfg: SimConfig) -> float:
    """The step that the workers' start phases spread over, us: one worker's mean step as
    replayed at ``cfg``'s configuration (its rate, PSes, link and options; ``cfg.workers``
    aside), over ``PERIOD_STEPS`` steps after its first. A phase is a share of the step
    being run, and at another rate or PS count than the profile's that is not the profiled
    step: at 0.4 times the profile's rate one worker's step can be 2.4 times as long, and
    phases drawn within the profiled step would start every worker in its first 40%
    (docs/predict.md, "Start phases"). ``--model emulate`` spreads its starts over its own
    emulated 1-worker step the same way."""
    lone = Simulator(templates, replace(cfg, workers=1, record=False, start_offsets_us=()),
                     ps_map)
    lone.run(PERIOD_STEPS + 1)
    ends = lone.step_ends[0]
    return (ends[-1] - ends[0]) / (len(ends) - 1)


def phase_period_us(templates: Sequence[StepTemplate], ps_map: Sequence[Sequence[int]],
                    cfg: SimConfig) -> float | None:
    """``start_offsets``' period for ``cfg.workers`` workers (placed ``templates`` and their PS
    map): the configuration's own step (``start_period_us``) where there are two workers or
    more; None, the profiled step, for a lone worker, whose phase is a share of nothing."""
    return start_period_us(templates, ps_map, cfg) if cfg.workers > 1 else None


def one_template(templates: Sequence[StepTemplate], ps_map: Sequence[Sequence[int]], k: int
                 ) -> tuple[list[StepTemplate], list[Sequence[int]]]:
    """Template ``k`` alone, with its PS map (``--template-draw run``: a run replays one
    traced step at every step of every worker); all of them for ``k`` < 0."""
    if k < 0:
        return list(templates), list(ps_map)
    return [templates[k]], [ps_map[k]]


def simulate_phases(templates: Sequence[StepTemplate], batch_size: int, workers: int, ps: int,
                    bandwidth_bps: float, order: str = "observed",
                    win_bytes: float | None = None, seed: int = 0, steps: int = 60,
                    replications: int = 8, max_replications: int = 64,
                    ci_target: float = CI_TARGET, link: str = "fair",
                    worker_bandwidth_bps: float | None = None,
                    ps_cores: int | None = None, stratified: bool = False,
                    burst_bytes: tuple[float, float] = (0.0, 0.0),
                    window_bytes: tuple[float, float] = (0.0, 0.0),
                    placement: str = "greedy", mechanism: str = ASYNC_PS,
                    host_queue: HostQueueSpec = LAB_HOST_QUEUE,
                    host: HostShare | None = None, draw: str = "step",
                    warmup_steps: int | None = None, aligned: bool = False) -> Prediction:
    """Mean throughput over replications from random start phases (see the module docstring).

    Replication r uses seed ``seed * 1_000_003 + r`` for its template draws (and ``random``
    order) and draws each worker's start offset uniformly from [0, one worker's step at this
    configuration) us (``start_period_us``; W = 1: the mean profiled step); ``stratified``:
    each from its own 1/W slot of that step (``start_offsets``); ``aligned``: every worker of
    every replication at time 0 (``--start aligned``: the replications differ in their
    template draws only, which through the PS's own queue can settle a run on its own long-run
    rate: docs/predict.md, "Start phases").
    ``steps``: steps per worker per replication; ``replications`` are doubled until the 95% CI
    half-width is within ``ci_target`` of the mean or ``max_replications`` is reached.
    ``bandwidth_bps``: each PS link per direction; ``worker_bandwidth_bps``: each worker's NIC
    (None: unconstrained), bits per second; ``ps_cores``: cores of each PS for the updates
    (None: one per worker's update, ICPE'20); ``burst_bytes``: each PS link's token bucket
    (down, up), bytes; ``window_bytes``: a pull's and a push's window (two-way traffic),
    bytes; ``placement``: the variables' PSes at a PS count other than the profile's
    (``assign_ps``); ``mechanism``: how the workers synchronise (``replay/mechanisms.py``);
    ``host_queue``: with ``link`` ``hostqueue``, each PS's own egress queue and its
    connections (``HostQueueSpec``); ``host``: every worker's compute and PS's updates on one
    host's cores (``replay/hostcores.py``; None: each node its own machine); ``draw``:
    ``step``, every worker draws a template for every step; ``run``, replication r replays
    template r mod (their number) at every step of every worker (``one_template``), the
    replications whole rounds over the templates (at most ``max_replications``, at least
    one round); ``warmup_steps``: steps per worker each replication drops before its
    throughput window (None: ``warmup(steps)``; ``gradwire predict --run-steps``: the lab's
    first quarter, ``lab_warmup_steps``).
    ``Prediction.steps`` is steps per worker summed
    over the replications; ``Prediction.phase_range`` the 5th-95th percentile of their
    throughputs.
    """
    cfg = sim_config(workers, ps, bandwidth_bps, order, win_bytes, seed, RECORD_REPLICATIONS,
                     link, worker_bandwidth_bps, ps_cores=ps_cores, burst_bytes=burst_bytes,
                     window_bytes=window_bytes, mechanism=mechanism, host_queue=host_queue,
                     host=host)
    templates, ps_map = placed_templates(templates, ps, placement, mechanism)
    period = None if aligned else phase_period_us(templates, ps_map, cfg)
    caches: dict[int, CompileCache] = {}  # the replications differ only in seed and phases
    warm = warmup(steps) if warmup_steps is None else warmup_steps
    sims: list[Simulator] = []
    rates: list[float] = []
    # one template a run: whole rounds over the templates, so each weighs the same
    rounds = len(templates) if draw == "run" else 1
    most = max(rounds, max_replications // rounds * rounds)
    target = min(most, -(-max(2, replications) // rounds) * rounds)
    while True:
        while len(sims) < target:
            r_seed = replication_seed(seed, len(sims))
            offsets = () if aligned else start_offsets(templates, workers, r_seed, stratified,
                                                       period)
            k = len(sims) % len(templates) if draw == "run" else -1
            tpls, maps = one_template(templates, ps_map, k)
            sim = Simulator(tpls, replace(cfg, seed=r_seed, start_offsets_us=offsets),
                            maps, cache=caches.setdefault(k, CompileCache(tpls)))
            sim.run(steps)
            sims.append(sim)
            rates.append(_window_throughput(sim, warm)[0])
            for observe in REPLICATION_OBSERVERS:
                observe(sim, throughput_window(sim, warm), rates[-1])
        mean = statistics.fmean(rates)
        half = t95(len(rates) - 1) * statistics.stdev(rates) / math.sqrt(len(rates))
        if mean > 0 and half <= ci_target * mean or target >= most:
            break
        target = min(2 * target, most)
    # a throughput is not negative: a wide interval (few replications) is cut at 0
    return _prediction(sims, batch_size, cfg, bandwidth_bps, mean,
                       (max(0.0, mean - half), mean + half), steps * len(sims),
                       phase_percentiles(rates),
                       "aligned" if aligned else "stratified" if stratified else "random")


def simulate(templates: Sequence[StepTemplate], batch_size: int, workers: int, ps: int,
             bandwidth_bps: float, order: str = "observed", win_bytes: float | None = None,
             seed: int = 0, steps: int = 200, max_steps: int = 3200, ci_target: float = CI_TARGET,
             record: bool = False, link: str = "fair",
             worker_bandwidth_bps: float | None = None,
             start_offsets_us: tuple[float, ...] = (),
             ps_cores: int | None = None,
             burst_bytes: tuple[float, float] = (0.0, 0.0),
             window_bytes: tuple[float, float] = (0.0, 0.0),
             placement: str = "greedy", mechanism: str = ASYNC_PS,
             host_queue: HostQueueSpec = LAB_HOST_QUEUE,
             host: HostShare | None = None, draw: str = "step",
             phases: str | None = None) -> tuple[Prediction, Simulator]:
    """Replay ``workers`` workers until the throughput's CI is within ``ci_target``.

    ``bandwidth_bps``: each PS link per direction; ``worker_bandwidth_bps``: each worker's NIC
    (None: unconstrained, as in a lab that shapes only the PS links), bits per second;
    ``start_offsets_us``: when each worker starts (default: all at 0); ``ps_cores``: cores of
    each PS for the updates (None: one per worker's update, ICPE'20); ``burst_bytes``: each PS
    link's token bucket (down, up), bytes; ``window_bytes``: a pull's and a push's window
    (two-way traffic), bytes; ``placement``: the variables' PSes at another PS count;
    ``mechanism``: how the workers synchronise; ``host_queue``, ``host``: as
    ``simulate_phases``; ``draw``: ``step``, or ``run``: template ``seed`` mod (their number)
    at every step; ``phases`` ``random`` or ``stratified``: instead of ``start_offsets_us``,
    the workers start as a replication of ``simulate_phases`` seeded ``seed`` starts them.
    """
    cfg = sim_config(workers, ps, bandwidth_bps, order, win_bytes, seed, record, link,
                      worker_bandwidth_bps, start_offsets_us, ps_cores, burst_bytes,
                      window_bytes, mechanism, host_queue, host)
    placed, ps_map = placed_templates(templates, ps, placement, mechanism)
    if phases is not None:
        cfg = replace(cfg, start_offsets_us=start_offsets(
            placed, workers, seed, phases == "stratified", phase_period_us(placed, ps_map, cfg)))
    tpls, maps = one_template(placed, ps_map, seed % len(templates) if draw == "run" else -1)
    sim = Simulator(tpls, cfg, maps)
    n = steps
    while True:
        sim.run(n)
        rate, ci = _window_throughput(sim, warmup(n))
        if rate > 0 and (ci[1] - ci[0]) / 2 <= ci_target * rate or n >= max_steps:
            break
        n *= 2
    ci = (max(0.0, ci[0]), ci[1])
    return _prediction([sim], batch_size, cfg, bandwidth_bps, rate, ci, n), sim
