"""``gradwire predict``: throughput for W workers, M PSes and bandwidths from a 1-worker profile."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gradwire import emit
from gradwire.argtypes import int_at_least, path_arg
from gradwire.errors import PredictError, ReplayError
from gradwire.replay.hostcores import cores_of
from gradwire.replay.hostqueue import CONGESTION_CONTROLS
from gradwire.replay.jobwhatifs import RECOMPUTE_CHEAP, RECOMPUTES, Plan
from gradwire.replay.mechanisms import canonical_mechanism, check_mechanism
from gradwire.replay.options import (
    BACKENDS,
    EMULATE_RUNS,
    EMULATE_STARTS,
    EMULATE_STEPS,
    EXECUTOR_GAPS,
    FORMATS,
    HOST_CPUS,
    LINK_BURSTS,
    LINK_SHARES,
    LINK_WINDOWS,
    LINKS,
    MAX_WORKERS,
    MODELS,
    ORDERS,
    PINGS,
    PLACEMENTS,
    RECORDING_COSTS,
    RING_HOPS,
    STARTS,
    TEMPLATE_DRAWS,
    TRACE_COSTS,
    PredictOptions,
    default_steps,
)
from gradwire.throughput import lab_warmup_steps
from gradwire.units import int_range, positive_int_arg, rate_arg, rates_arg, size_arg


class _Once(argparse.Action):
    """An option given at most once: a second value is refused, not silently kept instead of
    the first."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        if getattr(namespace, self.dest) is not None:
            parser.error(f"{option_string} is given once (it was {getattr(namespace, self.dest)}"
                         f" before {values})")
        setattr(namespace, self.dest, values)


def count_range(text: str) -> list[int]:
    """``1-16``, ``1,2,4`` or ``1-4,8`` -> sorted integers from 1 to MAX_WORKERS."""
    out: set[int] = set()
    if any(not part.strip() for part in text.split(",")):
        raise argparse.ArgumentTypeError(f"empty item in {text!r}: write counts like 1-16 or "
                                         "1,2,4")
    try:
        for part in text.split(","):
            lo, hi = int_range(part)
            if lo > hi:
                raise argparse.ArgumentTypeError(f"range {part!r} runs backwards: write "
                                                 f"{hi}-{lo}")
            if lo < 1:
                raise argparse.ArgumentTypeError(f"counts must be >= 1: {text!r}")
            if hi > MAX_WORKERS:  # checked before the range is built
                raise argparse.ArgumentTypeError(f"at most {MAX_WORKERS} per configuration: "
                                                 f"{text!r}")
            out.update(range(lo, hi + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 1-16 or 1,2,4: {text!r}") \
            from None
    return sorted(out)


def _mechanisms(text: str) -> list[str]:
    names = [m.strip() for m in text.split(",") if m.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"no mechanism in {text!r}")
    for m in names:
        if m != "auto":
            try:
                check_mechanism(m)
            except ReplayError as e:
                raise argparse.ArgumentTypeError(str(e)) from None
    return list(dict.fromkeys(m if m == "auto" else canonical_mechanism(m) for m in names))


def _models(text: str) -> list[str]:
    names = [m.strip() for m in text.split(",") if m.strip()]
    if "all" in names:
        if names != ["all"]:
            raise argparse.ArgumentTypeError(f"'all' stands alone, it already names every "
                                             f"model: {text!r}")
        return names  # the sim and the baselines of the mechanisms predicted: predictflow
    bad = [m for m in names if m not in MODELS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown model {bad[0] if bad else text!r}: use "
                                         f"{', '.join(MODELS)} or all")
    return names


def worker_rate_arg(text: str) -> str | float:
    """``same``, ``unlimited`` or a rate in bits per second (argparse type)."""
    return text if text in ("same", "unlimited") else rate_arg(text)


def _ps_cores(text: str) -> int | None:
    return None if text.strip().lower() == "unlimited" else positive_int_arg(text)


def _host_cores(text: str) -> str:
    """``off``, ``auto`` or a number of cores above 0 (argparse type)."""
    word = text.strip().lower()
    if word not in ("off", "auto"):
        try:
            cores_of(word)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not off, auto or a number of cores "
                                             "above 0") from None
    return word


def add_profile_arguments(p: argparse.ArgumentParser, verb: str) -> None:
    """The profile's bundles (positional) and ``--sample`` (``verb`` the sample bundle)."""
    p.add_argument("bundles", type=path_arg, nargs="*",
                   help="the profile's bundles (its PS and worker bundles, or their folder)")
    p.add_argument("--sample", action="store_true",
                   help=f"{verb} the sample bundle shipped with gradwire")


def add_parser(sub: Any) -> None:
    """Register the ``predict`` subcommand."""
    p = sub.add_parser(
        "predict", help="predict throughput for other numbers of workers, PSes, bandwidths",
        description="Replay the 1-worker profile in BUNDLES (the PS and worker bundles of one "
        "run, or their folder) for every combination of --workers, --ps and --bandwidth, and "
        "print the predicted examples/s, the speedup over the smallest W of the same model, "
        "M and bandwidth, and the busiest resource. "
        "Models: sim (gradwire's discrete-event replayer, ICPE'20 Algorithm 3.1), and the "
        "baselines mva-exact, mva-approx, mva-hybrid (Lin et al., MASCOTS'18) and cynthia; "
        "for the synchronous mechanisms sync-sum, sync-max, ring-ab and ring-max; emulate "
        "(real TCP in network namespaces, root). "
        "--sample predicts from the sample bundle shipped with gradwire. -o DIR writes "
        "DIR/predictions.json, predictions.csv and throughput.png. Notes on stderr say what "
        "the profile and the options imply: a lossy link in its PS capture (TCP "
        "retransmissions), where asynchronous workers take turns on the link; another "
        "mechanism than the profile's; the PS's own queue. See docs/predict.md.",
        epilog="Examples:\n  gradwire predict bundles/ --workers 1-16 --ps 1,2 "
        "--bandwidth 1Gbit,10Gbit\n  gradwire predict bundles/ --workers 1-8 --model all "
        "--flow-control off -o pred/ --timeline 4,1,1Gbit\n  gradwire predict --sample "
        "--workers 1-4 --format json > pred.json\n  gradwire predict --sample --workers 1-8 "
        "--explain 4,1,20Mbit",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_profile_arguments(p, "predict from")
    p.add_argument("--workers", type=count_range, default=[1, 2, 4, 8, 16],
                   help=f"worker counts, e.g. 1-16 or 1,2,4, at most {MAX_WORKERS} (default "
                   "1,2,4,8,16)", metavar="W")
    p.add_argument("--ps", type=count_range, default=None,
                   help="PS counts, e.g. 1,2 (default: as profiled)", metavar="M")
    p.add_argument("--bandwidth", type=rates_arg, default=None,
                   help="link rates, e.g. 1Gbit,10Gbit (default: the profile's)", metavar="RATE")
    p.add_argument("--order", choices=ORDERS, default="observed",
                   help="transfer order: observed (default), tic (TicTac's timing-independent "
                   "order from the graph), earliest (the parameters the profiled compute "
                   "needed first), reverse (of observed), random")
    p.add_argument("--flow-control", choices=("on", "off"), default="on",
                   help="HTTP/2 flow control: on = WIN multiplexing, off = whole streams "
                   "(default: on)")
    p.add_argument("--worker-bandwidth", type=worker_rate_arg, default="same", metavar="RATE",
                   help="each worker's NIC per direction: same (as --bandwidth, the paper's "
                   "identical machines), unlimited (only PS links limited, as in the lab), or "
                   "a rate; with several PSes a worker's flows share it (max-min fair); "
                   "default: same")
    p.add_argument("--link", choices=("auto", *LINKS), default="auto",
                   help="how a PS link is shared: auto (default) = hostqueue for a profile "
                   "whose lab queued the PS's traffic in a FIFO on the PS, if synchronous PS, "
                   "or asynchronous PS whose PSes ran CUBIC or Reno (then with --uplink-queue); "
                   "else fair; fair = equal shares among active workers "
                   "(the paper; Chang et al.'s round-robin distribution order in the "
                   "limit of small messages), fifo = one transfer chunk at a time in request "
                   "order, block = the PS sends one worker's pulls at a time, the lowest "
                   "worker first (Chang et al.'s block distribution order; pushes shared "
                   "fairly), hostqueue = each PS's downlink is its own drop-tail queue, each "
                   "worker a TCP connection through it packet by packet (TCP Small Queues, "
                   "local drops; docs/predict.md 'The PS's own queue'), overflow = "
                   "hostqueue for the asynchronous PS's rows whose W connections' two GSO "
                   "packets each overflow that queue, fair for the rest")
    p.add_argument("--host-queue", type=size_arg, default=None, metavar="SIZE",
                   help="with --link hostqueue or overflow: each PS's egress queue, bytes on "
                   "the wire "
                   "(e.g. 625KB, 1MiB; default: the lab's, 10 ms of the rate and at least "
                   "256 KiB); with --link-windows same, the queue each direction's "
                   "connections stand in (default: the profile's lab queue, else unbounded)")
    p.add_argument("--tcp", choices=CONGESTION_CONTROLS, default="reno",
                   help="with --link hostqueue: the connections' congestion control: reno "
                   "(default, also for BBR clusters: it was the nearer on the lab's BBR runs) "
                   "or bbr, a first model of BBR (its window: the pull window the profile's "
                   "capture shows when it ran BBR, else three GSO packets and its BDP; no "
                   "cut on a local drop; no restart after idle), or bbr-v1, Linux's BBR "
                   "whole (pacing, bandwidth filter, gain cycle, PROBE_RTT, the long-term "
                   "policer estimate, recovery); docs/predict.md 'The PS's own queue'")
    p.add_argument("--pings", choices=PINGS, default="auto",
                   help="with --link hostqueue: what lets a held pull (its packet dropped by "
                   "the PS's own queue with nothing in flight) go before its probe timer: "
                   "capture, its worker's next HTTP/2 PING, which the PS answers, their "
                   "intervals and the answer's delay from the profile's PS captures (none "
                   "there: the timer); none, only the timer; auto (default), capture with "
                   "--tcp bbr-v1, else none (as registered); docs/predict.md 'Held pulls and "
                   "the workers' PINGs'")
    p.add_argument("--uplink-queue", action="store_true",
                   help="with --link hostqueue: the workers' pushes, too, through a drop-tail "
                   "queue packet by packet (the switch's toward the PS, as large as the PS's "
                   "own; each worker a connection from a host of its own, so no TCP Small "
                   "Queues there), each direction's ACKs waiting behind the bytes the other's "
                   "queue holds; docs/predict.md 'The pushes' queue too'")
    p.add_argument("--ps-cores", type=_ps_cores, default=None, metavar="N",
                   help="cores of each PS for applying updates: unlimited (default: every "
                   "worker's update on a core of its own, as in ICPE'20) or N (at most N "
                   "updates at once, the others wait)")
    p.add_argument("--host-cores", type=_host_cores, default="off", metavar="off|auto|N",
                   help="the workers and PSes share one host of N cores, as in the lab: "
                   "compute chunks running at once beyond them slow down (processor "
                   "sharing); auto: the cores of the machine the profile's lab ran on; off "
                   "(default): each node a machine of its own. docs/predict.md 'One host'")
    p.add_argument("--win", type=positive_int_arg, default=None, metavar="BYTES",
                   help="HTTP/2 WIN in bytes (default: fitted on the profile's capture)")
    p.add_argument("--model", type=_models, default=["sim"],
                   help="comma-separated models: sim (gradwire's replay), the baselines of "
                   "asynchronous PS (mva-exact, mva-approx, mva-hybrid, cynthia), of "
                   "synchronous PS (sync-sum, sync-max) and of ring all-reduce (ring-ab, "
                   "ring-max); emulate: the profile's transfers over real TCP through shaped "
                   "links (root; asynchronous PS; takes real time); or all: the sim and the "
                   "baselines of the mechanisms predicted (default: sim)")
    p.add_argument("--emulate-step", choices=EMULATE_STEPS, default=None,
                   help="how --model emulate runs a worker's step: tensors (default) runs the "
                   "profile's step graph op by op, each pull and push a message of its own, "
                   "each push sent when the compute that makes it ends; phases runs one pull "
                   "and one push per PS with the step's idle time in two pieces (see "
                   "docs/predict.md, 'Real TCP instead of the fluid link')")
    p.add_argument("--emulate-start", choices=EMULATE_STARTS, default=None,
                   help="how --model emulate starts its workers: random (default) each after a "
                   "uniformly random wait within one emulated 1-worker step of the "
                   "configuration, at an independent phase, as a cluster's workers come up; "
                   "together: as they are spawned, a few ms apart, so in step "
                   "(docs/predict.md, 'Real TCP instead of the fluid link')")
    p.add_argument("--emulate-runs", type=positive_int_arg, default=None, metavar="N",
                   help=f"cap on --model emulate's runs of a configuration: it runs "
                   f"{EMULATE_RUNS[0]}, then {EMULATE_RUNS[0]} more at a time while the 95%% "
                   f"interval of their median reaches past 2%% of it, up to N (default "
                   f"{EMULATE_RUNS[1]}; {EMULATE_RUNS[0]}: no more)")
    p.add_argument("--batch-size", type=positive_int_arg, default=None, metavar="N",
                   help="examples per worker step (default: the lab's lab_result.json, else "
                   "the TraceHook's batch_size=N in the trace; asked for when neither says)")
    p.add_argument("--profile-bandwidth", type=rate_arg, default=None,
                   help="link rate the profile ran at: the baselines scale its measured phases "
                   "from it, and it is the sweep's rate when --bandwidth is not given (the sim "
                   "times transfers at the sweep's rates); default: the lab's config, else "
                   "measured", metavar="RATE")
    p.add_argument("--start", choices=STARTS, default="auto",
                   help="auto (default): stratified for the asynchronous PS (the lab's "
                   "workers move apart through a shared FIFO until they take turns), together "
                   "for synchronous mechanisms; random: average replications whose workers "
                   "start at independent random phases (the table's 'phase 5-95%%' column is "
                   "their spread: where one run lands depending on its phases); stratified: "
                   "the same, each worker starting in its own 1/W slot of the step; together: "
                   "one run with every worker starting at once, the paper's setting; aligned: "
                   "replications with every worker starting at once, each with its own "
                   "template draws (a synchronous run through the PS's own queue can settle "
                   "on a rate of its own) (see docs/predict.md, 'Start phases')")
    p.add_argument("--link-burst", choices=LINK_BURSTS, default=None,
                   help="off: every link is a plain rate; auto: replay the token bucket the "
                   "profile's PS capture shows on its links, and on the workers' own links "
                   "of ring and butterfly (the bytes an idle link sends at once above its "
                   "rate: a shaper's burst, kept in bytes at other rates). Default: auto with "
                   "--link hostqueue (the queue's shaper) and in a PS's one-worker rows (no "
                   "other worker on the links), off on links workers share, where it brings "
                   "W >= 2 further from the lab, and on the workers' own links: "
                   "docs/predict.md, 'Token buckets'")
    p.add_argument("--link-windows", choices=LINK_WINDOWS, default="auto",
                   help="two-way traffic on each PS link. same: both directions keep the "
                   "larger window per connection and every connection counts (a lone flow at "
                   "the full rate beside one going the other way, at half beside two), the "
                   "standing queue at most the profile's lab queue or --host-queue; ratio: a "
                   "direction carrying one worker's connection runs at its window's share of "
                   "the other direction's (the windows the profile's captures show); off: the "
                   "two directions are independent; auto (default): off for a profile whose "
                   "lab queued each node's traffic apart (--qdisc fair), else same for the "
                   "asynchronous PS on shared links, else ratio (docs/predict.md, 'Two-way "
                   "traffic')")
    p.add_argument("--link-shares", choices=LINK_SHARES, default="auto",
                   help="how the transfers moving one way on a shared PS link share it. "
                   "windows: in proportion to a window each worker's step draws from those the "
                   "profile's own transfers that way kept in flight and queued (its captures), "
                   "as TCP flows share a FIFO by their windows; equal: alike; auto (default): "
                   "windows for the asynchronous PS on shared links unless the profile's lab "
                   "queued each node apart (--qdisc fair), else equal (docs/predict.md, "
                   "'Shares by window')")
    p.add_argument("--placement", choices=("auto", *PLACEMENTS), default="auto",
                   help="with a PS count other than the profile's, which PS gets each "
                   "variable, in the order the model created them: greedy (the fewest bytes "
                   "so far: TensorFlow's GreedyLoadBalancingStrategy), round-robin "
                   "(replica_device_setter's default), balanced (biggest first to the least "
                   "loaded); auto (default): the strategy the profile's lab recorded, else "
                   "greedy; docs/predict.md, 'Placing the variables'")
    p.add_argument("--mechanism", type=_mechanisms, default=["auto"],
                   help="how the workers synchronise, comma-separated for a side-by-side "
                   "what-if: async-ps (each worker on its own, ICPE'20), sync-ps "
                   "(SyncReplicasOptimizer: every step ends at a barrier when all W workers' "
                   "gradients are in and applied), sync-ps+multicast, sync-ps+ina, "
                   "sync-ps+multicast+ina (a switch that copies the PS's variables to every "
                   "worker, or sums the workers' gradients: what-ifs the lab cannot run), "
                   "ring-allreduce (no PS: the gradients "
                   "all-reduced around a ring of the workers' own links, "
                   "MultiWorkerMirroredStrategy/Horovod), ring-allreduce+multicast (its "
                   "all-gather by multicast), butterfly (butterfly mixing); @whole after a "
                   "mechanism with relays (ring-allreduce@whole, sync-ps+ina@whole, ...): "
                   "messaging off, each parameter forwarded only once all of it has arrived; "
                   "@nobarrier after a synchronous PS one (sync-ps@nobarrier, ...): no "
                   "global barrier, each variable sent back once all its gradients are in; "
                   "ring-allreduce@overlap, butterfly@overlap: each gradient exchanged as soon "
                   "as it is computed; "
                   "auto (default): as the profile was "
                   "recorded (its trace shows SyncReplicasOptimizer's accumulators or not); "
                   "docs/predict.md, 'Synchronous training'")
    p.add_argument("--compute-scale", type=float, default=1.0, metavar="X",
                   help="what-if: every worker's compute X times as fast (its time divided by "
                   "X: a faster accelerator; the transfers, the PS's work and the client's gap "
                   "between steps kept), for the sim and the baselines (default: 1)")
    p.add_argument("--compute-ops", default=None, metavar="TYPES",
                   help="with --compute-scale: only the traced compute ops whose TensorFlow "
                   "op type contains one of TYPES (comma-separated, case-sensitive: Conv "
                   "matches Conv2D, its gradients, fused and depthwise convolutions; MatMul "
                   "also BatchMatMulV2) run X times as fast, as Chang et al. sped up "
                   "convolutions (needs the profile's trace)")
    p.add_argument("--recording-cost", choices=RECORDING_COSTS, default="auto",
                   help="auto (default): where the profile's job ran on after its capture "
                   "ended (gradwire collect --duration, or SIGUSR1 to collect) and its "
                   "captured steps ran clearly slower than those after, scale the steps' "
                   "compute, PS work and delays so the replay of the profile's own "
                   "configuration loses that excess, never below the uncaptured steps' median "
                   "(docs/predict.md, \"Recording's cost\"); keep: the templates as recorded")
    p.add_argument("--host-cpu", choices=HOST_CPUS, default="auto",
                   help="auto (default): where the profile's lab ran every node on one host "
                   "(its lab_result.json gives the cores and the CPU the nodes used per step), "
                   "no sim row goes above what those cores can run at that CPU per step; not "
                   "with a what-if that changes the compute (docs/predict.md, \"The host's "
                   "CPU\"); off: no bound")
    p.add_argument("--template-draw", choices=TEMPLATE_DRAWS, default="step",
                   help="step (default): every worker replays a traced step drawn at random "
                   "for each of its steps; run: each replication replays one traced step "
                   "(the replications take them in turn) at every step of every worker, so "
                   "the step-to-step differences of the recorded steps do not move the "
                   "workers' phases (docs/predict.md, \"The recorded steps' differences\")")
    p.add_argument("--executor-gaps", choices=EXECUTOR_GAPS, default="auto",
                   help="keep: each compute chunk lasts as the trace timed it, its executor's "
                   "waits between ops included; drop: the sum of its traced ops' own times, "
                   "the recorded run's waits left out; auto (default): drop where every "
                   "mechanism predicted computes with its links idle (ring all-reduce, "
                   "butterfly; not @overlap) and the profile ran a PS, else keep; alone: for "
                   "such a mechanism, the compute scaled to the worker's step run whole on "
                   "the machine (gradwire opdb step, in --opdb) (docs/predict.md, \"The "
                   "recorded steps' differences\")")
    p.add_argument("--trace-cost", choices=TRACE_COSTS, default="keep",
                   help="keep (default): the templates as the traced steps timed them; auto: "
                   "where the profile's captures show its traced steps ran slower than its "
                   "untraced ones from first request to last push, scale the steps' compute, "
                   "PS work and delays so the replay of the profile's own configuration loses "
                   "that excess, never below the untraced steps' median; requests: where the "
                   "captures show the PS answered the traced steps' first pulls later than the "
                   "untraced steps', every pull's request delay that much shorter "
                   "(docs/predict.md, 'FULL_TRACE's cost inside the step')")
    p.add_argument("--add-layer", default=None, metavar="SCOPE:N", action=_Once,
                   help="what-if, a synthetic model: N more copies of the layer whose ops "
                   "and tensors have SCOPE in their names (the trace's op names: a kernel's "
                   "pull and its gradient's push are named after the ops that use them, e.g. "
                   "MatMul_2; a note says what matched), its compute in series with it and "
                   "its tensors with its own (Chang et al. 8.5); given once")
    p.add_argument("--to-batch-size", type=positive_int_arg, default=None, metavar="N",
                   help="what-if: each worker's batch N examples instead of the profile's; "
                   "each traced op's time scaled by how the op cost database (--opdb) says its "
                   "cost grows with the batch; the model's tensors moved unchanged, those of the "
                   "batch (a sparse embedding's rows) N/B times their bytes (docs/opdb.md)")
    p.add_argument("--mixed-precision", action="store_true",
                   help="what-if: mixed precision, the compute in bfloat16 (each op's cost "
                   "from --opdb) and every transferred tensor in 16 bits (half the bytes)")
    p.add_argument("--op-fusion", action="store_true",
                   help="what-if: XLA-style fusion of element-wise op chains, the fused ops "
                   "costed from --opdb without their intermediate tensors' traffic")
    p.add_argument("--recompute", nargs="?", const=RECOMPUTE_CHEAP, default="",
                   choices=RECOMPUTES, metavar="WHICH",
                   help="what-if: recompute activations for the backward pass instead of "
                   "keeping them, each forward op again before its first gradient reader: "
                   "'cheap' (the default with no value) the element-wise ones whose inputs the "
                   "backward pass keeps anyway; 'all' every layer's forward op (gradient "
                   "checkpointing, as tf.recompute_grad over the layers)")
    p.add_argument("--partition", type=positive_int_arg, default=1, metavar="K",
                   help="what-if: tensor partition, a variable of N bytes cut into min(K, "
                   "ceil(N / 256 KiB)) slices, each placed on a PS of its own by --placement, "
                   "as TensorFlow's min_max_variable_partitioner (default 1: off)")
    p.add_argument("--fuse-tensors", type=size_arg, default=None, metavar="SIZE",
                   help="what-if: tensor fusion, the pushes to each PS grouped in ready order "
                   "into buckets of at least SIZE bytes (e.g. 4MB), each sent as one message")
    p.add_argument("--accumulate", type=positive_int_arg, default=1, metavar="K",
                   help="what-if: gradient accumulation, K micro-steps of the profile's batch "
                   "per update (the update moves K batches; default 1: off)")
    p.add_argument("--opdb", type=path_arg, default=None, metavar="FILE",
                   help="the op cost database for --to-batch-size, --mixed-precision and "
                   "--op-fusion (gradwire opdb build)")
    p.add_argument("--opdb-machine", default=None, metavar="FINGERPRINT",
                   help="whose timings in --opdb to use (default: its only machine)")
    p.add_argument("--ring-hop", choices=RING_HOPS, default="loopback",
                   help="where the software time of a ring all-reduce hop in --opdb comes "
                   "from: 'loopback' (default: two processes on loopback, gradwire opdb "
                   "build) or 'link' (timed across shaped links of several rates by "
                   "scripts/diag_ring_hop_link.py --db, each row's rate taken between them)")
    p.add_argument("--steps", type=int_at_least(10), default=None,
                   help="steps per worker, at least 10: per replication (default 60), or the "
                   "initial steps of the one run with --start together (default 200)")
    p.add_argument("--run-steps", type=int_at_least(10), default=None, metavar="N",
                   help="predict runs as the lab measures them: replications of N steps per "
                   "worker whose first quarter is dropped as warm-up, so that the phase range "
                   "is where one such run lands (instead of --steps; rows run as one run, "
                   "--start together and the synchronous mechanisms, start at N steps)")
    p.add_argument("--replications", type=int_at_least(2), default=None,
                   help="replications to begin with, at least 2, doubled until the 95%% CI is "
                   "within 2%% (default 8; not with --start together)", metavar="N")
    p.add_argument("--max-replications", type=int_at_least(2), default=None,
                   help="cap on the replications (default 64; not with --start together)")
    p.add_argument("--max-steps", type=int_at_least(10), default=3200,
                   help="--start together: cap on the steps when extending for the CI "
                   "(default 3200)", metavar="N")
    p.add_argument("--seed", type=int_at_least(0), default=0,
                   help="seed of the step sampling and start phases (default 0; same seed, "
                   "same predictions)")
    p.add_argument("--jobs", type=positive_int_arg, default=None,
                   help="parallel processes (at most the cores), or CPUs of the local Ray "
                   "instance (default: cores)", metavar="N")
    p.add_argument("--backend", choices=BACKENDS, default="local",
                   help="run the simulations in a local process pool, or as Ray tasks "
                   "(optional extra: pip install 'gradwire[ray]')")
    p.add_argument("--ray-address", default=None, metavar="HOST:PORT",
                   help="with --backend ray: the running Ray cluster to use, e.g. the head's "
                   "HOST:6379 (default: $RAY_ADDRESS, else a local Ray instance for this run)")
    p.add_argument("--measured", type=path_arg, action="append", default=[], metavar="FILE",
                   help="a lab result JSON (or a folder of them: its other JSON files are "
                   "passed over) to compare with and overlay "
                   "on the plot; repeat for several (--measured a.json --measured b.json); "
                   "with --sample, the sample's own lab runs unless given")
    p.add_argument("-o", "--out", type=path_arg, default=None, metavar="DIR",
                   help="folder for predictions.json, predictions.csv and throughput.png "
                   "(created; files of those names in it are replaced)")
    emit.add_format(p, FORMATS, json_flag=False, out_is_folder=True)
    p.add_argument("--json", dest="json_path", type=path_arg, default=None,
                   help=argparse.SUPPRESS)  # deprecated: -o DIR or --format json
    p.add_argument("--timeline", default=None, metavar="W,M,BW", action=_Once,
                   help="also write DIR/timeline-W4-M1-1Gbit.json (for --timeline "
                   "4,1,1Gbit), the synthetic timeline of this configuration (Chrome trace, "
                   "its critical path marked; needs -o DIR)")
    p.add_argument("--explain", default=None, metavar="W,M,BW", action=_Once,
                   help="the critical path of this configuration's steps: what sets its step "
                   "time, by kind (compute, each link, PS update, waits) and the ops that take "
                   "most of it; printed after the table and kept in predictions.json")


def run(args: argparse.Namespace) -> int:
    """Run ``gradwire predict``; returns the exit code."""
    from gradwire.replay.predictflow import run_predict

    opts = predict_options(args)
    return run_predict(opts, progress=emit.shows_progress(args))


def predict_options(args: argparse.Namespace) -> PredictOptions:
    """The options of ``gradwire predict``, made once from its command line and checked
    before any long work: the values (PredictOptions), the profile's bundles (a lab result
    given where a bundle goes is refused naming the new spelling), the places -o and --json
    will write, the ray extra. Says the deprecation note of --json FILE."""
    bundles = profile_paths(args)
    if args.json_path is not None:
        emit.deprecated("predict", "--json FILE", "-o DIR (DIR/predictions.json) or --format "
                        "json (standard output)")
    opts = PredictOptions(
        bundles=tuple(bundles), sample=args.sample, workers=tuple(args.workers),
        ps=None if args.ps is None else tuple(args.ps),
        bandwidths_bps=None if args.bandwidth is None else tuple(args.bandwidth),
        order=args.order, flow_control=args.flow_control == "on",
        worker_bandwidth=args.worker_bandwidth, link=args.link, ps_cores=args.ps_cores,
        host_cores=args.host_cores,
        host_queue_bytes=args.host_queue, tcp=args.tcp, uplink_queue=args.uplink_queue,
        pings=args.pings,
        win_bytes=args.win, models=tuple(args.model), batch_size=args.batch_size,
        profile_bandwidth_bps=args.profile_bandwidth, start=args.start,
        link_burst=args.link_burst, link_windows=args.link_windows,
        link_shares=args.link_shares, placement=args.placement,
        mechanisms=tuple(args.mechanism), compute_scale=args.compute_scale,
        compute_ops=() if args.compute_ops is None else tuple(args.compute_ops.split(",")),
        trace_cost=args.trace_cost,
        recording_cost=args.recording_cost,
        template_draw=args.template_draw, executor_gaps=args.executor_gaps,
        host_cpu=args.host_cpu,
        add_layer=args.add_layer, to_batch_size=args.to_batch_size, opdb=args.opdb,
        opdb_machine=args.opdb_machine, ring_hop=args.ring_hop,
        emulate_step=args.emulate_step, emulate_start=args.emulate_start,
        emulate_runs=args.emulate_runs,
        plan=Plan(mixed_precision=args.mixed_precision, op_fusion=args.op_fusion,
                  recompute=args.recompute, partition=args.partition,
                  fuse_bytes=args.fuse_tensors, accumulate=args.accumulate),
        steps=run_steps(args),
        warmup_steps=None if args.run_steps is None else lab_warmup_steps(args.run_steps),
        **_replications(args), max_steps=args.max_steps, seed=args.seed, jobs=args.jobs,
        backend=args.backend,
        ray_address=args.ray_address, measured=tuple(args.measured), out=args.out,
        json_path=args.json_path,
        timeline=None if args.timeline is None else parse_config(args.timeline, "--timeline"),
        explain=None if args.explain is None else parse_config(args.explain, "--explain"),
        format=args.format, quiet=bool(args.quiet), verbose=int(args.verbose))
    _ready_places(opts)
    if opts.backend == "ray" and opts.sim:
        from gradwire.replay.raybackend import import_ray

        import_ray()  # before the profile: say at once when the extra is missing
    return opts


def _replications(args: argparse.Namespace) -> dict[str, int]:
    """``--replications`` and ``--max-replications`` as given (the options' defaults where
    not); refused with ``--start together``, which runs one run, not replications."""
    given = {k: v for k, v in (("replications", args.replications),
                               ("max_replications", args.max_replications)) if v is not None}
    if given and args.start == "together":
        raise PredictError("--replications and --max-replications count the replications at "
                           "random start phases; --start together runs one: drop them", usage=True)
    return given


def run_steps(args: argparse.Namespace) -> int:
    """Steps per worker of each replication (or of the first run with --start together):
    ``--run-steps``, else ``--steps``, else ``default_steps``; both given is refused."""
    if args.run_steps is not None:
        if args.steps is not None:
            raise PredictError("--run-steps N is --steps N measured as the lab measures: "
                               "give one of them", usage=True)
        return int(args.run_steps)
    return default_steps(args.start) if args.steps is None else int(args.steps)


def parse_config(spec: str, option: str = "--timeline") -> tuple[int, int, float]:
    """``--timeline W,M,BW`` (or ``--explain``) -> (workers, PSes, bits per second), parsed
    (its values are checked with the other options, ``PredictOptions``)."""
    from gradwire.units import parse_rate_bps

    try:
        w, m, bw = spec.split(",")
        workers, ps = int(w), int(m)
    except ValueError:
        raise PredictError(f"{option} wants W,M,BANDWIDTH like 4,1,1Gbit: {spec!r}",
                           usage=True) from None
    try:
        bps = parse_rate_bps(bw)
    except ValueError as e:  # its own words: "bad rate '0bit': ..."
        raise PredictError(f"{option} {spec!r}: {e}", usage=True) from None
    return workers, ps, bps  # its ranges: PredictOptions


def profile_paths(args: argparse.Namespace) -> list[Path]:
    """The profile's bundles: those given, or with --sample the one shipped with gradwire."""
    from gradwire.bundle import given_or_sample
    from gradwire.replay.measured import is_lab_result

    bundles = given_or_sample(args.bundles or (), args.sample,
                              "the profile's bundles (its PS and worker bundles, or their folder)")
    for p in bundles:
        if p.suffix == ".json" and p.is_file() and is_lab_result(p):
            raise PredictError("a lab result, not a bundle: each lab result takes its own "
                               f"--measured (--measured {p})", path=p)
    return bundles


def _ready_places(opts: PredictOptions) -> None:
    """Check where -o DIR and --json FILE will write before the long work, so that nothing
    is lost at its end: a folder (not a file name), writable, its files replaceable."""
    from gradwire import atomic
    from gradwire.replay.outputs import OUT_FILES, timeline_name

    if opts.out is not None:
        atomic.refuse_collected(opts.out, "-o folder")  # before any advice on where to write
        atomic.refuse_file_name(opts.out, "predict", "predictions.json")
        atomic.ready_folder(opts.out)
        for name in OUT_FILES + ((timeline_name(*opts.timeline),) if opts.timeline else ()):
            atomic.ready_file(opts.out / name, "output file")
    if opts.json_path is not None:
        atomic.ready_file(opts.json_path, "--json file")
