"""Prediction accuracy against the real lab: gradwire and every baseline, W = 1..8 workers.

The configurations (``CONFIGS``) come in four groups: ``benchmark`` (the original ten,
W = 1..6), ``issue21`` (model families, batch sizes and links added for issue 21: a sparse
recommendation model, a deep MLP of many small tensors, MobileNetV2 at two batch sizes,
100 Mbit/s to 2 Gbit/s, W up to 8), ``cross``: the product's what-ifs, each measured at one
configuration and predicted from the 1-worker profile of another (``profile_of``): at 2.5x
and 0.4x the profile's bandwidth, and with 2 and 3 PSes from a 1-PS profile; and ``issue22``:
synchronous PS (SyncReplicasOptimizer; six configurations from their own synchronous
profiles, and Chang et al.'s Table 1 shape, W = 4 with 1-4 PSes) and collective ring
all-reduce (lab mode ring, from asynchronous profiles). The report's targets are checked over
the matrix (the first two groups), the cross predictions, the synchronous PS points and the
ring points, each apart (``BenchConfig.scope``), each against its own baselines.

Three stages (no subcommand: all three, in order), and ``prereg`` and ``checked``:

``measure``
    For each configuration below (model, batch, bandwidth, parameter servers, gRPC options) run
    the real lab (``scripts/lab``: one network namespace per node, tc-shaped PS links, async
    PS training) for each of its W, and once more with W = 1 under ``gradwire collect`` to
    record the 1-worker profile (bundles ``profile/ps0``, ``profile/worker0``, ...). Every lab
    result JSON and bundle is cached under ``--out`` (``<out>/<config>/w<W>[-r<k>].json``;
    ``<out>/<config>/profile/`` with that run's ``lab_result.json``, where ``gradwire predict``
    finds the batch size and bandwidth), so a re-run skips what exists; ``--force`` redoes it.
    A cached run made with another number of steps per worker than its configuration's (an
    older protocol) is redone, and ``report`` leaves such runs out. A run that fails is
    reported with its one-line error and retried by the next invocation. ``--profiles-only``
    records only the profiles (a cross prediction has none of its own), so that the
    predictions can be pre-registered before any throughput run. A run (profile or throughput)
    whose machine lost more than ``--max-steal`` cores (default a tenth of its cores, 0.2 on
    the lab's 2) to its hypervisor over its window (/proc/stat's steal: a virtual machine's
    noisy neighbour; for a profile also over its steps after the captures) is run again, up to
    ``STEAL_ATTEMPTS`` (3) attempts; the last is kept and marked ``disturbed`` if every one
    lost more (``bench`` in the result JSON). ``--workers W,...`` measures only those of each
    configuration's W.
``predict``
    For each configuration's profile, runs ``gradwire predict PROFILE --workers W,... --ps M
    --bandwidth BW --model sim,mva-exact,mva-approx,mva-hybrid,cynthia [--flow-control off]
    --json <out>/<config>/predict.json --quiet`` in a subprocess (always redone: it takes
    seconds, and a stale prediction would outlive a change to the model). Predictions
    written while the configuration has no lab run yet are also kept as ``prereg.json``, its
    pre-registration, never replaced; ``prereg`` prints them as a Markdown table (and writes
    ``<out>/preregistered.md``), to be committed before measuring. ``predict --emulate`` adds
    ``gradwire predict --model emulate``'s rows for the asynchronous PS configurations (root;
    real TCP through the lab's shaped links, minutes a configuration), one set per
    ``--emulate-step`` (``phases`` as ``emulate``, ``tensors`` as ``emulate:tensors``; ``predict
    --emulate tensors`` runs that step alone), shown beside the sim's, not counted as
    baselines, and held to the targets in the report beside the sim.
``checked``
    Each registration against the runs made after it: per configuration with a ``prereg.json``
    and lab runs, the runs' median, every pre-registered model's signed % error (the sim's
    variants included), each W >= 2 run's share of transfers beside another worker's the same
    way, and per model the median and max error and the phase ranges' coverage (printed and
    written to ``<out>/checked.md``): a registration's report table.
``report``
    A Markdown table per configuration (measured examples/s, the number of runs and their spread
    ``(max - min) / median``, CPU use in the measurement window and the most cores any of the
    point's runs lost to the hypervisor, the sim's 5-95% range over start phases and how many
    of the runs fall inside it, the pre-registered sim's error, signed % error
    ``(pred - meas) / meas`` of every model), then median and maximum absolute error per model
    over all configurations, how close the two workers of the W = 2 runs came to alternating
    (``w2_alternation``), the runs inside the phase range over all W >= 2 and over W = 1,
    and the issue's targets for ``sim`` (gradwire): median <= 5%,
    maximum <= 15%, lower median than every baseline. Printed, and written to
    ``<out>/accuracy.md`` and ``<out>/accuracy.json`` (with ``--only``, ``accuracy-partial.md``
    and ``.json``, so a partial report does not replace the full one).

``profile [--model NAME] [--out DIR]`` (alias ``profile-resnet50``) records one 1-worker
profile of a lab model (default ResNet-50; collect, 5 traced steps) into ``DIR/ps0``,
``DIR/worker0`` (for the replay speed benchmark, and Chang et al.'s models for
``scripts/bench_mechanisms.py``'s study).

Configurations are chosen so that the network, not the 2-core machine's CPU, sets the pace at
W = 6 (the lab reports each node's CPU share; the report shows the total per run). Flow control
"off" is approximated with gRPC channel arguments, since gRPC has no switch to disable HTTP/2
flow control: ``grpc.http2.bdp_probe=0`` (no BDP-driven window resizing) and
``grpc.http2.lookahead_bytes=2147483647`` (2^31 - 1, the largest HTTP/2 window, as the initial
stream window gRPC announces), so no stream waits for a WINDOW_UPDATE. TensorFlow reads them from
``TF_GRPC_DEFAULT_OPTIONS`` for the channels it creates, and the receivers that matter are those
channels' clients (the worker receives parameters, the PS receives gradients, both through
RecvTensor calls they issue). Checked with ``gradwire win`` on a 1-worker lab capture (mlp 20 MB,
1gbit): both clients advertise INITIAL_WINDOW_SIZE 2,147,483,647 and ~2.3 GB of connection
WINDOW_UPDATEs, the servers keep gRPC's 4 MiB (they only receive small requests); with the
defaults the window grows 4 -> 64 MiB by BDP probing (README, ``gradwire win``).

Needs root for ``measure`` and ``profile``. Examples:

    .venv/bin/python scripts/bench_accuracy.py                  # measure, predict, report
    .venv/bin/python scripts/bench_accuracy.py measure --only mlp
    .venv/bin/python scripts/bench_accuracy.py report --out bench-out/accuracy
    .venv/bin/python scripts/bench_accuracy.py profile --out bench-out/resnet50-profile
    .venv/bin/python scripts/bench_accuracy.py profile --model vgg16 --trace-first 1 --trace-steps 3
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import difflib
import functools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
sys.path.insert(0, str(SCRIPTS))

from benchcli import (  # noqa: E402
    OneLineParser,
    nonnegative_float,
    positive_int,
    positive_ints,
    run_cli,
)
from lab.cluster import LabConfig, run_lab, workers_throughput  # noqa: E402

from gradwire import atomic  # noqa: E402
from gradwire.procstat import STOLEN_SHARE_LIMIT  # noqa: E402
from gradwire.provenance import same_code, source_commit  # noqa: E402
from gradwire.replay.emulate import (  # noqa: E402  (ours, not a baseline)
    EMULATE,
    PHASES,
    TENSORS,
    TOGETHER,
)
from gradwire.replay.grid import LOSSY_SHARE  # noqa: E402
from gradwire.replay.netns import LabError  # noqa: E402
from gradwire.replay.options import EMULATE_STARTS, EMULATE_STEPS  # noqa: E402
from gradwire.throughput import lab_warmup_steps  # noqa: E402

PROG = "bench_accuracy"
DEFAULT_OUT = REPO / "bench-out" / "accuracy"
DEFAULT_PROFILE_OUT = REPO / "bench-out" / "resnet50-profile"
WORKERS = tuple(range(1, 7))
SIZED_MODELS = ("mlp", "deepmlp", "recsys")  # models whose --model-mb is part of their name
GROUPS = {"benchmark": "the original benchmark", "issue21": "families and links added for "
          "issue 21", "cross": "cross predictions (profile at another bandwidth or PS count)",
          "issue22": "synchronous training (SyncReplicasOptimizer PS, collective ring "
          "all-reduce; issue 22)",
          "issue23": "the job what-ifs (issue 23): batch size, tensor partition, gradient "
          "accumulation, XLA"}
PREREG = "prereg.json"  # predictions written before the configuration's first lab run
PREDICT_MODELS = ("sim", "mva-exact", "mva-approx", "mva-hybrid", "cynthia")
SYNC_PREDICT_MODELS = ("sim", "sync-sum", "sync-max")  # the baselines of synchronous training
RING_PREDICT_MODELS = ("sim", "ring-ab", "ring-max")  # and of ring all-reduce
SCOPES = ("matrix", "cross", "sync", "ring")  # summarised apart (BenchConfig.scope)
OURS = "sim"
# the sim with one mechanism switched off, predicted beside the default on the same profiles
# and reported as model "sim:NAME" (a comparison, not a baseline the targets count)
# the lab's run replayed whole: the shaper's bucket, the host's cores and the traced compute's
# excess out (docs/preregistered/issue22-ring-lab-host-report.md)
LAB_RUN = ["--link-burst", "auto", "--host-cores", "auto", "--trace-cost", "auto"]
SIM_VARIANTS = {"two-way-off": ["--link-windows", "off"],
                # the two-way rule before 2026-11-28: a lone connection at its window's share
                "two-way-ratio": ["--link-windows", "ratio"],
                # the default until 2026-11-28 on a loss-free profile: random phases with it
                # (docs/preregistered/issue21-strat-same-report.md)
                "random-ratio": ["--start", "random", "--link-windows", "ratio"],
                # the default's links with random phases in place of stratified slots
                # (docs/notes/issue21-recsys-w4-start.md; issue21-start-modes.md)
                "random": ["--start", "random"],
                # the shaper's bucket (docs/predict.md, "Token buckets"): in every row, and
                # in none (the default replays it in the PS's one-worker rows since
                # 2026-12-01, docs/preregistered/issue21-bucket-alone.md)
                "bucket": ["--link-burst", "auto"],
                "bucket-off": ["--link-burst", "off"],
                # every node's compute on the lab machine's cores (docs/predict.md, "One host")
                "host-cores": ["--host-cores", "auto"],
                # both of the lab's own facts at once: the shaper's bucket on every shaped
                # link and every node's compute on the lab machine's cores (each alone moves a
                # ring the opposite way: docs/preregistered/issue22-ring-lab-host.md)
                "bucket+host-cores": ["--link-burst", "auto", "--host-cores", "auto"],
                # ... and the traced compute's FULL_TRACE excess taken out: the lab's runs are
                # untraced (docs/preregistered/issue22-ring-lab-host-report.md)
                "lab-run": LAB_RUN,
                # FULL_TRACE's excess taken out where the captures show it (docs/predict.md,
                # "FULL_TRACE's cost inside the step")
                "trace-cost": ["--trace-cost", "auto"],
                # ... out of the pulls' request delays only, by how much later the PS answered
                # the traced steps' first pulls (docs/notes/recording-slowdown.md)
                "trace-requests": ["--trace-cost", "requests"],
                # the templates as recorded, the capture's cost kept in them (the default takes
                # it out where the profile ran on uncaptured: docs/predict.md, "Recording's cost")
                "recording-kept": ["--recording-cost", "keep"],
                # the recorded steps' differences (docs/predict.md): one traced step a run,
                # the executor's waits out of the compute, and both
                "draw-run": ["--template-draw", "run"],
                "gaps-dropped": ["--executor-gaps", "drop"],
                "draw-run+gaps-dropped": ["--template-draw", "run", "--executor-gaps", "drop"],
                # a ring from a PS profile with the PS profile's executor waits kept in its
                # compute, alone and with the lab's run replayed whole: the default until
                # 2026-12-01 (since then, a ring computes at its ops' own time: its links are
                # idle then, docs/notes/issue22-ring-wire.md)
                "gaps-kept": ["--executor-gaps", "keep"],
                "lab-run+gaps-kept": [*LAB_RUN, "--executor-gaps", "keep"],
                # ... and with the ring's compute at its step's time alone, run whole on the
                # machine (`gradwire opdb step` into OPDB; docs/notes/
                # issue22-ring-convnet-w2.md; the default for the registration of
                # docs/preregistered/issue22-ring-alone.md, where it lost)
                "compute-alone": ["--executor-gaps", "alone"],
                "lab-run+compute-alone": [*LAB_RUN, "--executor-gaps", "alone"],
                # without the host's CPU as a bound (docs/predict.md, "The host's CPU")
                "host-cpu-off": ["--host-cpu", "off"],
                # a ring hop's time as timed across links of the lab's rates, where OPDB has
                # such rows (scripts/diag_ring_hop_link.py --db; docs/predict.md, "A ring
                # hop across a link")
                "hop-link": ["--ring-hop", "link"],
                # each PS's downlink as its own drop-tail queue, packet by packet, Reno
                # connections: the synchronous PS's default, asked of an asynchronous one
                # (docs/predict.md, "The PS's own queue"; docs/preregistered/issue21-w8-links.md)
                "hostqueue": ["--link", "hostqueue"],
                # ... with BBR's connections in it (docs/predict.md, "--tcp bbr"; the lab's
                # default congestion control: docs/preregistered/issue21-recsys-reno.md)
                "hostqueue-bbr": ["--link", "hostqueue", "--tcp", "bbr"],
                # ... and the pushes through the switch's queue toward the PS packet by
                # packet too, each direction's ACKs behind the other's backlog (the lab's
                # switch queue, sampled: docs/notes/issue21-recsys-own-queue.md)
                "hostqueue-up": ["--link", "hostqueue", "--uplink-queue"],
                "hostqueue-up-bbr": ["--link", "hostqueue", "--uplink-queue", "--tcp", "bbr"],
                # ... with Linux's BBR whole in both queues (replay/bbr.py: pacing, the
                # bandwidth filter, PROBE_RTT, the long-term policer estimate;
                # docs/notes/issue21-bbr-v1.md)
                "hostqueue-up-bbr1": ["--link", "hostqueue", "--uplink-queue", "--tcp",
                                      "bbr-v1"],
                # the synchronous PS's own queue (its default link) with Linux's BBR whole,
                # with the workers' HTTP/2 PINGs ending a held pull (`--pings auto` gives them
                # to BBR whole since issue22-sync-pings-report) and without; and Reno's queue
                # without them (the same as `auto` since then; registered when `capture` was
                # the default: docs/predict.md, "Held pulls and the workers' PINGs";
                # docs/preregistered/issue22-sync-pings.md)
                "bbr1": ["--tcp", "bbr-v1"],
                "bbr1-pings-none": ["--tcp", "bbr-v1", "--pings", "none"],
                "pings-none": ["--pings", "none"],
                # the shared links' transfers sharing by windows drawn from the profile's own
                # transfers' (docs/predict.md, "Shares by window"; the asynchronous PS's default
                # since 2026-12-07), and equally, as before
                "shares": ["--link-shares", "windows"],
                "equal-shares": ["--link-shares", "equal"],
                # every row's links shared equally (the asynchronous PS's default), beside
                # issue21-own-queue's registered rule, which --link auto took for its
                # predictions: the PS's own queue for the rows that overflow it, now asked for
                # as "overflow" (replay/ownqueue.py; docs/preregistered/issue21-own-queue.md)
                "shared-links": ["--link", "fair"],
                "overflow": ["--link", "overflow"],
                # replications whose workers all start at once, each with its own template
                # draws, instead of the synchronous PS's one run (docs/predict.md, "Start
                # phases": a run through the PS's own queue can settle on a rate of its own);
                # only for rows run as one run (no --run-steps)
                "aligned": ["--start", "aligned"],
                # the asynchronous PS's replications as before 2026-11-30: 60 steps with 10%
                # warm-up, not the lab's run (docs/preregistered/issue21-run-length-report.md)
                "steps-60": ["--steps", "60"]}
# those that act on ring all-reduce (no PS link; the bucket on the workers' own links:
# docs/preregistered/issue22-ring-bucket-report.md)
RING_VARIANTS = ("bucket", "host-cores", "bucket+host-cores", "lab-run", "trace-cost",
                 "recording-kept", "host-cpu-off", "hop-link", "gaps-kept",
                 "lab-run+gaps-kept", "compute-alone", "lab-run+compute-alone")
# ... and those that act on it alone (a hop; the lab's host and shapers, checked on rings;
# the waits kept, which a PS keeps by default; the compute alone, of a ring only)
RING_ONLY = ("hop-link", "bucket+host-cores", "lab-run", "gaps-kept", "lab-run+gaps-kept",
             "compute-alone", "lab-run+compute-alone")
VARIANT = OURS + ":"
# each ``--emulate-step``'s rows: ``phases`` as ``emulate`` (the name every registration has
# used for it, from when it was the only step and then the default), ``tensors`` beside it;
# another ``--emulate-start`` than together adds its name (``emulate:tensors:random``)
EMULATE_MODELS = {PHASES: EMULATE, TENSORS: f"{EMULATE}:{TENSORS}"}
BOOTSTRAP = 2000  # resamples of the measured runs in the report's noise line
LAB_RESULT = "lab_result.json"  # beside the bundles: gradwire predict reads batch size, bandwidth
FC_OFF = "grpc.http2.bdp_probe=0,grpc.http2.lookahead_bytes=2147483647"
TARGET_MEDIAN_PCT = 5.0
TARGET_MAX_PCT = 15.0
CPU_BUSY_FRACTION = 0.8  # a run whose nodes use more than this share of the cores is flagged


class BenchError(Exception):
    """A failure reported as one line, without a traceback."""


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    """One measured configuration (run for every W in ``workers``).

    Attributes:
        model: lab model (``scripts/lab/models.py``: mlp, convnet, resnet50, deepmlp, recsys,
            mobilenet).
        model_mb: MB (float32) of mlp and deepmlp, or of recsys's embedding table; ignored by
            the other models.
        batch_size: examples per worker step.
        bandwidth: tc rate of every PS link, each direction ('100mbit', '1gbit').
        ps: parameter servers M.
        flow_control: 'on' (gRPC defaults) or 'off' (``FC_OFF`` channel arguments).
        steps: steps per worker in the throughput runs.
        trace_first, trace_steps: TraceHook window of the 1-worker profile run.
        workers: the W measured and predicted.
        profile_of: a cross prediction (the product's what-if): the name of the configuration
            whose 1-worker profile predicts this one, recorded at another bandwidth or PS
            count; None: this configuration records and predicts from its own profile.
        group: the report's table for it: ``benchmark`` (the original ten), ``issue21`` (the
            families and links added for issue 21), ``cross`` (cross predictions),
            ``issue22`` (synchronous training).
        mode: ``async`` or ``sync`` (SyncReplicasOptimizer, ``replicas_to_aggregate`` = W),
            as the lab runs it and as its profile records it; or ``ring`` (collective ring
            all-reduce among the workers, ``ps`` 0, every worker's link shaped), predicted
            with ``--mechanism ring-allreduce`` from the 1-worker PS profile of
            ``profile_of``.
        partition: tensor partition K (the lab's ``--partition``): the workers build the model
            under TensorFlow's ``min_max_variable_partitioner`` (a variable of N bytes in
            min(K, ceil(N / 256 KiB)) parts), each part placed on a PS of its own by the
            greedy strategy; 1: off. Models mlp, deepmlp, recsys and convnet, PS modes only
            (``LabConfig`` refuses the others). K > 1 adds ``-part<K>`` to the name.
        accumulate: gradient accumulation K (the lab's ``--accumulate``): each worker update
            runs K micro-steps of ``batch_size`` examples over one read of the variables and
            applies their mean gradient once; 1: off. Models mlp, deepmlp and convnet, mode
            async only (``LabConfig`` refuses the others). K > 1 adds ``-acc<K>`` to the name.
        xla: XLA auto-clustering in the workers' sessions (the lab's ``--xla``); adds ``-xla``
            to the name.
        mixed_precision: bfloat16 compute and transfers over float32 variables on the PSes
            (the lab's ``--mixed-precision``); models mlp and deepmlp, mode async only, not
            with accumulation (``LabConfig`` refuses the others); predicted with gradwire
            predict's ``--mixed-precision`` (costed from ``OPDB``); adds ``-bf16`` to the name.
        recompute: recomputation in segments of that many layers (the lab's ``--recompute``:
            ``tf.recompute_grad`` checkpoints); models mlp and deepmlp; predicted with gradwire
            predict's ``--recompute all``; 0: off; adds ``-rc<K>`` to the name.
        fuse_bytes: tensor fusion into buckets of at least that many bytes (the lab's
            ``--fuse-tensors``: each PS's gradients concatenated on the worker, one tensor
            pushed per bucket); mode async, dense models; predicted with gradwire predict's
            ``--fuse-tensors``; 0: off; adds ``-fuse<SIZE>MB`` to the name.
    """

    model: str
    model_mb: float = 50.0
    batch_size: int = 32
    bandwidth: str
    ps: int = 1
    flow_control: str = "on"
    steps: int
    trace_first: int = 3
    trace_steps: int = 5
    workers: tuple[int, ...] = WORKERS
    profile_of: str | None = None
    group: str = "benchmark"
    mode: str = "async"
    partition: int = 1
    accumulate: int = 1
    xla: bool = False
    mixed_precision: bool = False
    recompute: int = 0
    fuse_bytes: float = 0.0
    run_together: bool = False  # W >= 2 runs: the lab's --run-together (docs/lab.md)
    queue: str | None = None  # every run's bottleneck buffer (the lab's --queue); adds -q<SIZE>
    qdisc: str = "fifo"  # how that buffer serves its flows (the lab's --qdisc); adds -<QDISC>
    tcp_cc: str | None = None  # every node's congestion control (the lab's --tcp-cc; None: the
    # host's default, BBR on the dev VM); adds -<CC>
    label: str = ""  # told apart from a configuration of the same job; adds -<label>

    @property
    def name(self) -> str:
        """Folder name, unique per configuration, e.g. ``mlp20-b32-1gbit-ps1-fcon`` (and
        ``-sync`` for synchronous training, ``-part2`` for tensor partition into 2, ``-acc4``
        for gradient accumulation over 4 micro-steps, ``-xla`` for XLA auto-clustering,
        ``-bf16`` for mixed precision, ``-from-b32`` for a batch what-if from the profile at
        batch 32, ``-together`` for runs whose workers run on until all have their steps,
        ``-q512k`` for a bottleneck buffer other than the lab's default, ``-fair`` for
        runs, profile included, through the lab's fair queue instead of its FIFO, ``-reno``
        for runs, profile included, whose nodes ran Reno instead of the host's default)."""
        model = f"{self.model}{self.model_mb:g}" if self.model in SIZED_MODELS else self.model
        return (f"{model}-b{self.batch_size}-{self.bandwidth}-ps{self.ps}-fc{self.flow_control}"
                + ("" if self.mode == "async" else f"-{self.mode}")
                # issue 23's PS jobs name their partition, 1 (none) included: the benchmark
                # has an unpartitioned twin predicted from its own profile
                + (f"-part{self.partition}" if self.partition > 1
                   or (self.group == "issue23" and self.ps > 1) else "")
                + (f"-acc{self.accumulate}" if self.accumulate > 1 else "")
                + ("-xla" if self.xla else "")
                + ("-bf16" if self.mixed_precision else "")
                + (f"-rc{self.recompute}" if self.recompute else "")
                + (f"-fuse{self.fuse_bytes / 1e6:g}MB" if self.fuse_bytes else "")
                + (f"-from-{self.profile_of.split('-')[1]}" if self.group == "issue23"
                   and self.profile_of
                   and self.profile_of.split('-')[1] != f"b{self.batch_size}" else "")
                + ("-together" if self.run_together else "")
                + (f"-q{self.queue}" if self.queue else "")
                + ("" if self.qdisc == "fifo" else f"-{self.qdisc}")
                + (f"-{self.tcp_cc}" if self.tcp_cc else "")
                + (f"-{self.label}" if self.label else ""))

    @property
    def predict_models(self) -> tuple[str, ...]:
        """The models predicted and reported: the sim and the baselines of its mechanism."""
        return {"sync": SYNC_PREDICT_MODELS, "ring": RING_PREDICT_MODELS}.get(
            self.mode, PREDICT_MODELS)

    @property
    def scope(self) -> str:
        """Which summary its points count in (``SCOPES``): ``sync`` (synchronous PS),
        ``ring`` (ring all-reduce), ``cross`` (a cross prediction) or ``matrix``."""
        if self.mode != "async":
            return self.mode
        return "cross" if self.profile_of else "matrix"

    @property
    def grpc_options(self) -> str | None:
        """TF_GRPC_DEFAULT_OPTIONS for every node."""
        return FC_OFF if self.flow_control == "off" else None

    @property
    def profile_steps(self) -> int:
        """Steps of the profile run: the traced window plus one step after it."""
        return max(self.steps, self.trace_first + self.trace_steps + 1)

    def lab(self, workers: int, **extra: Any) -> LabConfig:
        """The lab configuration of one run with ``workers`` workers."""
        return LabConfig(
            model=self.model,
            model_mb=self.model_mb,
            batch_size=self.batch_size,
            steps=self.steps,
            workers=workers,
            ps=self.ps,
            mode=self.mode,
            partition=self.partition,
            accumulate=self.accumulate,
            xla=self.xla,
            mixed_precision=self.mixed_precision,
            recompute=self.recompute,
            fuse_bytes=self.fuse_bytes,
            shape="all" if self.mode == "ring" else "ps",
            bandwidth=self.bandwidth,
            grpc_options=self.grpc_options,
            trace_first=self.trace_first,
            trace_steps=self.trace_steps,
            timeout_s=600.0,
            run_together=self.run_together and workers > 1,
            queue=self.queue,
            qdisc=self.qdisc,
            tcp_cc=self.tcp_cc,
            **extra,
        )


ISSUE21_W = (1, 2, 3, 4, 6, 8)
# steps a profile run goes on after its captures end (lab --capture-steps): enough for the
# 95% interval of their median (replay/selfcheck.py, MIN_STEPS = 5) with the first few of
# them still settling after the capture tools stop
UNCAPTURED_STEPS = 12
# and for at least this long after the captures ended (lab --uncaptured-s): a job of 40 ms
# steps runs its dozen steps in less than the lab's 0.5 s poll and the captures' stop
# (0.05-0.2 s after the signal, measured), and would have none uncaptured
UNCAPTURED_S = 3.0
CROSS_W = (1, 2, 4, 6)


def _registered_set(*jobs: tuple[str, int, int, str, int, int],
                    workers: tuple[int, ...] = (1, 2, 3, 4)) -> tuple[BenchConfig, ...]:
    """Issue 21's jobs of one registration at ``workers`` (default W = 1-4), each from its own
    profile: (model, model MB, batch, rate, PS count, steps) each."""
    return tuple(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, ps=ps, steps=st,
                             workers=workers, group="issue21")
                 for m, mb, b, bw, ps, st in jobs)


def _ring_profile(m: str, mb: int, b: int, bw: str, st: int) -> BenchConfig:
    """The 1-worker asynchronous PS profile a ring job of issue 22 is predicted from: the job's
    model, model MB, batch and rate, recorded over ``st`` steps."""
    return BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, steps=st, workers=(1,))


def _ring_set(*jobs: tuple[str, int, int, str, int], workers: tuple[int, ...] = (2, 3, 4, 5)
              ) -> tuple[BenchConfig, ...]:
    """Issue 22's ring jobs of one registration at ``workers`` (default W = 2-5), each
    predicted from its own profile at the same rate (``_ring_profile``): (model, model MB,
    batch, rate, profile steps) each."""
    return tuple(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, ps=0, steps=12,
                             workers=workers, group="issue22", mode="ring",
                             profile_of=_ring_profile(m, mb, b, bw, st).name)
                 for m, mb, b, bw, st in jobs)


# the ring registrations of _ring_set: the hop timed by three pairs of processes with the lab's
# one thread (2026-11-30 19:09, docs/preregistered/issue22-ring-fresh.md); the lab's own host and
# shapers (docs/preregistered/issue22-ring-lab-host.md); the lab's run replayed whole
# (docs/preregistered/issue22-ring-lab-run.md)
RING_FRESH = (("mlp", 20, 32, "700mbit", 20), ("deepmlp", 10, 32, "350mbit", 20),
              ("convnet", 50, 32, "750mbit", 20))
RING_LAB_HOST = (("mlp", 10, 32, "300mbit", 20), ("deepmlp", 10, 32, "1500mbit", 20),
                 ("mobilenet", 50, 16, "500mbit", 16))
RING_LAB_RUN = (("mlp", 30, 32, "500mbit", 20), ("convnet", 50, 64, "1gbit", 20),
                ("mobilenet", 50, 8, "1gbit", 20))
# two ring jobs never run before, written down with the compute as its ops' own time beside
# the default (`sim:gaps-dropped`, `sim:lab-run+gaps-dropped`; docs/preregistered/
# issue22-ring-gaps.md): the W = 2 ring on the wire showed the PS profile's compute chunks
# longer than the ring's (docs/notes/issue22-ring-wire.md)
RING_GAPS = (("deepmlp", 5, 32, "1gbit", 20), ("mlp", 10, 32, "1500mbit", 20))
# ... and two other families at W = 2 alone, whose compute keeps a core busy a worker
# (docs/preregistered/issue22-ring-gaps-w2.md)
RING_GAPS_W2 = (("convnet", 50, 16, "1500mbit", 20), ("mobilenet", 50, 16, "1500mbit", 16))
# three ring jobs never run before, written down with the compute at its ops' own time as the
# default for a ring from a PS profile (`--executor-gaps auto`; docs/preregistered/
# issue22-ring-auto.md), the waits kept beside it (`sim:gaps-kept`, `sim:lab-run+gaps-kept`)
RING_AUTO = (("deepmlp", 20, 32, "600mbit", 20), ("convnet", 50, 32, "1200mbit", 20),
             ("mobilenet", 50, 16, "800mbit", 16))
# three more written down with the ring's compute at its step's time alone (`gradwire opdb
# step`) as the default, the ops' own traced time beside it (docs/preregistered/
# issue22-ring-alone.md: it lost, and is `sim:compute-alone` since)
RING_ALONE = (("mlp", 10, 64, "1gbit", 20), ("convnet", 50, 16, "600mbit", 20),
              ("mobilenet", 50, 24, "1gbit", 16))


# one-worker jobs never run before, a range of transfer sizes against the bucket's 130-170 KB
# (docs/preregistered/issue21-bucket-alone.md): (model, model MB, batch, rate, PS count, steps)
BUCKET_ALONE = (("recsys", 20, 64, "350mbit", 1, 20), ("recsys", 40, 32, "300mbit", 2, 20),
                ("mlp", 5, 32, "400mbit", 1, 16), ("deepmlp", 5, 32, "800mbit", 2, 20),
                ("convnet", 50, 16, "300mbit", 1, 20), ("mobilenet", 50, 8, "600mbit", 1, 16))

# ... and four over several PSes, one of which moves only transfers too short to show the
# bucket, the bucket pooled over the PS captures' episodes (docs/preregistered/
# issue21-bucket-pooled.md)
BUCKET_POOLED = (("recsys", 30, 32, "250mbit", 2, 20), ("recsys", 20, 64, "450mbit", 2, 20),
                 ("recsys", 20, 32, "300mbit", 4, 20), ("mlp", 10, 32, "500mbit", 2, 16))


def _scaled(rate: str, factor: float) -> str:
    """A ``<n>mbit`` rate times ``factor``, e.g. ``_scaled('500mbit', 2.5) == '1250mbit'``."""
    if not rate.endswith("mbit"):
        raise ValueError(f"not an mbit rate: {rate!r}")
    return f"{float(rate[:-4]) * factor:g}mbit"


# three jobs' profiles (model, model MB, batch, the profile's rate over 1 PS) and where each is
# measured (rate, PS count): docs/preregistered/issue21-emulate-cross.md
EMULATE_CROSS = (("deepmlp", 10, 52, "700mbit", (("1750mbit", 1), ("700mbit", 3))),
                 ("recsys", 20, 44, "500mbit", (("200mbit", 1), ("500mbit", 3))),
                 ("convnet", 50, 20, "400mbit", (("160mbit", 1), ("400mbit", 2))))
# ... and two more, chosen light on the lab's CPU (an MLP, the recommendation model), after the
# first three's deep MLP over 3 PSes was bound by the lab's 2 cores
# (docs/preregistered/issue21-emulate-cross-light.md)
EMULATE_CROSS_LIGHT = (("mlp", 10, 40, "500mbit", (("1250mbit", 1), ("500mbit", 3))),
                       ("recsys", 20, 36, "400mbit", (("160mbit", 1),)))
# two more, light on the CPU, with --emulate-start random beside emulate's default
# (docs/preregistered/issue21-emulate-start.md); the MLP's profile measured at W = 1-4 too
EMULATE_START = (("mlp", 10, 56, "650mbit", (("1625mbit", 1), ("260mbit", 1))),
                 ("recsys", 20, 28, "300mbit", (("750mbit", 1), ("120mbit", 1))))
# two more, emulate's runs made until their median is known to 2% (--emulate-runs), every W >= 2
# run of the lab's --run-together (docs/preregistered/issue21-emulate-runs.md): the
# recommendation model measured at its own rate, 2.5x and over 2 PSes, the MLP at 2.5x
EMULATE_RUNS = (("recsys", 20, 24, "400mbit", (("1000mbit", 1), ("400mbit", 2))),
                ("mlp", 10, 48, "900mbit", (("2250mbit", 1),)))
EMULATE_RUNS_BASES = tuple(
    dataclasses.replace(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=base, steps=20,
                                    workers=(1, 2, 3, 4) if m == "recsys" else (1,),
                                    group="issue21"), run_together=m == "recsys")
    for m, mb, b, base, _ in EMULATE_RUNS)

# the worker's write order of its pushes, registered on three new jobs (W = 1-3; the first
# also at 2.5x its rate and over 2 PSes; docs/preregistered/issue21-push-order.md): (model,
# model MB, batch, rate over 1 PS, crosses (rate, PS count)); the recommendation model's runs
# with the lab's --run-together (short steps)
PUSH_ORDER = (("recsys", 30, 32, "300mbit", (("750mbit", 1), ("300mbit", 2))),
              ("recsys", 20, 40, "600mbit", ()),
              ("mlp", 10, 36, "550mbit", ()))
PUSH_ORDER_BASES = tuple(
    BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=base, steps=20, workers=(1, 2, 3),
                group="issue21", run_together=m == "recsys")
    for m, mb, b, base, _ in PUSH_ORDER)

# ... and on two other families, a convnet and MobileNetV2 (docs/preregistered/
# issue21-push-order-families.md): (model, model MB, batch, rate, workers)
PUSH_ORDER_FAMILIES = (("convnet", 50, 20, "650mbit", (1, 2, 3)),
                       ("mobilenet", 50, 20, "350mbit", (1, 2)))

# pulls that wait for the PS work of the step's pushes (69a89c4), registered on jobs over
# several PSes and a cross at 2.5x the rate (docs/preregistered/issue21-ps-work.md):
# (model, model MB, batch, rate, PSes, the rates of its cross predictions)
PS_WORK = (("recsys", 25, 28, "450mbit", 2, ("1125mbit",)),
           ("mlp", 15, 32, "500mbit", 3, ()),
           ("convnet", 50, 28, "600mbit", 2, ()))
PS_WORK_BASES = tuple(
    BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, ps=ps, steps=20,
                workers=(1, 2, 3), group="issue21", run_together=m == "recsys")
    for m, mb, b, bw, ps, _ in PS_WORK)


# the train op's control chain across PSes registered (docs/preregistered/
# issue21-control-chain.md): per job (model, MB, batch, rate, W), its 1-PS and 2-PS profiles,
# the 2-PS one predicting its own runs and 1 PS, the 1-PS one predicting 2 PSes
CHAIN = (("recsys", 30, 32, "700mbit", (1, 2, 3)), ("mlp", 3, 32, "800mbit", (1, 2)))


# start phases spread over the step of the configuration predicted, not the profiled one
# (docs/preregistered/issue21-phase-period.md): three new jobs' 1-PS profiles (model, model MB,
# batch, the profile's rate) and where each is measured (rate, PS count, workers); the
# recommendation model's runs with the lab's --run-together (short steps)
PHASE_PERIOD = (("mlp", 10, 44, "550mbit", (("220mbit", 1, (1, 2, 3, 4)),
                                            ("1375mbit", 1, (1, 2, 3, 4)))),
                ("recsys", 20, 30, "350mbit", (("140mbit", 1, (1, 2, 3, 4)),
                                               ("350mbit", 2, (1, 2, 3)))),
                ("deepmlp", 10, 28, "500mbit", (("200mbit", 1, (1, 2, 3)),)))
PHASE_PERIOD_BASES = tuple(
    BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=base, steps=20, workers=(1,),
                group="issue21", run_together=m == "recsys")
    for m, mb, b, base, _ in PHASE_PERIOD)


def _chain_set(model: str, model_mb: int, batch: int, bandwidth: str, workers: tuple[int, ...]
               ) -> tuple[BenchConfig, ...]:
    """One job of ``CHAIN``: its 1-PS configuration (W = 1), its 2-PS one, the 1-PS job
    predicted from the 2-PS profile and the 2-PS job from the 1-PS profile (each labelled
    with where its profile comes from), every W >= 2 run with the lab's --run-together."""
    one = BenchConfig(model=model, model_mb=model_mb, batch_size=batch, bandwidth=bandwidth,
                      steps=20, workers=(1,), group="issue21", run_together=True)
    two = dataclasses.replace(one, ps=2, workers=workers)
    return (one, two, dataclasses.replace(one, workers=workers, group="cross",
                                          profile_of=two.name, label="from-ps2"),
            dataclasses.replace(two, group="cross", profile_of=one.name, label="from-ps1"))


def _emulate_cross(model: str, model_mb: int, batch: int, base: str, bandwidth: str, ps: int,
                   together: bool = False, profile: str | None = None) -> BenchConfig:
    """A cross prediction of the emulate registrations, W = 1-4: the job (model, model MB,
    batch) at ``bandwidth`` over ``ps`` PSes, from the profile of its 1-PS configuration at
    ``base`` (or of the configuration named ``profile``); ``together``: its W >= 2 runs with
    the lab's --run-together."""
    source = profile or BenchConfig(model=model, model_mb=model_mb, batch_size=batch,
                                    bandwidth=base, steps=20).name
    return BenchConfig(model=model, model_mb=model_mb, batch_size=batch, bandwidth=bandwidth,
                       ps=ps, steps=20, workers=(1, 2, 3, 4), group="cross", profile_of=source,
                       run_together=together)


def _cross_set(*jobs: tuple[str, int, int, str, int], ps_counts: tuple[int, ...] = (2, 3),
               workers: tuple[int, ...] = CROSS_W) -> tuple[BenchConfig, ...]:
    """Cross predictions at ``workers``: each job's 1-PS profile (model, model MB, batch, the
    profile's rate, steps) measured at 2.5x and 0.4x its rate over 1 PS, then at its own rate
    over each of ``ps_counts`` PSes."""
    return tuple(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, ps=ps, steps=st,
                             workers=workers, group="cross",
                             profile_of=BenchConfig(model=m, model_mb=mb, batch_size=b,
                                                    bandwidth=base, steps=st).name)
                 for m, mb, b, base, st in jobs
                 for bw, ps in ((_scaled(base, 2.5), 1), (_scaled(base, 0.4), 1),
                                *((base, n) for n in ps_counts)))


# issue 23's batch what-ifs at W >= 2 too (docs/preregistered/issue23-batch-w2.md): model, MB,
# the profile's batch, the predicted batch, rate, steps, W; each from the job's 1-worker
# profile at the profile's batch (``_batch_source``)
BATCH_W2 = (("mobilenet", 50, 32, 16, "600mbit", 16, (1, 2)),
            ("deepmlp", 10, 32, 64, "1gbit", 20, (1, 2, 4)),
            ("recsys", 20, 32, 64, "400mbit", 20, (1, 2, 4)))
# ... and the batch's own transfers (a sparse embedding's rows, moved with the batch since
# cca1335; docs/preregistered/issue23-batch-sparse.md): the same fields; three recommendation
# jobs never run at those batches
BATCH_SPARSE = (("recsys", 20, 32, 128, "600mbit", 20, (1, 2, 4)),
                ("recsys", 30, 32, 64, "250mbit", 20, (1, 2, 4)),
                ("recsys", 20, 64, 16, "300mbit", 20, (1, 2, 4)))
# ... and on three families never run at those batches, the workers run together at W >= 2
# (docs/preregistered/issue23-batch-three.md); the same fields
BATCH_THREE = (("mobilenet", 50, 32, 48, "400mbit", 16, (1, 2)),
               ("deepmlp", 15, 32, 64, "700mbit", 20, (1, 2, 4)),
               ("recsys", 25, 48, 96, "500mbit", 20, (1, 2, 4)))
# ... and three more, the same way (docs/preregistered/issue23-batch-three-2.md)
BATCH_THREE_2 = (("mobilenet", 50, 32, 40, "300mbit", 16, (1, 2)),
                 ("deepmlp", 5, 32, 16, "1200mbit", 20, (1, 2, 4)),
                 ("recsys", 40, 32, 64, "450mbit", 20, (1, 2, 4)))
# ... and under synchronous PS (docs/preregistered/issue23-batch-sync.md); the same fields
BATCH_SYNC = (("deepmlp", 20, 32, 48, "800mbit", 20, (1, 2, 4)),
              ("recsys", 30, 48, 24, "350mbit", 20, (1, 2, 4)))
# ... and the convnet, never run under the batch what-if at W >= 2, at about a third and one
# and a half times its profile's batch, run together
# (docs/preregistered/issue23-batch-convnet.md); the same fields
BATCH_CONVNET = (("convnet", 50, 32, 12, "900mbit", 20, (1, 2, 4)),
                 ("convnet", 50, 32, 48, "900mbit", 20, (1, 2, 4)))


def _batch_source(job: tuple, mode: str = "async") -> BenchConfig:
    """The 1-worker profile a batch what-if ``job`` (BATCH_W2's fields) is predicted
    from: the job at the profile's batch, in ``mode``."""
    m, mb, b0, _b, bw, st, _ws = job
    return BenchConfig(model=m, model_mb=mb, batch_size=b0, bandwidth=bw, steps=st, mode=mode)


def _batch_whatifs(jobs: tuple[tuple, ...], **fields: Any) -> tuple[BenchConfig, ...]:
    """The batch what-ifs ``jobs`` (BATCH_W2's fields), each predicted from
    ``_batch_source``; ``fields``: the configurations' other fields (a ``mode`` the
    profile's too)."""
    out = []
    for job in jobs:
        m, mb, _b0, b, bw, st, ws = job
        out.append(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, steps=st,
                               workers=ws, group="issue23",
                               profile_of=_batch_source(job, fields.get("mode", "async")).name,
                               **fields))
    return tuple(out)

# Chosen from pilot runs on the 2-core VM (async, 1 PS; CPU = all nodes' cores in the measurement
# window, from the lab's result JSON), so that W=6 stays network-bound and a run takes ~1-2 min:
#   mlp 20 MB   1gbit   W=1 90.3 ex/s (0.35 s steps) cpu 0.30 | W=6 132.7 ex/s cpu 0.58 (44 s wall)
#   mlp 20 MB   250mbit                                      | W=6  39.1 ex/s cpu 0.35 (82 s, 10 st)
#   convnet b32 100mbit W=1 22.1 ex/s (1.44 s steps) cpu 0.09 | W=6  35.5 ex/s cpu 0.21 (139 s)
#   convnet b32 500mbit                                      | W=6 181.5 ex/s cpu 0.70 (42 s)
#   resnet50 b2 500mbit W=1  0.5 ex/s (3.6 s steps) cpu 0.31 | W=6   0.9 ex/s cpu 0.74 (130 s)
#   resnet50 b2 1gbit                                        | W=6   1.8 ex/s cpu 1.29 (105 s)
# convnet moves 8.6 MB per direction per step (not 2.2 MB): 100mbit was too slow for the budget.
# ResNet-50 ran 8 and 10 steps per worker at first: too few (the throughput window skips the
# first quarter), the medians moved by -13..+21% with 24 (docs/predict.md, "Short runs").
CONFIGS: tuple[BenchConfig, ...] = (
    BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit", steps=16),
    BenchConfig(model="mlp", model_mb=20, bandwidth="1gbit", steps=20),
    BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit", ps=2, steps=16),
    BenchConfig(model="mlp", model_mb=20, bandwidth="1gbit", flow_control="off", steps=20),
    BenchConfig(model="convnet", bandwidth="250mbit", steps=20),
    BenchConfig(model="convnet", bandwidth="500mbit", steps=24),
    BenchConfig(model="resnet50", batch_size=2, bandwidth="500mbit", steps=24),
    BenchConfig(model="resnet50", batch_size=2, bandwidth="1gbit", steps=24),
    # held out: first measured after the lossy-link phase model was chosen on the eight above
    # (docs/predict.md, "Lossy links"), to test it on profiles it was not chosen on
    BenchConfig(model="convnet", bandwidth="250mbit", ps=2, steps=20),
    BenchConfig(model="mlp", model_mb=10, bandwidth="250mbit", steps=16),
    # issue 21: families the original ten lack (many small tensors, a sparse embedding table, a
    # second tf_keras application), W up to 8, 100 Mbit/s to 2 Gbit/s. Pilots (W=1, 12 steps):
    #   deepmlp 10 MB b32 500mbit  0.34 s steps, cpu 0.16 | mobilenet b16 1gbit 0.27 s, cpu 0.81
    #   mobilenet b16 1gbit W=4 cpu 1.53 of 2 (CPU-bound: hence 250mbit for mobilenet)
    #   recsys 20 MB b32 100mbit  0.18 s steps, 7.5% of the PS's data segments retransmitted
    BenchConfig(model="recsys", model_mb=20, bandwidth="100mbit", steps=20, workers=ISSUE21_W,
                group="issue21"),
    BenchConfig(model="deepmlp", model_mb=10, bandwidth="500mbit", steps=20, workers=ISSUE21_W,
                group="issue21"),
    BenchConfig(model="mobilenet", batch_size=16, bandwidth="250mbit", steps=16,
                workers=ISSUE21_W, group="issue21"),
    BenchConfig(model="mobilenet", batch_size=32, bandwidth="250mbit", steps=16,
                workers=ISSUE21_W, group="issue21"),
    # 2 Gbit/s: deepmlp 20 MB used 1.64 of the 2 cores at W=1 (CPU-bound); mlp 20 MB 0.29
    # (W=1 183 ex/s, W=2 249, W=4 278 at 0.45 cores: the link, not the CPU)
    BenchConfig(model="mlp", model_mb=20, bandwidth="2gbit", steps=20, workers=(1, 2, 3, 4, 6),
                group="issue21"),
    # three jobs never run before, written down after the client gap came from the untraced
    # steps (docs/preregistered/issue21-untraced-gap.md), to check that change on jobs it was
    # not looked at on
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, steps=st,
                  workers=(1, 2, 4), group="issue21")
      for m, mb, b, bw, st in (("mobilenet", 50, 24, "400mbit", 16),
                               ("deepmlp", 10, 32, "800mbit", 20),
                               ("convnet", 50, 32, "400mbit", 20))),
    # two jobs never run before, written down with a rule that counted the reverse direction's
    # connections up to the link's queue (docs/preregistered/issue21-reverse-queue.md; the
    # rule was taken back after their runs): fast links, whose queues hold several windows
    *(BenchConfig(model=m, model_mb=mb, batch_size=32, bandwidth=bw, steps=20, workers=ws,
                  group="issue21")
      for m, mb, bw, ws in (("deepmlp", 10, "1gbit", (1, 2, 3, 4, 6)),
                            ("convnet", 50, "800mbit", (1, 2, 3, 4)))),
    # two jobs never run before, written down with --link-windows same (every connection
    # counted, both directions the larger window: docs/preregistered/issue21-same-windows.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=32, bandwidth="600mbit", steps=20,
                  workers=(1, 2, 3, 4), group="issue21")
      for m, mb in (("deepmlp", 10), ("convnet", 50))),
    # three jobs never run before, recorded and measured the same day, written down with the
    # shaper's bucket and two-way variants beside the default
    # (docs/preregistered/issue21-same-day-variants.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=32, bandwidth=bw, steps=20,
                  workers=(1, 2, 3, 4), group="issue21")
      for m, mb, bw in (("deepmlp", 10, "700mbit"), ("recsys", 20, "300mbit"),
                        ("convnet", 50, "450mbit"))),
    # four jobs never run before, written down with the PS's write order on each connection
    # (a pull sendable no earlier than the pulls the PS wrote ahead of it) beside the replay
    # without it (docs/preregistered/issue21-write-order.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, steps=st, workers=ws,
                  group="issue21")
      for m, mb, b, bw, st, ws in (("deepmlp", 10, 32, "400mbit", 20, (1, 2, 3, 4)),
                                   ("convnet", 50, 32, "700mbit", 20, (1, 2, 3, 4)),
                                   ("recsys", 20, 32, "150mbit", 20, (1, 2, 3, 4)),
                                   ("mobilenet", 50, 24, "300mbit", 16, (1, 2, 4)))),
    # three jobs never run before, recorded and measured the same day, written down with the
    # workers' compute on the lab machine's cores (sim:host-cores) beside the default
    # (docs/preregistered/issue21-host-cores.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, steps=st,
                  workers=(1, 2, 3, 4), group="issue21")
      for m, mb, b, bw, st in (("mobilenet", 50, 16, "400mbit", 16),
                               ("convnet", 50, 32, "350mbit", 20),
                               ("deepmlp", 10, 32, "300mbit", 20))),
    # six pairs never run before, written down with both two-way rules: the default (a lone
    # connection at its window over the other direction's) and --link-windows same (every
    # connection counted), which the lab's socket samples of one flow beside one the other
    # way (0.93-0.97 of the rate) side with (docs/preregistered/issue21-pairs-two-way.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, steps=st,
                  workers=(1, 2), group="issue21")
      for m, mb, b, bw, st in (("mobilenet", 50, 24, "500mbit", 16),
                               ("mobilenet", 50, 16, "300mbit", 16),
                               ("convnet", 50, 32, "550mbit", 20),
                               ("deepmlp", 10, 32, "450mbit", 20),
                               ("recsys", 20, 32, "350mbit", 20),
                               ("mlp", 10, 32, "350mbit", 16))),
    # six jobs never run before, written down with the workers started in separate slots of
    # the step and every connection counted (sim:strat-same) beside the default
    # (docs/preregistered/issue21-strat-same.md); the last with its own 2-PS profile
    *_registered_set(("deepmlp", 10, 32, "850mbit", 1, 20),
                     ("convnet", 50, 32, "650mbit", 1, 20),
                     ("recsys", 20, 32, "400mbit", 1, 20),
                     ("mlp", 10, 32, "550mbit", 1, 16),
                     ("mobilenet", 50, 16, "500mbit", 1, 16),
                     ("deepmlp", 10, 32, "350mbit", 2, 20)),
    # the new default (each worker in its own slot, every connection counted) on five jobs
    # never run and one cross prediction, written down before their runs
    # (docs/preregistered/issue21-new-default.md)
    *_registered_set(("convnet", 50, 16, "450mbit", 1, 20),
                     ("deepmlp", 10, 32, "600mbit", 3, 20),
                     ("recsys", 20, 32, "250mbit", 2, 20),
                     ("mlp", 10, 32, "750mbit", 1, 16),
                     ("mobilenet", 50, 24, "600mbit", 1, 16)),
    # three PSes, where the traced steps can run slower than the untraced ones in-step: the
    # templates as traced against FULL_TRACE's excess taken out (sim:trace-cost), written
    # down before their runs (docs/preregistered/issue21-trace-cost.md)
    *_registered_set(("deepmlp", 10, 32, "450mbit", 3, 20),
                     ("mlp", 10, 32, "400mbit", 3, 16),
                     ("convnet", 50, 32, "500mbit", 3, 20)),
    # jobs whose recording loads the 2 cores, never run before, each profile's job run on
    # after its captures ended: the recording's cost taken out (the default) against the
    # templates as recorded (sim:recording-kept), written down before their runs
    # (docs/preregistered/issue21-recording-cost.md)
    *_registered_set(("deepmlp", 10, 32, "800mbit", 3, 20),
                     ("deepmlp", 10, 32, "550mbit", 3, 20),
                     ("mobilenet", 50, 32, "350mbit", 2, 16),
                     ("convnet", 50, 32, "600mbit", 3, 20)),
    # the recorded steps' differences (sim:draw-run, sim:gaps-dropped and both), never run
    # before, every W >= 2 run with its PS links' headers, written down before their runs
    # (docs/preregistered/issue21-recorded-differences.md)
    *_registered_set(("deepmlp", 10, 32, "650mbit", 2, 20),
                     ("mlp", 20, 32, "450mbit", 3, 16),
                     ("convnet", 50, 32, "750mbit", 2, 20),
                     ("mobilenet", 50, 32, "450mbit", 1, 16)),
    # the host's CPU as a bound (the default, --host-cpu auto) against none
    # (sim:host-cpu-off), on a compute-heavy job never run before, written down before its
    # runs (docs/preregistered/issue21-host-cpu.md)
    *_registered_set(("mobilenet", 50, 24, "700mbit", 1, 16)),
    # one template per replication (sim:draw-run) beside the default's draw per step, both
    # under the host's CPU bound, on six jobs never run before, written down before their
    # runs (docs/preregistered/issue21-draw-run.md)
    *_registered_set(("deepmlp", 10, 32, "750mbit", 2, 20),
                     ("deepmlp", 10, 32, "400mbit", 3, 20),
                     ("mlp", 10, 32, "600mbit", 2, 16),
                     ("convnet", 50, 32, "600mbit", 2, 20),
                     ("recsys", 20, 32, "500mbit", 2, 20),
                     ("mobilenet", 50, 16, "700mbit", 1, 16)),
    # three jobs never run before, written down with today's defaults (2026-11-30,
    # docs/preregistered/issue21-fresh-1130.md)
    *_registered_set(("recsys", 20, 32, "450mbit", 1, 20),
                     ("deepmlp", 10, 32, "700mbit", 3, 20),
                     ("convnet", 50, 32, "550mbit", 2, 20)),
    # three jobs never run before, written down with replications as long as the lab's runs
    # (sim:run-length) beside the default (docs/preregistered/issue21-run-length-fresh.md)
    *_registered_set(("mlp", 20, 32, "850mbit", 2, 16),
                     ("recsys", 20, 32, "550mbit", 2, 20),
                     ("convnet", 50, 32, "450mbit", 3, 20)),
    # the same three jobs, their workers run on until all have their steps (lab
    # --run-together), each from a profile of its own, written down before their runs
    # (docs/preregistered/issue21-run-together.md)
    *(dataclasses.replace(c, run_together=True)
      for c in _registered_set(("mlp", 20, 32, "850mbit", 2, 16),
                               ("recsys", 20, 32, "550mbit", 2, 20),
                               ("convnet", 50, 32, "450mbit", 3, 20))),
    # three jobs never run before, measured under the bench's steal check (profiles and runs
    # that lost more than a tenth of the machine's cores run again), written down before their
    # runs (docs/preregistered/issue21-steal-heldout.md)
    *_registered_set(("convnet", 50, 32, "300mbit", 2, 20),
                     ("deepmlp", 10, 32, "900mbit", 2, 20),
                     ("recsys", 20, 32, "600mbit", 1, 20)),
    # six one-worker jobs never run before, written down with the shaper's bucket replayed in
    # the PS's one-worker rows (the default since 2026-12-01) beside none (sim:bucket-off;
    # docs/preregistered/issue21-bucket-alone.md)
    *_registered_set(*BUCKET_ALONE, workers=(1,)),
    # ... and four more, the bucket pooled over the PS captures' episodes (docs/preregistered/
    # issue21-bucket-pooled.md)
    *_registered_set(*BUCKET_POOLED, workers=(1,)),
    # three jobs never run before, one at a rate below the others' (60 Mbit/s, where the
    # shipped sample's pair is over-predicted) and two at batch sizes new to their models,
    # written down with today's defaults (docs/preregistered/issue21-fresh-1201.md)
    *_registered_set(("mlp", 2, 32, "60mbit", 1, 16), ("deepmlp", 10, 64, "700mbit", 2, 20),
                     ("convnet", 50, 24, "350mbit", 1, 20)),
    # ... and three more, written down with the window ratio (sim:two-way-ratio, the default
    # until 2026-11-28) as the alternative, after it was the nearer on those three post hoc
    # (docs/preregistered/issue21-ratio-1201.md)
    *_registered_set(("deepmlp", 10, 48, "550mbit", 1, 20), ("convnet", 50, 40, "600mbit", 2, 20),
                     ("mlp", 10, 64, "350mbit", 1, 16)),
    # three jobs never run before, W = 1-3, written down with how the workers will occupy the
    # PS links (scripts/diag_link_states.py; docs/preregistered/issue21-trio-states.md)
    *_registered_set(("mlp", 5, 48, "200mbit", 1, 16), ("deepmlp", 10, 40, "800mbit", 2, 20),
                     ("recsys", 20, 48, "300mbit", 1, 20), workers=(1, 2, 3)),
    # the deep MLP of that set over 2 PSes at a quarter and a half of its rate (the host's CPU
    # that much less busy), and over 1 PS at twice it (the same bytes a second through the
    # host, no second link): which of the two goes with its trio's over-prediction
    # (docs/preregistered/issue21-trio-cpu.md)
    *_registered_set(("deepmlp", 10, 40, "200mbit", 2, 20), ("deepmlp", 10, 40, "400mbit", 2, 20),
                     ("deepmlp", 10, 40, "1600mbit", 1, 20),
                     workers=(1, 2, 3)),
    # ... the 1.6 Gbit/s job again with a queue of 512 KiB (about one window; the lab's default
    # there, 10 ms, holds four): whether its trio's bunching goes with the rate or with the queue
    # (docs/preregistered/issue21-trio-queue.md)
    BenchConfig(model="deepmlp", model_mb=10, batch_size=40, bandwidth="1600mbit", steps=20,
                workers=(1, 2, 3), group="issue21", queue="512k"),
    # two jobs never run before, W = 1-3, written down with the trio's transfers run again
    # over real TCP with no TensorFlow beside them (scripts/diag_bare_ps.py;
    # docs/preregistered/issue21-bare-trio.md)
    *_registered_set(("deepmlp", 10, 40, "1200mbit", 1, 20), ("mlp", 10, 32, "800mbit", 1, 16),
                     workers=(1, 2, 3)),
    # the deep MLP at 800 Mbit/s with a queue of 256 KiB, where the probe's pull takes the link
    # back within tens of ms beside two pushes after sharing (docs/preregistered/
    # issue21-probe-recovers.md)
    BenchConfig(model="deepmlp", model_mb=10, batch_size=40, bandwidth="800mbit", steps=20,
                workers=(1, 2, 3), group="issue21", queue="256k"),
    # two jobs never run before, W = 1-3, written down beside the plain-socket job with the
    # step's idle time where the profile's capture shows it (docs/preregistered/
    # issue21-bare-gaps.md)
    *_registered_set(("deepmlp", 10, 48, "900mbit", 1, 20), ("mlp", 10, 48, "600mbit", 1, 16),
                     workers=(1, 2, 3)),
    # ... and one more, W = 1-4 (docs/preregistered/issue21-bare-gaps-w4.md)
    *_registered_set(("deepmlp", 10, 36, "1000mbit", 1, 20)),
    # jobs never run before, written down with gradwire predict --model emulate beside the
    # sim (replay/emulate.py; docs/preregistered/issue21-emulate.md): over 2 PSes, over 1 PS,
    # and a 1-PS profile at 400 Mbit/s predicted at 2.5x its rate and over 2 PSes
    *_registered_set(("deepmlp", 10, 44, "500mbit", 2, 20), ("mlp", 10, 40, "700mbit", 1, 16)),
    BenchConfig(model="deepmlp", model_mb=10, batch_size=44, bandwidth="400mbit", steps=20,
                workers=(1,), group="issue21"),
    *(BenchConfig(model="deepmlp", model_mb=10, batch_size=44, bandwidth=bw, ps=ps, steps=20,
                  workers=(1, 2, 3, 4), group="cross",
                  profile_of=BenchConfig(model="deepmlp", model_mb=10, batch_size=44,
                                         bandwidth="400mbit", steps=20).name)
      for bw, ps in (("1000mbit", 1), ("400mbit", 2))),
    # three more, W = 1-4, of the kinds emulate had not met: a convnet and MobileNetV2, whose
    # pushes overlap their backward pass, and the recommendation model's sparse updates
    # (docs/preregistered/issue21-emulate-families.md)
    *_registered_set(("convnet", 50, 28, "450mbit", 1, 20), ("mobilenet", 50, 24, "350mbit", 1, 16),
                     ("recsys", 20, 40, "250mbit", 1, 20)),
    # two more at W = 1, 2, 4 and 6: more workers than emulate had met
    # (docs/preregistered/issue21-emulate-w6.md)
    *_registered_set(("deepmlp", 10, 40, "600mbit", 1, 20), ("mlp", 10, 36, "400mbit", 2, 16),
                     workers=(1, 2, 4, 6)),
    # and two at W = 1, 2, 4 and 8, the most the issue asks for
    # (docs/preregistered/issue21-emulate-w8.md)
    *_registered_set(("deepmlp", 10, 36, "450mbit", 1, 20), ("mlp", 10, 44, "300mbit", 2, 16),
                     workers=(1, 2, 4, 8)),
    # two more at W = 1, 2, 4 and 8: the links' share at eight workers, the PS's own queue
    # beside (docs/preregistered/issue21-w8-links.md)
    *_registered_set(("deepmlp", 10, 42, "350mbit", 1, 20), ("mlp", 10, 30, "550mbit", 1, 16),
                     workers=(1, 2, 4, 8)),
    # a convnet and the recommendation model, W = 1-4, with both of emulate's steps beside
    # (docs/preregistered/issue21-emulate-steps.md)
    *_registered_set(("convnet", 50, 24, "550mbit", 1, 20), ("recsys", 20, 36, "350mbit", 1, 20)),
    # both steps again, tensors' time ops now scaled where its gap cannot take the
    # calibration: MobileNetV2, a convnet over 2 PSes, an MLP on a fast link
    # (docs/preregistered/issue21-emulate-third.md)
    *_registered_set(("mobilenet", 50, 16, "450mbit", 1, 16), ("convnet", 50, 32, "400mbit", 2, 20),
                     ("mlp", 10, 40, "900mbit", 1, 16)),
    # cross predictions of three jobs never run, W = 1-4, emulate's tensors beside the sim:
    # each 1-PS profile measured at 2.5x or 0.4x its rate and over 2 or 3 PSes
    # (docs/preregistered/issue21-emulate-cross.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=base, steps=20, workers=(1,),
                  group="issue21") for m, mb, b, base, _ in EMULATE_CROSS + EMULATE_CROSS_LIGHT),
    *(_emulate_cross(m, mb, b, base, bw, ps)
      for m, mb, b, base, crosses in EMULATE_CROSS + EMULATE_CROSS_LIGHT + EMULATE_START
      for bw, ps in crosses),
    BenchConfig(model="recsys", model_mb=20, bandwidth="160mbit", steps=20, workers=(1, 2, 3, 4),
                profile_of=BenchConfig(model="recsys", model_mb=20, bandwidth="400mbit",
                                       steps=20).name, group="cross"),
    # emulate's start phases registered: two jobs' profiles, the MLP's measured at its own
    # rate too (their crosses above; docs/preregistered/issue21-emulate-start.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=base, steps=20,
                  workers=(1, 2, 3, 4) if m == "mlp" else (1,), group="issue21")
      for m, mb, b, base, _ in EMULATE_START),
    # emulate's runs registered (docs/preregistered/issue21-emulate-runs.md): two jobs'
    # profiles, the recommendation model's measured at its own rate too, and their crosses
    *EMULATE_RUNS_BASES,
    *(_emulate_cross(m, mb, b, base, bw, ps, together=True, profile=source.name)
      for source, (m, mb, b, base, crosses) in zip(EMULATE_RUNS_BASES, EMULATE_RUNS,
                                                   strict=True)
      for bw, ps in crosses),
    # the worker's push order registered (docs/preregistered/issue21-push-order.md)
    *PUSH_ORDER_BASES,
    *(dataclasses.replace(source, bandwidth=bw, ps=ps, group="cross", profile_of=source.name)
      for source, (*_, crosses) in zip(PUSH_ORDER_BASES, PUSH_ORDER, strict=True)
      for bw, ps in crosses),
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, steps=20, workers=ws,
                  group="issue21") for m, mb, b, bw, ws in PUSH_ORDER_FAMILIES),
    # pulls that wait for PS work registered (docs/preregistered/issue21-ps-work.md)
    *PS_WORK_BASES,
    # the train op's control chain across PSes (docs/preregistered/issue21-control-chain.md)
    *(c for job in CHAIN for c in _chain_set(*job)),
    # start phases over the configuration's own step (docs/preregistered/issue21-phase-period.md)
    *PHASE_PERIOD_BASES,
    *(dataclasses.replace(source, bandwidth=bw, ps=ps, workers=ws, group="cross",
                          profile_of=source.name)
      for source, (*_, crosses) in zip(PHASE_PERIOD_BASES, PHASE_PERIOD, strict=True)
      for bw, ps, ws in crosses),
    *(dataclasses.replace(source, bandwidth=bw, group="cross", profile_of=source.name)
      for source, (*_, crosses) in zip(PS_WORK_BASES, PS_WORK, strict=True) for bw in crosses),
    # the recommendation model's 2.5x cross again, its workers run on until all have their
    # steps (lab --run-together): its 30 ms steps left 6 of the 9 W >= 2 runs above without a
    # common window ("a worker recorded fewer than 2 steps"; issue21-emulate-start-report.md)
    *(_emulate_cross(m, mb, b, base, bw, ps, together=True)
      for m, mb, b, base, crosses in EMULATE_START if m == "recsys"
      for bw, ps in crosses[:1]),
    # cross predictions: measured here, predicted from the profile of the configuration named
    *_cross_set(("deepmlp", 10, 32, "500mbit", 20), ("recsys", 20, 32, "100mbit", 20),
                ("mobilenet", 50, 16, "250mbit", 16)),
    # the one-worker bucket's cross predictions: two profiles of BUCKET_ALONE at 2.5x and 0.4x
    # their rate and over 2 PSes, W = 1 (docs/preregistered/issue21-bucket-cross.md)
    *_cross_set(("recsys", 20, 64, "350mbit", 20), ("mlp", 5, 32, "400mbit", 16),
                ps_counts=(2,), workers=(1,)),
    # held out for the variables' placement (--placement greedy, TensorFlow's rule): added and
    # pre-registered after it was built, before their first run
    *(BenchConfig(model="mobilenet", batch_size=32, bandwidth="250mbit", ps=ps, steps=16,
                  workers=CROSS_W, profile_of=BenchConfig(model="mobilenet", batch_size=32,
                                                          bandwidth="250mbit", steps=16).name,
                  group="cross")
      for ps in (2, 3)),
    # one job never run, W = 1, 2, 4, with the lab's default queue and with 256 KiB: written
    # down with whether its workers keep equal shares, from its connections' windows against
    # the queue (docs/notes/issue21-worker-shares.md; docs/preregistered/issue21-shares-queue.md)
    *(BenchConfig(model="deepmlp", model_mb=10, batch_size=46, bandwidth="450mbit", steps=20,
                  workers=(1, 2, 4), group="issue21", queue=q)
      for q in (None, "256k")),
    # two jobs never run, W = 1, 2, 4, 8, each through the lab's FIFO and through its fair
    # queue (one HTB class per node: the equal sharing the replay assumes): is the sim's
    # shortfall at W = 8 the FIFO's unequal sharing? (docs/preregistered/issue21-fair-w8.md)
    *(BenchConfig(model=m, model_mb=10, batch_size=b, bandwidth=bw, steps=n,
                  workers=(1, 2, 4, 8), group="issue21", qdisc=q)
      for m, b, bw, n in (("deepmlp", 34, "400mbit", 20), ("mlp", 38, "450mbit", 16))
      for q in ("fifo", "fair")),
    # two more jobs never run, W = 1, 2, 4, 8, through the lab's FIFO under its default BBR
    # and under Reno: are the FIFO's unequal, carried push shares that keep the W = 8 workers
    # apart BBR's? (docs/preregistered/issue21-reno-w8.md)
    *(BenchConfig(model=m, model_mb=10, batch_size=b, bandwidth=bw, steps=n,
                  workers=(1, 2, 4, 8), group="issue21", tcp_cc=cc)
      for m, b, bw, n in (("deepmlp", 36, "350mbit", 20), ("mlp", 36, "500mbit", 16))
      for cc in (None, "reno")),
    # three jobs never run, through the lab's FIFO, W up to where their connections' two GSO
    # packets each overflow the PS's queue and beyond (at W >= 2, 3 and 6): are those rows
    # the PS's own queue's, as --link auto replayed them for the registration? (no: the rule
    # is --link overflow, asked for; docs/preregistered/issue21-own-queue.md and its report)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, steps=n, workers=ws,
                  group="issue21")
      for m, mb, b, bw, n, ws in (("recsys", 20, 48, "150mbit", 20, (1, 2, 3, 4)),
                                  ("deepmlp", 10, 44, "300mbit", 20, (1, 2, 3, 4, 6)),
                                  ("mlp", 10, 42, "600mbit", 16, (1, 2, 4, 6)))),
    # four jobs never run, through the lab's FIFO, W up to where their connections overflow
    # the PS's queue and beyond (at W >= 3, 3, 4 and 5): are those rows the PS's own queue's,
    # as --link auto replayed them for the registration where the profile's capture showed one
    # worker kept within the queue (the MLP's at 400 Mbit/s and the recommendation model's)?
    # (no: 2 of 4; docs/preregistered/issue21-loss-free-queue.md and its report)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, steps=n, workers=ws,
                  group="issue21")
      for m, mb, b, bw, n, ws in (("deepmlp", 10, 40, "250mbit", 20, (1, 2, 3, 4)),
                                  ("mlp", 10, 50, "300mbit", 16, (1, 2, 3, 4)),
                                  ("mlp", 10, 46, "400mbit", 16, (1, 2, 4, 6)),
                                  ("recsys", 20, 56, "500mbit", 20, (1, 2, 4, 6, 8)))),
    # the recommendation model's W = 4, 6, 8 again, 60 steps a worker from the same profile:
    # its 20-step runs held 3-4 steps in their common window at W = 6-8, the points the
    # registered rule missed (docs/preregistered/issue21-loss-free-queue-long.md)
    BenchConfig(model="recsys", model_mb=20, batch_size=56, bandwidth="500mbit", steps=60,
                workers=(4, 6, 8), group="issue21", profile_of="recsys20-b56-500mbit-ps1-fcon",
                label="s60"),
    # the PS's own queue for the rows that overflow it (sim:overflow) beside equal sharing, a
    # third time, on three jobs never run, one of each regime the two parted on before: a
    # small model on a slow link (as the shipped sample), a deep MLP at W = 8, a
    # recommendation model at W = 6 (docs/preregistered/issue21-overflow-third.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, steps=n, workers=ws,
                  group="issue21")
      for m, mb, b, bw, n, ws in (("mlp", 2, 48, "80mbit", 16, (1, 2, 3, 4)),
                                  ("deepmlp", 10, 38, "450mbit", 30, (1, 2, 4, 8)),
                                  ("recsys", 20, 40, "300mbit", 40, (1, 2, 4, 6)))),
    # the bunching at W = 6-8 (docs/notes/issue21-bunching-w6.md) on two 10 MB MLPs never
    # run, its link states written down before the runs (docs/preregistered/issue21-bunching.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, steps=30, workers=(1, 6, 8),
                  group="issue21")
      for m, mb, b, bw in (("deepmlp", 10, 30, "500mbit"), ("mlp", 10, 44, "700mbit"))),
    # real TCP (--model emulate, its calibration run as its rows since 2026-12-06) on a
    # recommendation model never run, at W = 4-8 where the PS's own queue replays Reno's
    # losses and has been 3-14% low (docs/notes/issue21-recsys-own-queue.md;
    # docs/preregistered/issue21-emulate-recsys.md)
    BenchConfig(model="recsys", model_mb=20, batch_size=52, bandwidth="450mbit", steps=60,
                workers=(1, 4, 6, 8), group="issue21", run_together=True),
    # ... and a second one, at a slower rate and batch, registered after the first's report
    # (docs/preregistered/issue21-emulate-recsys-second.md)
    BenchConfig(model="recsys", model_mb=20, batch_size=44, bandwidth="350mbit", steps=60,
                workers=(1, 4, 6, 8), group="issue21", run_together=True),
    # the start phases (stratified, the default, against random: sim:random) on two jobs
    # never run, after random came within 1.4% at the six W = 4-8 points of the two above
    # where stratified was 1.7-13.5% high, post hoc (docs/notes/issue21-recsys-w4-start.md;
    # docs/preregistered/issue21-start-modes.md)
    BenchConfig(model="recsys", model_mb=20, batch_size=38, bandwidth="425mbit", steps=60,
                workers=(1, 2, 4, 6), group="issue21", run_together=True),
    BenchConfig(model="deepmlp", model_mb=10, batch_size=42, bandwidth="550mbit", steps=30,
                workers=(1, 2, 4, 6), group="issue21"),
    # is the PS's own queue's miss on recommendation models at W = 4-8 its Reno against the
    # lab's BBR? One job never run, twice: the lab's BBR and Reno, each from its own profile,
    # both packet models beside (sim:hostqueue Reno, sim:hostqueue-bbr;
    # docs/notes/issue21-recsys-own-queue.md; docs/preregistered/issue21-recsys-reno.md)
    *(BenchConfig(model="recsys", model_mb=20, batch_size=46, bandwidth="400mbit", steps=60,
                  workers=(1, 4, 6, 8), group="issue21", run_together=True, tcp_cc=cc)
      for cc in (None, "reno")),
    # the pushes through the switch's queue too (sim:hostqueue-up), after the switch's
    # samples showed the own queue's ACK wait 2-5 times the lab's: a 10 MB MLP (where equal
    # sharing has been low at W >= 6) and a recommendation model (where the own queue alone
    # was), neither run before (docs/notes/issue21-recsys-own-queue.md;
    # docs/preregistered/issue21-uplink-queue.md)
    BenchConfig(model="mlp", model_mb=10, batch_size=36, bandwidth="650mbit", steps=30,
                workers=(1, 4, 6, 8), group="issue21"),
    BenchConfig(model="recsys", model_mb=20, batch_size=42, bandwidth="375mbit", steps=60,
                workers=(1, 4, 6, 8), group="issue21", run_together=True),
    # shares by window (sim:shares, --link-shares windows) beside the default's equal shares,
    # after it came within 9.1% at the 32 points at hand post hoc: three families never run
    # (docs/preregistered/issue21-link-shares.md)
    BenchConfig(model="deepmlp", model_mb=10, batch_size=40, bandwidth="650mbit", steps=30,
                workers=(1, 2, 4, 6, 8), group="issue21"),
    BenchConfig(model="convnet", model_mb=50, batch_size=28, bandwidth="750mbit", steps=20,
                workers=(1, 2, 4), group="issue21"),
    BenchConfig(model="recsys", model_mb=20, batch_size=50, bandwidth="325mbit", steps=60,
                workers=(1, 2, 4, 8), group="issue21", run_together=True),
    # ... and again, on a wide MLP and a recommendation model over 2 PSes, never run, its
    # "not worse" check over the points the change moves
    # (docs/preregistered/issue21-link-shares-second.md)
    BenchConfig(model="mlp", model_mb=10, batch_size=34, bandwidth="550mbit", steps=30,
                workers=(1, 2, 4, 6, 8), group="issue21"),
    BenchConfig(model="recsys", model_mb=20, batch_size=40, bandwidth="400mbit", ps=2, steps=60,
                workers=(1, 2, 4, 8), group="issue21", run_together=True),
    # today's default (shares by window, each connection apart, each PS its own windows) on
    # jobs never run: a deep MLP over 2 PSes, a convnet predicted at 2.5x its profile's rate,
    # a recommendation model at a low rate (docs/preregistered/issue21-fresh-1207.md)
    BenchConfig(model="deepmlp", model_mb=10, batch_size=38, bandwidth="475mbit", ps=2, steps=30,
                workers=(1, 2, 4, 6), group="issue21"),
    BenchConfig(model="convnet", model_mb=50, batch_size=36, bandwidth="320mbit", steps=20,
                workers=(1,), group="issue21"),
    BenchConfig(model="convnet", model_mb=50, batch_size=36, bandwidth="800mbit", steps=20,
                workers=(1, 2, 4), group="cross",
                profile_of=BenchConfig(model="convnet", model_mb=50, batch_size=36,
                                       bandwidth="320mbit", steps=20).name),
    BenchConfig(model="recsys", model_mb=20, batch_size=44, bandwidth="275mbit", steps=60,
                workers=(1, 2, 4, 6), group="issue21", run_together=True),
    # two MLPs over 2 PSes never run, today's default (shares by window) beside equal shares:
    # does the draws' pull into step over several PSes show (docs/notes/issue21-two-ps-convoy.md,
    # docs/preregistered/issue21-two-ps-shares.md)
    BenchConfig(model="mlp", model_mb=10, batch_size=30, bandwidth="700mbit", ps=2, steps=30,
                workers=(1, 2, 4), group="issue21"),
    BenchConfig(model="deepmlp", model_mb=10, batch_size=44, bandwidth="525mbit", ps=2, steps=30,
                workers=(1, 2, 4), group="issue21"),
    # a pull's request through the switch's queue toward its PS (sim:hostqueue-up, -up-bbr,
    # --uplink-queue since cb2c8eb) beside the default on four families never run
    # (docs/notes/issue21-request-crossing.md; docs/preregistered/issue21-request-crossing.md)
    BenchConfig(model="deepmlp", model_mb=10, batch_size=36, bandwidth="600mbit", ps=2, steps=30,
                workers=(1, 2, 4), group="issue21"),
    BenchConfig(model="mlp", model_mb=10, batch_size=38, bandwidth="480mbit", steps=30,
                workers=(1, 2, 4, 6), group="issue21"),
    BenchConfig(model="recsys", model_mb=20, batch_size=34, bandwidth="330mbit", steps=60,
                workers=(1, 2, 4), group="issue21", run_together=True),
    BenchConfig(model="convnet", model_mb=50, batch_size=30, bandwidth="650mbit", steps=20,
                workers=(1, 2, 4), group="issue21"),
    # Linux's BBR whole in both queues (sim:hostqueue-up-bbr1, --tcp bbr-v1 since c8791cd)
    # beside the default on five jobs never run, 1, 2 and 3 PSes
    # (docs/notes/issue21-bbr-v1.md; docs/preregistered/issue21-bbr-v1.md)
    BenchConfig(model="deepmlp", model_mb=10, batch_size=40, bandwidth="700mbit", ps=2, steps=30,
                workers=(1, 2, 4), group="issue21"),
    BenchConfig(model="mlp", model_mb=15, batch_size=34, bandwidth="400mbit", steps=30,
                workers=(1, 2, 4, 6), group="issue21"),
    BenchConfig(model="convnet", model_mb=50, batch_size=26, bandwidth="550mbit", steps=20,
                workers=(1, 2, 4), group="issue21"),
    BenchConfig(model="recsys", model_mb=30, batch_size=30, bandwidth="450mbit", steps=60,
                workers=(1, 2, 4), group="issue21", run_together=True),
    BenchConfig(model="deepmlp", model_mb=15, batch_size=40, bandwidth="450mbit", ps=3, steps=30,
                workers=(1, 2, 4), group="issue21"),
    # ... a second time, on four more jobs never run and two cross predictions of one of them
    # (0.4x its rate; 2 PSes) (docs/preregistered/issue21-bbr-v1-second.md)
    BenchConfig(model="deepmlp", model_mb=10, batch_size=30, bandwidth="800mbit", ps=2, steps=30,
                workers=(1, 2, 4), group="issue21"),
    BenchConfig(model="mlp", model_mb=20, batch_size=30, bandwidth="600mbit", steps=30,
                workers=(1, 2, 4), group="issue21"),
    BenchConfig(model="mlp", model_mb=20, batch_size=30, bandwidth="240mbit", steps=20,
                workers=(1, 2, 4), group="cross", profile_of="mlp20-b30-600mbit-ps1-fcon"),
    BenchConfig(model="mlp", model_mb=20, batch_size=30, bandwidth="600mbit", ps=2, steps=30,
                workers=(1, 2, 4), group="cross", profile_of="mlp20-b30-600mbit-ps1-fcon"),
    BenchConfig(model="convnet", model_mb=50, batch_size=34, bandwidth="450mbit", steps=20,
                workers=(1, 2, 4), group="issue21"),
    BenchConfig(model="recsys", model_mb=25, batch_size=36, bandwidth="280mbit", steps=60,
                workers=(1, 2, 4), group="issue21", run_together=True),
    # issue 22: synchronous PS (SyncReplicasOptimizer), three models at two rates each, each
    # predicted from its own 1-worker synchronous profile. A synchronous step moves W times a
    # worker's bytes through the PS link, so its runs are W times slower than an asynchronous
    # worker's: 12 steps per worker (a barrier makes every step alike). Pilot (pre-registered,
    # docs/preregistered/issue22-sync-pilot.md): deepmlp 10 MB 500mbit W=2 95.4 ex/s (0.64 s
    # steps), W=4 96.9 (1.23 s), cpu 0.13 of 2 cores.
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, steps=12,
                  workers=(1, 2, 3, 4, 6), group="issue22", mode="sync")
      for m, mb, b, rates in (("deepmlp", 10, 32, ("500mbit", "1250mbit")),
                              ("recsys", 20, 32, ("100mbit", "250mbit")),
                              ("mobilenet", 50, 16, ("250mbit", "625mbit")))
      for bw in rates),
    # issue 22: synchronous PS on two jobs never run so, written down with the shaper's bucket
    # measured as a transfer's lead (the PS's own queue replays it;
    # docs/preregistered/issue22-sync-bucket-lead.md)
    *(BenchConfig(model=m, model_mb=mb, bandwidth=bw, steps=20, workers=(1, 2, 3, 4),
                  group="issue22", mode="sync")
      for m, mb, bw in (("recsys", 20, "150mbit"), ("deepmlp", 10, "400mbit"))),
    # a synchronous job over 2 PSes whose embedding PS moves only short transfers, never run
    # before, its bucket pooled over the PS captures (the PS's own queue replays it at every
    # W; docs/preregistered/issue21-bucket-pooled-sync.md)
    BenchConfig(model="recsys", model_mb=20, bandwidth="400mbit", ps=2, steps=20,
                workers=(1, 2, 3, 4), group="issue22", mode="sync"),
    # issue 22: synchronous PS on three jobs never run before, each predicted from its own
    # 1-worker synchronous profile with the defaults of 2026-11-30 (the PS's own queue behind
    # its shaper's bucket): docs/preregistered/issue22-sync-fresh.md
    *(BenchConfig(model=m, model_mb=mb, bandwidth=bw, ps=ps, steps=12, workers=(1, 2, 3, 4),
                  group="issue22", mode="sync")
      for m, mb, bw, ps in (("mlp", 10, "600mbit", 1), ("convnet", 50, "400mbit", 1),
                            ("deepmlp", 10, "800mbit", 2))),
    # issue 22: synchronous PS on two jobs never run, W = 1-4 and 6, each from its own
    # 1-worker synchronous profile, with the defaults of 2026-12-04 (a run stops once its
    # interval is within 2%): docs/preregistered/issue22-sync-w6.md
    *(BenchConfig(model=m, model_mb=10, batch_size=b, bandwidth=bw, steps=12,
                  workers=(1, 2, 3, 4, 6), group="issue22", mode="sync")
      for m, b, bw in (("mlp", 52, "450mbit"), ("deepmlp", 24, "700mbit"))),
    # issue 22: synchronous PS on three jobs never run, each from its own 1-worker synchronous
    # profile, after each variable's update was made to run once every worker's gradient of
    # it is in (SyncReplicasOptimizer's take_grad per accumulator):
    # docs/preregistered/issue22-sync-per-variable.md
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, ps=ps, steps=12,
                  workers=ws, group="issue22", mode="sync")
      for m, mb, b, bw, ps, ws in (("deepmlp", 10, 20, "900mbit", 1, (1, 2, 3, 4, 6)),
                                   ("convnet", 50, 44, "650mbit", 1, (1, 2, 3, 4)),
                                   ("mlp", 10, 60, "350mbit", 2, (1, 2, 3, 4, 6)))),
    # issue 22: synchronous PS on three deep MLPs never run (20 and 15 MB: more variables, so
    # more of FULL_TRACE's step statistics on the PS), each from its own 1-worker synchronous
    # profile, `--trace-cost requests` beside the default
    # (docs/preregistered/issue22-trace-requests.md)
    *(BenchConfig(model="deepmlp", model_mb=mb, batch_size=b, bandwidth=bw, ps=ps, steps=12,
                  workers=ws, group="issue22", mode="sync")
      for mb, b, bw, ps, ws in ((20, 24, "750mbit", 1, (1, 2, 3, 4, 6)),
                                (15, 36, "500mbit", 2, (1, 2, 3, 4)),
                                (15, 16, "1100mbit", 1, (1, 2, 3, 4, 6)))),
    # issue 22: synchronous PS on three jobs of other families never run (MobileNetV2, the
    # recommendation model, an MLP over 2 PSes at 1 Gbit/s), with the defaults of 2026-12-04
    # (docs/preregistered/issue22-sync-families.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, ps=ps, steps=12,
                  workers=(1, 2, 3, 4), group="issue22", mode="sync")
      for m, mb, b, bw, ps in (("mobilenet", 50, 12, "300mbit", 1),
                               ("recsys", 30, 48, "200mbit", 1),
                               ("mlp", 20, 40, "1gbit", 2))),
    # issue 22's own benchmark as its text sets it (five runs a point, W = 2-6, 1 and 2 PSes):
    # synchronous PS on three jobs of three families never run at these batches, each from its
    # own 1-worker synchronous profile, with the defaults of 2026-12-04
    # (docs/preregistered/issue22-sync-five.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, ps=ps, steps=12,
                  workers=(1, 2, 3, 4, 6), group="issue22", mode="sync")
      for m, mb, b, bw, ps in (("deepmlp", 15, 28, "600mbit", 1),
                               ("convnet", 50, 36, "750mbit", 2),
                               ("recsys", 25, 32, "300mbit", 1))),
    # ... and the same three jobs at half those rates (the issue's second bandwidth), never run
    # there, each from its own new 1-worker synchronous profile, with the defaults of
    # 2026-12-05 (docs/preregistered/issue22-sync-five-half.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, ps=ps, steps=12,
                  workers=(1, 2, 3, 4, 6), group="issue22", mode="sync")
      for m, mb, b, bw, ps in (("deepmlp", 15, 28, "300mbit", 1),
                               ("convnet", 50, 36, "375mbit", 2),
                               ("recsys", 25, 32, "150mbit", 1))),
    # issue 22: two synchronous jobs never run, W = 1, 2, 4, each under the lab's default BBR
    # and under Reno, each twin predicted from its own profile: is the synchronous replay's
    # shortfall at W >= 2 BBR's? (docs/preregistered/issue22-sync-reno-twins.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, steps=12,
                  workers=(1, 2, 4), group="issue22", mode="sync", tcp_cc=cc)
      for m, mb, b, bw in (("deepmlp", 20, 28, "400mbit"), ("convnet", 50, 30, "500mbit"))
      for cc in (None, "reno")),
    # issue 22: two synchronous recommendation jobs never run, under the lab's BBR, a held
    # pull going at its worker's next HTTP/2 PING (--pings capture, the default when they were
    # registered) beside the timer alone and BBR whole (docs/preregistered/issue22-sync-pings.md)
    *(BenchConfig(model="recsys", model_mb=mb, batch_size=b, bandwidth=bw, ps=ps, steps=12,
                  workers=ws, group="issue22", mode="sync")
      for mb, b, bw, ps, ws in ((30, 32, "350mbit", 1, (1, 2, 3, 4, 6)),
                                (20, 24, "450mbit", 2, (1, 2, 4, 6)))),
    # the same two jobs, 40 steps a worker from the same profiles: their 12-step runs spread
    # 29-61% at W = 2-4, a held pull costing a step 200 ms; the models predict the long run's
    # rate (docs/preregistered/issue22-sync-long.md)
    *(BenchConfig(model="recsys", model_mb=mb, batch_size=b, bandwidth=bw, ps=ps, steps=40,
                  workers=ws, group="issue22", mode="sync", label="s40",
                  profile_of=BenchConfig(model="recsys", model_mb=mb, batch_size=b,
                                         bandwidth=bw, ps=ps, steps=12, mode="sync").name)
      for mb, b, bw, ps, ws in ((30, 32, "350mbit", 1, (1, 2, 3, 4, 6)),
                                (20, 24, "450mbit", 2, (1, 2, 4, 6)))),
    # issue 22: BBR whole with the PINGs beside the Reno default on three synchronous jobs
    # never run, the recommendation model's runs 40 steps a worker (its held pulls), the
    # others' 20 (docs/preregistered/issue22-sync-bbr-second.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, ps=ps, steps=n,
                  workers=(1, 2, 4, 6), group="issue22", mode="sync")
      for m, mb, b, bw, ps, n in (("deepmlp", 15, 24, "450mbit", 1, 20),
                                  ("convnet", 50, 32, "600mbit", 2, 20),
                                  ("recsys", 25, 40, "250mbit", 1, 40))),
    # issue 22: the synchronous default under CUBIC, Linux's default congestion control and
    # the one most clusters run, which no set had measured (the dev VM's host runs BBR; the
    # lab's namespaces may take CUBIC once the host allows it:
    # docs/preregistered/issue22-sync-cubic.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, ps=ps, steps=n,
                  workers=(1, 2, 4, 6), group="issue22", mode="sync", tcp_cc="cubic")
      for m, mb, b, bw, ps, n in (("convnet", 50, 32, "600mbit", 2, 20),
                                  ("recsys", 25, 40, "250mbit", 1, 40),
                                  ("recsys", 20, 28, "300mbit", 2, 40))),
    # issue 21: the asynchronous default under CUBIC, three jobs never run (the sets before ran
    # the dev VM's BBR; docs/preregistered/issue21-cubic.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, ps=ps, steps=20,
                  workers=(1, 2, 4), group="issue21", tcp_cc="cubic")
      for m, mb, b, bw, ps in (("deepmlp", 10, 34, "600mbit", 2),
                               ("mlp", 20, 32, "500mbit", 1),
                               ("recsys", 25, 36, "300mbit", 1))),
    # issue 21: three more asynchronous jobs under CUBIC, never run, real TCP (--model emulate,
    # its namespaces under the profile's CUBIC) beside the default: does the kernel's CUBIC
    # take the turns the fluid replay lacks? (docs/preregistered/issue21-cubic-emulate.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, ps=ps, steps=30,
                  workers=(1, 2, 4), group="issue21", tcp_cc="cubic")
      for m, mb, b, bw, ps in (("deepmlp", 10, 40, "550mbit", 2),
                               ("mlp", 20, 28, "450mbit", 1),
                               ("recsys", 25, 32, "350mbit", 1))),
    # issue 21: three more under CUBIC, never run: the replay's Reno connections through both
    # queues (--link hostqueue --uplink-queue) and real TCP beside the default, a rule for
    # loss-based congestion control written first (docs/preregistered/issue21-cubic-reno-queues.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, ps=ps, steps=30,
                  workers=(1, 2, 4), group="issue21", tcp_cc="cubic")
      for m, mb, b, bw, ps in (("deepmlp", 10, 36, "500mbit", 2),
                               ("mlp", 10, 40, "400mbit", 1),
                               ("recsys", 20, 36, "300mbit", 2))),
    # issue 22, Chang et al.'s Table 1: synchronous PS at a fixed W = 4 with 1, 2, 3 and 4
    # PSes, predicted from the MLP's 1-worker, 1-PS asynchronous profile (--mechanism sync-ps,
    # TensorFlow's greedy placement). Its three big kernels (5.5, 7.3 and 7.3 MB) cannot be
    # split evenly: the busiest PS holds 7.3 MB from M = 3 on, so the gain should plateau.
    *(BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit", ps=ps, steps=12, workers=(4,),
                  group="issue22", mode="sync",
                  profile_of=BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit",
                                         steps=16).name)
      for ps in (1, 2, 3, 4)),
    # issue 22: synchronous PS over 2 PSes, three models at two rates each (the profile's and
    # twice it), predicted from the model's 1-worker, 1-PS synchronous profile
    # (docs/preregistered/issue22-sync-2ps.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, ps=2, steps=12,
                  workers=(1, 2, 3, 4, 6), group="issue22", mode="sync",
                  profile_of=BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=base,
                                         steps=st, mode="sync").name)
      for m, mb, b, base, st, rates in (("deepmlp", 10, 32, "500mbit", 12, ("500mbit", "1gbit")),
                                        ("recsys", 20, 32, "150mbit", 20, ("150mbit", "300mbit")),
                                        ("mobilenet", 50, 16, "250mbit", 12,
                                         ("250mbit", "500mbit")))
      for bw in rates),
    # issue 22: collective ring all-reduce (lab mode ring: MultiWorkerMirroredStrategy's
    # CollectiveReduceV2 with the RING hint, no PS, every worker's link shaped), three dense
    # models at two rates each, predicted with --mechanism ring-allreduce from the model's
    # 1-worker asynchronous PS profile (the compute, the gradients' bytes, the update). The
    # workers compute at once on this machine's 2 cores, so the models are those whose
    # compute is small beside the ring at W = 6. Spike (seen before pre-registering): mlp
    # 20 MB 250mbit W=2 80.8 ex/s, W=3 89.9; the capture of W=3 showed 4 RecvBuf calls of
    # 6.672 MB (G / W) a step on each worker's link, ring order 0 -> 1 -> 2 -> 0.
    *(BenchConfig(model=m, model_mb=mb, batch_size=32, bandwidth=bw, ps=0, steps=12,
                  workers=(2, 3, 4, 5, 6), group="issue22", mode="ring",
                  profile_of=BenchConfig(model=m, model_mb=mb, bandwidth=base, steps=st).name)
      for m, mb, base, st, rates in (("mlp", 20, "250mbit", 16, ("250mbit", "500mbit")),
                                     ("deepmlp", 10, "500mbit", 20, ("250mbit", "500mbit")),
                                     ("convnet", 50, "250mbit", 20, ("100mbit", "250mbit")))
      for bw in rates),
    # two ring jobs never run before, written down after each hop got TensorFlow's software
    # time from the op cost database (docs/preregistered/issue22-ring-hop.md): faster links,
    # where that time is a larger share of a hop
    *(BenchConfig(model=m, model_mb=mb, batch_size=32, bandwidth="1gbit", ps=0, steps=12,
                  workers=(2, 3, 4, 5, 6), group="issue22", mode="ring",
                  profile_of=BenchConfig(model=m, model_mb=mb, bandwidth=base, steps=st).name)
      for m, mb, base, st in (("mlp", 20, "250mbit", 16), ("deepmlp", 10, "500mbit", 20),
                              # a third family, written down after the first two's runs
                              # (docs/preregistered/issue22-ring-hop-convnet.md)
                              ("convnet", 50, "250mbit", 20))),
    # three ring jobs never run before, each at its profile's own rate, written down with and
    # without the shaper's bucket on the workers' links (docs/preregistered/
    # issue22-ring-bucket.md and its report: the bucket lost, so it is the `sim:bucket`
    # variant); the profiles are 1-worker asynchronous PS profiles recorded on this machine
    # on 2026-11-30 for issue 23 (bench-out/memwire, bench-out/fuse2)
    *(BenchConfig(model=m, model_mb=mb, batch_size=32, bandwidth=bw, ps=0, steps=12,
                  workers=(2, 3, 4), group="issue22", mode="ring",
                  profile_of=BenchConfig(model=m, model_mb=mb, bandwidth=bw, steps=20).name)
      for m, mb, bw in (("mlp", 10, "750mbit"), ("deepmlp", 10, "700mbit"),
                        ("convnet", 50, "500mbit"))),
    # three more ring jobs never run before, each at its profile's own rate (RING_FRESH)
    *_ring_set(*RING_FRESH),
    # three ring jobs never run before, each at its profile's own rate, written down with
    # the lab's own host and shapers beside the default (`sim:bucket+host-cores`): a
    # link-bound MLP, a deep MLP on a fast link and MobileNetV2, whose workers' compute keeps
    # the 2 cores busy (RING_LAB_HOST)
    *_ring_set(*RING_LAB_HOST),
    # three more, written down with the lab's run replayed whole (`sim:lab-run`: its bucket,
    # its cores and the traced compute's excess out; RING_LAB_RUN)
    *_ring_set(*RING_LAB_RUN),
    # two more, written down with the executor's waits out of the compute (RING_GAPS)
    *_ring_set(*RING_GAPS),
    *_ring_set(*RING_GAPS_W2, workers=(2,)),
    # three more with the waits out by default (RING_AUTO)
    *_ring_set(*RING_AUTO),
    # three more, registered with the compute alone as the default (RING_ALONE)
    *_ring_set(*RING_ALONE),
    # issue 23: the batch-size what-if, asynchronous PS at half and twice the batch of the
    # profile (32), predicted with --to-batch-size from the op cost database OPDB (built by
    # `gradwire opdb build` on this machine), three models whose compute is a large share of
    # their step
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, steps=st,
                  workers=(1, 2, 4), group="issue23",
                  profile_of=BenchConfig(model=m, model_mb=mb, bandwidth=bw, steps=st).name)
      for m, mb, bw, st in (("mobilenet", 50, "250mbit", 16), ("convnet", 50, "250mbit", 20),
                            ("deepmlp", 10, "500mbit", 20))
      for b in (16, 64)),
    # ... and three jobs never run, at W >= 2 too, with the database of the lab's one intra-op
    # thread (docs/preregistered/issue23-batch-w2.md): MobileNetV2 at half its batch, the deep
    # MLP and the recommendation model at twice theirs
    *_batch_whatifs(BATCH_W2),
    *_batch_whatifs(BATCH_SPARSE),
    *_batch_whatifs(BATCH_THREE, run_together=True),
    *_batch_whatifs(BATCH_THREE_2, run_together=True),
    *_batch_whatifs(BATCH_SYNC, mode="sync"),
    *_batch_whatifs(BATCH_CONVNET, run_together=True),
    # ... and where compute is most of the step: MobileNetV2 at 2 Gbit/s, one worker (more
    # would share this machine's 2 cores), from the same 250 Mbit/s profile
    *(BenchConfig(model="mobilenet", batch_size=b, bandwidth="2gbit", steps=16, workers=(1,),
                  group="issue23",
                  profile_of=BenchConfig(model="mobilenet", bandwidth="250mbit", steps=16).name)
      for b in (16, 64)),
    # ... and from profiles at the same 2 Gbit/s, the op database timed with the lab's one
    # intra-op thread (docs/preregistered/issue23-batch-threads.md): MobileNetV2 at a quarter and
    # four times its batch, the convnet at half and twice
    *(BenchConfig(model=m, model_mb=50, bandwidth="2gbit", steps=st, workers=(1,),
                  group="issue23") for m, st in (("mobilenet", 16), ("convnet", 20))),
    *(BenchConfig(model=m, model_mb=50, batch_size=b, bandwidth="2gbit", steps=st,
                  workers=(1,), group="issue23",
                  profile_of=BenchConfig(model=m, model_mb=50, bandwidth="2gbit", steps=st).name)
      for m, st, batches in (("mobilenet", 16, (8, 128)), ("convnet", 20, (16, 64)))
      for b in batches),
    # ... and the check of a rule releasing each push after the compute the profile ran before
    # it (docs/preregistered/issue23-push-release-lab.md; it failed, the rule was taken out):
    # the convnet at 1.2 Gbit/s, its own job at W = 1, 2, and its batch what-ifs at W = 1
    BenchConfig(model="convnet", model_mb=50, bandwidth="1200mbit", steps=20, workers=(1, 2),
                group="issue23"),
    *(BenchConfig(model="convnet", model_mb=50, batch_size=b, bandwidth="1200mbit", steps=20,
                  workers=(1,), group="issue23",
                  profile_of=BenchConfig(model="convnet", model_mb=50, bandwidth="1200mbit",
                                         steps=20).name)
      for b in (16, 64)),
    # issue 23: tensor partition (the lab's --partition K, TensorFlow's partitioned variables),
    # predicted from the job's unpartitioned 1-PS profile with --partition K: the MLP (three
    # kernels of 5.5-7.3 MB that no placement of whole variables splits evenly over 2 PSes)
    # beside the same job unpartitioned, and the recommendation model over 2 and 3 PSes
    # (its unpartitioned runs are the cross configurations above)
    *(BenchConfig(model=m, model_mb=20, bandwidth=bw, ps=ps, partition=k, steps=st,
                  workers=(1, 2, 4), group="issue23",
                  profile_of=BenchConfig(model=m, model_mb=20, bandwidth=bw, steps=st).name)
      for m, bw, st, points in (("mlp", "250mbit", 16, ((2, 1), (2, 2))),
                                ("recsys", "100mbit", 20, ((2, 2), (3, 3))))
      for ps, k in points),
    # issue 23: gradient accumulation (the lab's --accumulate K: K micro-batches of 32 per
    # update, one pull and one push), predicted from the job's 1-worker profile with
    # --accumulate K; and XLA's auto-clustering on CPU (the lab's --xla), predicted from the
    # unclustered profile with --op-fusion (element-wise chains fused, costed from OPDB)
    *(BenchConfig(model=m, model_mb=mb, bandwidth=bw, steps=st, accumulate=k, xla=xla,
                  workers=(1, 2, 4), group="issue23",
                  profile_of=BenchConfig(model=m, model_mb=mb, bandwidth=bw, steps=st).name)
      for m, mb, bw, st, k, xla in (("deepmlp", 10, "500mbit", 20, 2, False),
                                    ("deepmlp", 10, "500mbit", 20, 4, False),
                                    ("convnet", 50, "250mbit", 20, 2, False),
                                    ("deepmlp", 10, "500mbit", 20, 1, True))),
    # ... MobileNetV2 under XLA at W = 1, 2 only: XLA's CPU code runs its step about ten times
    # as long (its depthwise convolutions), so each worker keeps one of the 2 cores busy and
    # W = 4 would measure the lab's cores; it failed in the lab until 2026-11-30 (TensorFlow
    # compiled clusters placed on the PS: lab/node.py keep_xla_off_ps)
    BenchConfig(model="mobilenet", model_mb=50, bandwidth="250mbit", steps=16, xla=True,
                workers=(1, 2), group="issue23",
                profile_of=BenchConfig(model="mobilenet", model_mb=50, bandwidth="250mbit",
                                       steps=16).name),
    # ... and the convnet under XLA at 2 Gbit/s, where its compute is most of the step, from
    # its profile at that rate (docs/preregistered/issue23-xla-rows.md)
    BenchConfig(model="convnet", model_mb=50, bandwidth="2gbit", steps=20, xla=True,
                workers=(1, 2), group="issue23",
                profile_of=BenchConfig(model="convnet", model_mb=50, bandwidth="2gbit",
                                       steps=20).name),
    # ... and three jobs never run under XLA, written down with the worker's compute as one
    # cluster (docs/preregistered/issue23-xla-cluster.md), each from its own new profile
    *(BenchConfig(model=m, model_mb=mb, bandwidth=bw, steps=20, xla=True, workers=(1, 2),
                  group="issue23",
                  profile_of=BenchConfig(model=m, model_mb=mb, bandwidth=bw, steps=20).name)
      for m, mb, bw in (("convnet", 50, "1gbit"), ("mlp", 20, "2gbit"),
                        ("deepmlp", 10, "1gbit"))),
    # ... and MobileNetV2 at batch 16 under XLA, never run so, written down with the step
    # compiled whole and timed on the machine (docs/preregistered/issue23-xla-step.md)
    BenchConfig(model="mobilenet", model_mb=50, batch_size=16, bandwidth="500mbit", steps=16,
                xla=True, workers=(1, 2), group="issue23",
                profile_of=BenchConfig(model="mobilenet", model_mb=50, batch_size=16,
                                       bandwidth="500mbit", steps=16).name),
    # issue 23: mixed precision (the lab's --mixed-precision: float32 variables on the PSes,
    # each read and cast to bfloat16 there, so pulls and pushes are 16-bit, and the worker's
    # compute in bfloat16), predicted from the float32 profile with --mixed-precision (op
    # costs from OPDB, transferred bytes halved)
    *(BenchConfig(model=m, model_mb=mb, bandwidth=bw, steps=st, mixed_precision=True,
                  workers=(1, 2, 4), group="issue23",
                  profile_of=BenchConfig(model=m, model_mb=mb, bandwidth=bw, steps=st).name)
      for m, mb, bw, st in (("mlp", 20, "250mbit", 16), ("deepmlp", 10, "500mbit", 20))),
    # recomputation (the lab's --recompute K: the MLPs' layers in tf.recompute_grad segments
    # of K), predicted from the plain profile with --recompute all; where compute is a visible
    # share of the step (MLP 20 MB at 2 Gbit/s, the deep MLP at 1250 Mbit/s)
    # (the deep MLP's from its 500 Mbit/s profile, as its cross prediction at 1250 is)
    *(BenchConfig(model=m, model_mb=mb, bandwidth=bw, steps=st, recompute=k, workers=(1, 2, 4),
                  group="issue23",
                  profile_of=BenchConfig(model=m, model_mb=mb, bandwidth=base, steps=st).name)
      for m, mb, bw, base, st, k in (("mlp", 20, "2gbit", "2gbit", 20, 2),
                                     ("deepmlp", 10, "1250mbit", "500mbit", 20, 4))),
    # issue 23: tensor partition on jobs never partitioned before, written down with each
    # slice requested apart and written in order on its own PS
    # (docs/preregistered/issue23-partition-slices.md)
    *(BenchConfig(model=m, model_mb=mb, bandwidth=bw, ps=k, partition=k, steps=20,
                  workers=(1, 2, 4), group="issue23",
                  profile_of=BenchConfig(model=m, model_mb=mb, bandwidth=bw, steps=20).name)
      for m, mb, bw, k in (("recsys", 20, "150mbit", 2), ("recsys", 20, "150mbit", 3),
                           ("convnet", 50, "250mbit", 3))),
    # issue 23: the partitioned jobs' one worker on jobs and rates never recorded before,
    # written down with the shaper's bucket measured as the lead a transfer ends with
    # (docs/preregistered/issue23-partition-bucket.md); the unpartitioned 1-PS job at W = 1
    # beside them (the convnet's at 400 Mbit/s is above)
    *(BenchConfig(model=m, model_mb=mb, bandwidth=bw, steps=20, workers=(1,), group="issue23")
      for m, mb, bw in (("recsys", 20, "200mbit"), ("mlp", 10, "300mbit"))),
    *(BenchConfig(model=m, model_mb=mb, bandwidth=bw, ps=k, partition=k, steps=20,
                  workers=(1,), group="issue23",
                  profile_of=BenchConfig(model=m, model_mb=mb, bandwidth=bw, steps=20).name)
      for m, mb, bw, k in (("recsys", 20, "200mbit", 2), ("recsys", 20, "200mbit", 3),
                           ("mlp", 10, "300mbit", 2), ("convnet", 50, "400mbit", 2))),
    # issue 23: gradient accumulation on jobs never accumulated before, written down with
    # each rerun micro-step costed from the traced ops' least times
    # (docs/preregistered/issue23-accumulate-rerun.md)
    *(BenchConfig(model=m, model_mb=mb, bandwidth=bw, steps=20, accumulate=k,
                  workers=(1, 2, 4), group="issue23",
                  profile_of=BenchConfig(model=m, model_mb=mb, bandwidth=bw, steps=20).name)
      for m, mb, bw, k in (("deepmlp", 10, "400mbit", 4), ("convnet", 50, "700mbit", 4))),
    # ... and the plan `gradwire optimize --opdb` recommends for the MLP at W = 4 over 2 PSes:
    # mixed precision and tensor partition together
    BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit", ps=2, partition=2,
                mixed_precision=True, steps=16, workers=(1, 2, 4), group="issue23",
                profile_of=BenchConfig(model="mlp", model_mb=20, bandwidth="250mbit",
                                       steps=16).name),
    # ... and the plans `gradwire optimize` recommends for the convnet over 3 PSes at 500
    # Mbit/s, from its 3-PS profile: --partition 6 at W = 1, --partition 3 at W = 4
    # (docs/preregistered/issue23-optimize-convnet.md)
    *(BenchConfig(model="convnet", model_mb=50, bandwidth="500mbit", ps=3, partition=k,
                  steps=20, workers=(w,), group="issue23",
                  profile_of=BenchConfig(model="convnet", model_mb=50, bandwidth="500mbit",
                                         ps=3, steps=20).name)
      for k, w in ((6, 1), (3, 4))),
    # issue 23: tensor fusion (the lab's --fuse-tensors: each PS's gradients concatenated on
    # the worker into buckets of at least 16 MB, so one bucket for each of these models),
    # predicted from the plain job's profile with --fuse-tensors
    # (docs/preregistered/issue23-tensor-fusion.md); the plain convnet at 1 Gbit/s beside it
    # (the other two plain jobs are issue 21's)
    BenchConfig(model="convnet", model_mb=50, bandwidth="1gbit", steps=20, workers=(1, 2, 4),
                group="issue23"),
    # ... and, after its report, on three more jobs (2 MB buckets for the deep MLP: five of
    # them), with the buckets in the gradients' ready order and the compute they move away
    # from the pushes at its quiet time (docs/preregistered/issue23-tensor-fusion-2.md); the
    # plain jobs are issue 21's and the benchmark's
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, steps=st, fuse_bytes=fb,
                  workers=ws, group="issue23",
                  profile_of=BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw,
                                         steps=st).name)
      for m, mb, b, bw, st, ws, fb in (
          ("deepmlp", 10, 32, "1gbit", 20, (1, 2, 4), 16e6),
          ("convnet", 50, 32, "1gbit", 20, (1, 2, 4), 16e6),
          ("mobilenet", 50, 16, "500mbit", 16, (1, 2), 16e6),
          ("deepmlp", 10, 32, "700mbit", 20, (1, 2, 4), 2e6),
          ("convnet", 50, 32, "500mbit", 24, (1, 2, 4), 16e6),
          ("mobilenet", 50, 16, "250mbit", 16, (1, 2), 16e6))),
    # issue 23: tensor fusion, tensor partition and recomputation again, on six jobs never
    # run, written down with the asynchronous PS's replay as it stood on 2026-12-05 (its
    # sets of 2026-11-26..30 were predicted by the replay before issue 21's later changes;
    # docs/preregistered/issue23-whatifs-1205.md): two jobs each, from their plain profiles
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, ps=ps, partition=k,
                  recompute=rc, fuse_bytes=fb, steps=st, workers=(1, 2, 4), group="issue23",
                  profile_of=BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw,
                                         steps=st).name)
      for m, mb, b, bw, st, ps, k, rc, fb in (
          ("deepmlp", 10, 36, "600mbit", 20, 1, 1, 0, 4e6),
          ("convnet", 50, 40, "900mbit", 20, 1, 1, 0, 16e6),
          ("recsys", 20, 40, "200mbit", 20, 2, 2, 0, 0.0),
          ("mlp", 20, 32, "600mbit", 16, 2, 2, 0, 0.0),
          ("mlp", 20, 32, "1500mbit", 20, 1, 1, 2, 0.0),
          ("deepmlp", 10, 40, "1gbit", 20, 1, 1, 4, 0.0))),
    # issue 23: tensor fusion on three jobs never run, the compute its buckets move away
    # from the pushes at the rate of the plain job's step run whole (`opdb step`), the
    # least traced times beside as sim:fusion-traced (docs/preregistered/issue23-fusion-rate.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, fuse_bytes=fb, steps=20,
                  workers=(1, 2, 4), group="issue23",
                  profile_of=BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw,
                                         steps=20).name)
      for m, mb, b, bw, fb in (("convnet", 50, 44, "1200mbit", 16e6),
                               ("convnet", 50, 24, "800mbit", 8e6),
                               ("deepmlp", 15, 32, "1200mbit", 4e6))),
    # ... and, after its report, with each bucket's PS updates woken once, on three more
    # (MobileNetV2's many small tensors among them; docs/preregistered/issue23-fusion-wakeup.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, fuse_bytes=fb, steps=st,
                  workers=ws, group="issue23",
                  profile_of=BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw,
                                         steps=st).name)
      for m, mb, b, bw, fb, st, ws in (("mobilenet", 50, 24, "800mbit", 16e6, 16, (1, 2)),
                                       ("deepmlp", 10, 28, "900mbit", 2e6, 20, (1, 2, 4)),
                                       ("convnet", 50, 28, "1gbit", 16e6, 20, (1, 2, 4)))),
    # issue 23: gradient accumulation and mixed precision on jobs never run, under today's
    # replay, nothing changed for them (docs/preregistered/issue23-whatifs-1206.md)
    *(BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw, accumulate=k,
                  mixed_precision=bf16, steps=20, workers=(1, 2, 4), group="issue23",
                  profile_of=BenchConfig(model=m, model_mb=mb, batch_size=b, bandwidth=bw,
                                         steps=20).name)
      for m, mb, b, bw, k, bf16 in (("deepmlp", 15, 24, "650mbit", 3, False),
                                    ("mlp", 10, 40, "800mbit", 2, False),
                                    ("convnet", 50, 28, "350mbit", 2, False),
                                    ("deepmlp", 15, 40, "700mbit", 1, True),
                                    ("mlp", 10, 36, "300mbit", 1, True))),
)
XLA_STEP = "xla_step.json"  # beside a profile: its step was timed whole under XLA into OPDB
PLAIN_STEP = "step.json"  # ... and without XLA (the micro-steps of gradient accumulation)
OPDB = REPO / "bench-out" / "opdb.sqlite"  # the op cost database of the batch what-ifs


# -- small helpers ------------------------------------------------------------------------------


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON atomically (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    """JSON of ``path``, or None if it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def selected(only: str | None) -> list[BenchConfig]:
    """The configurations whose name contains one of the comma-separated ``only`` substrings
    (one ending in ``$``: whose name ends with it, so ``convnet-b32-1gbit-ps1-fcon$`` is that
    job and not its what-ifs; one starting with ``^``: whose name starts with it, so
    ``^mlp10-b32-1500mbit-ps0-fcon-ring$`` is not the deep MLP's)."""
    if not only:
        return list(CONFIGS)
    keys = [k for k in only.split(",") if k]

    def matches(key: str, name: str) -> bool:
        if key.startswith("^"):
            return name.startswith(key[1:].rstrip("$")) and matches(key[1:], name)
        return name.endswith(key[:-1]) if key.endswith("$") else key in name

    chosen = [c for c in CONFIGS if any(matches(k, c.name) for k in keys)]
    if not chosen:
        near = difflib.get_close_matches(keys[0].strip("^$") if keys else "",
                                         [c.name for c in CONFIGS], n=4, cutoff=0.5)
        raise BenchError(f"--only {only!r} matches no configuration of the {len(CONFIGS)}"
                         + (f" (nearest: {', '.join(near)})" if near else "")
                         + f"; their names are CONFIGS' in {Path(__file__).name}")
    return chosen


# 1-worker asynchronous PS profiles that ring configurations are predicted from, and that are
# no configuration of their own: ``measure`` records each with the configurations naming it
# (once each: BATCH_CONVNET's two what-ifs share one)
PROFILE_SOURCES: tuple[BenchConfig, ...] = tuple({
    p.name: p
    for p in (*(_ring_profile(*job) for job in (*RING_FRESH, *RING_LAB_HOST, *RING_LAB_RUN,
                                                 *RING_GAPS, *RING_GAPS_W2, *RING_AUTO,
                                                 *RING_ALONE)),
              *(_batch_source(job) for job in (*BATCH_W2, *BATCH_SPARSE, *BATCH_THREE,
                                               *BATCH_THREE_2, *BATCH_CONVNET)),
              *(_batch_source(job, "sync") for job in BATCH_SYNC))
    if all(c.name != p.name for c in CONFIGS)}.values())


def plain_source(cfg: BenchConfig) -> BenchConfig | None:
    """The configuration whose profile ``cfg`` is predicted from, where that is not itself
    among ``CONFIGS`` (whose profiles ``measure`` records as theirs): one of
    ``PROFILE_SOURCES``, or ``cfg``'s own job without its what-ifs (XLA, accumulation, ...);
    None otherwise."""
    if cfg.profile_of is None or any(c.name == cfg.profile_of for c in CONFIGS):
        return None
    known = next((c for c in PROFILE_SOURCES if c.name == cfg.profile_of), None)
    if known is not None:
        return known
    plain = dataclasses.replace(cfg, workers=(1,), profile_of=None, group="benchmark",
                                partition=1, accumulate=1, xla=False, mixed_precision=False,
                                recompute=0, fuse_bytes=0.0)
    # over its own PS count, or (a partition what-if over more PSes) over one PS
    return next((p for p in (plain, dataclasses.replace(plain, ps=1))
                 if p.name == cfg.profile_of), None)


def run_file(out: Path, cfg: BenchConfig, workers: int, repeat: int) -> Path:
    """Cache path of one throughput run."""
    suffix = "" if repeat == 0 else f"-r{repeat}"
    return out / cfg.name / f"w{workers}{suffix}.json"


def same_protocol(cfg: BenchConfig, result: dict[str, Any] | None) -> bool:
    """Whether a cached throughput run was made with ``cfg``'s steps per worker, its queue
    discipline, its congestion control and its ``run_together`` (at W >= 2; runs of an older
    protocol are redone by ``measure`` and left out of the report)."""
    run_cfg = result.get("config") if isinstance(result, dict) else None
    return (isinstance(run_cfg, dict) and run_cfg.get("steps") == cfg.steps
            and run_cfg.get("qdisc", "fifo") == cfg.qdisc
            and run_cfg.get("tcp_cc") == cfg.tcp_cc
            and bool(run_cfg.get("run_together"))
            == (cfg.run_together and int(run_cfg.get("workers") or 1) > 1))


def cpu_total(result: dict[str, Any]) -> float | None:
    """Cores used by all nodes during the measurement window of a lab result."""
    value = result.get("cpu_share_window_total")
    return float(value) if value is not None else None


def same_direction_share(result: dict[str, Any]) -> float | None:
    """The share of a run's bulk transfers on its captured links (``lab --capture-headers``)
    that ran beside another worker's the same way, both ways and every link together; None
    without headers."""
    links = [h for h in (result.get("headers") or {}).values() if "error" not in h]
    ways = [h[way] for h in links for way in ("out", "in") if h[way]["transfers"]]
    total = sum(w["transfers"] for w in ways)
    return sum(w["same_share"] * w["transfers"] for w in ways) / total if total else None


def _say(msg: str) -> None:
    print(msg, flush=True)


# a run whose machine lost more than this many cores to its hypervisor (``host_steal_window``)
# is run again: a tenth of the machine's cores (gradwire.procstat.STOLEN_SHARE_LIMIT; 0.2 on
# the lab's 2 cores)
MAX_STEAL_CORES = STOLEN_SHARE_LIMIT * (os.cpu_count() or 1)
# attempts at one run before it is kept as it is, marked disturbed
STEAL_ATTEMPTS = 3


def stolen_cores(result: dict[str, Any]) -> float | None:
    """The cores a lab run's machine lost to its hypervisor while it was measured: over the
    throughput window, and for a profile also over its steps after the captures (the larger);
    None where the run did not record it (runs before 2026-11-29)."""
    values = [result.get("host_steal_window"), (result.get("uncaptured") or {}).get("host_steal")]
    known = [float(v) for v in values if v is not None]
    return max(known) if known else None


def capture_stolen_cores(folder: Path) -> float | None:
    """The most cores any node's machine lost to its hypervisor over its capture: each bundle's
    ``host_cpu.stolen_cores`` in ``folder/*/manifest.json`` (a profile's traced steps ran
    then); None where no manifest says (no capture, or one from before 2026-11-29)."""
    values = []
    for manifest in sorted(folder.glob("*/manifest.json")):
        data = read_json(manifest)
        host_cpu = data.get("host_cpu") if isinstance(data, dict) else None
        if isinstance(host_cpu, dict) and isinstance(host_cpu.get("stolen_cores"), int | float):
            values.append(float(host_cpu["stolen_cores"]))
    return max(values) if values else None


def _lab_run(lab_cfg: LabConfig, max_steal: float = MAX_STEAL_CORES,
             before_again: Callable[[], None] | None = None) -> dict[str, Any]:
    """Run the lab, again (up to ``STEAL_ATTEMPTS`` in all) while its machine lost more than
    ``max_steal`` cores to the hypervisor, ``before_again`` clearing what a run left; the
    result gets the bench's own bookkeeping under ``bench``: every attempt's stolen cores and
    ``disturbed`` where the last one still lost more. A run under ``--collect`` counts its
    captures' steal too (``capture_stolen_cores``): a profile is built from its traced
    steps, which ran while the captures did."""
    steal: list[float | None] = []
    for attempt in range(1, STEAL_ATTEMPTS + 1):
        load = os.getloadavg()
        t0 = time.time()
        result = run_lab(lab_cfg)
        captured = (capture_stolen_cores(Path(lab_cfg.collect_dir)) if lab_cfg.collect_dir
                    else None)
        known = [c for c in (stolen_cores(result), captured) if c is not None]
        steal.append(max(known) if known else None)
        disturbed = steal[-1] is not None and steal[-1] > max_steal
        if not disturbed or attempt == STEAL_ATTEMPTS:
            break
        _say(f"  the machine lost {steal[-1]:.2f} cores to its hypervisor during the run "
             f"(limit {max_steal:g}): running it again ({attempt + 1} of {STEAL_ATTEMPTS})")
        if before_again is not None:
            before_again()
    result["bench"] = {
        "started_s": t0,
        "loadavg_before": list(load),
        "loadavg_after": list(os.getloadavg()),
        "stolen_cores_by_attempt": steal,
        "disturbed": disturbed,
    }
    return result


def _need_root() -> None:
    if os.geteuid() != 0:
        raise BenchError("the lab needs root (network namespaces and tc): run as root")


# -- measure ------------------------------------------------------------------------------------


def _remove_profile(folder: Path) -> None:
    """Delete a profile folder's node bundles and result (only what the bench writes there)."""
    for child in folder.glob("*"):
        if child.is_dir() and child.name.startswith(("ps", "worker")):
            shutil.rmtree(child)
    (folder / LAB_RESULT).unlink(missing_ok=True)


def measure_profile(cfg: BenchConfig, out: Path, force: bool,
                    max_steal: float = MAX_STEAL_CORES) -> dict[str, Any]:
    """Record the 1-worker profile of ``cfg`` (cached; again while the hypervisor takes more
    than ``max_steal`` cores); returns a progress row."""
    folder = out / cfg.name / "profile"
    done = folder / LAB_RESULT
    if done.exists() and not force:
        return {"config": cfg.name, "run": "profile", "status": "cached"}
    if folder.exists():  # a run that died half-way, or --force
        _remove_profile(folder)
    shutil.rmtree(out / cfg.name / "logs" / "profile", ignore_errors=True)
    # the captures end after the profile's steps, and the job runs UNCAPTURED_STEPS more (and
    # UNCAPTURED_S at least), timed by the TraceHook: predict's --recording-cost compares the two
    lab_cfg = dataclasses.replace(
        cfg.lab(1, collect_dir=str(folder), work_dir=str(out / cfg.name / "logs" / "profile")),
        steps=cfg.profile_steps + UNCAPTURED_STEPS, capture_steps=cfg.profile_steps,
        uncaptured_s=UNCAPTURED_S,
    )
    def clear() -> None:
        _remove_profile(folder)
        shutil.rmtree(out / cfg.name / "logs" / "profile", ignore_errors=True)

    result = _lab_run(lab_cfg, max_steal, clear)
    write_json(done, result)
    return {"config": cfg.name, "run": "profile", "status": "ran", "result": result}


def measure(configs: list[BenchConfig], out: Path, force: bool, repeats: int,
            profiles_only: bool = False, max_steal: float = MAX_STEAL_CORES,
            workers_only: Sequence[int] | None = None) -> int:
    """Run every (configuration, W, repeat) and the profiles (only the profiles with
    ``profiles_only``, so predictions can be pre-registered before any throughput run), each
    again while its machine lost more than ``max_steal`` cores to the hypervisor; with
    ``workers_only``, only those of each configuration's W; return the number of failures."""
    _need_root()
    jobs: list[tuple[BenchConfig, int | None, int]] = []
    for cfg in configs:
        if not profiles_only:
            jobs += [(cfg, w, r) for r in range(repeats) for w in cfg.workers
                     if workers_only is None or w in workers_only]
        if cfg.profile_of is None:  # a cross prediction uses another configuration's profile
            jobs.append((cfg, None, 0))
        elif (source := plain_source(cfg)) is not None and (source, None, 0) not in jobs:
            jobs.append((source, None, 0))  # the plain job it names, itself no configuration
    failures: list[str] = []
    ran = 0
    t_start = time.time()
    for i, (cfg, workers, repeat) in enumerate(jobs, 1):
        write_json(out / cfg.name / "config.json", dataclasses.asdict(cfg) | {"name": cfg.name})
        head = f"[{i}/{len(jobs)}] {cfg.name} " + (
            "profile (W=1, collect)" if workers is None else f"W={workers} r{repeat}"
        )
        t0 = time.time()
        try:
            if workers is None:
                row = measure_profile(cfg, out, force, max_steal)
                result = row.get("result")
            else:
                path = run_file(out, cfg, workers, repeat)
                if path.exists() and not force and same_protocol(cfg, read_json(path)):
                    _say(f"{head}: cached")
                    continue
                work = out / cfg.name / "logs" / path.stem
                if work.exists():
                    shutil.rmtree(work)
                # two or more workers: the PS links' headers say whether they took turns
                headers = {"headers_dir": str(work / "headers")} if workers > 1 and shutil.which(
                    "tcpdump") else {}
                result = _lab_run(cfg.lab(workers, work_dir=str(work), **headers), max_steal,
                                  functools.partial(shutil.rmtree, work, ignore_errors=True))
                if result.get("throughput_examples_per_s") is None:
                    raise LabError("no throughput: a worker recorded fewer than 2 steps")
                write_json(path, result)
        except LabError as e:
            failures.append(f"{head}: {e}")
            write_json(
                out / cfg.name / f"failed-{'profile' if workers is None else f'w{workers}'}.json",
                {"error": str(e), "time_s": time.time()},
            )
            _say(f"{head}: FAILED after {time.time() - t0:.0f} s: {e}")
            continue
        if result is None:
            _say(f"{head}: cached")
            continue
        (out / cfg.name / f"failed-{'profile' if workers is None else f'w{workers}'}.json").unlink(
            missing_ok=True
        )
        ran += 1
        cpu = cpu_total(result)
        same = same_direction_share(result)
        # the last attempt's as the bench judged it (a profile's captures included)
        stolen = ((result.get("bench") or {}).get("stolen_cores_by_attempt") or [None])[-1]
        _say(
            f"{head}: {result['throughput_examples_per_s']:.2f} ex/s, "
            f"cpu {cpu if cpu is None else round(cpu, 2)} of {result['cpu_count']} cores, "
            + ("" if stolen is None else f"{stolen:.2f} stolen by the hypervisor"
               + (" (DISTURBED: over the limit on every attempt)"
                  if (result.get("bench") or {}).get("disturbed") else "") + ", ")
            + ("" if same is None else f"{100 * same:.0f}% of bulk transfers beside another "
               "worker's the same way, ")
            + f"{time.time() - t0:.0f} s (elapsed {(time.time() - t_start) / 60:.1f} min)"
        )
    _say(
        f"measure: {len(jobs)} runs: {ran} ran, {len(failures)} failed, "
        f"{len(jobs) - ran - len(failures)} cached; {time.time() - t_start:.0f} s"
    )
    for f in failures:
        _say(f"  failed: {f}")
    return len(failures)


def profile_model(
    out: Path, bandwidth: str, batch_size: int, trace_first: int, trace_steps: int, force: bool,
    model: str = "resnet50",
) -> int:
    """Record one 1-worker profile of lab model ``model`` into ``out`` (``out/ps0``,
    ``out/worker0``)."""
    _need_root()
    done = out / LAB_RESULT
    if done.exists() and not force:
        _say(f"profile {model}: cached in {out} (--force to redo)")
        return 0
    if out.exists():
        for child in out.glob("*"):
            if child.is_dir() and child.name.startswith(("ps", "worker")):
                shutil.rmtree(child)
    cfg = LabConfig(
        model=model,
        batch_size=batch_size,
        steps=trace_first + trace_steps + 1,
        workers=1,
        ps=1,
        bandwidth=bandwidth,
        collect_dir=str(out),
        trace_first=trace_first,
        trace_steps=trace_steps,
        work_dir=str(out / "logs"),
        timeout_s=900.0,
    )
    t0 = time.time()
    result = _lab_run(cfg)
    write_json(done, result)
    _say(
        f"profile {model}: {result['throughput_examples_per_s']:.2f} ex/s, "
        f"{time.time() - t0:.0f} s, bundles in {out}"
    )
    return 0


# -- predict ------------------------------------------------------------------------------------


def gradwire_command() -> list[str]:
    """The gradwire CLI of this interpreter's environment."""
    exe = Path(sys.executable).with_name("gradwire")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "gradwire"]


def job_options(cfg: BenchConfig) -> list[str]:
    """The ``gradwire predict`` options of ``cfg``'s job: flow control and the job what-ifs
    (issue 23: partition, accumulation, op fusion, mixed precision, recomputation, tensor
    fusion), with ``OPDB`` where one reads it (accumulation since 2026-11-30: its
    micro-steps' time; tensor fusion since 2026-12-05: the rate of the compute its buckets
    move away from the pushes)."""
    return [*(["--flow-control", "off"] if cfg.flow_control == "off" else []),
            *(["--partition", str(cfg.partition)] if cfg.partition > 1 else []),
            *(["--accumulate", str(cfg.accumulate)] if cfg.accumulate > 1 else []),
            *(["--op-fusion"] if cfg.xla else []),
            *(["--mixed-precision"] if cfg.mixed_precision else []),
            *(["--recompute", "all"] if cfg.recompute else []),
            *(["--fuse-tensors", f"{cfg.fuse_bytes:g}"] if cfg.fuse_bytes else []),
            # the op rows, and the steps timed whole (`opdb step`: the cluster, a micro-step,
            # the quiet compute's rate; accumulation and tensor fusion read it where it is,
            # and cost from the trace without it)
            *(["--opdb", str(OPDB)] if cfg.xla or cfg.mixed_precision
              or ((cfg.accumulate > 1 or cfg.fuse_bytes) and OPDB.is_file()) else [])]


def predict_command(cfg: BenchConfig, out: Path, link: str = "auto"
                    ) -> tuple[list[str], list[str]]:
    """The ``gradwire predict`` command of ``cfg`` (its profile's, or the one it names), and
    for a batch what-if the naive twin that scales compute with the batch (else [])."""
    source = cfg.profile_of or cfg.name
    profile = out / source / "profile"
    if not (profile / LAB_RESULT).exists():
        raise BenchError(f"no profile for {cfg.name} in {profile}: run the measure stage"
                         + (f" for {source}" if cfg.profile_of else ""))
    cmd = [
        *gradwire_command(),
        "predict",
        str(profile),
        "--workers",
        ",".join(str(w) for w in cfg.workers),
        # ring: each hop's software time from the op cost database
        *(["--mechanism", "ring-allreduce", "--opdb", str(OPDB)] if cfg.mode == "ring" else
          ["--ps", str(cfg.ps),
           "--worker-bandwidth", "unlimited"]),  # the lab shapes the PS links only
        # the asynchronous PS's replications as long as the lab's runs, measured with its
        # window, so that the phase range is where one run lands (since 2026-11-30,
        # docs/preregistered/issue21-run-length-report.md); the others run as one run
        *(["--run-steps", str(cfg.steps)] if cfg.mode == "async" else []),
        # a synchronous configuration predicted from another's asynchronous profile
        *(["--mechanism", "sync-ps"] if cfg.mode == "sync" and cfg.profile_of else []),
        "--bandwidth",
        cfg.bandwidth,
        "--model",
        ",".join(cfg.predict_models),
        *job_options(cfg),
        "--link",
        link,
        "--format",
        "json",
    ]
    source_cfg = read_json(out / source / "config.json")
    if not isinstance(source_cfg, dict) or "batch_size" not in source_cfg:
        raise BenchError(f"{out / source / 'config.json'}: missing or unreadable (the profile "
                         f"of {cfg.name} was not recorded by the measure stage)")
    profiled_batch = source_cfg["batch_size"]
    linear = []
    if (cfg.mode == "ring" or profiled_batch != cfg.batch_size) and not OPDB.is_file():
        raise BenchError(f"{cfg.name} needs the op cost database: build it first "
                         f"(gradwire opdb build --threads 1 --db {OPDB}: the lab's nodes run "
                         "one intra-op thread)")
    if profiled_batch != cfg.batch_size:  # the batch what-if, and its naive twin
        linear = [*cmd, "--batch-size", str(cfg.batch_size), "--compute-scale",
                  str(profiled_batch / cfg.batch_size)]
        cmd += ["--to-batch-size", str(cfg.batch_size), "--opdb", str(OPDB)]
    return cmd, linear


def emulate_item(item: str) -> tuple[str, str, str]:
    """One of ``predict --emulate``'s items, ``STEP`` or ``STEP:START`` (an ``--emulate-step``
    and an ``--emulate-start``, together when left out: the bench's names predate random's
    becoming predict's default) -> (step, start, the model name of its rows). Raises
    BenchError on an unknown step or start."""
    step, _, start = item.partition(":")
    start = start or TOGETHER
    if step not in EMULATE_STEPS or start not in EMULATE_STARTS:
        raise BenchError(f"unknown --emulate {item}: expected STEP[:START], STEP one of "
                         f"{', '.join(EMULATE_STEPS)}, START one of {', '.join(EMULATE_STARTS)}")
    return step, start, EMULATE_MODELS[step] + ("" if start == TOGETHER else f":{start}")


def predict(configs: list[BenchConfig], out: Path, link: str = "auto",
            variants: Sequence[str] | None = None, emulate: Sequence[str] = ()) -> None:
    """Run ``gradwire predict`` on each configuration's profile (a cross prediction's: the
    profile of the configuration it names), with the sim's ``variants`` (None: every one of
    ``SIM_VARIANTS``), and for each ``emulate_item`` named in ``emulate`` the asynchronous
    PS's ``--model emulate`` rows too (replay/emulate.py: real TCP in namespaces, root, 3 to 9
    x 40 real steps per W: 1-20 minutes a step and configuration on the lab's jobs; never
    beside a lab run). Predictions written while a configuration has no lab run yet are also kept as
    its pre-registration (``prereg.json``, never replaced)."""
    for cfg in configs:
        # always redone (cheap, and the model changes); the one before is replaced only once
        # this one is made, so a failure leaves the last good one (its provenance says whose)
        dest = out / cfg.name / "predict.json"
        # the cluster's time; a micro-step's; the rate of the compute tensor fusion moves
        # away from the pushes; a ring's compute alone (sim:compute-alone; first: it may make
        # OPDB, which the command then reads)
        if cfg.xla or cfg.accumulate > 1 or cfg.fuse_bytes or cfg.mode == "ring":
            time_step(out / (cfg.profile_of or cfg.name) / "profile", xla=cfg.xla)
        cmd, linear = predict_command(cfg, out, link)
        t0 = time.time()
        data = _predict_json(cmd, cfg.name)
        data["rows"] += _variant_rows(cmd, cfg.name, variants)
        if emulate and cfg.mode == "async":  # each step's rows, named by EMULATE_MODELS
            data["profile"]["emulate_steps"] = {}
            for item in emulate:
                step, start, model = emulate_item(item)
                argv = list(cmd)
                argv[argv.index("--model") + 1] = EMULATE
                emulated = _predict_json([*argv, "--emulate-start", start, "--emulate-step",
                                          step],
                                         f"{cfg.name} (emulate, {item})")
                data["rows"] += [row | {"model": model} for row in emulated["rows"]]
                data["profile"]["emulate_steps"][item] = emulated["profile"].get("emulate")
            data["profile"]["emulate"] = data["profile"]["emulate_steps"][emulate[0]]
        # without the database: a ring without the hops' software time; tensor fusion's
        # moved compute at its least traced times (the default before 2026-12-05)
        for ask, variant in ((cfg.mode == "ring", "hop-off"),
                             (bool(cfg.fuse_bytes) and "--opdb" in cmd, "fusion-traced")):
            if ask:
                plain = [a for a in cmd if a not in ("--opdb", str(OPDB))]
                plain[plain.index("--model") + 1] = OURS
                data["rows"] += [row | {"model": VARIANT + variant} for row in
                                 _predict_json(plain, f"{cfg.name} ({variant})")["rows"]]
        if linear:  # compute proportional to the batch (no database): what the what-if beats
            linear[linear.index("--model") + 1] = OURS
            data["rows"] += [row | {"model": VARIANT + "linear-batch"}
                             for row in _predict_json(linear, f"{cfg.name} (linear)")["rows"]]
            default = default_threads_machine(out / (cfg.profile_of or cfg.name) / "profile")
            if default:  # the database's rows timed with TensorFlow's default threads
                argv = [*cmd, "--opdb-machine", default]
                argv[argv.index("--model") + 1] = OURS
                data["rows"] += [row | {"model": VARIANT + "opdb-default-threads"} for row in
                                 _predict_json(argv, f"{cfg.name} (default threads)")["rows"]]
        atomic.write_text(dest, json.dumps(data, indent=1) + "\n")
        note = ""
        if not (out / cfg.name / PREREG).exists() and not has_runs(cfg, out):
            write_json(out / cfg.name / PREREG, data | {
                "preregistered_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            note = f"; pre-registered in {cfg.name}/{PREREG} (no lab run yet)"
        _say(f"predict {cfg.name}: {time.time() - t0:.1f} s{note}")


def time_step(profile: Path, xla: bool) -> None:
    """Time the profile's worker step run whole into OPDB (``gradwire opdb step``, with the
    threads its trace ran; ``xla``: compiled by XLA), once per profile and kind (``XLA_STEP``
    or ``PLAIN_STEP`` beside it says it was done), so that ``--op-fusion`` runs the job's one
    cluster, ``--accumulate`` each rerun micro-step, ``--fuse-tensors`` the compute its
    buckets move away from the pushes, and ``--executor-gaps alone`` a ring's compute, for
    that time;
    a profile recorded before the TraceHook kept its graph is left to the op rows and the
    traced ops."""
    marker = profile.parent / (XLA_STEP if xla else PLAIN_STEP)
    if marker.exists() or not (profile / "worker0" / "trace" / "graph.meta.pb").is_file():
        return
    cmd = [*gradwire_command(), "opdb", "step", str(profile), *(["--xla"] if xla else []),
           "--db", str(OPDB)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BenchError(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-500:]}")
    write_json(marker, {"command": cmd, "said": proc.stderr.strip().splitlines()[-1:],
                        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    _say(f"timed {profile}'s step{' under XLA' if xla else ''}: "
         f"{proc.stderr.strip().splitlines()[-1]}")


def default_threads_machine(profile: Path) -> str | None:
    """The fingerprint of OPDB's machine that is the profile's worker's but for its threads
    (TensorFlow's default where the worker ran other intra-op threads); None where the profile
    ran the default, does not say, or OPDB never timed ops on that machine."""
    from gradwire.opdb import OpDatabase, machine_of

    m = read_json(profile / "worker0" / "trace" / "session.json").get("machine") or {}
    if not m.get("threads"):
        return None
    fp = machine_of(m["description"], m["cores"], m["tf_version"]).fingerprint
    with OpDatabase(OPDB) as db:
        return fp if any(x.fingerprint == fp for x in db.machines()) else None


def has_link_hops() -> bool:
    """Whether OPDB has a ring hop timed across a link (``sim:hop-link`` needs one)."""
    from gradwire.collector.opgrid import LINK_ATTR, RING_HOP
    from gradwire.opdb import OpDatabase

    if not OPDB.is_file():
        return False
    with OpDatabase(OPDB) as db:
        return any(LINK_ATTR in dict(r.attrs) for r in db.timings(op=RING_HOP))


def _variant_rows(cmd: list[str], name: str, variants: Sequence[str] | None = None
                  ) -> list[dict[str, Any]]:
    """The sim's rows under each of ``SIM_VARIANTS`` (``variants``: those named; None: all)
    (``cmd`` with the sim alone and the
    variant's options; ``steps-60`` in place of the command's ``--run-steps``, and only
    where it has one; ``aligned`` only where it has none: a row run as one run, which it
    replicates), renamed ``sim:NAME``; for ring all-reduce only ``RING_VARIANTS``: its
    replay has no PS link for ``--link-windows`` to act on (those variants' rows were the
    sim's, to the bit, at 10-20 s per configuration)."""
    ring = "ring-allreduce" in cmd
    rows = []
    for variant, extra in SIM_VARIANTS.items():
        if (ring and variant not in RING_VARIANTS
                or not ring and variant in RING_ONLY
                or variant == "hop-link" and not has_link_hops()
                or variant == "steps-60" and "--run-steps" not in cmd
                or variant == "aligned" and "--run-steps" in cmd
                or variants is not None and variant not in variants):
            continue
        argv = list(cmd)
        argv[argv.index("--model") + 1] = OURS
        if "--steps" in extra:  # the replications' length instead of the lab's run
            at = argv.index("--run-steps")
            del argv[at:at + 2]
        for row in _predict_json([*argv, *extra], f"{name} ({variant})")["rows"]:
            rows.append(row | {"model": VARIANT + variant})
    return rows


def _predict_json(cmd: list[str], name: str) -> dict[str, Any]:
    """Run a ``gradwire predict ... --format json`` command; its JSON, with a list of rows."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        why = lines[-1] if lines else "no output"
        raise BenchError(f"gradwire predict failed for {name} (exit {proc.returncode}): {why}")
    try:
        data = json.loads(proc.stdout)
    except ValueError as e:
        raise BenchError(f"gradwire predict wrote no readable JSON for {name} ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise BenchError(f"gradwire predict wrote no rows for {name}")
    return data


def has_runs(cfg: BenchConfig, out: Path) -> bool:
    """Whether any throughput run of ``cfg`` is cached (of any protocol)."""
    return any((out / cfg.name).glob("w[0-9]*.json"))


# -- report -------------------------------------------------------------------------------------


def lab_run_files(config_dir: Path, workers: int) -> list[Path]:
    """A configuration folder's lab result files at W = ``workers``: its first run, then its
    repeats in order (``wW.json``, ``wW-rN.json``)."""
    return (sorted(config_dir.glob(f"w{workers}.json"))
            + sorted(config_dir.glob(f"w{workers}-r*.json")))


def lab_runs(cfg: BenchConfig, out: Path, workers: int, quiet: bool = True
             ) -> list[dict[str, Any]]:
    """The cached lab results of one configuration at W = ``workers`` that have a throughput
    and follow its protocol (steps per worker); the others are left out (said unless quiet)."""
    runs = [read_json(p) for p in lab_run_files(out / cfg.name, workers)]
    runs = [r for r in runs if r and r.get("throughput_examples_per_s")]
    fresh = [r for r in runs if same_protocol(cfg, r)]
    if len(fresh) < len(runs) and not quiet:
        _say(f"{cfg.name} W={workers}: {len(runs) - len(fresh)} cached run(s) with another "
             f"number of steps than {cfg.steps} left out (measure redoes them)")
    return fresh


def throughput(result: dict[str, Any]) -> float:
    """A lab run's examples/s, measured afresh from its workers' step end times by the lab's
    ``cluster_throughput`` (so runs cached before it changed are measured as new ones are),
    or as the run recorded it where the result lacks them."""
    workers = result.get("per_worker") or {}
    batch = (result.get("config") or {}).get("batch_size")
    known = workers and (batch or all(w.get("examples_per_step") for w in workers.values()))
    rate, _ = workers_throughput(workers, batch or 0) if known else (None, None)
    return rate if rate is not None else result["throughput_examples_per_s"]


def window_steps(result: dict[str, Any]) -> int | None:
    """How many whole steps the lab's common window (every worker past its warm-up, none
    finished: ``cluster_throughput``) holds of the worker with the fewest there (its step
    ends in it less one, as ``summed_worker_rates`` counts them), i.e. how many steps of
    each worker a run's throughput rests on; None where the result has no step ends.
    Workers that start a second apart can leave a fast job a few (docs/lab.md, "Workers that
    start apart")."""
    workers = result.get("per_worker") or {}
    ends = [w.get("step_end_times_s") or [] for w in workers.values()]
    if not ends or not all(ends):
        return None
    _, window = workers_throughput(workers, (result.get("config") or {}).get("batch_size") or 1)
    if window is None:
        return 0
    return max(0, min(sum(window[0] <= t <= window[1] for t in e) for e in ends) - 1)


def measured(cfg: BenchConfig, out: Path) -> dict[int, dict[str, Any]]:
    """W -> median throughput over the cached repeats (examples/s), the runs' values, their
    spread ``(max - min) / median`` in %, CPU cores, and the median of the runs'
    ``window_steps`` (None where no run has step ends)."""
    rows: dict[int, dict[str, Any]] = {}
    for w in cfg.workers:
        runs = lab_runs(cfg, out, w, quiet=False)
        if not runs:
            continue
        values = [throughput(r) for r in runs]
        cpus = [c for c in (cpu_total(r) for r in runs) if c is not None]
        stolen = [c for c in (stolen_cores(r) for r in runs) if c is not None]
        windows = [n for n in (window_steps(r) for r in runs) if n is not None]
        mid = statistics.median(values)
        rows[w] = {
            "examples_per_s": mid,
            "runs": values,
            "spread_pct": 100.0 * (max(values) - min(values)) / mid,
            "cpu_cores": statistics.median(cpus) if cpus else None,
            "cpu_count": runs[0].get("cpu_count"),
            # the most any run's machine lost to its hypervisor (None before it was recorded)
            "stolen_cores_max": max(stolen) if stolen else None,
            "window_steps": statistics.median(windows) if windows else None,
        }
    return rows


def few_steps(tables: list[dict[str, Any]], configs: Sequence[BenchConfig]
              ) -> dict[str, Any] | None:
    """The W >= 2 points whose runs' common window held (median over the runs) fewer than
    half of the steps a run measures (``steps`` less the lab's warm-up quarter): their
    throughput rests on a few steps; None where there are none."""
    steps = {c.name: c.steps for c in configs}
    few = [(t["config"], r["workers"], r["window_steps"]) for t in tables for r in t["rows"]
           if r["workers"] >= 2 and r.get("window_steps") is not None
           and r["window_steps"] < (steps[t["config"]]
                                    - lab_warmup_steps(steps[t["config"]])) / 2]
    if not few:
        return None
    line = ("Measured over few steps (the median run's common window, all W running past "
            "warm-up, held fewer than half of a run's measured steps; lab --run-together "
            "keeps the workers running together): "
            + ", ".join(f"{name} W={w} ({n:g} steps)" for name, w, n in few) + ".")
    return {"points": [list(x) for x in few], "line": line}


def predicted(
    cfg: BenchConfig, out: Path, file: str = "predict.json"
) -> tuple[dict[str, dict[int, float]], dict[str, dict[int, tuple[float, float]]],
           dict[str, Any] | None]:
    """From the cached ``file`` (``predict.json``, or the pre-registered ``prereg.json``;
    empty/None if absent): model -> W -> predicted
    examples/s; model -> W -> its 5th-95th percentile examples/s over its replications (the
    sim and its variants, where predicted with them); and the profile's TCP statistics as
    ``gradwire predict`` wrote them (retransmitted share, queue delay), or None."""
    path = out / cfg.name / file
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        return {}, {}, None
    profile = data.get("profile")
    tr = profile.get("transport") if isinstance(profile, dict) else None
    transport = tr if isinstance(tr, dict) and "retransmitted_share" in tr else None
    preds: dict[str, dict[int, float]] = {}
    ranges: dict[str, dict[int, tuple[float, float]]] = {}
    for (model, w), (rate, phase) in prediction_rows(cfg, path, data).items():
        preds.setdefault(model, {})[w] = rate
        if phase is not None:
            ranges.setdefault(model, {})[w] = phase
    return preds, ranges, transport


def prediction_rows(cfg: BenchConfig, path: Path, data: dict[str, Any]
                    ) -> dict[tuple[str, int], tuple[float, tuple[float, float] | None]]:
    """(model, W) -> the row's examples/s and 5-95% phase range (None where it has none),
    for the rows of ``cfg``'s PS count with a prediction in ``data``, a ``gradwire predict``
    JSON read from ``path``; a malformed row is a BenchError naming the file."""
    rows: dict[tuple[str, int], tuple[float, tuple[float, float] | None]] = {}
    for row in data.get("rows") if isinstance(data.get("rows"), list) else ():
        try:
            if int(row.get("ps", cfg.ps)) != cfg.ps or row.get("examples_per_s") is None:
                continue
            phase = (None if row.get("phase_low") is None
                     else (float(row["phase_low"]), float(row["phase_high"])))
            rows[(str(row["model"]), int(row["workers"]))] = (float(row["examples_per_s"]),
                                                              phase)
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise BenchError(f"bad row in {path}: {row!r} ({e})") from e
    return rows


def _transport_text(tr: dict[str, Any] | None) -> str:
    if tr is None:
        return ""
    lossy = " (lossy)" if tr["retransmitted_share"] > LOSSY_SHARE else ""
    delay = tr.get("queue_delay_ms")
    return (f"; profile's PS capture: {100 * tr['retransmitted_share']:.2f}% of TCP data "
            f"segments retransmitted{lossy}"
            + ("" if delay is None else f", PS egress queueing {delay:.1f} ms (median)"))


def _by_loss(tables: list[dict[str, Any]]) -> list[str]:
    """Lines: the sim's errors at W >= 2 split by whether the profile's link was lossy."""
    groups: dict[bool, list[float]] = {}
    for t in tables:
        tr = t.get("transport")
        if tr is None:
            continue
        lossy = tr["retransmitted_share"] > LOSSY_SHARE
        groups.setdefault(lossy, []).extend(
            r["error_pct"][OURS] for r in t["rows"] if r["workers"] >= 2 and OURS in r["error_pct"])
    lines = []
    for lossy, errs in sorted(groups.items(), reverse=True):
        if errs:
            kind = "lossy" if lossy else "loss-free"
            rule = "above" if lossy else "at most"
            lines.append(
                f"{OURS} at W >= 2 on {kind} profiles (retransmitted share {rule} "
                f"{100 * LOSSY_SHARE:.1f}%): n={len(errs)}, median |error| "
                f"{statistics.median(abs(e) for e in errs):.1f}%, signed {min(errs):+.1f}% to "
                f"{max(errs):+.1f}%.")
    return lines


def alternation_distances(ends0: list[float], ends1: list[float]) -> list[float]:
    """For each step end of worker 1 inside a step of worker 0 (end to end, seconds), how far
    the two are from alternating: ``|phase - 0.5|`` with ``phase`` the fraction of worker 0's
    step that had passed; 0 when they alternate, 0.5 when they run in step."""
    out = []
    for t in ends1:
        i = bisect.bisect_right(ends0, t) - 1
        if 0 <= i < len(ends0) - 1 and ends0[i + 1] > ends0[i]:
            out.append(abs((t - ends0[i]) / (ends0[i + 1] - ends0[i]) - 0.5))
    return out


def w2_alternation(cfg: BenchConfig, out: Path) -> dict[str, Any] | None:
    """The W = 2 runs' distance from alternating (``alternation_distances``): per run the median
    over its first three steps and over its second half; then the runs' medians."""
    runs = []
    for r in lab_runs(cfg, out, 2):
        w = r.get("per_worker", {})
        if "worker0" not in w or "worker1" not in w:
            continue
        d = alternation_distances(w["worker0"].get("step_end_times_s", []),
                                  w["worker1"].get("step_end_times_s", []))
        if len(d) >= 6:
            runs.append({"first_steps": statistics.median(d[:3]),
                         "second_half": statistics.median(d[len(d) // 2:])})
    if not runs:
        return None
    return {"runs": runs,
            "first_steps": statistics.median(r["first_steps"] for r in runs),
            "second_half": statistics.median(r["second_half"] for r in runs)}


def _alternation_md(tables: list[dict[str, Any]]) -> list[str]:
    """Markdown: the W = 2 alternation per configuration, beside its loss and sim's error."""
    rows = []
    for t in (t for t in tables if t.get("w2_alternation")):
        a, tr = t["w2_alternation"], t.get("transport")
        err = next((r["error_pct"].get(OURS) for r in t["rows"] if r["workers"] == 2), None)
        rows.append([
            t["config"], "-" if tr is None else f"{100 * tr['retransmitted_share']:.2f}%",
            str(len(a["runs"])), f"{a['first_steps']:.2f}", f"{a['second_half']:.2f}",
            " ".join(f"{r['second_half']:.2f}" for r in a["runs"]), _pct(err)])
    return _md_section(
        "Two workers: how close to alternating",
        "Worker 1's step ends as a fraction of worker 0's step, distance from alternating "
        "|phase - 0.5| (0: one pulls while the other pushes; 0.5: in step): the median of each "
        "W = 2 run over its first 3 steps and over its second half, then the median of the "
        "runs.",
        ["configuration", "retransmitted", "runs", "first 3 steps", "second half",
         "per run (second half)", "sim % at W=2"], rows)


def _md_section(title: str, intro: str, columns: list[str], rows: list[list[str]]
                ) -> list[str]:
    """A report section: its heading, a paragraph and a table; none without rows."""
    if not rows:
        return []
    return [f"## {title}", "", intro, "", _md_row(columns),
            "|" + "---|" * len(columns), *map(_md_row, rows), ""]


def own_run(cfg: BenchConfig, out: Path, meas: dict[int, dict[str, Any]]
            ) -> dict[str, Any] | None:
    """One worker, split in two: the profile's own recorded run (its untraced captured steps)
    against its replay, and that run against the lab's later W = 1 runs (no captures), from
    ``predict.json``'s ``self_check`` (``gradwire predict``, replay/selfcheck.py); None for a
    configuration predicted from another's profile, or without a check or a W = 1 run."""
    if cfg.profile_of or 1 not in meas:
        return None
    data = read_json(out / cfg.name / "predict.json")
    check = data.get("self_check") if isinstance(data, dict) else None
    if not isinstance(check, dict):
        return None
    try:
        run, replay = (float(check["measured_examples_per_s"]),
                       float(check["replayed_examples_per_s"]))
    except (KeyError, TypeError, ValueError) as e:
        raise BenchError(f"bad self_check in {out / cfg.name / 'predict.json'}: {e}") from e
    lab = meas[1]["examples_per_s"]
    return {"recorded_run": run, "replayed": replay, "lab": lab,
            "inside": bool(check.get("inside", True)),
            "after_capture": bool(check.get("after_capture", False)),
            "replay_vs_run_pct": 100.0 * (replay / run - 1.0),
            "run_vs_lab_pct": 100.0 * (run / lab - 1.0)}


def _own_run_md(tables: list[dict[str, Any]]) -> list[str]:
    """Markdown: the W = 1 error of each configuration predicted from its own profile, split
    into the replay's against the recorded run and the recorded run's against the lab's."""
    rows = [[t["config"], f"{o['recorded_run']:.2f}" + (" (after)" if o["after_capture"] else ""),
             f"{o['replayed']:.2f}" + ("" if o["inside"] else " (outside)"),
             _pct(o["replay_vs_run_pct"]), f"{o['lab']:.2f}", _pct(o["run_vs_lab_pct"])]
            for t in tables if (o := t.get("own_run"))]
    return _md_section(
        "One worker: the replay against its own run, the run against the lab's",
        "The profile's recorded run (its untraced steps, under captures; \"after\": the steps "
        "it ran on after its captures ended) replayed at its own configuration, and the lab's "
        "later W = 1 runs (no captures): the sim's W = 1 error is about the sum of the two "
        "(docs/predict.md, \"The replay against its own run\").",
        ["configuration", "recorded run ex/s", "replayed", "replay vs run %", "lab W=1",
         "run vs lab %"], rows)


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1f}"


def report(configs: list[BenchConfig], out: Path, stem: str = "accuracy") -> dict[str, Any]:
    """Tabulate measured throughput and every model's signed error; write ``<out>/<stem>.json``
    and ``<out>/<stem>.md``. Raises BenchError when ``out`` holds no lab result of any of
    ``configs`` (a mistyped ``--out`` would otherwise give an empty report)."""
    meas_of = {cfg.name: measured(cfg, out) for cfg in configs}
    if not any(meas_of.values()):
        raise BenchError(f"{out}: no lab results of these configurations: run the measure "
                         "stage, or give the --out it wrote to")
    tables: list[dict[str, Any]] = []
    errors: dict[str, dict[str, list[float]]] = {scope: {} for scope in SCOPES}
    prereg_errors: dict[str, list[float]] = {scope: [] for scope in SCOPES}
    md: list[str] = ["# gradwire prediction accuracy (real lab)", ""]
    for cfg in configs:
        meas = meas_of[cfg.name]
        scope = cfg.scope
        preds, ranges, transport = predicted(cfg, out)
        prereg = predicted(cfg, out, PREREG)[0].get(OURS, {})
        variants = sorted(m for m in preds if m.startswith(VARIANT))  # beside the sim
        models = [m for m in cfg.predict_models if m in preds]
        models[1:1] = variants
        models += sorted(m for m in preds if m not in models)
        rows = []
        for w, m in meas.items():
            row: dict[str, Any] = {"workers": w, **m, "predicted": {}, "error_pct": {}}
            if w in ranges.get(OURS, {}):
                lo, hi = ranges[OURS][w]
                row["sim_phase_range"] = [lo, hi]
                row["runs_in_phase_range"] = sum(lo <= v <= hi for v in m["runs"])
            row["variant_runs_in_range"] = {  # the variants' own ranges (_coverage)
                v: sum(ranges[v][w][0] <= x <= ranges[v][w][1] for x in m["runs"])
                for v in variants if w in ranges.get(v, {})}
            for model in models:
                p = preds[model].get(w)
                if p is None:
                    continue
                err = 100.0 * (p - m["examples_per_s"]) / m["examples_per_s"]
                row["predicted"][model] = p
                row["error_pct"][model] = err
                errors[scope].setdefault(model, []).append(err)
            if w in prereg:
                row["prereg_pct"] = 100.0 * (prereg[w] - m["examples_per_s"]) / m["examples_per_s"]
                prereg_errors[scope].append(row["prereg_pct"])
            rows.append(row)
        tables.append({"config": cfg.name, **dataclasses.asdict(cfg), "rows": rows,
                       "transport": transport, "w2_alternation": w2_alternation(cfg, out),
                       "own_run": own_run(cfg, out, meas)})
        md += [
            f"## {cfg.name}",
            "",
            f"{cfg.model}"
            + (f" {cfg.model_mb:g} MB" if cfg.model in SIZED_MODELS else "")
            + f", batch {cfg.batch_size}, "
            + ("ring all-reduce, every worker's link" if cfg.mode == "ring"
               else f"{cfg.mode} PS, M={cfg.ps} PS,")
            + f" {cfg.bandwidth}, flow control "
            f"{cfg.flow_control}, {cfg.steps} steps per worker"
            + (f"; predicted from the profile of {cfg.profile_of}" if cfg.profile_of else "")
            + ("" if preds else "; no predictions yet") + _transport_text(transport),
            "",
            _md_row(
                ["W", "measured ex/s", "runs", "spread %", "CPU cores (most stolen)",
                 "sim 5-95% ex/s",
                 "runs inside", "sim pre-registered %", *(f"{m} %" for m in models)]
            ),
            "|---|---|---|---|---|---|---|---|" + "---|" * len(models),
        ]
        for row in rows:
            cpu = row["cpu_cores"]
            busy = cpu is not None and cpu > CPU_BUSY_FRACTION * (row["cpu_count"] or 2)
            cpu_s = "-" if cpu is None else f"{cpu:.2f}" + (" (busy)" if busy else "")
            if row.get("stolen_cores_max") is not None:
                cpu_s += f", {row['stolen_cores_max']:.2f} stolen"
            errs = [_pct(row["error_pct"].get(m)) for m in models]
            cells = [str(row["workers"]), f"{row['examples_per_s']:.2f}", str(len(row["runs"]))]
            rng = row.get("sim_phase_range")
            cells += [f"{row['spread_pct']:.0f}", cpu_s]
            cells += ["-", "-"] if rng is None else [
                f"{rng[0]:.2f}-{rng[1]:.2f}", f"{row['runs_in_phase_range']}/{len(row['runs'])}"]
            cells += [_pct(row.get("prereg_pct")), *errs]
            md.append(_md_row(cells))
        md.append("")
    summary, cross = _summary(errors["matrix"]), _summary(errors["cross"])
    sync, ring = _summary(errors["sync"]), _summary(errors["ring"])
    md += _alternation_md(tables)
    md += _own_run_md(tables)
    md += ["## Summary (absolute % error over all configurations and W, cross predictions "
           "apart)", ""]
    md += _summary_md(summary, "" if cross or sync or ring else "no predictions yet (run the "
                      "predict stage)")
    md += _groups_md(tables)
    if cross:
        md += ["", "## Cross predictions (profile at another bandwidth or PS count)", ""]
        md += _summary_md(cross, "")
    if sync:
        md += ["", "## Synchronous PS training (issue 22; its own baselines)", ""]
        md += _summary_md(sync, "")
    if ring:
        md += ["", "## Ring all-reduce (issue 22; its own baselines)", ""]
        md += _summary_md(ring, "")
    for scope, errs in prereg_errors.items():
        if errs:
            md += ["", f"Pre-registered {OURS} predictions ({scope}: written before the "
                   f"configuration's first lab run): n={len(errs)}, median |error| "
                   f"{statistics.median(abs(e) for e in errs):.1f}%, max "
                   f"{max(abs(e) for e in errs):.1f}%."]
    spreads = [r["spread_pct"] for t in tables for r in t["rows"] if len(r["runs"]) > 1]
    if spreads:
        md += [
            "",
            f"Run-to-run spread of the measurements ((max - min) / median over the repeats of a "
            f"point): median {statistics.median(spreads):.0f}%, max {max(spreads):.0f}%.",
        ]
    coverage = _coverage(tables)
    md += ["", coverage["line"]] if coverage else []
    short = few_steps(tables, configs)
    md += ["", short["line"]] if short else []
    md += [line for x in _by_loss(tables) for line in ("", x)]
    noise = _bootstrap(tables)
    md += ["", noise["line"]] if noise else []
    made_by = prediction_sources(configs, out)
    md += ["", made_by["line"]]
    if made_by["warning"]:
        _say(f"report: WARNING: {made_by['warning']}")
        md += ["", f"**Warning: {made_by['warning']}**"]
    targets = _targets(summary)
    md += ["", *[f"- {t}" for t in targets["lines"]]]
    targets_cross = _targets(cross) if cross else None
    md += [f"- cross predictions: {t}" for t in targets_cross["lines"]] if targets_cross else []
    targets_sync = _targets(sync) if sync else None
    md += [f"- synchronous: {t}" for t in targets_sync["lines"]] if targets_sync else []
    targets_ring = _targets(ring) if ring else None
    md += [f"- ring all-reduce: {t}" for t in targets_ring["lines"]] if targets_ring else []
    md.append("")
    text = "\n".join(md)
    write_json(out / f"{stem}.json", {"configs": tables, "summary": summary, "targets": targets,
                                       "summary_cross": cross, "targets_cross": targets_cross,
                                       "summary_sync": sync, "targets_sync": targets_sync,
                                       "summary_ring": ring, "targets_ring": targets_ring,
                                       "phase_range_coverage": coverage,
                                       "few_steps": short,
                                       "measurement_noise": noise, "predicted_by": made_by})
    (out / f"{stem}.md").write_text(text)
    print(text, flush=True)
    return summary


def preregistered(configs: list[BenchConfig], out: Path) -> str:
    """Markdown of the pre-registered predictions (``prereg.json``: written by the predict
    stage before a configuration's first lab run): per configuration and W, the sim's
    examples/s and 5-95% phase range and mva-exact's, with when and by which code they were
    written. Written to ``<out>/preregistered.md`` and returned. Raises BenchError when no
    configuration has one."""
    md = ["# Pre-registered predictions (written before any lab run of the configuration)", ""]
    found = 0
    for cfg in configs:
        data = read_json(out / cfg.name / PREREG)
        if not isinstance(data, dict):
            continue
        found += 1
        preds, all_ranges, transport = predicted(cfg, out, PREREG)
        ranges = all_ranges.get(OURS, {})
        emulated = sorted(m for m in preds if m.startswith(EMULATE))
        stamp = data.get("gradwire") if isinstance(data.get("gradwire"), dict) else {}
        md += [f"## {cfg.name}", "",
               f"written {data.get('preregistered_utc', '?')} by gradwire "
               f"{stamp.get('commit', '?')}"
               + (f"; from the profile of {cfg.profile_of}" if cfg.profile_of else "")
               + _transport_text(transport), "",
               f"| W | sim ex/s | sim 5-95% | {cfg.predict_models[1]} ex/s |"
               + "".join(f" {m} ex/s |" for m in emulated),
               "|---|---|---|---|" + "---|" * len(emulated)]
        for w in cfg.workers:
            sim, mva = preds.get(OURS, {}).get(w), preds.get(cfg.predict_models[1], {}).get(w)
            rng = ranges.get(w)
            emu = [preds[m].get(w) for m in emulated]
            md.append(_md_row([str(w), "-" if sim is None else f"{sim:.2f}",
                               "-" if rng is None else f"{rng[0]:.2f}-{rng[1]:.2f}",
                               *("-" if v is None else f"{v:.2f}" for v in
                                 [mva, *emu])]))
        md.append("")
    if not found:
        raise BenchError(f"{out}: no pre-registered predictions of these configurations: run "
                         "the predict stage before their first lab run")
    text = "\n".join(md)
    (out / "preregistered.md").write_text(text)
    print(text, flush=True)
    return text


def registration_checked(configs: list[BenchConfig], out: Path) -> str:
    """Markdown of each registration against the runs made after it: per configuration with a
    ``prereg.json`` and lab runs, per W, the runs' median examples/s and values, each W >= 2
    run's share of bulk transfers beside another worker's the same way, and the signed % error
    of every model pre-registered (``sim`` and each ``sim:VARIANT`` first); then per model the
    median and max |error|, the median over W >= 3, the points beyond 10%, and for each row
    with a 5-95% phase range how many W >= 2 runs it holds. Written to ``<out>/checked.md``
    and returned. Raises BenchError when no configuration has both."""
    columns: list[str] = []
    errors: dict[str, list[tuple[int, float]]] = {}
    inside: dict[str, list[int]] = {}
    body: list[str] = []
    for cfg in configs:
        data = read_json(out / cfg.name / PREREG)
        meas = measured(cfg, out)
        if not isinstance(data, dict) or not meas:
            continue
        rows = prediction_rows(cfg, out / cfg.name / PREREG, data)
        for model in sorted({m for m, _ in rows}, key=lambda m: (not m.startswith(OURS), m)):
            if model not in columns:
                columns.append(model)
        for w, m in sorted(meas.items()):
            shares = [same_direction_share(r) for r in lab_runs(cfg, out, w)] if w > 1 else []
            cells = [cfg.name, str(w), f"{m['examples_per_s']:.1f} ("
                     + ", ".join(f"{v:.1f}" for v in m["runs"]) + ")",
                     ", ".join("-" if x is None else f"{100 * x:.0f}%" for x in shares) or "-"]
            for model in columns:
                if (model, w) not in rows:
                    cells.append("-")
                    continue
                rate, phase = rows[(model, w)]
                err = 100.0 * (rate - m["examples_per_s"]) / m["examples_per_s"]
                errors.setdefault(model, []).append((w, err))
                cells.append(f"{err:+.1f}")
                if w > 1 and phase is not None:
                    held = inside.setdefault(model, [0, 0])
                    held[0] += sum(phase[0] <= v <= phase[1] for v in m["runs"])
                    held[1] += len(m["runs"])
            body.append(cells)
    if not body:
        raise BenchError(f"{out}: no configuration has both pre-registered predictions and lab "
                         "runs: run the predict stage, then measure")
    head = ["job", "W", "lab median (runs)", "same-direction share"] + columns
    md = ["# The pre-registered predictions against the runs made after them", "",
          _md_row(head), _md_row(["---"] * len(head))]
    md += [_md_row(cells + ["-"] * (len(head) - len(cells))) for cells in body]
    md.append("")
    for model in columns:
        errs = errors.get(model)
        if not errs:
            continue
        absolute = [abs(e) for _, e in errs]
        later = [abs(e) for w, e in errs if w >= 3]
        line = (f"- {model}: median |error| {statistics.median(absolute):.1f}%, max "
                f"{max(absolute):.1f}%, beyond 10%: {sum(a > 10 for a in absolute)} of "
                f"{len(absolute)}")
        if later:
            line += f", W >= 3 median {statistics.median(later):.1f}%"
        if model in inside:
            line += f", phase range holds {inside[model][0]} of {inside[model][1]} W >= 2 runs"
        md.append(line)
    text = "\n".join(md) + "\n"
    (out / "checked.md").write_text(text)
    print(text, flush=True)
    return text


def _summary(errors: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    """Model -> n, median and max absolute % error."""
    return {m: {"n": len(v), "median_abs_pct": statistics.median(abs(e) for e in v),
                "max_abs_pct": max(abs(e) for e in v)} for m, v in errors.items() if v}


def _summary_md(summary: dict[str, dict[str, Any]], empty: str) -> list[str]:
    """Markdown table of a ``_summary`` (or ``empty`` when it has no model)."""
    if not summary:
        return [empty] if empty else []
    return ["| model | n | median | max |", "|---|---|---|---|"] + [
        f"| {m} | {s['n']} | {s['median_abs_pct']:.1f} | {s['max_abs_pct']:.1f} |"
        for m, s in summary.items()]


def _groups_md(tables: list[dict[str, Any]]) -> list[str]:
    """Lines: the sim's median and max |error| per configuration group, when there are several."""
    by: dict[str, list[float]] = {}
    for t in tables:
        by.setdefault(t["group"], []).extend(
            r["error_pct"][OURS] for r in t["rows"] if OURS in r["error_pct"])
    if len([g for g, v in by.items() if v]) < 2:
        return []
    return [""] + [f"- {OURS} on {GROUPS.get(g, g)}: n={len(v)}, median |error| "
                   f"{statistics.median(abs(e) for e in v):.1f}%, max "
                   f"{max(abs(e) for e in v):.1f}%" for g, v in by.items() if v]


def prediction_sources(configs: list[BenchConfig], out: Path) -> dict[str, Any]:
    """Which gradwire commits wrote the configurations' ``predict.json`` (their ``gradwire``
    stamp), and a warning when they are not all one clean commit with the code running now
    (commits that differ in Markdown only count as the same): a report over predictions of
    different code, or of uncommitted code, says so."""
    commits: dict[str, str] = {}
    for cfg in configs:
        data = read_json(out / cfg.name / "predict.json")
        if not isinstance(data, dict) or not data.get("rows"):
            continue
        stamp = data.get("gradwire") if isinstance(data.get("gradwire"), dict) else {}
        commits[cfg.name] = str(stamp.get("commit") or "unknown (not stamped)")
    now = source_commit() or "unknown"
    kinds = sorted(set(commits.values()))
    line = ("Predictions written by gradwire "
            + ("; ".join(f"{c} ({sum(v == c for v in commits.values())})" for c in kinds)
               if kinds else "(none)") + f"; this report ran at {now}.")
    warning = None
    if len(kinds) > 1:
        warning = (f"the predictions come from {len(kinds)} different versions of gradwire: "
                   "rerun the predict stage")
    elif kinds and not same_code(kinds[0], now):
        warning = (f"the predictions were written by {kinds[0]}, not by a clean checkout of "
                   f"the code running now ({now}): rerun the predict stage")
    return {"commits": commits, "report_commit": now, "line": line, "warning": warning}


def _coverage(tables: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How many measured runs fall inside the sim's 5th-95th percentile over start phases, for
    W = 1 (no phases to vary: the range is a few tenths of a % wide) and W >= 2."""
    cells: dict[str, list[int]] = {"w1": [0, 0], "w2plus": [0, 0]}
    for t in tables:
        for r in t["rows"]:
            if "runs_in_phase_range" in r:
                c = cells["w1" if r["workers"] == 1 else "w2plus"]
                c[0] += r["runs_in_phase_range"]
                c[1] += len(r["runs"])
    variants: dict[str, list[int]] = {}  # a variant's own range, W >= 2
    for t in tables:
        for r in t["rows"]:
            for v, n in r.get("variant_runs_in_range", {}).items():
                if r["workers"] >= 2:
                    got = variants.setdefault(v, [0, 0])
                    got[0] += n
                    got[1] += len(r["runs"])
    if not cells["w1"][1] and not cells["w2plus"][1]:
        return None
    (a, b), (c, d) = cells["w1"], cells["w2plus"]
    line = (f"Measured runs inside the sim's 5-95% range over start phases: W >= 2 {c}/{d}"
            f" ({100 * c / max(d, 1):.0f}%), W = 1 {a}/{b}"
            + "".join(f"; {v}'s own range, W >= 2 {x}/{y} ({100 * x / max(y, 1):.0f}%)"
                      for v, (x, y) in sorted(variants.items()) if y) + ".")
    return {"w1": cells["w1"], "w2plus": cells["w2plus"], "variants": variants,
            "line": line}


def _bootstrap(tables: list[dict[str, Any]], n: int = BOOTSTRAP, seed: int = 0
               ) -> dict[str, Any] | None:
    """How much the summary owes to measurement noise: ``n`` times (seeded), resample each
    point's runs with replacement, take their median as the measured value and recompute each
    model's median and max |error| over the points; returns their 95% percentile intervals per
    model and, per baseline, the share of resamples in which the sim's median was the lower.
    Only the measurements are resampled, not the sim's replications."""
    points = []  # (runs, model -> predicted examples/s)
    for t in tables:
        for r in t["rows"]:
            if len(r["runs"]) > 1 and r["predicted"]:
                points.append((r["runs"], r["predicted"]))
    models = sorted({m for _, preds in points for m in preds}, key=lambda m: (m != OURS, m))
    if not points or OURS not in models:
        return None
    rng = random.Random(seed)
    med: dict[str, list[float]] = {m: [] for m in models}
    top: dict[str, list[float]] = {m: [] for m in models}
    for _ in range(n):
        errs: dict[str, list[float]] = {m: [] for m in models}
        for runs, preds in points:
            mv = statistics.median(rng.choices(runs, k=len(runs)))
            for m, p in preds.items():
                errs[m].append(100.0 * abs(p - mv) / mv)
        for m in models:
            med[m].append(statistics.median(errs[m]))
            top[m].append(max(errs[m]))

    def interval(v: list[float]) -> list[float]:
        q = statistics.quantiles(v, n=40, method="inclusive")
        return [q[0], q[-1]]

    out: dict[str, Any] = {"resamples": n, "points": len(points),
                           "median_abs_pct_95": {m: interval(med[m]) for m in models},
                           "max_abs_pct_95": {m: interval(top[m]) for m in models},
                           "sim_median_lower": {m: sum(a < b for a, b in zip(med[OURS], med[m],
                                                                             strict=True)) / n
                                                for m in models if m != OURS}}
    parts = [f"{m} {a:.1f}-{b:.1f}%" for m, (a, b) in out["median_abs_pct_95"].items()]
    lo, hi = out["max_abs_pct_95"][OURS]
    wins = [f"{100 * f:.0f}% against {m}" for m, f in out["sim_median_lower"].items()]
    out["line"] = (f"Measurement noise ({n} resamples of each point's runs, {len(points)} points): "
                   f"95% intervals of the median |error|: {', '.join(parts)}; {OURS}'s max "
                   f"|error| {lo:.1f}-{hi:.1f}%. {OURS}'s median is the lower in "
                   f"{', '.join(wins)} of the resamples.")
    return out


def _targets(summary: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets for gradwire's own models, checked against the summary: the sim
    (the default model, whose verdict is ``met``) and each emulate step predicted beside it
    (``emulated``: model -> its ``met`` and ``checks``), each against the same baselines."""
    ours = summary.get(OURS)
    if ours is None:
        return {"met": None, "lines": [f"targets: no {OURS} predictions"]}
    baselines = {m: s for m, s in summary.items()
                 if m != OURS and not m.startswith((VARIANT, EMULATE))}

    def checked(model: dict[str, Any]) -> dict[str, bool]:
        checks = {
            f"median |error| {model['median_abs_pct']:.1f}% <= {TARGET_MEDIAN_PCT:g}%":
                model["median_abs_pct"] <= TARGET_MEDIAN_PCT,
            f"max |error| {model['max_abs_pct']:.1f}% <= {TARGET_MAX_PCT:g}%":
                model["max_abs_pct"] <= TARGET_MAX_PCT,
        }
        for m, s in baselines.items():
            checks[f"median below {m}'s {s['median_abs_pct']:.1f}%"] = (
                model["median_abs_pct"] < s["median_abs_pct"]
            )
        return checks

    checks = checked(ours)
    emulated = {m: checked(s) for m, s in summary.items() if m.startswith(EMULATE)}
    lines = [f"{model}: {'met' if ok else 'NOT met'}: {what}"
             for model, each in ((OURS, checks), *emulated.items()) for what, ok in each.items()]
    return {"met": all(checks.values()), "checks": checks, "lines": lines,
            "emulated": {m: {"met": all(c.values()), "checks": c} for m, c in emulated.items()}}


# -- command line -------------------------------------------------------------------------------


def _common(p: argparse.ArgumentParser, top: bool) -> None:
    """Options of the accuracy stages; on subcommands they do not override the top level's."""
    keep = {} if top else {"default": argparse.SUPPRESS}
    p.add_argument(
        "--out", type=Path, help=f"cache and results folder (default: {DEFAULT_OUT})", **keep
    )
    p.add_argument("--force", action="store_true", help="redo cached lab runs", **keep)
    p.add_argument(
        "--only", help="comma-separated substrings of configuration names to run (one ending "
        "in $: names ending with it)", **keep
    )
    p.add_argument(
        "--repeats", type=positive_int, help="throughput runs per W (median; default 1)", **keep
    )
    p.add_argument(
        "--link", choices=("auto", "fair", "fifo", "hostqueue"),
        help="gradwire predict --link (default auto: the PS's own queue for the synchronous PS "
        "profiles, whose lab queues in a FIFO on the PS; equal sharing for the others)", **keep
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line: subcommands measure, predict, report, prereg, checked, profile."""
    p = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    _common(p, top=True)
    p.set_defaults(out=None, repeats=1, link="auto")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name, what in (
        ("measure", "run the lab: each configuration's W, and the 1-worker profiles"),
        ("predict", "run gradwire predict on every profile (pre-registered before any run)"),
        ("report", "tabulate measured throughput and prediction errors"),
        ("prereg", "print the predictions pre-registered before each configuration's runs"),
        ("checked", "the pre-registered predictions against the runs made after them"),
    ):
        stage = sub.add_parser(name, help=what, description=what)
        _common(stage, top=False)
        if name == "predict":
            stage.add_argument("--emulate", metavar="STEPS", nargs="?", default="",
                               const=",".join(EMULATE_STEPS),
                               help="also predict the asynchronous PS configurations with "
                               "gradwire predict --model emulate, once for each "
                               "comma-separated STEP[:START], an --emulate-step of "
                               f"{', '.join(EMULATE_STEPS)} (default: all of them) and an "
                               f"--emulate-start of {', '.join(EMULATE_STARTS)} (here "
                               f"{TOGETHER} when left out; e.g. tensors,tensors:random; root; "
                               "real TCP in network namespaces, minutes a step and "
                               "configuration; never beside a lab)")
            stage.add_argument("--variants", metavar="NAMES", default=None,
                               help="comma-separated sim variants to predict beside the sim "
                               f"(default: all of {', '.join(SIM_VARIANTS)}); predict.json, "
                               "and a first prereg.json, then hold only these")
        if name == "measure":
            stage.add_argument("--profiles-only", action="store_true",
                               help="record only the 1-worker profiles (then predict, to "
                                    "pre-register, before measuring)")
            stage.add_argument("--workers", metavar="W,...", type=positive_ints, default=None,
                               help="measure only these numbers of workers of each "
                               "configuration (default: all of its W)")
            stage.add_argument("--max-steal", metavar="CORES", type=nonnegative_float,
                               default=MAX_STEAL_CORES,
                               help=f"run again (up to {STEAL_ATTEMPTS} attempts) a run whose "
                               "machine lost "
                               "more cores than this to its hypervisor (/proc/stat steal; "
                               f"default a tenth of the machine's cores, {MAX_STEAL_CORES:g})")
    prof = sub.add_parser(
        "profile",
        aliases=["profile-resnet50"],
        help="record one 1-worker profile bundle of a lab model (default ResNet-50)",
        description="Record one 1-worker profile (collect) for the replay benchmarks.",
    )
    prof.add_argument("--model", default="resnet50", help="lab model (scripts/lab/models.py)")
    prof.add_argument("--out", type=Path, default=None,
                      help=f"bundle folder (default: {DEFAULT_PROFILE_OUT} for resnet50, "
                      "bench-out/<model>-profile for the others)")
    prof.add_argument("--bandwidth", default="1gbit", help="tc rate of the PS link")
    prof.add_argument("--batch-size", type=positive_int, default=2)
    prof.add_argument("--trace-first", type=positive_int, default=3, help="first traced step")
    prof.add_argument("--trace-steps", type=positive_int, default=5, help="traced steps")
    prof.add_argument("--force", action="store_true", help="record again")
    return p


def variant_names(named: str | None) -> list[str] | None:
    """``--variants``' comma-separated names of ``SIM_VARIANTS`` (None: not given, every
    one); an unknown name is an error before anything runs."""
    variants = named.split(",") if named else None
    unknown = [v for v in variants or () if v not in SIM_VARIANTS]
    if unknown:
        raise BenchError(f"unknown --variants {', '.join(unknown)}: expected some of "
                         f"{', '.join(SIM_VARIANTS)}")
    return variants


def _run(args: argparse.Namespace) -> int:
    if args.command in ("profile", "profile-resnet50"):
        out = args.out or (DEFAULT_PROFILE_OUT if args.model == "resnet50"
                           else REPO / "bench-out" / f"{args.model}-profile")
        return profile_model(out.resolve(), args.bandwidth, args.batch_size, args.trace_first,
                             args.trace_steps, args.force, args.model)
    variants = variant_names(getattr(args, "variants", None))
    steps = tuple(filter(None, getattr(args, "emulate", "").split(",")))
    for item in steps:
        emulate_item(item)  # an unknown one: an error before anything runs
    out = (args.out or DEFAULT_OUT).resolve()
    if out.exists() and not out.is_dir():
        raise BenchError(f"--out {out}: not a folder (the stages keep a folder per "
                         "configuration in it)")
    configs = selected(args.only)
    failed = 0
    if args.command in (None, "measure"):
        failed = measure(configs, out, args.force, args.repeats,
                         getattr(args, "profiles_only", False),
                         getattr(args, "max_steal", MAX_STEAL_CORES),
                         getattr(args, "workers", None))
    if args.command in (None, "predict"):
        predict(configs, out, args.link, variants, steps)
    if args.command == "prereg":
        preregistered(configs, out)
        return 0
    if args.command == "checked":
        registration_checked(configs, out)
        return 0
    if args.command in (None, "report"):
        report(configs, out, "accuracy-partial" if args.only else "accuracy")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    args = build_parser().parse_args(argv)
    return run_cli(PROG, lambda: _run(args), (BenchError, LabError))


if __name__ == "__main__":
    sys.exit(main())
