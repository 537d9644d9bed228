"""Replay speed of every synchronisation mechanism (issue 22, section 4): how long a sweep of
all mechanisms takes, and how a replay's cost per op-event grows with the worker count.

1. The sweep: ``gradwire predict PROFILE --workers 32 --bandwidth 10Gbit,25Gbit,40Gbit,100Gbit
   --mechanism async-ps,sync-ps,ring-allreduce --jobs 2`` (12 configurations, each the mean
   of its replications), timed as a user runs it: wall seconds of the whole command, start-up
   and profile loading included. Target: under 60 s on 2 cores for a ResNet-50-class profile.
2. The scale: one replay per mechanism and W (``--scale``, default 64,256,1024) of
   ``--steps`` steps per worker at 25 Gbit/s, built and run in this process (``Simulator``,
   the kernel compiled before any timing): op-events, seconds and op-events/s, and the
   op-events/s over the same mechanism's at the first W ("vs first": 1.0 when the cost of an
   event does not grow with W).

The profile: ``--profile BUNDLES`` (default: the lab's 1-worker ResNet-50 profile in
``bench-out/resnet50-profile``, recorded by ``scripts/bench_accuracy.py profile-resnet50``),
else the sample bundle shipped with gradwire, which the tables then name. Markdown tables on
stdout, everything in ``--json``.

    .venv/bin/python scripts/bench_mechanisms.py [--profile DIR ...] [--scale 64,256,1024]
        [--steps 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gradwire.bundle import SAMPLE_BUNDLE
from gradwire.replay.engine import SimConfig, Simulator
from gradwire.replay.mechanisms import MECHANISMS
from gradwire.replay.predict import GOODPUT, assign_ps
from gradwire.replay.profile import load_profile

ROOT = Path(__file__).resolve().parents[1]
RESNET50 = ROOT / "bench-out" / "resnet50-profile"
BANDWIDTHS = ("10Gbit", "25Gbit", "40Gbit", "100Gbit")
SWEEP_W = 32


def profile_paths(given: list[Path]) -> list[Path]:
    """The profile's bundles: as given, else the ResNet-50 profile if recorded, else the
    sample."""
    if given:
        return given
    if (RESNET50 / "worker0").is_dir():
        return [RESNET50]
    return [SAMPLE_BUNDLE]


def sweep(paths: list[Path]) -> dict[str, Any]:
    """Time the whole ``gradwire predict`` sweep of every mechanism at W = 32."""
    cmd = [sys.executable, "-m", "gradwire", "predict", *map(str, paths), "--workers",
           str(SWEEP_W), "--bandwidth", ",".join(BANDWIDTHS), "--mechanism",
           ",".join(MECHANISMS), "--jobs", "2", "--format", "json", "--quiet"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"bench_mechanisms: gradwire predict failed: {proc.stderr.strip()[-300:]}")
    rows = json.loads(proc.stdout)["rows"]
    return {"command": " ".join(cmd[2:]), "wall_s": wall, "rows": rows,
            "events": sum(r["events"] for r in rows)}


def scale(paths: list[Path], workers: list[int], steps: int) -> list[dict[str, Any]]:
    """One replay per mechanism and W at 25 Gbit/s: op-events per second."""
    prof = load_profile(paths)
    rate = 25e9 * GOODPUT / 8e6
    out = []
    warm = Simulator(prof.templates, SimConfig(workers=2, ps=1, rate_bytes_per_us=rate))
    warm.run(2)  # compile the kernel before any timing
    for mech in MECHANISMS:
        first = None
        for w in workers:
            t0 = time.perf_counter()
            sim = Simulator(prof.templates, SimConfig(workers=w, ps=1, rate_bytes_per_us=rate,
                                                      mechanism=mech),
                            assign_ps(prof.templates, 1))
            sim.run(steps)
            sec = time.perf_counter() - t0
            rate_ev = sim.events / sec
            first = first or rate_ev
            out.append({"mechanism": mech, "workers": w, "events": sim.events, "seconds": sec,
                        "events_per_s": rate_ev, "vs_first": rate_ev / first,
                        "step_ms": 1e-3 * sim.now / steps})
            print(f"bench_mechanisms: {mech} W={w}: {sim.events:,} op-events in {sec:.1f} s",
                  file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", type=Path, nargs="+", default=[], help="the profile's bundles")
    p.add_argument("--scale", default="64,256,1024", help="worker counts of the scale table")
    p.add_argument("--steps", type=int, default=10, help="steps per worker of a scale replay")
    p.add_argument("--json", type=Path, help="write everything here")
    args = p.parse_args(argv)
    paths = profile_paths(args.profile)
    which = "ResNet-50 (lab)" if paths == [RESNET50] else ", ".join(map(str, paths))
    sw = sweep(paths)
    print(f"Profile: {which}.\n\n`{sw['command']}`: {len(sw['rows'])} configurations, "
          f"{sw['events']:,} op-events, **{sw['wall_s']:.1f} s** wall (target < 60 s).\n")
    workers = [int(w) for w in args.scale.split(",") if w]
    rows = scale(paths, workers, args.steps)
    print("| mechanism | W | op-events | seconds | op-events/s | vs first W | step ms |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mechanism']} | {r['workers']} | {r['events']:,} | {r['seconds']:.2f} | "
              f"{r['events_per_s']:,.0f} | {r['vs_first']:.2f} | {r['step_ms']:.1f} |")
    if args.json:
        doc = {"profile": which, "sweep": sw, "scale": rows}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
