"""The accuracy benchmark's stages for one job at W beyond the 2-core machine (W = 8-16).

For a lent machine with more cores (the device machine: 16 cores), where 16 workers still have
a core each. One configuration (default: the asynchronous PS deep MLP, 10 MB in ~50 tensors,
batch 32, a 1 Gbit/s PS link, as ``deepmlp10-b32-1gbit-ps1-fcon`` in
``scripts/bench_accuracy.py``; ``--mode sync`` for SyncReplicasOptimizer, ``--mode ring`` for
the collective ring all-reduce, predicted from the 1-worker asynchronous PS profile at
``--profile-bandwidth`` as the bench's ring configurations are), in this order, so that the
prediction is fixed before any throughput run is made:

1. the 1-worker profile, recorded under ``gradwire collect`` on this machine (ring: also a hop
   of the collective ring timed into the bench's op cost database, ``gradwire opdb build
   --ops CollectiveRingHop --threads 1``, which the ring's prediction reads);
2. ``gradwire predict`` of every W from that profile (the bench's ``predict`` stage: the sim
   and the baselines), printed and kept as ``prereg.json``;
3. the lab's throughput runs, W in increasing order (``--repeats``: in rounds), each started
   only while ``--deadline-s`` seconds since the script's start have not passed (a lease ends);
4. the bench's ``report`` over the W that ran (``<out>/bigw.md``, ``<out>/bigw.json``).

Usage (as root, from the repository)::

    python scripts/bench_bigw.py --out bench-out/bigw --workers 2,4,8,12,16 --deadline-s 420
    python scripts/bench_bigw.py --out bench-out/bigw --mode ring --model convnet \
        --profile-bandwidth 250mbit --steps 12 --workers 2-6,8,12

Nothing here is tuned: it runs the bench's own stages on another machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_accuracy as bench  # noqa: E402  (after the path fix)
from benchcli import OneLineParser, positive_int, run_cli  # noqa: E402

from gradwire.replay.command import count_range as worker_counts  # noqa: E402  (predict's --workers)
from gradwire.replay.netns import LabError  # noqa: E402

PROG = "bench_bigw"


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="cache and results folder")
    p.add_argument("--model", default="deepmlp", help="lab model (default deepmlp)")
    p.add_argument("--model-mb", type=float, default=10.0, help="MB of mlp/deepmlp/recsys")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--bandwidth", default="1gbit",
                   help="tc rate of the PS link (ring: of every worker's link)")
    p.add_argument("--steps", type=positive_int, default=20, help="steps per worker")
    p.add_argument("--mode", choices=("async", "sync", "ring"), default="async",
                   help="async or sync (SyncReplicasOptimizer) PS, each from its own profile, "
                   "or ring (collective ring all-reduce, every worker's link shaped, predicted "
                   "from the asynchronous 1-PS profile at --profile-bandwidth; default async)")
    p.add_argument("--profile-bandwidth", default=None,
                   help="ring: the PS link's rate in the 1-worker profile it is predicted from "
                   "(default: --bandwidth)")
    p.add_argument("--profile-steps", type=positive_int, default=20,
                   help="ring: steps of the 1-worker profile run (default 20)")
    p.add_argument("--workers", type=worker_counts, default=[2, 4, 8, 12, 16],
                   help="W to run, as gradwire predict takes them: 2,4,8 or 2-4,8, run in "
                   "increasing order (default 2,4,8,12,16)")
    p.add_argument("--repeats", type=positive_int, default=1,
                   help="lab runs per W, in rounds: every W once, then every W again "
                   "(default 1)")
    p.add_argument("--variants", default=None, metavar="A,B",
                   help="the sim's variants to predict beside it (bench_accuracy.py's "
                   "SIM_VARIANTS; default: every one that acts on the mode)")
    p.add_argument("--deadline-s", type=float, default=None,
                   help="start no throughput run after this many seconds (default: none)")
    return p


def configs(args: argparse.Namespace) -> tuple[bench.BenchConfig, bench.BenchConfig]:
    """The measured configuration and the one whose 1-worker profile predicts it (itself,
    except for ring all-reduce: the asynchronous 1-PS job at ``--profile-bandwidth``)."""
    if args.mode != "ring" and args.profile_bandwidth is not None:
        raise bench.BenchError("--profile-bandwidth is for --mode ring only")
    job = dict(model=args.model, model_mb=args.model_mb, batch_size=args.batch_size)
    if args.mode != "ring":
        cfg = bench.BenchConfig(**job, bandwidth=args.bandwidth, steps=args.steps,
                                workers=tuple(args.workers), group="bigw", mode=args.mode)
        return cfg, cfg
    profile = bench.BenchConfig(**job, bandwidth=args.profile_bandwidth or args.bandwidth,
                                steps=args.profile_steps, workers=(1,), group="bigw")
    cfg = bench.BenchConfig(**job, bandwidth=args.bandwidth, ps=0, steps=args.steps,
                            workers=tuple(args.workers), group="bigw", mode="ring",
                            profile_of=profile.name)
    return cfg, profile


def time_ring_hop(bandwidth: str) -> None:
    """Time a hop of the collective ring on this machine into the bench's op cost database
    (resumable: a hop already timed here is kept), as the lab's nodes run it: one intra-op
    thread; then across a lab link of ``bandwidth`` too (scripts/diag_ring_hop_link.py
    --db --links-only: the bench's ``sim:hop-link``; the build's loopback rows kept)."""
    bench.OPDB.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    cmd = [*bench.gradwire_command(), "opdb", "build", "--ops", "CollectiveRingHop",
           "--threads", "1", "--db", str(bench.OPDB)]
    link = [sys.executable, str(Path(__file__).with_name("diag_ring_hop_link.py")),
            "--bandwidth", bandwidth, "--db", str(bench.OPDB), "--links-only"]
    for argv in (cmd, link):
        if subprocess.run(argv).returncode != 0:
            raise bench.BenchError(f"timing the ring hop failed: {' '.join(argv)}")
    print(f"{PROG}: ring hop timed into {bench.OPDB} in {time.time() - t0:.0f} s", flush=True)


def lab_runs(cfg: bench.BenchConfig, out: Path, repeats: int, deadline_s: float | None,
             t0: float) -> tuple[int, list[int]]:
    """The lab's runs of ``cfg`` in rounds (every W once, then every W again: a round's runs
    already made are kept), none started ``deadline_s`` after ``t0`` (time.time()); returns
    the failures and the W that ran at least once."""
    failed, ran = 0, []
    for rounds in range(1, repeats + 1):
        for w in cfg.workers:
            if deadline_s is not None and time.time() - t0 > deadline_s:
                print(f"{PROG}: deadline: round {rounds} W={w} and later not run", flush=True)
                return failed, ran
            failed += bench.measure([dataclasses.replace(cfg, workers=(w,))], out, False,
                                    rounds)
            if w not in ran:
                ran.append(w)
    return failed, ran


def run(args: argparse.Namespace) -> int:
    """Profile, predict, measure, report; return the number of failed runs."""
    t0 = time.time()
    out = args.out.resolve()
    cfg, profile = configs(args)
    variants = bench.variant_names(args.variants)  # before the profile's run, not after it
    failed = bench.measure([profile], out, False, 1, profiles_only=True)
    if failed:
        return failed
    if args.mode == "ring":
        time_ring_hop(args.bandwidth)
    bench.predict([cfg], out, variants=variants)
    rows = bench.read_json(out / cfg.name / "predict.json")["rows"]
    print("predicted before any throughput run (examples/s):", flush=True)
    for row in rows:
        print(f"  {row['model']:<24} W={row['workers']:<3} "
              f"{row['examples_per_s']:8.1f}", flush=True)
    lab_failed, ran = lab_runs(cfg, out, args.repeats, args.deadline_s, t0)
    failed += lab_failed
    done = dataclasses.replace(cfg, workers=tuple(ran))
    bench.write_json(out / cfg.name / "config.json", dataclasses.asdict(done) | {"name": cfg.name})
    if ran:
        bench.report([done], out, "bigw")
    print(f"{PROG}: {time.time() - t0:.0f} s", flush=True)
    return failed


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    args = build_parser().parse_args(argv)
    return run_cli(PROG, lambda: 1 if run(args) else 0, (bench.BenchError, LabError))


if __name__ == "__main__":
    sys.exit(main())
