"""Argument parsing and summary printing for ``python scripts/lab``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from benchcli import OneLineParser

from gradwire.procstat import too_much_stolen
from gradwire.replay.netns import LabError, cleanup_stale, list_lab_namespaces
from gradwire.units import size_arg
from lab import models, tcpsample

DEFAULTS = {
    "model": "mlp",
    "batch_size": 32,
    "steps": 20,
    "workers": 2,
    "ps": 1,
    "bandwidth": "1gbit",
}


class _DefaultsOnce(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default in its help, once: not where the help already says its default,
    and not for an option off or unset by default (None, False, 0)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default in (None, False, 0, 0.0):
            return text
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    """The lab's argument parser."""
    p = OneLineParser(
        prog="python scripts/lab",
        error_name="lab",
        description="Run real TensorFlow training (PS, or collective ring all-reduce) with each "
        "node in its own network namespace and tc-shaped links; write throughput JSON. See "
        "docs/lab.md.",
        formatter_class=_DefaultsOnce,
    )
    p.add_argument("--model", choices=models.MODELS, default=DEFAULTS["model"],
                   help="model to train")
    p.add_argument("--model-mb", type=float, default=50.0,
                   help="parameters of mlp and deepmlp, or recsys's embedding table, MB "
                   "(float32)")
    p.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"],
                   help="examples per worker step")
    p.add_argument("--steps", type=int, default=DEFAULTS["steps"], help="steps per worker")
    p.add_argument("--workers", type=int, default=DEFAULTS["workers"], help="workers W")
    p.add_argument("--ps", type=int, default=None,
                   help="parameter servers M (default: 1; 0 in mode ring)")
    p.add_argument("--mode", choices=models.MODES, default="async",
                   help="training: async or sync (SyncReplicasOptimizer) PS, or ring "
                   "(collective ring all-reduce among the workers, no PS)")
    p.add_argument(
        "--bandwidth",
        default=DEFAULTS["bandwidth"],
        help="rate of each shaped link (the PSes', or every worker's with --shape all), each "
        "direction, e.g. 100mbit, 1gbit; 'none'",
    )
    p.add_argument("--delay", default=None, help="one-way delay per PS link, e.g. 1ms (netem)")
    p.add_argument(
        "--queue",
        default=None,
        help="bottleneck buffer per shaped link, e.g. 512k (bfifo); 'kernel' for the kernel's "
        "default queue; default: 10 ms of the rate, at least 256k",
    )
    p.add_argument(
        "--burst",
        default="gso",
        help="HTB burst of the shaped links: gso (128 KiB, veths pass GSO packets; after an "
        "idle spell 128 KiB go at line rate), mtu (GSO off, 4 frames: a plain rate at any "
        "transfer size, for tensors of a few hundred KB), or a size of at least gso's "
        "(512k: that bucket, GSO on)",
    )
    p.add_argument(
        "--qdisc",
        choices=("fifo", "fair", "ackfirst"),
        default="fifo",
        help="how each shaped link's buffer serves its flows: fifo (one byte FIFO, default) "
        "or fair (an HTB class per node at the other end: round robin between them, the "
        "replayer's equal sharing) or ackfirst (the FIFO, with pure ACKs sent ahead of its "
        "data); fair and ackfirst need a byte --queue and no --delay",
    )
    p.add_argument(
        "--tcp-cc",
        default=None,
        help="TCP congestion control in every namespace, one of the host's "
        "net.ipv4.tcp_allowed_congestion_control (e.g. reno, bbr); default: the host's",
    )
    p.add_argument("--shape", choices=("ps", "all"), default=None,
                   help="which links to shape (default: ps; all in mode ring)")
    p.add_argument(
        "--grpc-options",
        default=None,
        help="TF_GRPC_DEFAULT_OPTIONS for every node, e.g. grpc.http2.bdp_probe=0",
    )
    p.add_argument(
        "--ps-strategy",
        choices=models.PS_STRATEGIES,
        default="greedy",
        help="which PS gets each variable: greedy (the fewest bytes so far, TF 1.x's "
        "GreedyLoadBalancingStrategy) or round-robin (replica_device_setter's default); "
        "recorded in the result, where gradwire predict --placement auto finds it",
    )
    p.add_argument(
        "--partition",
        type=int,
        default=1,
        metavar="K",
        help="tensor partition: split each variable along its first axis into min(K, "
        "ceil(bytes / 256 KiB)) variables (TensorFlow's min_max_variable_partitioner), each "
        "placed on a PS by --ps-strategy; models mlp, deepmlp, recsys and convnet, PS modes "
        "only; 1: off",
    )
    p.add_argument(
        "--accumulate",
        type=int,
        default=1,
        metavar="K",
        help="gradient accumulation: each worker update reads the variables once, runs K "
        "micro-steps of --batch-size examples one after another and applies the mean of their "
        "gradients once (K * batch-size examples per step); models "
        f"{', '.join(models.ACCUMULATE_MODELS)}, mode async only; 1: off",
    )
    p.add_argument(
        "--mixed-precision",
        action="store_true",
        help="mixed precision: float32 variables on the PSes, each read once per step and "
        "cast to bfloat16 there, the workers' forward and backward pass in bfloat16, the "
        "bfloat16 gradients cast to float32 on the PS before the update; models "
        f"{', '.join(models.PRECISION_MODELS)}, mode async only, not with --accumulate",
    )
    p.add_argument(
        "--recompute",
        type=int,
        default=0,
        metavar="K",
        help="recomputation: the model's layers in segments of K, each a tf.recompute_grad "
        "checkpoint (its input kept, its forward run again before its gradients); models "
        f"{', '.join(models.RECOMPUTE_MODELS)}, not with --accumulate or --mixed-precision; "
        "0: off",
    )
    p.add_argument(
        "--fuse-tensors",
        type=size_arg,
        default=0.0,
        metavar="SIZE",
        help="tensor fusion: each worker's gradients to one PS, in the order the backward pass "
        "makes them, concatenated into buckets of at least SIZE (e.g. 4MB; one tensor pushed "
        "per bucket, split on the PS before the updates); mode async, dense models, not with "
        "--accumulate or --mixed-precision; default off",
    )
    p.add_argument(
        "--xla",
        action="store_true",
        help="XLA auto-clustering in the workers' sessions (global_jit_level ON_1 and "
        "TF_XLA_FLAGS=--tf_xla_cpu_global_jit)",
    )
    p.add_argument(
        "--collect",
        metavar="DIR",
        default=None,
        help="run every node under `gradwire collect`, bundles in DIR/<role><i>",
    )
    p.add_argument(
        "--tcp-sample",
        metavar="DIR",
        default=None,
        help="sample the PSes' sockets and queues (ss, tc; the workers' for ring) about every "
        "15 ms into DIR/<node>.ss.txt, and the switch's queues toward them (what flows to a "
        "PS: pushes and the ACKs of its pulls) into DIR/switch.ss.txt; the result's tcp_samples "
        "lists each flow held back with data waiting (python scripts/lab/tcpsample.py FILE "
        "prints them)",
    )
    p.add_argument(
        "--tcp-sample-pause",
        metavar="SECONDS",
        type=float,
        default=tcpsample.PAUSE_S,
        help="with --tcp-sample: seconds the sampler sleeps between samples; the default "
        "samples about every 15 ms, which can knock two asynchronous workers out of taking "
        "turns; 0.1 keeps them (0.001 to 10)",
    )
    p.add_argument(
        "--capture-headers",
        metavar="DIR",
        default=None,
        help="keep the packet headers of each PS's link (the workers' for ring) in "
        "DIR/<node>.headers.pcap (tcpdump -s 128): light enough to leave two workers' phases "
        "as they are; the result's headers says, per link, how many bulk transfers ran beside "
        "another worker's going the same way (python scripts/lab/headers.py FILE prints them)",
    )
    p.add_argument(
        "--capture-steps",
        metavar="K",
        type=int,
        default=None,
        help="with --collect: end every node's capture (SIGUSR1 to `gradwire collect`) once "
        "every worker has run K steps; the job runs on to --steps uncaptured, its steps timed "
        "by the TraceHook, which `gradwire predict` uses to take the recording's cost out "
        "(default: capture the whole run)",
    )
    p.add_argument(
        "--uncaptured-s",
        metavar="S",
        type=float,
        default=None,
        help="with --capture-steps: the workers also run on, beyond --steps if their steps are "
        "short, until S seconds after the captures ended (default: --steps only)",
    )
    p.add_argument(
        "--run-together",
        action="store_true",
        help="asynchronous workers run on past --steps until every worker has ended --steps "
        "steps, so that the measured window holds all of them for every worker's steps "
        "(workers that start a second apart otherwise overlap for a few steps of a fast job)",
    )
    p.add_argument("--trace-first", type=int, default=10, help="TraceHook first step")
    p.add_argument("--trace-steps", type=int, default=5, help="TraceHook number of steps")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for workers")
    p.add_argument("--work-dir", default=None, help="node logs and per-worker results "
                   "(default: a new /tmp/gwlab-* folder, kept after the run)")
    p.add_argument("--out", default=None, help="result JSON path")
    p.add_argument(
        "--cleanup-stale",
        action="store_true",
        help="delete leftover namespaces of earlier lab runs (gwl*) and exit",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug log output")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, format="%(name)s: %(message)s"
    )
    if os.geteuid() != 0:
        print("lab: error: needs root (network namespaces and tc); run as root", file=sys.stderr)
        return 1
    try:
        if args.cleanup_stale:
            print(f"deleted: {' '.join(cleanup_stale('gwl')) or 'nothing'}")
            return 0
        from lab.cluster import LabConfig, run_lab

        cfg = LabConfig(
            model=args.model,
            model_mb=args.model_mb,
            batch_size=args.batch_size,
            steps=args.steps,
            workers=args.workers,
            ps=(0 if args.mode == "ring" else DEFAULTS["ps"]) if args.ps is None else args.ps,
            mode=args.mode,
            bandwidth=None if str(args.bandwidth).lower() == "none" else args.bandwidth,
            delay=args.delay,
            queue=args.queue,
            tcp_cc=args.tcp_cc,
            burst=args.burst,
            qdisc=args.qdisc,
            shape=args.shape or ("all" if args.mode == "ring" else "ps"),
            grpc_options=args.grpc_options,
            ps_strategy=args.ps_strategy,
            partition=args.partition,
            accumulate=args.accumulate,
            mixed_precision=args.mixed_precision,
            recompute=args.recompute,
            fuse_bytes=args.fuse_tensors,
            xla=args.xla,
            collect_dir=args.collect,
            capture_steps=args.capture_steps,
            uncaptured_s=args.uncaptured_s,
            run_together=args.run_together,
            tcp_sample_dir=args.tcp_sample,
            tcp_sample_pause_s=args.tcp_sample_pause,
            headers_dir=args.capture_headers,
            trace_first=args.trace_first,
            trace_steps=args.trace_steps,
            timeout_s=args.timeout,
            work_dir=args.work_dir,
        )
        cfg.validate()
        if args.out:  # before the run: a bad path must not cost the result
            from gradwire.atomic import ready_file
            from gradwire.errors import GradwireError

            try:
                ready_file(args.out, "--out file")
            except GradwireError as e:
                raise LabError(str(e)) from None
        result = run_lab(cfg)
    except LabError as e:
        print(f"lab: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("lab: interrupted; namespaces and processes cleaned up", file=sys.stderr)
        return 130
    except SystemExit as e:  # SIGTERM/SIGHUP, raised by the Topology's signal handlers
        print("lab: terminated by a signal; namespaces and processes cleaned up", file=sys.stderr)
        raise SystemExit(e.code) from None
    from gradwire.atomic import write_text

    text = json.dumps(result, indent=1) + "\n"
    if args.out:
        write_text(args.out, text)
    if args.collect:  # beside the bundles, where `gradwire predict` reads batch size and rate
        write_text(os.path.join(args.collect, "lab_result.json"), text)
    _summary(result)
    print(f"node logs and per-worker results: {result['work_dir']}")
    left = list_lab_namespaces(result["prefix"])
    if left:
        print(f"lab: warning: namespaces left behind: {' '.join(left)}", file=sys.stderr)
        return 1
    return 0


def _pct(x: float | None) -> float | None:
    return None if x is None else 100 * x


def _fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def _summary(r: dict) -> None:
    c = r["config"]
    print(
        f"{c['model']} batch {c['batch_size']} {c['mode']} W={c['workers']} M={c['ps']} "
        f"bw={c['bandwidth'] or 'unshaped'} delay={c['delay'] or 0} "
        f"grpc={c['grpc_options'] or '-'}"
        + (f" partition={c['partition']}" if c.get("partition", 1) > 1 else "")
        + (f" accumulate={c['accumulate']}" if c.get("accumulate", 1) > 1 else "")
        + (" bf16" if c.get("mixed_precision") else "")
        + (f" recompute={c['recompute']}" if c.get("recompute", 0) > 0 else "")
        + (f" fuse={c['fuse_bytes'] / 1e6:g}MB" if c.get("fuse_bytes", 0) > 0 else "")
        + (" xla" if c.get("xla") else "")
        + f"  ({r['wall_s']:.0f}s, prefix {r['prefix']})"
    )
    for name, w in r["per_worker"].items():
        print(
            f"  {name}: {w['steps']} steps, {_fmt(w['examples_per_s'])} ex/s, "
            f"median step {_fmt(w.get('median_step_s'), '.3f')} s, "
            f"cpu {_fmt(r['cpu_share'][name]['window'], '.2f')} cores"
        )
    for name, s in r["cpu_share"].items():
        if name.startswith("ps"):
            print(f"  {name}: cpu {_fmt(s['window'], '.2f')} cores")
    print(
        f"throughput {_fmt(r['throughput_examples_per_s'])} examples/s; cpu in window "
        f"{_fmt(r['cpu_share_window_total'], '.2f')} of {r['cpu_count']} cores (the nodes; "
        f"the machine {_fmt(r.get('host_cpu_window'), '.2f')}, softirq "
        f"{_fmt(r.get('host_softirq_window'), '.2f')}, stolen by the hypervisor "
        f"{_fmt(r.get('host_steal_window'), '.2f')})"
    )
    for name, t in (r.get("tcp_samples") or {}).items():
        print(f"  {name}: {t['samples']} tcp samples over {t['span_s']:.1f} s, largest backlog "
              f"{t['max_backlog_bytes'] / 1e3:.0f} kB, {t['dropped_packets']} packets dropped, "
              f"{len(t['held'])} flows held back "
              f"(python scripts/lab/tcpsample.py {t['file']})")
    for name, h in (r.get("headers") or {}).items():
        if "error" in h:
            print(f"  {name}: headers unreadable: {h['error']}")
            continue
        ways = [f"{way} {h[way]['transfers']} ({_fmt(_pct(h[way]['same_share']), '.0f')}% "
                "beside another's the same way)" for way in ("out", "in") if h[way]["transfers"]]
        print(f"  {name}: bulk transfers {', '.join(ways) or 'none'} "
              f"(python scripts/lab/headers.py {h['file']})")
    for name, w in r["per_worker"].items():
        if w.get("finished") is False:
            print(f"lab: note: {name} did not finish its {c['steps']} steps ({w['steps']} "
                  "recorded; in sync mode a worker stops when the others are done)",
                  file=sys.stderr)
    busy, cores = r.get("cpu_share_window_total"), r.get("cpu_count")
    if busy is not None and cores and busy >= 0.8 * cores:
        print(f"lab: note: the nodes used {busy:.2f} of this machine's {cores} cores in the "
              "window: the throughput may be bounded by this machine's CPUs, not the links "
              "(fewer --workers, or a smaller model)", file=sys.stderr)
    stolen = r.get("host_steal_window")
    if stolen is not None and cores and too_much_stolen(stolen, cores):
        print(f"lab: note: the machine lost {stolen:.2f} of its {cores} cores to its hypervisor "
              "in the window (other virtual machines on its host): the throughput is not the "
              "job's own; run it again when the machine is quieter", file=sys.stderr)
    if r["throughput_examples_per_s"] is None:
        print("lab: note: no throughput: the workers have no common window past their warm-up "
              "(a worker ran fewer than 3 steps, or one finished before another warmed up); "
              "raise --steps", file=sys.stderr)
