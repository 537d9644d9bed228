"""Replay speed of every synchronisation mechanism (issue 22, section 4): how long a sweep of
all mechanisms takes, and how a replay's cost per op-event grows with the worker count; and,
with ``--study``, Chang et al.'s study of the mechanisms on profiles of their models, beside
their numbers.

1. The sweep: ``gradwire predict PROFILE --workers 32 --bandwidth 10Gbit,25Gbit,40Gbit,100Gbit
   --mechanism`` (all eight) ``--jobs 2`` (32 configurations), timed as a user runs it: wall
   seconds of the whole command, start-up and profile loading included, ``--repeats`` times
   (the median reported). Target: under 60 s on 2 cores for a ResNet-50-class profile.
   Each version's sweeps keep their profiles in a cache folder of their own, made empty for
   the bench (the first sweep builds the profile, the others read it: replay/profilecache.py);
   ``--no-cache`` builds it every time. ``--before REV`` times gradwire at an older revision
   in the same alternation (a git worktree, scripts/oldsource.py) and reports the largest
   difference between the two versions' rows, matched by mechanism, W, PSes and rate;
   ``--sweep-only`` skips the scale table.
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
        [--steps 10] [--repeats 1] [--before REV] [--no-cache] [--sweep-only]
        [--json out.json]

``--study`` (section 3 of the issue): for each of Chang et al.'s models with a lab profile in
``bench-out/<model>-profile`` (``scripts/bench_accuracy.py profile --model vgg16|inception3|
resnet101``; one worker, batch 2, CPU), the profile's compute is first scaled to the paper's
GPU compute per iteration (their Table 3, forward plus backpropagation: the scale is ours over
theirs, a number of their hardware, not fitted), then replayed with 1 PS under each mechanism:

1. speedups over synchronous PS at 32 workers and 25 Gbit/s, beside their Tables 4 and 6;
2. seconds per iteration at 32 workers across 10-100 Gbit/s and the ranking (Figures 3-5);
3. ring all-reduce against multicast + in-network aggregation as W grows at 25 Gbit/s
   (Figures 6-8: for VGG-16, "nearly a 2x performance advantage with 4 workers, and a 1.3x
   performance advantage with 32 workers");
4. as compute gets 1-3x faster at 32 workers and 25 Gbit/s, the speedups of multicast + INA,
   ring all-reduce and butterfly mixing, and where multicast + INA overtakes the ring
   (Figures 11-12: "at around 2.5x"); beside it the same with the forward and backward
   passes scaled apart to Table 3's two numbers (``by_pass``: a CPU spends a larger share of a
   step in backpropagation than their GPUs), and with that and the PS path's request and parse
   delays left out (``without_software_delays``: the paper's simulator has none).

    .venv/bin/python scripts/bench_mechanisms.py --study [--models vgg16,inception3,resnet101]
        [--json study.json]
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gradwire.bundle import SAMPLE_BUNDLE
from gradwire.replay.engine import SimConfig, Simulator
from gradwire.replay.jobwhatifs import over_steps, traced_steps
from gradwire.replay.mechanisms import (
    BUTTERFLY,
    MECHANISMS,
    OVERLAP,
    RING,
    RING_MULTICAST,
    SYNC_INA,
    SYNC_MULTICAST,
    SYNC_MULTICAST_INA,
    SYNC_PS,
)
from gradwire.replay.oppasses import faster_passes, faster_types, pass_times_us
from gradwire.replay.predict import GOODPUT, assign_ps
from gradwire.replay.profile import load_profile
from gradwire.replay.rebatch import rebatch_template
from gradwire.replay.template import DELAY, UP, Profile, StepTemplate
from gradwire.replay.transforms import is_compute, scale_compute

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchcli import (  # noqa: E402
    OneLineParser,
    output_file,
    positive_int,
    positive_ints,
    revision,
)
from oldsource import older_gradwire  # noqa: E402

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


def sweep(paths: list[Path], before: tuple[dict[str, str], Path] | None = None,
          cache: str = "off") -> dict[str, Any]:
    """Time the whole ``gradwire predict`` sweep of every mechanism at W = 32 (``before``:
    the older gradwire's environment and working directory, ``oldsource.old_env``;
    ``cache``: its profile cache folder, ``GRADWIRE_CACHE``, or ``off``)."""
    cmd = [sys.executable, "-m", "gradwire", "predict", *(str(p.resolve()) for p in paths),
           "--workers", str(SWEEP_W), "--bandwidth", ",".join(BANDWIDTHS), "--mechanism",
           ",".join(MECHANISMS), "--jobs", "2", "--format", "json", "--quiet"]
    env, cwd = before or (dict(os.environ), None)
    env = {**env, "GRADWIRE_CACHE": cache}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"bench_mechanisms: gradwire predict failed: {proc.stderr.strip()[-300:]}")
    rows = json.loads(proc.stdout)["rows"]
    return {"command": " ".join(cmd[2:]), "wall_s": wall, "rows": rows,
            "events": sum(r["events"] for r in rows)}


def _row_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return row["mechanism"], row["workers"], row["ps"], row["bandwidth_bps"]


def sweeps(paths: list[Path], repeats: int, rev: str | None, cached: bool = True
           ) -> dict[str, Any]:
    """``repeats`` sweeps, alternating with gradwire at ``rev`` when given, each version
    with a profile cache folder of its own, empty at first (``cached``; else none): each
    version's walls (s), the last rows and op-events, and the largest relative difference
    between the two versions' examples/s over the rows both have."""
    out: dict[str, Any] = {"now": [], "before": []}
    with (tempfile.TemporaryDirectory(prefix="bench-mechanisms-") as tmp,
          older_gradwire(rev) as before):
        now_cache, old_cache = ((str(Path(tmp) / "cache-now"), str(Path(tmp) / "cache-old"))
                                if cached else ("off", "off"))
        for _ in range(repeats):
            out["now"].append(sweep(paths, cache=now_cache))
            if before is not None:
                out["before"].append(sweep(paths, before, old_cache))
    last = out["now"][-1]
    doc = {"command": last["command"], "rows": last["rows"], "events": last["events"],
           "walls_s": [s["wall_s"] for s in out["now"]]}
    doc["wall_s"] = statistics.median(doc["walls_s"])
    if rev:
        old = {_row_key(r): r for r in out["before"][-1]["rows"]}
        both = [(r, old[_row_key(r)]) for r in last["rows"] if _row_key(r) in old]
        doc.update(before=rev, before_walls_s=[s["wall_s"] for s in out["before"]],
                   before_events=out["before"][-1]["events"],
                   before_rows=out["before"][-1]["rows"],
                   rows_compared=f"{len(both)} of {len(last['rows'])}",
                   most_apart=max((abs(a["examples_per_s"] / b["examples_per_s"] - 1)
                                   for a, b in both), default=float("nan")))
        doc["before_wall_s"] = statistics.median(doc["before_walls_s"])
    return doc


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


# Chang et al.'s numbers (docs/notes/issue22-chang-spec.md transcribes the paper's tables):
# Table 3 compute per iteration (forward, backpropagation excluding its first layer; s),
# Table 2 model size (Gbit), Tables 4 and 6 speedups over synchronous PS (32 workers, 25 Gbps)
PAPER = {
    "vgg16": {"name": "VGG-16", "forward_s": 0.169, "backward_s": 0.024, "gbit": 6.58,
              "speedup": {SYNC_INA: 1.89, SYNC_MULTICAST: 1.94, SYNC_MULTICAST_INA: 22.0,
                          RING: 24.6, RING_MULTICAST: 24.6, BUTTERFLY: 11.3}},
    "inception3": {"name": "Inception-v3", "forward_s": 0.176, "backward_s": 0.296, "gbit": 0.715,
                   "speedup": {SYNC_INA: 1.34, SYNC_MULTICAST: 1.69, SYNC_MULTICAST_INA: 3.28,
                               RING: 3.35, RING_MULTICAST: 3.41, BUTTERFLY: 3.41}},
    "resnet101": {"name": "ResNet-101", "forward_s": 0.176, "backward_s": 0.180, "gbit": 1.42,
                  "speedup": {SYNC_INA: 1.65, SYNC_MULTICAST: 1.79, SYNC_MULTICAST_INA: 6.07,
                              RING: 6.55, RING_MULTICAST: 6.71, BUTTERFLY: 6.46}},
}
RING_OVERLAP = RING + OVERLAP  # each gradient rung during backpropagation: the paper's ring
BUTTERFLY_OVERLAP = BUTTERFLY + OVERLAP  # each parameter's rounds during backpropagation (8.2.2)
STUDY = (SYNC_PS, SYNC_INA, SYNC_MULTICAST, SYNC_MULTICAST_INA, RING, RING_OVERLAP,
         RING_MULTICAST, BUTTERFLY, BUTTERFLY_OVERLAP)
for _p in PAPER.values():  # the paper's ring and butterfly start each parameter during
    _p["speedup"][RING_OVERLAP] = _p["speedup"][RING]  # backpropagation
    _p["speedup"][BUTTERFLY_OVERLAP] = _p["speedup"][BUTTERFLY]
FASTER = (SYNC_MULTICAST_INA, RING, RING_OVERLAP, BUTTERFLY, BUTTERFLY_OVERLAP)
CONV = ("Conv",)  # the op types the paper sped up: "we increased the speed of convolutions"
STUDY_GBPS = (10, 25, 40, 100)
STUDY_W = (4, 8, 16, 32)
STUDY_SCALES = (1.0, 1.5, 2.0, 2.5, 3.0)
SOFTWARE_DELAYS = ("request ", "parse ")  # the template's names of the PS path's software time


def compute_us(t: StepTemplate) -> float:
    """A step's compute (its worker ops but the client's gap), us."""
    return sum(a for k, n, a in zip(t.kind, t.name, t.amount, strict=True)
               if is_compute(k, n))


def iteration_s(templates: list[StepTemplate], mechanism: str, workers: int, gbps: float,
                steps: int = 6) -> float:
    """Seconds per iteration of ``mechanism`` with ``workers`` workers, 1 PS, every link at
    ``gbps``: the mean step of worker 0 after the first two (lock-step: all alike)."""
    sim = Simulator(templates, SimConfig(workers=workers, ps=1, mechanism=mechanism,
                                         rate_bytes_per_us=gbps * 1e9 * GOODPUT / 8e6),
                    assign_ps(templates, 1))
    sim.run(steps)
    ends = sim.step_ends[0]
    return (ends[-1] - ends[1]) / (len(ends) - 2) / 1e6


def by_pass(prof: Profile, steps: list, times: list[tuple[float, float]],
            paper: dict[str, Any]) -> tuple[list[StepTemplate], float, float]:
    """The profile's templates with its forward pass's compute scaled to the paper's forward
    and its backward pass's to the paper's backpropagation (Table 3: their GPUs' numbers,
    not fitted), and the two scales (ours over theirs). A CPU spends a larger share of a step
    in backpropagation than their GPUs did, and that share is what hides a ring under the
    compute (section 8.6's crossover). The traced ops' passes (``times``: ``pass_times_us``
    of each recorded step in ``steps``; their medians) are taken up by the executor's share
    of the templates' compute.
    Table 3's backpropagation leaves out its first layer, which ours includes, so the
    backward is shrunk too far where that layer is large (VGG-16's: 1/72.5 on the lab's
    profile); the whole-step scale leaves the same layer out of the total."""
    fwd = statistics.median(f for f, _ in times)
    bwd = statistics.median(b for _, b in times)
    executor = statistics.mean(compute_us(t) for t in prof.templates) / (fwd + bwd)
    f_scale = fwd * executor / 1e6 / paper["forward_s"]
    b_scale = bwd * executor / 1e6 / paper["backward_s"]
    r = over_steps(steps, lambda ops: faster_passes(ops, f_scale, b_scale))
    return [rebatch_template(t, r.ratios) for t in prof.templates], f_scale, b_scale


def without_software_delays(t: StepTemplate) -> StepTemplate:
    """``t`` with the PS path's software delays at 0: each pull's request latency and each
    arrival's parse time (the ``request`` and ``parse`` delays the profile's captures timed
    on the lab's CPU, 71 ms and about 1 ms a transfer on ResNet-101's). Chang et al.'s
    simulator has none (its only latency is a minimal link latency), nor has the study's ring,
    replayed without the op cost database's hop time."""
    soft = [k == DELAY and n.startswith(SOFTWARE_DELAYS) for k, n in zip(t.kind, t.name,
                                                                         strict=True)]
    amount = [0.0 if x else a for x, a in zip(soft, t.amount, strict=True)]
    unfloored = {d: (req, group, 0.0) for d, (req, group, _) in t.unfloored.items()}
    return dataclasses.replace(t, amount=amount, unfloored=unfloored)


def faster_compute(base: list[StepTemplate], steps: list, what: str) -> dict[float, dict]:
    """Speedups over synchronous PS at 32 workers and 25 Gbit/s as compute gets
    ``STUDY_SCALES`` times faster: every compute op (``what`` "all") or the convolutions."""
    faster: dict[float, dict[str, float]] = {}
    for f in STUDY_SCALES:
        if what == "all":
            t = [scale_compute(x, f) for x in base]
        else:
            r = over_steps(steps, lambda ops, f=f: faster_types(ops, CONV, f))
            t = [rebatch_template(x, r.ratios) for x in base]
        sync = iteration_s(t, SYNC_PS, 32, 25)
        faster[f] = {m: sync / iteration_s(t, m, 32, 25) for m in FASTER}
    return faster


def study_model(model: str, folder: Path) -> dict[str, Any]:
    """Chang et al.'s four views (module docstring) of one model's profile."""
    paper = PAPER[model]
    prof = load_profile([folder])
    steps = traced_steps([folder], "the study's compute by pass")
    ours_s = sum(compute_us(t) for t in prof.templates) / len(prof.templates) / 1e6
    scale = ours_s / (paper["forward_s"] + paper["backward_s"])
    base = [scale_compute(t, scale) for t in prof.templates]
    times = [pass_times_us(ops) for ops in steps if ops]
    passes, f_scale, b_scale = by_pass(prof, steps, times, paper)
    fwd_share = statistics.median(f / (f + b) for f, b in times)
    gbit = prof.templates[0].bytes_by(UP) * 8 / 1e9
    out: dict[str, Any] = {"model": model, "name": paper["name"], "our_compute_s": ours_s,
                           "compute_scale": scale, "forward_scale": f_scale,
                           "backward_scale": b_scale, "our_forward_share": fwd_share,
                           "gbit": gbit, "paper_gbit": paper["gbit"]}
    def say(what: str) -> None:
        print(f"bench_mechanisms: {model}: {what}", file=sys.stderr, flush=True)

    say(f"compute {ours_s:.2f} s a step on this CPU ({100 * fwd_share:.0f}% of it forward), "
        f"scaled by {scale:.1f} to the paper's {paper['forward_s'] + paper['backward_s']:.3f} "
        f"s (by pass: the forward by {f_scale:.1f}, the backward by {b_scale:.1f}); "
        f"{gbit:.2f} Gbit of gradients")
    at25 = {m: iteration_s(base, m, 32, 25) for m in STUDY}
    out["speedup_32w_25g"] = {m: at25[SYNC_PS] / at25[m] for m in STUDY}
    out["iteration_32w_25g_s"] = at25
    say("speedups at 32 workers, 25 Gbit/s")
    out["by_bandwidth_s"] = {g: {m: at25[m] if g == 25 else iteration_s(base, m, 32, g)
                                 for m in STUDY} for g in STUDY_GBPS}
    say("bandwidths")
    out["ring_vs_mcina_by_w"] = {
        ring: {w: iteration_s(base, SYNC_MULTICAST_INA, w, 25) / iteration_s(base, ring, w, 25)
               for w in STUDY_W} for ring in (RING, RING_OVERLAP)}
    say("worker counts")
    out["conv_share"] = over_steps(steps, lambda ops: faster_types(ops, CONV, 2.0)).changed_share
    out["speedup_by_compute_scale"] = faster_compute(base, steps, "all")
    out["speedup_by_conv_scale"] = faster_compute(base, steps, "conv")
    # the same from the passes scaled apart to the paper's (the CPU's larger backward share
    # not kept), and from those without the PS path's software delays, as in the paper's
    # simulator: the two differences the crossover could hinge on, side by side
    out["speedup_by_compute_scale_by_pass"] = faster_compute(passes, steps, "all")
    out["speedup_by_compute_scale_by_pass_no_delays"] = faster_compute(
        [without_software_delays(t) for t in passes], steps, "all")
    say("faster compute")
    return out


def _ranking(times: dict[str, float]) -> str:
    return " < ".join(m for m in sorted(times, key=times.get))


def study_tables(results: list[dict[str, Any]]) -> str:
    """The study's Markdown tables, ours beside the paper's."""
    md = ["Chang et al.'s study on the lab's profiles (1 worker, batch 2, CPU), compute scaled "
          "to the paper's GPU iteration (Table 3), 1 PS, replayed by gradwire; the passes "
          "scaled apart where a table says so.", "",
          "| model | our compute / step | scaled by | forward share, ours (paper's) | "
          "by pass: forward scaled by | backward scaled by | gradients, Gbit (paper) |",
          "|---|---|---|---|---|---|---|"]
    for r in results:
        p = PAPER[r["model"]]
        paper_share = p["forward_s"] / (p["forward_s"] + p["backward_s"])
        md.append(f"| {r['name']} | {r['our_compute_s']:.2f} s | 1/{r['compute_scale']:.1f} | "
                  f"{100 * r['our_forward_share']:.0f}% ({100 * paper_share:.0f}%) | "
                  f"1/{r['forward_scale']:.1f} | 1/{r['backward_scale']:.1f} | "
                  f"{r['gbit']:.2f} ({r['paper_gbit']}) |")
    md += ["", "**Speedup over synchronous PS, 32 workers, 25 Gbit/s** (ours / paper's Tables "
           "4 and 6):", "", "| model | " + " | ".join(STUDY[1:]) + " |",
           "|---|" + "---|" * (len(STUDY) - 1)]
    for r in results:
        cells = [f"{r['speedup_32w_25g'][m]:.2f}x / {PAPER[r['model']]['speedup'][m]}x"
                 for m in STUDY[1:]]
        md.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    md += ["", "**Seconds per iteration at 32 workers** (Figures 3-5; fastest first in the "
           "ranking):", "", "| model | Gbit/s | " + " | ".join(STUDY) + " | ranking |",
           "|---|---|" + "---|" * len(STUDY) + "---|"]
    for r in results:
        for g, times in r["by_bandwidth_s"].items():
            md.append(f"| {r['name']} | {g} | " + " | ".join(f"{times[m]:.3f}" for m in STUDY)
                      + f" | {_ranking(times)} |")
    md += ["", "**Ring all-reduce's advantage over multicast + INA** (its time over the "
           "ring's; 25 Gbit/s; Figures 6-8, VGG-16: ~2x at 4 workers, 1.3x at 32):", "",
           "| model | ring | " + " | ".join(f"W={w}" for w in STUDY_W) + " |",
           "|---|---|" + "---|" * len(STUDY_W)]
    for r in results:
        for ring, by_w in r["ring_vs_mcina_by_w"].items():
            md.append(f"| {r['name']} | {ring} | " + " | ".join(
                f"{by_w[w]:.2f}x" for w in STUDY_W) + " |")
    for key, what in (("speedup_by_compute_scale", "every compute op"),
                      ("speedup_by_compute_scale_by_pass", "every compute op, from the forward "
                       "and backward passes scaled apart to the paper's Table 3"),
                      ("speedup_by_compute_scale_by_pass_no_delays", "every compute op, the "
                       "passes scaled apart and the PS path's request and parse delays left out "
                       "(the paper's simulator has none)"),
                      ("speedup_by_conv_scale", "the convolutions only (Conv op types: "
                       + ", ".join(f"{r['name']} {100 * r.get('conv_share', 0):.0f}%"
                                   for r in results) + " of the traced compute)")):
        md += ["", f"**Faster compute, {what}** (speedup over synchronous PS at the same "
               "compute, 32 workers, 25 Gbit/s; Figures 11-12: multicast + INA overtakes the "
               "ring at ~2.5x):", "",
               "| model | compute x | mc+ina | ring | ring@overlap | butterfly | "
               "butterfly@overlap | fastest |", "|---|---|---|---|---|---|---|---|"]
        for r in results:
            for f, sp in r[key].items():
                md.append(f"| {r['name']} | {f:g} | " + " | ".join(
                    f"{sp[m]:.2f}x" for m in FASTER) + f" | {max(sp, key=sp.get)} |")
    return "\n".join(md)


def study(models: list[str], json_path: Path | None) -> int:
    """Run the study on every model whose profile is recorded; say which are missing."""
    results = []
    for model in models:
        if model not in PAPER:
            sys.exit(f"bench_mechanisms: --models: {model!r} is not one of {', '.join(PAPER)}")
        folder = ROOT / "bench-out" / f"{model}-profile"
        if not (folder / "worker0").is_dir():
            print(f"bench_mechanisms: no profile of {model} in {folder}: record it with "
                  f"scripts/bench_accuracy.py profile --model {model}", file=sys.stderr)
            continue
        results.append(study_model(model, folder))
    if not results:
        sys.exit("bench_mechanisms: no profile of the paper's models to study")
    print(study_tables(results))
    if json_path:
        json_path.write_text(json.dumps(results, indent=1) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="bench_mechanisms.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", type=Path, nargs="+", default=[], help="the profile's bundles")
    p.add_argument("--scale", type=positive_ints, default=[64, 256, 1024],
                   help="worker counts of the scale table (default 64,256,1024)")
    p.add_argument("--steps", type=positive_int, default=10,
                   help="steps per worker of a scale replay")
    p.add_argument("--repeats", type=positive_int, default=1,
                   help="sweeps to time (the median shown)")
    p.add_argument("--before", metavar="REV", type=revision, default=None,
                   help="also time the sweep with gradwire at this git revision, alternating")
    p.add_argument("--sweep-only", action="store_true", help="the sweep, not the scale table")
    p.add_argument("--no-cache", action="store_true",
                   help="build the profile in every sweep (no profile cache)")
    p.add_argument("--json", type=output_file, help="write everything here")
    p.add_argument("--study", action="store_true",
                   help="Chang et al.'s study of the mechanisms on their models' profiles")
    p.add_argument("--models", default=",".join(PAPER), help="the study's models")
    args = p.parse_args(argv)
    if args.study:
        return study([m for m in args.models.split(",") if m], args.json)
    paths = profile_paths(args.profile)
    which = "ResNet-50 (lab)" if paths == [RESNET50] else ", ".join(map(str, paths))
    sw = sweeps(paths, args.repeats, args.before, not args.no_cache)
    walls = ", ".join(f"{w:.1f}" for w in sw["walls_s"])
    print(f"Profile: {which}.\n\n`{sw['command']}`: {len(sw['rows'])} configurations, "
          f"{sw['events']:,} op-events, **{sw['wall_s']:.1f} s** wall, the median of {walls} "
          "(target < 60 s).")
    if args.before:
        walls = ", ".join(f"{w:.1f}" for w in sw["before_walls_s"])
        print(f"At {args.before}, alternating: {sw['before_wall_s']:.1f} s, the median of "
              f"{walls}; {sw['before_events']:,} op-events; its rows and today's "
              f"({sw['rows_compared']}) at most {100 * sw['most_apart']:.3f}% apart.")
    print()
    rows = [] if args.sweep_only else scale(paths, args.scale, args.steps)
    if rows:
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
