"""``gradwire predict``'s options: parsed once from the command line (replay/command.py) into a
frozen object whose values are checked when it is made, as h2's ``H2Configuration`` checks its
settings. The flow, the sweep's configurations, the notes and the outputs read it; nothing
changes it.

>>> from pathlib import Path
>>> opts = PredictOptions(bundles=(Path("bundles"),), workers=(1, 2, 4), start="together",
...                       steps=default_steps("together"))
>>> opts.steps, opts.flow_control, opts.fit_win
(200, True, True)
>>> PredictOptions(bundles=(Path("b"),), replications=1)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
gradwire.errors.PredictError: --replications must be at least 2 and at most ... (got 1 and 64)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from gradwire.errors import PredictError, ReplayError
from gradwire.replay.hostcores import HostShare
from gradwire.replay.hostqueue import CONGESTION_CONTROLS, HostQueueSpec
from gradwire.replay.jobwhatifs import Plan
from gradwire.replay.mechanisms import check_mechanism, peer_mechanisms
from gradwire.replay.placement import PLACEMENTS
from gradwire.replay.transforms import parse_layer_copies

ORDERS = ("observed", "tic", "earliest", "reverse", "random")  # a step's transfer orders
# the --link values that replay the PS's own queue (sized by --host-queue, its connections'
# congestion control --tcp): every row, or the asynchronous rows that overflow it
OWN_QUEUE_LINKS = ("hostqueue", "overflow")
LINKS = ("fair", "fifo", "block", *OWN_QUEUE_LINKS)  # how a PS link is shared (--link)

MODELS = ("sim", "mva-exact", "mva-approx", "mva-hybrid", "cynthia", "sync-sum", "sync-max",
          "ring-ab", "ring-max", "emulate")
STARTS = ("auto", "random", "stratified", "together", "aligned")
HOST_CPUS = ("auto", "off")  # --host-cpu: a one-host lab profile's CPU per step bounds the rows
TEMPLATE_DRAWS = ("step", "run")  # --template-draw: a traced step each step, or one a run
# --executor-gaps: compute chunks as traced, or their ops' own time; auto: their own for a ring
# from a PS profile; alone: a ring's at its step's time alone (replay/executorgaps.py)
EXECUTOR_GAPS = ("auto", "keep", "drop", "alone")
# --emulate-step (the first the default): the emulator runs the profile's step graph op by op,
# each transfer a message (replay/emulate_tensors.py; the default since the third
# registration of both, docs/predict.md), or one pull and one push per PS (replay/emulate.py)
EMULATE_STEPS = ("tensors", "phases")
# --emulate-start (the first the default): each emulated worker starts after a uniformly
# random wait within one emulated 1-worker step of the configuration, at an independent phase
# (replay/emulate.py ``start_spread_s``; the default since its registration,
# docs/preregistered/issue21-emulate-start-report.md); or as they are spawned, a few ms apart,
# so in step
EMULATE_STARTS = ("random", "together")
# --emulate-runs: the runs of a configuration to begin with (and per batch after, while their
# median is not known to the sim's CI_TARGET), and the default cap on them (replay/emulate.py)
EMULATE_RUNS = (3, 9)
RECORDING_COSTS = ("auto", "keep")  # --recording-cost: the capture's cost out where timed, or kept
# --trace-cost: the templates as traced, FULL_TRACE's excess out of every time op, or out
# of the pulls' request delays only
TRACE_COSTS = ("keep", "auto", "requests")
LINK_BURSTS = ("off", "auto")  # --link-burst: a plain rate, or the profile's token bucket
# --pings: a held pull tries again at its worker's next HTTP/2 PING (the profile's capture),
# or only at its probe timer; auto: the PINGs for BBR whole, the timer for Reno and BBR's window
# model (registered: docs/preregistered/issue22-sync-pings-report.md)
PINGS = ("auto", "capture", "none")
LINK_WINDOWS = ("auto", "off", "same", "ratio")  # --link-windows: two-way traffic from windows
LINK_SHARES = ("auto", "equal", "windows")  # --link-shares: a direction's transfers share it how
RING_HOPS = ("loopback", "link")  # --ring-hop: a ring hop's time timed on loopback, or on links
BACKENDS = ("local", "ray")
FORMATS = ("table", "json", "csv")
MAX_WORKERS = 4096  # workers (or PSes) in one configuration: a large PS cluster, with room
MAX_CONFIGURATIONS = 2000  # configurations in one sweep (W x M x bandwidths, each model)
MIN_STEPS = 10  # steps per worker of a run, at the least


@dataclass(frozen=True, kw_only=True)
class PredictOptions:
    """What ``gradwire predict`` was asked for; rates in bits per second, WIN in bytes.

    ``bundles``: the profile's bundle folders (with ``sample``, the sample shipped with
    gradwire); ``workers``, ``ps``, ``bandwidths_bps``: the sweep's counts and link rates
    (``ps``/``bandwidths_bps`` None: as profiled); ``worker_bandwidth``: ``same``,
    ``unlimited`` or a rate; ``ps_cores`` None: a core per worker's update; ``host_cores``:
    ``off``, ``auto`` or N, resolved (``predictflow.resolved``) into ``host``, the one host
    every node's compute shares (``replay/hostcores.py``; None: none); ``win_bytes``
    None: fitted on the profile; ``steps``: per replication, or the first run's with
    ``start="together"`` (the command line's default: ``default_steps``); ``measured``:
    ``--measured`` as given; ``timeline``, ``explain``: (W, M, rate) of ``--timeline`` and
    ``--explain``; ``link_burst``: ``off`` a plain rate, ``auto`` replays the token
    bucket the profile's PS captures show on its links (``TransportStats.burst_bytes``),
    given for every link, the workers' own links of the peer mechanisms (ring, butterfly)
    too; None: ``auto`` on the PS links where they are the PS's own queue (``link``
    ``hostqueue``; ``overflow``: ``hostqueue`` for the asynchronous rows whose connections
    overflow it, resolved into ``fair`` for the rest, replay/ownqueue.py) and in a PS
    mechanism's one-worker rows, else ``off``
    (``grid.replays_bucket``);
    ``link_windows``: ``ratio`` couples each PS link's two directions by the windows the
    profile's captures show (``TransportStats.window_bytes``), ``off`` keeps them independent,
    ``same`` gives both directions the larger window and counts every connection (resolved
    into ``standing_queue``, ``HostQueueSpec.standing``); ``auto``: ``same`` where every
    mechanism is the asynchronous PS on shared links, else ``ratio``, and ``off`` for a
    profile whose lab queued each node apart
    (``predictflow.auto_link_windows``);
    ``link_shares``: how a direction's transfers share a processor-shared PS link, ``equal``
    or ``windows`` (in proportion to windows drawn from the profile's transfers', resolved
    into ``share_windows``, bytes: ``grid.measured_share_windows``); ``auto``: ``windows``
    where every mechanism is the asynchronous PS on shared links and the profile's lab did
    not queue each node apart, else ``equal`` (``predictflow.auto_link_shares``);
    ``host_queue_bytes``: with ``link`` ``hostqueue``, each PS's egress queue, and with
    ``link_windows`` ``same`` the queue a direction's connections stand in (bytes on the
    wire; None: the lab's, ``hostqueue.lab_queue_bytes``); ``tcp``: its connections'
    congestion control, ``reno``, ``bbr`` (a window target) or ``bbr-v1`` (Linux's BBR
    whole, replay/bbr.py); resolved (``predictflow.resolved``) into ``bbr_window_bytes``:
    None for Reno, ``hostqueue.BBR_V1`` for BBR whole, else BBR's window target (TCP
    payload; 0: ``hostqueue.bbr_window``'s); ``pings``: with ``link`` ``hostqueue``,
    ``capture`` (a held pull tries again at its worker's next HTTP/2 PING, their intervals
    and the PS's answer from the profile's PS captures, resolved into ``pings_us`` and
    ``ping_answer_us``, replay/pings.py), ``none`` (at its probe timer) or ``auto``
    (``capture`` with ``tcp`` ``bbr-v1``, else ``none``);
    ``placement``: how the variables
    go to another PS count than the profile's (replay/placement.py; ``auto``: the strategy
    the profile's lab recorded, else greedy);
    ``mechanisms``: how the sim's workers synchronise (replay/mechanisms.py; ``auto``: as the
    profile was recorded); ``models`` ``("all",)``: the sim and the baselines of those
    mechanisms (resolved once the profile says which, ``baselines_of``); ``compute_scale``:
    the workers' compute that many times as fast (``transforms.scale_compute``), only the
    ops whose TensorFlow type contains one of ``compute_ops`` where given
    (``oppasses.faster_types``);
    ``add_layer``: ``SCOPE:N``, N more copies of a layer (``transforms.add_layer_copies``);
    ``to_batch_size``: each worker's batch, a what-if costed from the op database ``opdb``
    (of machine ``opdb_machine``; replay/rebatch.py); ``ring_hop``: where a ring hop's
    software time in ``opdb`` comes from, ``loopback`` (two processes on loopback, ``opdb
    build``) or ``link`` (across shaped links, each row's rate its own, mechanisms.hop_line_at);
    ``warmup_steps``: steps per worker a replication drops before its throughput window (None:
    10%, at least 3; ``--run-steps N``: the lab's first quarter; a row run as one run,
    ``start`` ``together``, keeps its own); ``format`` None:
    the table; ``plan``: the job what-ifs (replay/jobwhatifs.py: mixed precision, op
    fusion, recomputation, tensor partition and fusion, gradient accumulation). Raises
    PredictError naming the option for a value out of range or a
    contradiction.
    """

    bundles: tuple[Path, ...]
    sample: bool = False
    workers: tuple[int, ...] = (1, 2, 4, 8, 16)
    ps: tuple[int, ...] | None = None
    bandwidths_bps: tuple[float, ...] | None = None
    order: str = "observed"
    flow_control: bool = True
    worker_bandwidth: str | float = "same"
    link: str = "auto"
    host_queue_bytes: float | None = None
    tcp: str = "reno"
    uplink_queue: bool = False  # --uplink-queue: the pushes through the switch's queue too
    pings: str = "auto"  # --pings: what ends a held pull before its probe timer
    # --pings capture, resolved: the workers' PING intervals on the pull connections and the
    # PS's answer (us; Profile.ps_pings), empty without them
    pings_us: tuple[float, ...] = ()
    ping_answer_us: float = 0.0
    bbr_window_bytes: float | None = None
    standing_queue: str = "off"
    ps_cores: int | None = None
    host_cores: str = "off"
    host: HostShare | None = None
    win_bytes: int | None = None
    models: tuple[str, ...] = ("sim",)
    batch_size: int | None = None
    profile_bandwidth_bps: float | None = None
    start: str = "auto"
    link_burst: str | None = None
    link_windows: str = "auto"
    link_shares: str = "auto"
    # --link-shares windows, resolved: the windows the profile's pulls' and pushes' transfers
    # drew, then each PS link's where known (bytes; grid.measured_share_windows)
    share_windows: tuple[tuple[float, ...], ...] = ((), ())
    placement: str = "auto"
    mechanisms: tuple[str, ...] = ("auto",)
    compute_scale: float = 1.0
    compute_ops: tuple[str, ...] = ()
    trace_cost: str = "keep"
    recording_cost: str = "auto"
    template_draw: str = "step"
    host_cpu: str = "auto"
    executor_gaps: str = "auto"
    add_layer: str | None = None
    to_batch_size: int | None = None
    opdb: Path | None = None
    opdb_machine: str | None = None
    ring_hop: str = "loopback"
    emulate_step: str | None = None  # None: the first of EMULATE_STEPS
    emulate_start: str | None = None  # None: the first of EMULATE_STARTS
    emulate_runs: int | None = None  # None: EMULATE_RUNS' cap
    plan: Plan = Plan()
    steps: int = 60
    warmup_steps: int | None = None
    replications: int = 8
    max_replications: int = 64
    max_steps: int = 3200
    seed: int = 0
    jobs: int | None = None
    backend: str = "local"
    ray_address: str | None = None
    measured: tuple[Path, ...] = ()
    out: Path | None = None
    json_path: Path | None = None  # the deprecated --json FILE
    timeline: tuple[int, int, float] | None = None
    explain: tuple[int, int, float] | None = None
    format: str | None = None
    quiet: bool = False
    verbose: int = 0

    def __post_init__(self) -> None:
        if not self.bundles:
            raise PredictError("give the profile's bundles (its PS and worker bundles, or their "
                               "folder), or --sample for the sample bundle shipped with "
                               "gradwire", usage=True)
        _counts("--workers", self.workers)
        if self.ps is not None:
            _counts("--ps", self.ps)
        for rate in (self.bandwidths_bps or ()) + ((self.profile_bandwidth_bps,)
                                                    if self.profile_bandwidth_bps else ()):
            _rate(rate)
        if self.bandwidths_bps is not None and not self.bandwidths_bps:
            raise PredictError("--bandwidth names no rate", usage=True)
        _one_of("--order", self.order, ORDERS)
        _one_of("--link", self.link, ("auto", *LINKS))
        if self.link_windows != "auto":  # auto: once resolved (predictflow.resolved)
            refuse_host_queue(self.host_queue_bytes, self.link, self.link_windows)
        _one_of("--tcp", self.tcp, CONGESTION_CONTROLS)
        if self.tcp != "reno" and self.link not in ("auto", *OWN_QUEUE_LINKS):
            raise PredictError(f"--tcp {self.tcp} runs the connections of --link hostqueue; "
                               f"--link {self.link} has none", usage=True)
        _one_of("--pings", self.pings, PINGS)
        if self.pings != "auto" and self.link not in ("auto", *OWN_QUEUE_LINKS):
            raise PredictError(f"--pings {self.pings} is for the connections of --link "
                               f"hostqueue; --link {self.link} has none", usage=True)
        if self.uplink_queue and self.link != "hostqueue":
            raise PredictError(f"--uplink-queue is for --link hostqueue only (the pushes "
                               f"through a queue beside the PS's own), not --link {self.link}: "
                               "add --link hostqueue", usage=True)
        _one_of("--start", self.start, STARTS)
        _one_of("--host-cpu", self.host_cpu, HOST_CPUS)
        _one_of("--template-draw", self.template_draw, TEMPLATE_DRAWS)
        _one_of("--executor-gaps", self.executor_gaps, EXECUTOR_GAPS)
        if self.link_burst is not None:
            _one_of("--link-burst", self.link_burst, LINK_BURSTS)
        _one_of("--link-windows", self.link_windows, LINK_WINDOWS)
        _one_of("--link-shares", self.link_shares, LINK_SHARES)
        if self.link_shares == "windows" and self.link not in ("auto", "fair", "overflow"):
            raise PredictError(f"--link-shares {self.link_shares} shares the processor-shared "
                               f"links; --link {self.link} has none: drop one", usage=True)
        _one_of("--ring-hop", self.ring_hop, RING_HOPS)
        for flag, value, allowed, what in (
                ("--emulate-step", self.emulate_step, EMULATE_STEPS, "runs a step"),
                ("--emulate-start", self.emulate_start, EMULATE_STARTS, "starts its workers")):
            if value is not None:
                _one_of(flag, value, allowed)
                if not self.emulate:
                    raise PredictError(f"{flag} says how --model emulate {what}: add emulate "
                                       "to --model", usage=True)
        if self.emulate_runs is not None and not self.emulate:
            raise PredictError("--emulate-runs caps the runs --model emulate makes: add emulate "
                               "to --model", usage=True)
        if self.emulate_runs is not None and self.emulate_runs < EMULATE_RUNS[0]:
            raise PredictError(f"--emulate-runs must be at least {EMULATE_RUNS[0]}, the runs "
                               f"every configuration begins with: {self.emulate_runs}", usage=True)
        if self.ring_hop != "loopback" and self.opdb is None:
            raise PredictError(f"--ring-hop {self.ring_hop} reads the hop's timings from "
                               "--opdb FILE: give the database", usage=True)
        _one_of("--placement", self.placement, ("auto", *PLACEMENTS))
        if not self.mechanisms or len(set(self.mechanisms)) != len(self.mechanisms):
            raise PredictError(f"--mechanism names each mechanism once: "
                               f"{','.join(self.mechanisms)!r}", usage=True)
        for mech in self.mechanisms:
            if mech != "auto":
                try:
                    check_mechanism(mech)
                except ReplayError as e:
                    raise PredictError(f"--mechanism: {e}", usage=True) from None
        if not (math.isfinite(self.compute_scale) and self.compute_scale > 0):
            raise PredictError(f"--compute-scale must be a finite number > 0, not "
                               f"{self.compute_scale!r}", usage=True)
        if self.compute_ops and not all(x.strip() for x in self.compute_ops):
            raise PredictError(f"--compute-ops {','.join(self.compute_ops)!r}: an empty op "
                               "type; name TensorFlow op types, comma-separated (e.g. Conv)",
                               usage=True)
        if self.compute_ops and self.compute_scale == 1.0:
            raise PredictError("--compute-ops names op types (e.g. Conv) whose compute "
                               "--compute-scale X (not 1) makes faster", usage=True)
        if self.add_layer is not None:
            parse_layer_copies(self.add_layer)
        if self.plan.needs_opdb and self.opdb is None:
            given = " and ".join(name for name, on in (
                ("--mixed-precision", self.plan.mixed_precision),
                ("--op-fusion", self.plan.op_fusion)) if on)
            raise PredictError(f"{given} needs --opdb FILE: the op cost database that costs "
                               "the changed ops (gradwire opdb build)", usage=True)
        if self.opdb_machine is not None and self.opdb is None:
            raise PredictError(f"--opdb-machine {self.opdb_machine} names whose timings in "
                               "--opdb FILE to use: give the database", usage=True)
        if self.to_batch_size is not None and self.opdb is None:
            raise PredictError("--to-batch-size needs --opdb FILE: the op cost database that "
                               "costs the ops at the new batch (gradwire opdb build)", usage=True)
        _one_of("--backend", self.backend, BACKENDS)
        if self.format is not None:
            _one_of("--format", self.format, FORMATS)
        if self.models != ("all",) and (not self.models
                                         or any(m not in MODELS for m in self.models)):
            bad = next((m for m in self.models if m not in MODELS), "")
            raise PredictError(f"unknown model {bad!r}: use {', '.join(MODELS)} or all", usage=True)
        if self.worker_bandwidth not in ("same", "unlimited"):
            if isinstance(self.worker_bandwidth, str):
                raise PredictError(f"--worker-bandwidth must be same, unlimited or a rate, not "
                                   f"{self.worker_bandwidth!r}", usage=True)
            _rate(self.worker_bandwidth)
        for name, value in (("--ps-cores", self.ps_cores), ("--win", self.win_bytes),
                            ("--batch-size", self.batch_size), ("--jobs", self.jobs)):
            if value is not None and value < 1:
                raise PredictError(f"{name} must be >= 1 (got {value})", usage=True)
        for bad, name in ((self.steps, "--steps"), (self.max_steps, "--max-steps")):
            if bad < MIN_STEPS:
                raise PredictError(f"{name} must be at least {MIN_STEPS} (got {bad})", usage=True)
        if self.warmup_steps is not None and not 1 <= self.warmup_steps < self.steps:
            raise PredictError(f"a replication's warm-up must be at least 1 step and fewer "
                               f"than its {self.steps} (got {self.warmup_steps})", usage=True)
        if not 2 <= self.replications <= self.max_replications:
            raise PredictError(f"--replications must be at least 2 and at most "
                               f"--max-replications (got {self.replications} and "
                               f"{self.max_replications})", usage=True)
        if self.start == "together" and self.max_steps < self.steps:
            raise PredictError(f"--max-steps ({self.max_steps}) is below --steps "
                               f"({self.steps})", usage=True)
        peer = bool(peer_mechanisms(self.mechanisms[:1]))  # the one they are replayed under
        for name, config in (("--timeline", self.timeline), ("--explain", self.explain)):
            if config is not None:
                _configuration(name, config, peer)
        if self.timeline is not None and self.out is None:
            raise PredictError("--timeline writes into the -o folder: give -o DIR", usage=True)
        if self.explain is not None and self.format == "csv" and self.out is None:
            raise PredictError("--explain's critical path does not fit the CSV's rows: use "
                               "--format json, or the table", usage=True)
        if self.ray_address and self.backend != "ray":
            raise PredictError("--ray-address needs --backend ray", usage=True)

    @property
    def recorded(self) -> tuple[tuple[int, int, float], ...]:
        """The configurations replayed once more with every op recorded (``--timeline``,
        ``--explain``; one run where they name the same)."""
        return tuple(dict.fromkeys(c for c in (self.timeline, self.explain) if c is not None))

    @property
    def sim(self) -> bool:
        """Whether the sweep runs the simulator (``--model`` names sim)."""
        return "sim" in self.models or self.models == ("all",)

    def changes_job(self, batch_size: int) -> bool:
        """Whether a what-if changes the job itself: its compute speed, its layers, its batch
        (other than ``batch_size``, the one the profile was recorded at), a plan of job
        passes. Then the profile's own run and its CPU a step are not the job predicted."""
        return (self.compute_scale != 1.0 or self.add_layer is not None
                or self.to_batch_size not in (None, batch_size) or not self.plan.empty)

    @property
    def baselines(self) -> list[str]:
        """The analytical models asked for, in order."""
        return [m for m in self.models if m not in ("sim", "emulate")]

    @property
    def emulate(self) -> bool:
        """Whether ``--model`` names emulate (replay/emulate.py: real TCP, root)."""
        return "emulate" in self.models

    @property
    def fit_win(self) -> bool:
        """Whether WIN is fitted on the profile's worker capture (flow control on, no
        ``--win``)."""
        return self.flow_control and not self.win_bytes

    def win_of(self, fitted_win_bytes: float | None) -> float | None:
        """The sim's WIN in bytes: None with flow control off, else ``--win`` or the fit."""
        if not self.flow_control:
            return None
        return float(self.win_bytes) if self.win_bytes else fitted_win_bytes

    @property
    def host_queue(self) -> HostQueueSpec:
        """``--link hostqueue``'s queue and connections, as resolved (``HostQueueSpec``)."""
        return HostQueueSpec(self.host_queue_bytes, self.bbr_window_bytes, self.standing_queue,
                             self.uplink_queue, self.share_windows, self.pings_us,
                             self.ping_answer_us)

    def worker_nic_bps(self, bandwidth_bps: float) -> float | None:
        """Each worker's NIC rate for a PS link rate: ``--worker-bandwidth same`` -> that
        rate, ``unlimited`` -> None, else the rate given (bits per second)."""
        nic = self.worker_bandwidth
        return bandwidth_bps if nic == "same" else None if nic == "unlimited" else float(nic)


def baselines_of(mechanisms: tuple[str, ...]) -> tuple[str, ...]:
    """The baselines that model ``mechanisms`` (``--model all``), in ``MODELS``' order."""
    from gradwire.replay.baselines import ASYNC_BASELINES, RING_BASELINES, SYNC_BASELINES
    from gradwire.replay.mechanisms import ASYNC_PS, BUTTERFLY, PEER_MECHANISMS, base_mechanism

    want: set[str] = set()
    for m in map(base_mechanism, mechanisms):  # butterfly mixing has no baseline of its own
        if m != BUTTERFLY:
            want.update(ASYNC_BASELINES if m == ASYNC_PS else RING_BASELINES
                        if m in PEER_MECHANISMS else SYNC_BASELINES)
    return tuple(m for m in MODELS if m in want)


def default_steps(start: str) -> int:
    """Steps per worker when --steps is not given: the one run of ``--start together`` starts
    at 200 (and doubles), a replication of the others runs 60."""
    return 200 if start == "together" else 60


def _counts(name: str, counts: tuple[int, ...]) -> None:
    if not counts:
        raise PredictError(f"{name} names no count", usage=True)
    bad = [n for n in counts if not 1 <= n <= MAX_WORKERS]
    if bad:
        raise PredictError(f"{name}: counts run from 1 to {MAX_WORKERS} (got {bad[0]})", usage=True)


def _rate(bps: float) -> None:
    if not (math.isfinite(bps) and bps > 0):
        raise PredictError(f"a link rate must be a finite number of bits per second > 0, not "
                           f"{bps!r}", usage=True)


def refuse_host_queue(host_queue_bytes: float | None, link: str, link_windows: str) -> None:
    """PredictError where ``--host-queue`` is given and neither ``--link hostqueue`` (or
    ``overflow``) nor ``--link-windows same`` (``link_windows`` not ``auto``) has a queue for
    it to size."""
    if (host_queue_bytes is not None and link not in OWN_QUEUE_LINKS
            and link_windows != "same"):
        raise PredictError(f"--host-queue sizes the queue of --link hostqueue (or overflow) and of "
                           f"--link-windows same, and this prediction takes --link {link} "
                           f"with --link-windows {link_windows}; drop it or take one of those",
                           usage=True)


def _one_of(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise PredictError(f"{name} must be one of {', '.join(choices)}, not {value!r}", usage=True)


def _configuration(name: str, config: tuple[int, int, float], peer: bool = False) -> None:
    """Refuse a W,M,BW configuration out of range, naming the option; ``peer``: replayed
    under a mechanism without PSes (ring all-reduce, butterfly), whose rows show M = 0."""
    w, m, bps = config
    if w < 1 or m < (0 if peer else 1):
        raise PredictError(f"{name} needs at least 1 worker"
                           + ("" if peer else " and 1 PS") + f": {w},{m}", usage=True)
    if peer and m > 0:
        raise PredictError(f"{name} {w},{m}: the mechanism it is replayed under has no "
                           f"parameter servers (its rows show M = 0): give {w},0", usage=True)
    if max(w, m) > MAX_WORKERS:
        raise PredictError(f"{name}: at most {MAX_WORKERS} workers and PSes: {w},{m}", usage=True)
    _rate(bps)
