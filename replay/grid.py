"""The configurations of a prediction sweep: its size, the sim's jobs (how each one's workers
start: ``--start auto`` reads the profile's PS captures for an overflowing queue; each worker's
NIC), the rate the profile ran at, the analytical baselines' rows, and the recorded runs of
``--timeline`` and ``--explain``."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gradwire.collector.transport import TransportStats
from gradwire.errors import PredictError
from gradwire.replay.mechanisms import (
    ASYNC_PS,
    PEER_MECHANISMS,
    RING,
    SYNC_PS,
    base_mechanism,
)
from gradwire.replay.options import MAX_CONFIGURATIONS, PredictOptions
from gradwire.replay.predict import (
    GOODPUT,
    Prediction,
    assign_ps,
    replication_seed,
    simulate,
)
from gradwire.replay.sweep import REPLICATED, Job
from gradwire.replay.template import DOWN, PS, UP, Profile
from gradwire.units import format_rate

if TYPE_CHECKING:
    from gradwire.replay.engine import Simulator

LOSSY_SHARE = 0.003  # retransmitted share of data segments above which a link counts as lossy


def is_lossy(stats: TransportStats | None) -> bool:
    """Whether the profile's PS captures show an overflowing queue (more than LOSSY_SHARE of
    their data segments retransmitted)."""
    return stats is not None and stats.retransmitted_share > LOSSY_SHARE


def start_mode(start: str, mechanism: str = ASYNC_PS) -> str:
    """How a configuration's workers start: ``--start auto`` is ``together`` (one run) for a
    synchronous ``mechanism``, whose first barrier aligns the workers whatever their phases
    (replications from other phases would all run the same steps after it), and
    ``stratified`` (each worker in its own slot of the step) for the asynchronous PS: through
    a shared FIFO the lab's workers move apart until they take turns, a force the replay's
    equal sharing lacks (docs/predict.md, "Start phases"); any other ``--start`` as given."""
    if start != "auto":
        return start
    return "stratified" if base_mechanism(mechanism) == ASYNC_PS else "together"


def profile_bandwidth_bps(prof: Profile) -> float:
    """The link rate the profile ran at: as configured when known, else its measured goodput
    over the TCP payload share, bits per second."""
    return prof.profile_bandwidth_bps or prof.link_rate_bps / GOODPUT


def ps_loads(prof: Profile, ps: int, placement: str = "greedy"
             ) -> tuple[list[float], list[float]]:
    """The bytes each of ``ps`` PSes sends (pulled) and receives (pushed) in the profile's
    first step, (pulled per PS, pushed per PS): as profiled at the profile's own count
    (unless tensor partition changed its variables), else placed as the sim places them
    (``assign_ps``)."""
    t = prof.templates[0]
    m = (list(t.ps) if ps == prof.ps_count and not t.placed_again
         else assign_ps([t], ps, placement)[0])
    loads = []
    for kind in (DOWN, UP):
        load = [0.0] * ps
        for i, k in enumerate(t.kind):
            if k == kind:
                load[m[i]] += t.amount[i]
        loads.append(load)
    return loads[0], loads[1]


def busiest_ps_share(prof: Profile, ps: int, placement: str = "greedy") -> tuple[float, float]:
    """The largest share of one PS in the pulled and in the pushed bytes of the profile's first
    step with ``ps`` PSes (``ps_loads``)."""
    shares = [max(load) / sum(load) if sum(load) > 0 else 1 / ps
              for load in ps_loads(prof, ps, placement)]
    return shares[0], shares[1]


def baseline_resource_names(prof: Profile, ps: int, placement: str = "greedy") -> dict[str, str]:
    """The sim's names (``generators.resource_name``) of a PS baseline's stations with ``ps``
    PSes: its downlink is the link of the PS that sends the most bytes, its uplink and server
    that of the PS that receives the most (the busiest PS the baselines model), so that the
    bottleneck column reads alike for every model: ``downlink ps:0``, not ``downlink``."""
    from gradwire.replay.generators import resource_name

    pulled, pushed = (max(range(ps), key=load.__getitem__)
                      for load in ps_loads(prof, ps, placement))
    return {"downlink": resource_name(DOWN, pulled), "uplink": resource_name(UP, pushed),
            "ps": resource_name(PS, pushed), "worker": "worker"}


def baseline_rows(prof: Profile, models: list[str], workers: list[int], ps_list: list[int],
                  bandwidths: list[float], placement: str = "greedy") -> list[Prediction]:
    """The analytical baselines for every configuration, each PS count with the busiest PS's
    share of the bytes under ``placement``; each row names the mechanism its model is of."""
    from gradwire.replay.baselines import RING_BASELINES, SYNC_BASELINES, PhaseTimes, baseline

    if not prof.phases:
        raise PredictError("the baselines need the 1-worker phases from the worker's capture, "
                           "and none were found", path=prof.source or None)
    # the baselines scale the shared stations' times by the busiest PS's share; a profile
    # recorded with M0 PSes shows them scaled by its own, so scale back to one PS first
    own = busiest_ps_share(prof, prof.ps_count)
    base_bw = profile_bandwidth_bps(prof)
    uplink_s, server_s = wire_bound_uplink(prof, prof.phases["uplink"] / own[1],
                                           prof.phases["server"] / own[1], base_bw)
    phases = PhaseTimes(downlink_s=prof.phases["downlink"] / own[0],
                        worker_s=prof.phases["worker"], uplink_s=uplink_s,
                        server_s=server_s, batch_size=prof.batch_size)
    rows = []
    for model in models:
        ring = model in RING_BASELINES  # no PS: every gradient byte on each worker's link
        for m in ps_list[:1] if ring else ps_list:
            share = (1.0, 1.0) if ring else busiest_ps_share(prof, m, placement)
            names = {} if ring else baseline_resource_names(prof, m, placement)
            for bw in bandwidths:
                for w in workers:
                    r = baseline(model, phases, w, m, bw / base_bw, share)
                    rows.append(Prediction(
                        model=model, workers=w, ps=0 if ring else m, bandwidth_bps=bw,
                        order="-",
                        flow_control=True, examples_per_s=r.examples_per_s,
                        steps_per_s=r.steps_per_s, ci=(r.examples_per_s, r.examples_per_s),
                        steps=0, bottleneck=names.get(r.bottleneck, r.bottleneck),
                        utilisation=r.utilisation, events=0,
                        mechanism=RING if ring else SYNC_PS if model in SYNC_BASELINES
                        else ASYNC_PS))
    return rows


def wire_bound_uplink(prof: Profile, uplink_s: float, server_s: float, rate_bps: float
                      ) -> tuple[float, float]:
    """The worker capture's uplink and server phases (s, a step's pushes to one PS) with the
    pushes at least as long as their bytes take at ``rate_bps``, what was missing taken out
    of the server phase (at most all of it). The worker's capture sees a push end when its
    last byte leaves the worker; where the bottleneck is past that point (the lab shapes the
    PS's link; a cluster's switch port), the rest of the push waits in that queue, and the
    MASCOTS'18 phases count it as the PS's work: on the shipped sample at 20 Mbit/s, 93 ms of
    uplink for 495 kB that take 207 ms on the wire, and 120 ms of server, so the baselines
    kept 113 ms of link time fixed at every other rate. The pushed bytes are the median
    step template's (TCP payload at 1448 of every 1514 bytes on the wire)."""
    if not prof.templates or rate_bps <= 0:
        return uplink_s, server_s
    pushed = statistics.median_high(t.bytes_by(UP) for t in prof.templates)
    wire_s = pushed * 8 / (rate_bps * GOODPUT)
    moved = min(max(0.0, wire_s - uplink_s), server_s)
    return uplink_s + moved, server_s - moved


def check_size(opts: PredictOptions, ps_list: list[int], bandwidths: list[float]) -> None:
    """Refuse a sweep of more than MAX_CONFIGURATIONS configurations (counted once the
    profile has said its PS count and rate, where --ps and --bandwidth were not given, and
    which mechanisms ``auto`` is): the sim's rows of each mechanism (one PS count for a peer
    mechanism) and each baseline's, over W and the rates."""
    from gradwire.replay.options import baselines_of

    baselines = (baselines_of(opts.mechanisms) if opts.models == ("all",)
                 else opts.baselines)
    per_rate_and_w = (sum(1 if base_mechanism(m) in PEER_MECHANISMS else len(ps_list)
                          for m in opts.mechanisms) if opts.sim else 0) \
        + len(baselines) * len(ps_list) + (len(ps_list) if opts.emulate else 0)
    n = per_rate_and_w * len(bandwidths) * len(opts.workers)
    if n > MAX_CONFIGURATIONS:
        raise PredictError(f"{n} configurations (workers x PSes x bandwidths x mechanisms and "
                           f"models) in one sweep; at most {MAX_CONFIGURATIONS}: predict fewer "
                           "W, e.g. --workers 1,2,4,8,16,32", usage=True)


def measured_burst_bytes(prof: Profile) -> tuple[float, float]:
    """The token bucket the profile's PS captures show on its links at its rate, (downlink,
    uplink) bytes (``TransportStats.burst_bytes``, the rate as TCP payload); (0, 0) without
    a PS capture. ``--link-burst auto`` replays it, in bytes, at every rate of the sweep."""
    if prof.transport is None:
        return 0.0, 0.0
    return prof.transport.burst_bytes(payload_rate(prof))


def measured_window_bytes(prof: Profile) -> tuple[float, float]:
    """The windows the profile's captures show at its rate, (pull, push) bytes: what the PS
    keeps on its way when it sends a pull (its captures) and what the worker keeps when it
    sends a push (its capture), ``TransportStats.window_bytes`` with the rate as TCP payload;
    0 for a side without a capture or without samples. ``--link-windows auto`` replays them,
    in bytes, at every rate of the sweep."""
    rate = payload_rate(prof)
    return tuple(t.window_bytes(rate) if t is not None else 0.0  # type: ignore[return-value]
                 for t in (prof.transport, prof.worker_transport))


# an idle spell this long ends a transfer in a capture (``transfer_windows``): longer than a
# sender's pauses inside one, shorter than anything between one worker's transfers the same
# way (the lab's link diagnostics take transfers so, scripts/lab/headers.py MIN_GAP_S)
TRANSFER_GAP_S = 0.010
GSO_BYTES = 65536  # the largest packet a shaper lets out whole (a GSO packet)
SHARE_DRAWS = 32  # windows a direction's draws pick among: its transfers' byte quantiles


def measured_share_windows(prof: Profile) -> tuple[tuple[float, ...], ...]:
    """``--link-shares windows``: the windows the profile's transfers kept, each
    ``SHARE_DRAWS`` byte-weighted quantiles of its transfers' (``transfer_windows`` of the
    PS's and the worker's captures at the profile's rate, a transfer ended by an idle spell of
    ``TRANSFER_GAP_S`` or two GSO packets' time, the longer, each connection apart), so that
    a uniform draw among them draws a transfer in proportion to its bytes: (pulls, pushes)
    over every PS; then, for a profile of several PSes each placed (``Profile.ps_addresses``),
    each PS's pulls (its own capture's) and each PS's pushes (the worker's connections to
    it), 2 M more, a side with no transfers of its own taking the pooled ones (none where the
    PSes share an address with each other or with the worker, or none has its own)
    (``generators.link_windows`` reads them); empty for a side without a capture."""
    rate = payload_rate(prof)
    gap = transfer_gap_s(rate)
    sides = (prof.transport, prof.worker_transport)

    def windows(among: frozenset[str] | None) -> list[tuple[float, ...]]:
        return [byte_quantiles(t.transfer_windows(rate, gap, among), SHARE_DRAWS)
                if t is not None else () for t in sides]

    pooled = windows(None)
    places = [frozenset(a) for a in prof.ps_addresses]
    worker = prof.worker_transport
    workers = {h for hs in worker.hosts for h in hs} if worker is not None else set()
    # each PS told apart by its addresses alone: none shared with another PS (one host, a
    # loopback cluster) or with the profiled worker (whose capture would count as its own)
    if (len(places) < 2 or not all(places) or len(places) != len(prof.ps_tasks)
            or len(frozenset().union(*places)) < sum(map(len, places))
            or any(a & workers for a in places)):
        return tuple(pooled)
    per = [windows(a) for a in places]
    by_ps = tuple(p[d] or pooled[d] for d in (0, 1) for p in per)
    if all(x == pooled[i // len(per)] for i, x in enumerate(by_ps)):
        return tuple(pooled)  # no PS had transfers of its own: nothing of its own to say
    return tuple(pooled) + by_ps


def transfer_gap_s(rate_bytes_per_s: float) -> float:
    """The idle spell that ends a transfer in a capture, seconds: ``TRANSFER_GAP_S`` or two
    GSO packets' time at the rate (bytes per second), the longer."""
    if not rate_bytes_per_s > 0:
        return TRANSFER_GAP_S
    return max(TRANSFER_GAP_S, 2 * GSO_BYTES / rate_bytes_per_s)


def byte_quantiles(transfers: Sequence[tuple[float, int]], k: int) -> tuple[float, ...]:
    """``k`` quantiles of ``transfers`` ((value, bytes) each) weighted by their bytes, at the
    middles of k equal slices of the bytes; empty without bytes."""
    pairs = sorted((v, b) for v, b in transfers if b > 0)
    total = sum(b for _, b in pairs)
    if not total:
        return ()
    out: list[float] = []
    acc, j = 0, 0
    for q in range(k):
        target = (q + 0.5) / k * total
        while acc + pairs[j][1] < target:
            acc += pairs[j][1]
            j += 1
        out.append(pairs[j][0])
    return tuple(out)


def payload_rate(prof: Profile) -> float:
    """The profile's link rate as TCP payload, bytes per second."""
    return profile_bandwidth_bps(prof) * GOODPUT / 8


def sim_jobs(opts: PredictOptions, ps_list: list[int], bandwidths: list[float],
             win: float | None, burst: tuple[float, float] = (0.0, 0.0),
             windows: tuple[float, float] = (0.0, 0.0)) -> list[Job]:
    """The sim's job for every configuration, mechanism first (``opts.mechanisms``, resolved:
    no ``auto``), then PS count (one for the peer mechanisms, which have no PS), rate and
    workers."""
    return [Job(w, m, bw, opts.order, win, opts.seed, opts.steps, opts.max_steps,
                opts.link, opts.worker_nic_bps(bw),
                start_mode(opts.start, mech), opts.replications,
                opts.max_replications, opts.ps_cores, bucket_of(opts, mech, burst, w),
                windows,
                opts.placement, mech,
                opts.host_queue, opts.host, opts.template_draw, opts.warmup_steps)
            for mech in opts.mechanisms
            for m in (ps_list[:1] if base_mechanism(mech) in PEER_MECHANISMS else ps_list)
            for bw in bandwidths for w in opts.workers]


def replays_bucket(opts: PredictOptions, mechanism: str, workers: int | None = None) -> bool:
    """Whether the rows of ``mechanism`` with ``workers`` workers (None: every row) replay
    the shaper's token bucket on their links (``opts.link`` resolved): ``--link-burst`` as
    given; not given, a PS mechanism's links through the PS's own queue, whose shaper has
    it, and a PS mechanism's links that one worker alone uses (W = 1), where no transfer
    finds another on its link; not links that workers share, whose replay lacks what the
    real ones lose beside the bucket, nor the peer mechanisms' own
    (docs/predict.md, "Token buckets"; docs/preregistered/issue22-ring-bucket-report.md)."""
    if opts.link_burst is not None:
        return opts.link_burst == "auto"
    if base_mechanism(mechanism) in PEER_MECHANISMS:
        return False
    return opts.link == "hostqueue" or workers == 1


def bucket_rows(opts: PredictOptions) -> dict[str, list[str]]:
    """The mechanisms (``opts.mechanisms``, resolved) whose rows replay the bucket
    (``replays_bucket``): ``all`` in every row, ``one_worker`` in their one-worker rows only."""
    every = [m for m in opts.mechanisms if replays_bucket(opts, m)]
    return {"all": every, "one_worker": [m for m in opts.mechanisms
                                         if m not in every and replays_bucket(opts, m, 1)]}


def bucket_of(opts: PredictOptions, mechanism: str, burst: tuple[float, float],
              workers: int | None = None) -> tuple[float, float]:
    """The bucket (bytes, down and up) the rows of ``mechanism`` with ``workers`` workers
    replay: ``burst`` where they replay it (``replays_bucket``), else none."""
    return burst if replays_bucket(opts, mechanism, workers) else (0.0, 0.0)


RECORDED_STEPS = 20  # steps per worker of a recorded run (--timeline, --explain)
# op runs a recorded run may keep: each costs about 200 bytes (the kernel's row, the timeline's
# tuple, the path's walk), so 5 million are about 1 GB; ResNet-50 (2,086 ops) at W=119
MAX_RECORDED_OPS = 5_000_000


def check_recorded(opts: PredictOptions, prof: Profile) -> None:
    """Refuse, before the sweep, a ``--timeline`` or ``--explain`` run too big to record."""
    ops = max(len(t.kind) for t in prof.templates)
    for config, option in ((opts.timeline, "--timeline"), (opts.explain, "--explain")):
        if config is None:
            continue
        w, m, bw = config
        n = w * ops * RECORDED_STEPS
        if n > MAX_RECORDED_OPS:
            most = MAX_RECORDED_OPS // (ops * RECORDED_STEPS)
            raise PredictError(f"{option} {w},{m},{format_rate(bw)} would record {n:,} op runs "
                               f"({w:,} workers x {ops:,} ops x {RECORDED_STEPS} steps), more "
                               f"than {MAX_RECORDED_OPS:,} (about 1 GB): give it at most "
                               f"{most:,} workers", usage=True)


def recorded_run(opts: PredictOptions, prof: Profile, win: float | None,
                 config: tuple[int, int, float],
                 burst: tuple[float, float] = (0.0, 0.0),
                 windows: tuple[float, float] = (0.0, 0.0)) -> Simulator:
    """The configuration ``config`` (W, M, bits per second) simulated for ``RECORDED_STEPS``
    steps with every op recorded (``--timeline``, ``--explain``), its workers starting as that
    configuration's sim row starts them (the first replication's phases), under the first of
    ``opts.mechanisms`` (resolved)."""
    w, m, bw = config
    seed, phases = opts.seed, None
    start = start_mode(opts.start, opts.mechanisms[0])
    if start in REPLICATED:  # the first replication's seed and phases (aligned: none)
        seed, phases = replication_seed(opts.seed, 0), None if start == "aligned" else start
    # a peer mechanism's rows show M = 0; its replay has no PS, whatever M it is given
    _, sim = simulate(prof.templates, prof.batch_size, w, max(1, m), bw, opts.order, win, seed,
                      steps=RECORDED_STEPS, max_steps=RECORDED_STEPS, record=True,
                      link=opts.link,
                      worker_bandwidth_bps=opts.worker_nic_bps(bw), phases=phases,
                      ps_cores=opts.ps_cores,
                      burst_bytes=bucket_of(opts, opts.mechanisms[0], burst, w),
                      window_bytes=windows, placement=opts.placement,
                      mechanism=opts.mechanisms[0],
                      host_queue=opts.host_queue, host=opts.host, draw=opts.template_draw)
    return sim


def lab_per_node_queues(lab: dict) -> bool:
    """Whether the profile's lab served each PS link's traffic from one queue per node at the
    other end, in turn (its ``qdisc`` ``fair``: an HTB class per node, docs/lab.md)."""
    return lab.get("qdisc") == "fair"
