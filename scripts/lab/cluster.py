"""Orchestration: build the topology, start M PS + W worker processes, measure, tear down.

``run_lab(LabConfig(...))`` returns a JSON-ready dict. Cluster throughput is measured over the
common window in which every worker is past its warm-up (the first quarter of its steps, at least
one) and none has finished: the sum of each worker's rate between its own step ends in that
window (``cluster_throughput``). Summing each worker's own rate over the second half of its
steps (the ICPE'20 paper's measure, kept as ``throughput_sum_of_workers_examples_per_s``)
overstates a short run, since workers that start late or finish early run part of their second
half with less contention. CPU share of each node process tree is sampled from /proc/<pid>/stat
(utime + stime, in cores: 1.0 = one core busy) and reported over the process lifetime and over
the measurement window.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from gradwire.procstat import CLK_TCK, cores_between, host_cpu_ticks
from gradwire.replay.netns import (
    PORT,
    LabError,
    Node,
    Topology,
    burst_bytes,
    check_qdisc,
    check_tcp_cc,
    descendant_pids,
    host_tcp_cc,
    parse_delay_s,
    parse_rate_bps,
    pid_alive,
    queue_bytes,
)
from gradwire.throughput import lab_warmup_steps, summed_worker_rates
from lab import headers, models, tcpsample

log = logging.getLogger(__name__)
SCRIPTS_DIR = Path(__file__).resolve().parent.parent
SAMPLE_PERIOD_S = 0.5
# written in the work dir when the captures are told to end (--capture-steps)
CAPTURES_ENDED = "captures_ended"
ALL_STEPPED = "all_stepped"  # run_together: every worker has ended its steps (its time in it)


@dataclass
class LabConfig:
    """One lab run.

    Attributes:
        model: one of lab.models.MODELS ('mlp', 'convnet', 'resnet50', 'deepmlp', 'recsys',
            'mobilenet', and Chang et al.'s 'vgg16', 'inception3', 'resnet101').
        model_mb: parameter size in MB (float32) of mlp, deepmlp and recsys's table; ignored
            by the others.
        batch_size: examples per worker step.
        steps: training steps per worker.
        workers: number of workers W.
        ps: number of parameter servers M.
        mode: 'async', 'sync' (SyncReplicasOptimizer, replicas_to_aggregate=W) or 'ring'
            (collective ring all-reduce among the workers, no PS: ``ps`` must be 0 and
            ``shape`` 'all'; see ``lab/node.py``).
        bandwidth: tc rate of each shaped link, each direction ('100mbit', '1gbit'); None:
            unshaped.
        delay: one-way delay on each PS link, each direction ('1ms'); needs sch_netem.
        queue: bottleneck buffer of each shaped link ('512k'; a bfifo under the rate class);
            None: 10 ms of the rate, at least 256 KiB; 'kernel': the kernel's default queue
            (1000 packets: up to 64 MB with GSO packets). See ``netns.queue_bytes``.
        shape: links to shape, 'ps' or 'all'.
        burst: the shaped links' HTB burst: 'gso' (default, 128 KiB) or 'mtu' (GSO off, 4
            frames: a plain rate at any transfer size), or a size at least gso's ('512k',
            GSO on). See ``netns.Topology``.
        qdisc: how a shaped link's buffer serves its flows: 'fifo' (default), 'fair' (round
            robin between the nodes at the other end) or 'ackfirst' (the FIFO, pure ACKs
            ahead of its data). See ``netns.Topology``.
        grpc_options: TF_GRPC_DEFAULT_OPTIONS for every node ('grpc.http2.bdp_probe=0,...').
        ps_strategy: how the variables go to the PSes: 'greedy' (each to the PS with the fewest
            bytes so far) or 'round-robin' (replica_device_setter's default).
        partition: tensor partition: the workers build the model under TensorFlow's
            ``min_max_variable_partitioner(max_partitions=partition, axis=0,
            min_slice_size=256 KiB)``, so a variable of N bytes becomes min(partition,
            ceil(N / 256 KiB), its first dimension) variables, each placed on a PS by
            ``ps_strategy``; 1: off. Only the models of ``models.PARTITIONED_MODELS``, and
            not in mode 'ring'.
        accumulate: gradient accumulation: each worker update (one ``session.run``) reads
            every variable once, runs ``accumulate`` micro-steps of ``batch_size`` examples one
            after another and applies the mean of their gradients once, so a worker's step is
            ``accumulate * batch_size`` examples; 1: off. Only the models of
            ``models.ACCUMULATE_MODELS``, and only in mode 'async'.
        mixed_precision: bfloat16 compute and transfers: the variables stay float32 on the
            PSes, each worker step reads each once and casts it to bfloat16 on its PS (the
            tensor pulled is bfloat16), computes the forward and backward pass in bfloat16 and
            pushes bfloat16 gradients, cast to float32 on the PS before the update. Only the
            models of ``models.PRECISION_MODELS``, only in mode 'async', not with
            ``accumulate``.
        recompute: recomputation: the workers build the model's layers in segments of
            ``recompute``, each a ``tf.recompute_grad`` checkpoint whose forward pass runs
            again before its gradients; 0: off. Only the models of
            ``models.RECOMPUTE_MODELS``, not with ``accumulate`` or ``mixed_precision``.
        fuse_bytes: tensor fusion: each worker's gradients to one PS, in the order the
            backward pass makes them, concatenated into buckets of at least that many bytes
            (one tensor pushed per bucket, split on the PS before the updates); 0: off. Only
            in mode 'async', not for sparse models, not with ``accumulate`` or
            ``mixed_precision``.
        xla: XLA auto-clustering in the workers' sessions (``global_jit_level`` ON_1, with
            ``TF_XLA_FLAGS=--tf_xla_cpu_global_jit`` in the worker processes).
        collect_dir: if set, every node runs under ``gradwire collect`` into
            ``collect_dir/<role><index>``, capturing its own veth on port 2222.
        capture_steps: with ``collect_dir``: every node's capture ends (SIGUSR1 to its
            ``gradwire collect``) once every worker has run this many steps, and the job runs
            on to ``steps`` uncaptured (the TraceHook still times its steps); None: the whole
            run is captured.
        uncaptured_s: with ``capture_steps``: the workers also run on, beyond ``steps`` if
            their steps are short, until this many seconds after the captures ended (a job
            of 40 ms steps would otherwise end before the lab's 0.5 s poll saw it reach
            ``capture_steps``); None: ``steps`` only.
        run_together: asynchronous workers run on past ``steps`` until every worker has
            ended ``steps`` steps (the orchestrator's poll sees it and writes
            ``ALL_STEPPED``), so that the window in which all W run holds every worker's
            measured steps: TensorFlow's start on a small machine can leave the workers'
            first steps a second apart, longer than a whole run of a job of 50 ms steps
            (docs/lab.md, "Workers that start apart"); not with ``uncaptured_s``.
        hook_dir: if set (and no ``collect_dir``), workers run the TraceHook into
            ``hook_dir/<role><index>`` without any capture (to measure the hook alone).
        trace_first, trace_steps: TraceHook window (used under ``collect_dir`` or ``hook_dir``).
        tcp_sample_dir: if set, the PSes' namespaces (the workers' for ring all-reduce) are
            sampled with ``ss`` and ``tc`` (every ``tcp_sample_pause_s`` and the loop's own
            few ms) while the nodes run, into ``tcp_sample_dir/<node>.ss.txt``, and the
            switch's queues (``tc`` alone) into ``tcp_sample_dir/switch.ss.txt``; the result's
            ``tcp_samples`` summarises each file (``lab/tcpsample.py``).
        tcp_sample_pause_s: seconds the sampler sleeps between samples (``tcpsample.PAUSE_S``:
            about every 15 ms; 0.1 s disturbs the workers' phases less).
        headers_dir: if set, ``tcpdump`` keeps the packet headers of each PS's link (every
            worker's for ring all-reduce) in ``headers_dir/<node>.headers.pcap`` while the
            nodes run; the result's ``headers`` summarises each file (``lab/headers.py``).
        timeout_s: give up on the workers after this many seconds.
        work_dir: node logs and per-worker result files; a fresh temp dir by default.
        python: interpreter for the nodes; this one by default.
    """

    model: str = "mlp"
    model_mb: float = 50.0
    batch_size: int = 32
    steps: int = 20
    workers: int = 2
    ps: int = 1
    mode: str = "async"
    bandwidth: str | None = "1gbit"
    delay: str | None = None
    queue: str | None = None
    tcp_cc: str | None = None
    shape: str = "ps"
    burst: str = "gso"
    qdisc: str = "fifo"
    grpc_options: str | None = None
    ps_strategy: str = "greedy"
    partition: int = 1
    accumulate: int = 1
    mixed_precision: bool = False
    recompute: int = 0
    fuse_bytes: float = 0.0
    xla: bool = False
    collect_dir: str | None = None
    capture_steps: int | None = None
    uncaptured_s: float | None = None
    run_together: bool = False
    hook_dir: str | None = None
    trace_first: int = 10
    trace_steps: int = 5
    tcp_sample_dir: str | None = None
    tcp_sample_pause_s: float = tcpsample.PAUSE_S
    headers_dir: str | None = None
    timeout_s: float = 900.0
    work_dir: str | None = None
    python: str = field(default_factory=lambda: sys.executable)

    @property
    def rate_bps(self) -> float | None:
        """The shaped links' rate, bits per second (None: unshaped)."""
        return parse_rate_bps(self.bandwidth) if self.bandwidth else None

    def validate(self) -> None:
        """Raise LabError with a one-line message on the first bad value."""
        if self.model not in models.MODELS:
            raise LabError(f"bad model {self.model!r}: expected one of {', '.join(models.MODELS)}")
        if self.mode not in models.MODES:
            raise LabError(f"bad mode {self.mode!r}: expected {', '.join(models.MODES)}")
        for name in ("batch_size", "steps", "workers"):
            if int(getattr(self, name)) < 1:
                raise LabError(f"bad {name.replace('_', '-')} {getattr(self, name)}: must be >= 1")
        if self.mode == "ring":
            if self.ps != 0:
                raise LabError(f"bad ps {self.ps} for mode ring: ring all-reduce has no "
                               "parameter servers; use --ps 0")
            if self.bandwidth and self.shape != "all":
                raise LabError("mode ring with shape 'ps': ring all-reduce has no PS link; "
                               "shape 'all' (every worker's link)")
        elif self.ps < 1:
            raise LabError(f"bad ps {self.ps}: must be >= 1 in mode {self.mode}")
        if self.steps < 2:
            raise LabError(f"bad steps {self.steps}: need >= 2 to time the second half")
        if self.model_mb <= 0:
            raise LabError(f"bad model-mb {self.model_mb}: must be > 0")
        rate = self.rate_bps  # parses the bandwidth
        parse_delay_s(self.delay)
        queue_bytes(self.queue, rate)
        check_tcp_cc(self.tcp_cc)
        burst_bytes(self.burst, rate or 0.0)  # refuses a bad one
        check_qdisc(self.qdisc, queue_bytes(self.queue, rate), parse_delay_s(self.delay))
        if self.grpc_options is not None and any(
            "=" not in kv for kv in self.grpc_options.split(",") if kv
        ):
            raise LabError(f"bad grpc options {self.grpc_options!r}: expected 'key=value,...'")
        if self.ps_strategy not in models.PS_STRATEGIES:
            raise LabError(f"bad ps strategy {self.ps_strategy!r}: expected "
                           f"{' or '.join(models.PS_STRATEGIES)}")
        why = models.job_refusal(self.mode, self.model, self.partition, self.accumulate,
                                 self.mixed_precision, self.recompute, self.fuse_bytes)
        if why:
            raise LabError(why)
        if self.timeout_s <= 0:
            raise LabError(f"bad timeout {self.timeout_s}: must be > 0 seconds")
        if self.collect_dir or self.hook_dir:
            self._validate_trace_window()
        if self.collect_dir:
            self._validate_collect_dir(Path(self.collect_dir))
        if self.capture_steps is not None:
            if not self.collect_dir:
                raise LabError("capture-steps ends the captures of --collect: give --collect")
            if not self.trace_first + self.trace_steps <= self.capture_steps < self.steps:
                raise LabError(f"bad capture-steps {self.capture_steps}: it must cover the "
                               f"traced steps (at least {self.trace_first + self.trace_steps}) "
                               f"and leave steps to run uncaptured (below --steps {self.steps})")
        if self.uncaptured_s is not None and (self.capture_steps is None
                                              or not 0 < self.uncaptured_s < self.timeout_s):
            raise LabError(f"bad uncaptured-s {self.uncaptured_s}: it needs capture-steps and "
                           f"a number of seconds above 0 and below the timeout")
        if self.run_together and (self.mode != "async" or self.uncaptured_s is not None):
            raise LabError("run-together is for asynchronous workers without --uncaptured-s "
                           "(synchronous and ring workers step together already; the "
                           "captures' run-on has its own end)")
        if self.tcp_sample_dir:
            self._validate_tcp_sample_dir(Path(self.tcp_sample_dir))
        if self.headers_dir:
            self._validate_headers_dir(Path(self.headers_dir))
        if not tcpsample.valid_pause(self.tcp_sample_pause_s):
            raise LabError(f"bad tcp-sample pause {self.tcp_sample_pause_s}: must be in "
                           f"{tcpsample.PAUSE_RANGE} seconds")

    def _validate_trace_window(self) -> None:
        if self.trace_first < 0 or self.trace_steps < 1:
            raise LabError(f"bad trace window: trace-first {self.trace_first} must be >= 0 and "
                           f"trace-steps {self.trace_steps} >= 1")
        if self.steps <= self.trace_first:
            raise LabError(f"steps {self.steps} <= trace-first {self.trace_first}: the "
                           "TraceHook would record nothing; raise --steps or lower --trace-first")

    def _validate_collect_dir(self, folder: Path) -> None:
        """Before any cluster is built: a file, or bundles of an earlier run, fail here."""
        if folder.exists() and not folder.is_dir():
            raise LabError(f"bad collect dir {folder}: it is a file, not a folder")
        names = [f"ps{i}" for i in range(self.ps)] + [f"worker{i}" for i in range(self.workers)]
        taken = [n for n in names if (folder / n).exists() and (
            not (folder / n).is_dir() or any((folder / n).iterdir()))]
        if taken:
            raise LabError(f"bad collect dir {folder}: {', '.join(taken)} already hold(s) "
                           "bundles; give a new or empty folder")

    def _validate_tcp_sample_dir(self, folder: Path) -> None:
        """Before any cluster is built: a file in the way, or samples of an earlier run, fail
        here (nothing is overwritten)."""
        self._refuse_used_folder(folder, "tcp-sample", tcpsample.sample_file,
                                 also=(tcpsample.SWITCH,))

    def _validate_headers_dir(self, folder: Path) -> None:
        """Before any cluster is built: no tcpdump, a file in the way, or captures of an
        earlier run fail here (nothing is overwritten)."""
        self._refuse_used_folder(folder, "capture-headers", headers.capture_file)
        if shutil.which("tcpdump") is None:
            raise LabError("--capture-headers needs tcpdump: install it (apt-get install "
                           "tcpdump)")

    def _refuse_used_folder(self, folder: Path, option: str,
                            file_of: Callable[[Path, str], Path], also: tuple[str, ...] = ()
                            ) -> None:
        """``folder`` must be a folder (or not exist yet) without ``file_of(folder, node)`` for
        any of ``sampled_nodes`` and the names in ``also``."""
        if folder.exists() and not folder.is_dir():
            raise LabError(f"bad {option} dir {folder}: it is a file, not a folder")
        taken = [f.name for n in [*self.sampled_nodes(), *also]
                 if (f := file_of(folder, n)).exists()]
        if taken:
            raise LabError(f"bad {option} dir {folder}: {', '.join(taken)} already there; "
                           "give a new or empty folder")

    def sampled_nodes(self) -> list[str]:
        """The nodes whose links ``--tcp-sample`` and ``--capture-headers`` watch: the PSes,
        the workers in ring all-reduce (no PS)."""
        return ([f"ps{i}" for i in range(self.ps)] if self.ps
                else [f"worker{i}" for i in range(self.workers)])


# -- CPU accounting ---------------------------------------------------------------------------


def cpu_seconds(pid: int) -> tuple[int, float] | None:
    """(start time in clock ticks since boot, utime + stime in seconds) of ``pid`` from
    /proc/<pid>/stat, None if it is gone; the start time tells a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # fields 14, 15 and 22 of stat(5), counted after the command name's ")"
    return int(fields[19]), (int(fields[11]) + int(fields[12])) / CLK_TCK


@dataclass
class _HostCpu:
    """The whole machine's CPU over time: the nodes, their captures and samplers, and the
    kernel's packet work (softirq, part of it charged to no process)."""

    # (time, busy, softirq, steal): host_cpu_ticks' counters
    samples: list[tuple[float, ...]] = field(default_factory=list)

    def sample(self) -> None:
        self.samples.append((time.time(), *host_cpu_ticks()))

    def share(self, t0: float, t1: float,
              more: list[tuple[float, ...]] | None = None) -> tuple[float, ...] | None:
        """Mean cores busy, in softirq and stolen between the first and last reading in
        [t0, t1] that have all three: the samples, and ``more`` readings of the same counters
        (the workers' at their step ends)."""
        pts = sorted(s for s in [*self.samples, *(more or [])]
                     if t0 <= s[0] <= t1 and len(s) == 4)
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            return None
        return cores_between(pts[0][1:], pts[-1][1:], pts[-1][0] - pts[0][0])


def step_end_ticks(per_worker: dict[str, dict[str, Any]]) -> list[tuple[float, ...]]:
    """Every worker's (step end, busy, softirq, steal) readings of the machine's CPU ticks."""
    out: list[tuple[float, ...]] = []
    for w in per_worker.values():
        ticks = w.get("host_ticks_at_step_end") or []
        out += [(t, *(int(x) for x in k))
                for t, k in zip(w.get("step_end_times_s") or [], ticks, strict=False)]
    return out


@dataclass
class _Watched:
    name: str
    node: Node
    proc: subprocess.Popen[Any]
    start_s: float
    samples: list[tuple[float, float]] = field(default_factory=list)  # (time.time(), cpu_s)
    pids_seen: set[int] = field(default_factory=set)
    last_cpu_s: dict[tuple[int, int], float] = field(default_factory=dict)  # (pid, start)

    def sample(self) -> None:
        """Add (now, CPU seconds of the whole process tree so far); a descendant that has
        exited (the training under ``gradwire collect``) keeps its last reading."""
        if self.proc.poll() is not None:
            return
        tree = [self.proc.pid, *descendant_pids(self.proc.pid)]
        self.pids_seen.update(tree)
        for p in tree:
            reading = cpu_seconds(p)
            if reading is not None:
                start, cpu = reading
                self.last_cpu_s[(p, start)] = max(cpu, self.last_cpu_s.get((p, start), 0.0))
        self.samples.append((time.time(), sum(self.last_cpu_s.values())))

    def share(self, t0: float | None = None, t1: float | None = None) -> float | None:
        """Mean cores used between t0 and t1 (default: whole sampled lifetime)."""
        pts = [
            (t, c) for t, c in self.samples if (t0 is None or t >= t0) and (t1 is None or t <= t1)
        ]
        if t0 is None and self.samples:
            pts = [(self.start_s, 0.0), *pts]
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            return None
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


# -- running ----------------------------------------------------------------------------------


def _node_command(
    cfg: LabConfig, node: Node, cluster: dict[str, list[str]], out: Path
) -> list[str]:
    cmd = [
        cfg.python,
        "-m",
        "lab.node",
        "--role",
        node.role,
        "--index",
        str(node.index),
        "--cluster",
        json.dumps(cluster),
        "--model",
        cfg.model,
        "--model-mb",
        str(cfg.model_mb),
        "--batch-size",
        str(cfg.batch_size),
        "--steps",
        str(cfg.steps),
        "--mode",
        cfg.mode,
        "--ps-strategy",
        cfg.ps_strategy,
        "--trace-first",
        str(cfg.trace_first),
        "--trace-steps",
        str(cfg.trace_steps),
    ]
    if node.role == "worker" and cfg.uncaptured_s is not None:
        cmd += ["--run-on-file", str(out.parent / CAPTURES_ENDED), "--run-on-s",
                str(cfg.uncaptured_s)]
    if node.role == "worker" and cfg.run_together:
        cmd += ["--run-on-file", str(out.parent / ALL_STEPPED), "--run-on-s", "0"]
    if node.role == "worker":
        cmd += ["--partition", str(cfg.partition), "--accumulate", str(cfg.accumulate),
                "--recompute", str(cfg.recompute), "--fuse-tensors", f"{cfg.fuse_bytes:g}",
                *(["--mixed-precision"] if cfg.mixed_precision else []),
                *(["--xla"] if cfg.xla else []), "--out", str(out)]
    if cfg.collect_dir:
        bundle = Path(cfg.collect_dir) / node.name
        cmd = [
            cfg.python,
            "-m",
            "gradwire",
            "collect",
            "--out",
            str(bundle),
            "--iface",
            node.iface,
            "--ports",
            str(PORT),
            "--",
            *cmd,
        ]
    return cmd


def _node_env(cfg: LabConfig, node: Node, cluster: dict[str, list[str]]) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SCRIPTS_DIR), env.get("PYTHONPATH")) if p)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["TF_CONFIG"] = json.dumps(
        {"cluster": cluster, "task": {"type": node.role, "index": node.index}}
    )
    env.pop("GRADWIRE_BUNDLE", None)  # set by `gradwire collect` for its child only
    if cfg.hook_dir and not cfg.collect_dir and node.role == "worker":
        env["GRADWIRE_BUNDLE"] = str(Path(cfg.hook_dir) / node.name)
    if cfg.grpc_options:
        env["TF_GRPC_DEFAULT_OPTIONS"] = cfg.grpc_options
    else:
        env.pop("TF_GRPC_DEFAULT_OPTIONS", None)
    return env


def _tail(path: Path) -> str:
    """The last line of a node's log and the log's path, for one-line errors."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        text = []
    return f"{text[-1].strip() if text else '(empty log)'} (log: {path})"


def _stop(w: _Watched, grace_s: float = 5.0) -> None:
    """SIGTERM the node (by PID), SIGKILL its tree after ``grace_s`` seconds."""
    if w.proc.poll() is not None:
        return
    w.pids_seen.update(descendant_pids(w.proc.pid))
    w.proc.send_signal(signal.SIGTERM)
    try:
        w.proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        for pid in [w.proc.pid, *descendant_pids(w.proc.pid)]:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        w.proc.wait(timeout=5)


def cluster_throughput(ends: list[list[float]], examples_per_step: list[int]
                       ) -> tuple[float | None, list[float] | None]:
    """Examples/s of all workers over their common window, and the window (s).

    ``ends``: each worker's step end times (s). The window opens when every worker has ended
    its warm-up steps (the first quarter, at least one: ``lab_warmup_steps``) and closes when
    the first worker ends its last step. The rate is
    ``gradwire.throughput.summed_worker_rates`` (the replayer's estimator too): each worker's
    rate between its own step ends inside the window, summed.
    None when a worker has fewer than 3 steps or no step end inside the window.
    """
    if not ends or any(len(t) < 3 for t in ends):
        return None, None
    t0 = max(t[lab_warmup_steps(len(t)) - 1] for t in ends)
    t1 = min(t[-1] for t in ends)
    total = summed_worker_rates(ends, examples_per_step, t0, t1)
    if total is None:
        return None, None
    return total, [t0, t1]


def workers_throughput(per_worker: dict[str, dict[str, Any]], batch_size: int
                       ) -> tuple[float | None, list[float] | None]:
    """``cluster_throughput`` of a result's ``per_worker`` records (their step end times and
    examples per step, ``batch_size`` where a worker has none)."""
    return cluster_throughput(
        [w.get("step_end_times_s") or [] for w in per_worker.values()],
        [w.get("examples_per_step") or batch_size for w in per_worker.values()],
    )


def worker_throughput(res: dict[str, Any]) -> dict[str, Any]:
    """Examples/s of one worker, time-averaged over the second half of its steps.

    With end times t_0..t_{n-1} and k = n // 2: (n - 1 - k) * examples_per_step / (t_{n-1} - t_k).
    """
    t = res["step_end_times_s"]
    n = len(t)
    if n < 2:
        return {"steps": n, "examples_per_s": None}
    k = n // 2 if n > 2 else 0
    span = t[-1] - t[k]
    eps = (n - 1 - k) * res["examples_per_step"] / span if span > 0 else None
    cpu = res.get("cpu_s_at_step_end", [])
    durations = [b - a for a, b in zip(t[:-1], t[1:], strict=True)]
    return {
        "steps": n,
        "examples_per_s": eps,
        "window_s": [t[k], t[-1]],
        "median_step_s": sorted(durations)[len(durations) // 2],
        "cpu_share_window_self": (cpu[-1] - cpu[k]) / span if len(cpu) == n and span > 0 else None,
    }


def run_lab(cfg: LabConfig, prefix: str | None = None) -> dict[str, Any]:
    """Run one lab experiment end to end and return the result dict (see docs/lab.md)."""
    cfg.validate()
    # nodes run with the work dir as cwd: relative paths are the caller's
    paths = ("collect_dir", "hook_dir", "work_dir", "tcp_sample_dir", "headers_dir")
    cfg = replace(cfg, **{k: str(Path(v).resolve()) for k in paths if (v := getattr(cfg, k))})
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces and tc): run it as root")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise LabError(f"{tool!r} not found: install iproute2")
    work = Path(cfg.work_dir or tempfile.mkdtemp(prefix="gwlab-"))
    work.mkdir(parents=True, exist_ok=True)
    for i in range(cfg.workers):  # an earlier run's results in the same work dir would be
        # read as this one's (its step ends would end the captures at once)
        (work / f"worker{i}.json").unlink(missing_ok=True)
    for flag in (CAPTURES_ENDED, ALL_STEPPED):  # an earlier run's would stop these at once
        (work / flag).unlink(missing_ok=True)
    if cfg.collect_dir:
        Path(cfg.collect_dir).mkdir(parents=True, exist_ok=True)
    topo_kw: dict[str, Any] = {"prefix": prefix} if prefix else {}
    t_begin = time.time()
    watched: list[_Watched] = []
    host = _HostCpu()
    outcome: dict[str, Any] = {}
    grace_s = 30.0 if cfg.collect_dir else 5.0  # `gradwire collect` must stop its capture
    with Topology(
        cfg.ps, cfg.workers, bandwidth=cfg.bandwidth, delay=cfg.delay, shape=cfg.shape,
        queue=cfg.queue, tcp_cc=cfg.tcp_cc, burst=cfg.burst, qdisc=cfg.qdisc, **topo_kw
    ) as topo:
        cluster = {"worker": [n.endpoint for n in topo.workers]}
        if topo.ps:  # ring all-reduce: workers only
            cluster["ps"] = [n.endpoint for n in topo.ps]
        sampled = topo.ps or topo.workers
        try:
            if cfg.tcp_sample_dir:
                loops = tcpsample.start(topo, sampled, Path(cfg.tcp_sample_dir),
                                        cfg.tcp_sample_pause_s)
                loops.append(tcpsample.start_switch(topo, Path(cfg.tcp_sample_dir),
                                                    cfg.tcp_sample_pause_s))
            if cfg.headers_dir:
                dumps = headers.start(topo, sampled, Path(cfg.headers_dir))
            for node in topo.ps + topo.workers:
                out = work / f"{node.name}.json"
                logf = open(work / f"{node.name}.log", "wb")  # noqa: SIM115 - closed below
                proc = topo.spawn(
                    node,
                    _node_command(cfg, node, cluster, out),
                    env=_node_env(cfg, node, cluster),
                    cwd=str(work),
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                )
                logf.close()
                watched.append(_Watched(node.name, node, proc, time.time()))
            outcome = _wait(cfg, watched, work, grace_s, host)
            if cfg.tcp_sample_dir:
                tcpsample.stop(loops)
                outcome["tcp_samples"] = {
                    name: {"file": str(path), **tcpsample.summary(path)}
                    for name, (_, path) in zip([n.name for n in sampled] + [tcpsample.SWITCH],
                                               loops, strict=True)
                }
            if cfg.headers_dir:
                headers.stop(dumps)
                outcome["headers"] = headers.summaries(
                    [(n.name, path, n.addr) for n, (_, path) in zip(sampled, dumps, strict=True)],
                    cfg.rate_bps)
            for w in watched:  # stop PSes (and any straggler) while the topology exists
                w.sample()
                _stop(w, grace_s)
        finally:
            all_pids = sorted({p for w in watched for p in (w.pids_seen | {w.proc.pid})})
        prefix_used = topo.prefix
        namespaces = topo.namespaces()
    t_end = time.time()

    per_worker = {}
    for w in watched:
        if w.node.role != "worker":
            continue
        res = _load(work / f"{w.name}.json")
        info = worker_throughput(res) if res else {"steps": 0, "examples_per_s": None}
        info["step_end_times_s"] = res.get("step_end_times_s", []) if res else []
        info["host_ticks_at_step_end"] = res.get("host_ticks_at_step_end", []) if res else []
        info["exit_code"] = w.proc.returncode
        info["finished"] = bool(res and res.get("done"))
        for key in ("examples_per_step", "param_bytes", "session_ready_time_s"):
            info[key] = res.get(key) if res else None
        per_worker[w.name] = info
    rates = [i["examples_per_s"] for i in per_worker.values()]
    total_sum = sum(r for r in rates if r) if rates and all(rates) else None
    total, window = workers_throughput(per_worker, cfg.batch_size)
    if window is None:
        window = [None, None]
    cpu = {
        w.name: {
            "lifetime": w.share(),
            "window": w.share(*window) if window[0] is not None else None,
            "pid": w.proc.pid,
        }
        for w in watched
    }
    host_window = (host.share(*window, step_end_ticks(per_worker)) if window[0] is not None
                   else None)
    # from when the last capture stopped (its bundle says), else from the signal
    stopped = capture_stopped_s(cfg) or outcome.get("capture_ended_s")
    uncaptured = uncaptured_measures(per_worker, stopped, watched, host)
    return {
        "config": asdict(cfg),
        "prefix": prefix_used,
        "namespaces": namespaces,
        "pids": all_pids,
        "throughput_examples_per_s": total,
        "throughput_window_s": window if window[0] is not None else None,
        "throughput_sum_of_workers_examples_per_s": total_sum,
        "per_worker": per_worker,
        "cpu_share": cpu,
        "cpu_share_window_total": (
            sum(c["window"] for c in cpu.values() if c["window"] is not None)
            if window[0] is not None and any(c["window"] is not None for c in cpu.values())
            else None
        ),
        "cpu_count": os.cpu_count(),
        # the machine's busy cores in the window (None without a window), softirq among them
        "host_cpu_window": host_window[0] if host_window else None,
        "host_softirq_window": host_window[1] if host_window else None,
        # cores the hypervisor gave to something else meanwhile (a noisy neighbour)
        "host_steal_window": host_window[2] if host_window else None,
        # with --capture-steps: the steps after every capture ended, and their CPU
        "uncaptured": uncaptured,
        "bandwidth_bps": cfg.rate_bps,
        "delay_s": parse_delay_s(cfg.delay),
        "queue_bytes": queue_bytes(cfg.queue, cfg.rate_bps),
        "tcp_cc": cfg.tcp_cc or host_tcp_cc(),
        "burst": cfg.burst,
        "qdisc": cfg.qdisc,
        "wall_s": t_end - t_begin,
        "work_dir": str(work),
        **outcome,
        "versions": _versions(cfg.python),
    }


def capture_stopped_s(cfg: LabConfig) -> float | None:
    """When the last node's capture stopped (epoch s; its bundle's ``capture.stopped_ns``,
    written as ``gradwire collect`` exits), None without ``--capture-steps`` or a bundle that
    says."""
    if not cfg.collect_dir or cfg.capture_steps is None:
        return None
    stops = []
    for manifest in Path(cfg.collect_dir).glob("*/manifest.json"):
        stopped = ((_load(manifest) or {}).get("capture") or {}).get("stopped_ns")
        if isinstance(stopped, int):
            stops.append(stopped / 1e9)
    return max(stops, default=None)


def uncaptured_measures(per_worker: dict[str, dict[str, Any]], ended_s: float | None,
                        watched: list[_Watched], host: _HostCpu) -> dict[str, Any] | None:
    """The run after its captures ended at ``ended_s`` (``--capture-steps``): from each
    worker's second step end after it (the step it was in then is left out) to the
    first worker's last, its steps per second (every worker's), the nodes' cores busy (None
    where the sampler read fewer than 2 in it) and the machine's (from the samples and the
    workers' readings at their step ends); None without a signal or 3 step ends per worker."""
    if ended_s is None:
        return None
    ends = [[t for t in w.get("step_end_times_s") or [] if t > ended_s][1:]
            for w in per_worker.values()]
    if not ends or any(len(e) < 3 for e in ends):
        return None
    t0, t1 = max(e[0] for e in ends), min(e[-1] for e in ends)
    steps = 0.0
    for e in ends:
        inside = [t for t in e if t0 <= t <= t1]
        if len(inside) >= 2:
            steps += (len(inside) - 1) / (inside[-1] - inside[0])
    nodes = [w.share(t0, t1) for w in watched]
    # the workers' readings at their step ends hold the machine's CPU over a window shorter
    # than the sampler's period (a job of 50 ms steps)
    machine = host.share(t0, t1, step_end_ticks(per_worker))
    if t1 <= t0 or steps <= 0 or machine is None:
        return None
    return {"window_s": [t0, t1], "steps_per_s": steps,
            "cpu_share_total": (sum(c for c in nodes if c is not None)
                                if all(c is not None for c in nodes) else None),
            "host_cpu": machine[0], "host_steal": machine[2]}


def _load(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _all_stepped(work: Path, workers: list[_Watched], steps: int) -> bool:
    """Whether every worker's step file in ``work`` holds at least ``steps`` step ends."""
    return all(len((_load(work / f"{w.name}.json") or {}).get("step_end_times_s") or [])
               >= steps for w in workers)


def _flag(path: Path, when_s: float) -> None:
    """Write a run-on flag holding ``when_s`` (``time.time()``), whole: renamed in."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(repr(when_s))
    os.replace(tmp, path)


def _wait(cfg: LabConfig, watched: list[_Watched], work: Path, grace_s: float,
          host: _HostCpu) -> dict[str, Any]:
    """Wait for every worker to exit; fail fast if a node dies; sample CPU (the nodes' and
    the machine's) meanwhile."""
    workers = [w for w in watched if w.node.role == "worker"]
    deadline = time.monotonic() + cfg.timeout_s
    straggler_deadline: float | None = None
    stopped: list[str] = []
    capturing = cfg.collect_dir is not None and cfg.capture_steps is not None
    ended: dict[str, Any] = {}
    while True:
        for w in watched:
            w.sample()
        host.sample()
        if capturing and _all_stepped(work, workers, cfg.capture_steps or 0):
            for w in watched:  # `gradwire collect` ends its capture; the node runs on
                if w.proc.poll() is None:
                    w.proc.send_signal(signal.SIGUSR1)
            capturing = False
            ended["capture_ended_s"] = time.time()
            # workers with --run-on-file run on from this time
            _flag(work / CAPTURES_ENDED, ended["capture_ended_s"])
        if (cfg.run_together and "all_stepped_s" not in ended
                and _all_stepped(work, workers, cfg.steps)):
            ended["all_stepped_s"] = time.time()  # the workers run on until they see it
            _flag(work / ALL_STEPPED, ended["all_stepped_s"])
        for w in watched:
            code = w.proc.poll()
            if code is not None and code != 0 and w.name not in stopped:
                raise LabError(f"{w.name} exited with code {code}: {_tail(work / f'{w.name}.log')}")
            if code is not None and w.node.role == "ps":
                raise LabError(f"{w.name} exited early: {_tail(work / f'{w.name}.log')}")
        running = [w for w in workers if w.proc.poll() is None]
        if not running:
            return {"stopped_stragglers": stopped, **ended}
        if cfg.mode == "sync" and len(running) < len(workers) and straggler_deadline is None:
            # In sync mode a worker can block forever on a token once its peers have left;
            # its steps are already on disk (rewritten after every step).
            straggler_deadline = time.monotonic() + 30.0
        if straggler_deadline is not None and time.monotonic() > straggler_deadline:
            for w in running:
                stopped.append(w.name)
                _stop(w, grace_s)
            continue
        if time.monotonic() > deadline:
            raise LabError(
                f"workers still running after {cfg.timeout_s:.0f}s: "
                f"{', '.join(w.name for w in running)}"
            )
        time.sleep(SAMPLE_PERIOD_S)


def _versions(python: str) -> dict[str, str]:
    out = {"python": platform.python_version(), "kernel": platform.release()}
    try:
        import importlib.metadata as md

        for dist in ("tensorflow", "tf-keras", "gradwire"):
            try:
                out[dist] = md.version(dist)
            except md.PackageNotFoundError:
                out[dist] = "absent"
    except ImportError:  # pragma: no cover
        pass
    return out
