"""Replayer speed: simulated op-events per second against graph size and workers, and a full
W = 1..16 sweep on a lab profile.

Synthetic step graphs shaped like a profiled PS step (n pulls, each parsed and gating a compute
chunk; n pushes released along the backward chunks, each parsed and applied on the PS), with
4n + 3 nodes, sizes and durations drawn from a fixed seed. An op-event is one op completion.
``--engine`` picks the event loop (``$GRADWIRE_ENGINE``): the compiled one (``fast``), the
Python one, or ``both`` side by side in one run, checked to give the same step end times. The
compiled loop is compiled (or loaded from numba's cache) before timing starts. "loop only"
leaves out setting up the simulator (folding delays and compiling the templates, in Python for
both loops, and starting the workers). ``--budgets`` compares instead the compiled loop's work
units per kernel call (``fastloop.BUDGET``; 0: one call per run, as before the loop returned
to Python between calls for signals), each row run with every budget in turn, ``--repeat``
times, medians, checked to give the same step end times.

    .venv/bin/python scripts/bench_replay.py [--profile BUNDLES] [--steps 1000] [--json out.json]
        [--engine fast|python|both] [--budgets 0,262144 --repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from gradwire.replay import fastloop
from gradwire.replay.engine import SimConfig, Simulator
from gradwire.replay.predict import GOODPUT, assign_ps, simulate
from gradwire.replay.template import DELAY, DOWN, PS, UP, WORKER, StepTemplate


def synthetic_template(n: int, seed: int = 0) -> StepTemplate:
    """A step of ``n`` tensors (4n + 3 ops), shaped like a profiled PS step."""
    rng = random.Random(seed)
    t = StepTemplate(step=0)
    start = t.add(DELAY, 100.0, "start")
    prev = start
    for j in range(n):
        d = t.add(DOWN, rng.uniform(1e3, 4e5), f"pull{j}", [start], prio=j)
        p = t.add(DELAY, rng.uniform(50, 300), f"parse{j}", [d])
        prev = t.add(WORKER, rng.uniform(20, 400), f"fwd{j}", [prev, p])
    ends = []
    for k in range(n):
        prev = t.add(WORKER, rng.uniform(20, 400), f"bwd{k}", [prev])
        u = t.add(UP, rng.uniform(1e3, 4e5), f"push{k}", [prev], prio=k)
        ends.append(t.add(PS, rng.uniform(10, 100), f"apply{k}", [u]))
    t.add(WORKER, 2000.0, "client gap", ends)
    return t


def use_engine(engine: str) -> None:
    """Select the replay loop for this process and the ones it starts; compile the compiled
    loop now (or load it from numba's cache), so no timing includes it."""
    os.environ["GRADWIRE_ENGINE"] = engine
    if engine == "fast":
        simulate([synthetic_template(2)], 1, 2, 1, 1e9, steps=2, max_steps=2)


def events_per_second(nodes: int, workers: int, steps: int) -> dict:
    """Op-events per second replaying a synthetic graph of about ``nodes`` ops, as ``simulate``
    does (one PS, 1 Gbit/s): end to end, and in the loop alone (without setting up the
    simulator: folding delays and compiling the templates in Python, starting the workers)."""
    tpl = synthetic_template(max(1, (nodes - 3) // 6))
    cfg = SimConfig(workers=workers, ps=1, rate_bytes_per_us=1e9 * GOODPUT / 8e6)
    t0 = time.perf_counter()
    sim = Simulator([tpl], cfg, assign_ps([tpl], 1))
    t1 = time.perf_counter()
    sim.run(steps)
    t2 = time.perf_counter()
    dt = t2 - t0
    return {"nodes": len(tpl.kind), "workers": workers, "steps": steps, "events": sim.events,
            "seconds": dt, "events_per_s": sim.events / dt, "engine": sim.engine,
            "step_ends": sim.step_ends, "setup_s": t1 - t0,
            "loop_events_per_s": sim.events / (t2 - t1)}


def _sweep_point(args: tuple) -> tuple[int, float, int]:
    prof, w, steps, ps, nic, budget = args
    if budget is not None:
        fastloop.BUDGET = budget
    rate = prof.profile_bandwidth_bps or 1e9
    pred, sim = simulate(prof.templates, prof.batch_size, w, ps or len(prof.ps_tasks), rate,
                         steps=steps, max_steps=steps,
                         worker_bandwidth_bps=rate if nic == "same" else None)
    return w, pred.examples_per_s, sim.events


def sweep(bundles: list[Path], steps: int, max_w: int, jobs: int, ps: int | None = None,
          nic: str = "unlimited", budget: int | None = None) -> dict:
    """W = 1..max_w x ``steps`` steps per worker on a lab profile, on ``jobs`` processes
    (biggest W first), timed from the loaded profile to the last result. ``ps``: parameter
    servers (default: the profile's); ``nic``: ``same`` gives the workers' NICs the links'
    rate (with several PSes they couple the links), ``unlimited`` leaves them out.
    ``budget``: the compiled loop's work units per kernel call (default: ``fastloop.BUDGET``)."""
    from gradwire.replay.profile import load_profile

    prof = load_profile(bundles)
    t0 = time.perf_counter()
    work = [(prof, w, steps, ps, nic, budget) for w in range(max_w, 0, -1)]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            done = list(pool.map(_sweep_point, work))
    else:
        done = [_sweep_point(a) for a in work]
    dt = time.perf_counter() - t0
    events = sum(e for _, _, e in done)
    rows = [{"workers": w, "examples_per_s": x} for w, x, _ in sorted(done)]
    nodes = statistics_nodes(prof.templates)
    return {"profile": ", ".join(map(str, bundles)), "template_nodes": nodes, "steps": steps,
            "ps": ps or len(prof.ps_tasks), "worker_nics": nic, "jobs": jobs, "seconds": dt,
            "events": events, "events_per_s": events / dt,
            "rows": rows}


def statistics_nodes(templates: list[StepTemplate]) -> int:
    return round(sum(len(t.kind) for t in templates) / len(templates))


def synthetic_table(engines: list[str]) -> list[dict]:
    """The synthetic rows, each graph and W run by every engine in turn; prints the table."""
    rows = []
    for nodes in (1000, 5000, 20000, 50000):
        for workers in (1, 4, 16):
            steps = max(2, 200_000 // (nodes * workers))
            row: dict = {}
            ends: dict = {}
            for engine in engines:
                use_engine(engine)
                r = events_per_second(nodes, workers, steps)
                assert r["engine"] == engine, (r["engine"], engine)
                row.update(nodes=r["nodes"], workers=workers, steps=steps, events=r["events"])
                row[engine] = {k: r[k] for k in ("seconds", "events_per_s", "events",
                                                 "setup_s", "loop_events_per_s")}
                ends[engine] = r["step_ends"]
                print(f"  {r['nodes']} nodes, W={workers}, {engine}: "
                      f"{r['events_per_s']:,.0f} events/s", file=sys.stderr)
            if any(ends[e] != ends[engines[0]] for e in engines):
                raise SystemExit(f"engines disagree on {row['nodes']} nodes, W={workers}")
            rows.append(row)
    head = "| graph nodes | workers | steps/worker | op-events |"
    rule = "|---:|---:|---:|---:|"
    for e in engines:
        head += f" {e}: seconds | {e}: op-events/s | {e}: loop only |"
        rule += "---:|---:|---:|"
    if len(engines) == 2:
        head += f" {engines[0]} / {engines[1]} |"
        rule += "---:|"
    print(head)
    print(rule)
    for r in rows:
        line = f"| {r['nodes']:,} | {r['workers']} | {r['steps']} | {r['events']:,} |"
        for e in engines:
            line += (f" {r[e]['seconds']:.2f} | {r[e]['events_per_s']:,.0f} |"
                     f" {r[e]['loop_events_per_s']:,.0f} |")
        if len(engines) == 2:
            line += f" {r[engines[0]]['events_per_s'] / r[engines[1]]['events_per_s']:.1f}x |"
        print(line)
    return rows


def budget_table(budgets: list[int], repeat: int) -> list[dict]:
    """The synthetic rows on the compiled loop, each run with every budget in turn (work units
    per kernel call), ``repeat`` times; prints the medians and each budget's kernel calls."""
    use_engine("fast")
    default = fastloop.BUDGET
    kernel = fastloop.loop
    calls = [0]

    def counted(*args):  # the kernel, counting its calls
        calls[0] += 1
        return kernel(*args)

    fastloop.loop = counted
    rows = []
    try:
        for nodes in (1000, 5000, 20000, 50000):
            for workers in (1, 4, 16):
                steps = max(2, 200_000 // (nodes * workers))
                rates: dict[int, list[float]] = {b: [] for b in budgets}
                loops: dict[int, list[float]] = {b: [] for b in budgets}
                ncalls: dict[int, int] = {}
                ends = {}
                for _ in range(repeat):
                    for b in budgets:
                        fastloop.BUDGET = b
                        calls[0] = 0
                        r = events_per_second(nodes, workers, steps)
                        ncalls[b] = calls[0] - 1  # less the call that starts the workers
                        rates[b].append(r["events_per_s"])
                        loops[b].append(r["loop_events_per_s"])
                        ends[b] = r["step_ends"]
                if any(ends[b] != ends[budgets[0]] for b in budgets):
                    raise SystemExit(f"budgets disagree on {nodes} nodes, W={workers}")
                row: dict = {"nodes": r["nodes"], "workers": workers, "steps": steps,
                             "events": r["events"]}
                for b in budgets:
                    row[str(b)] = {"events_per_s": statistics.median(rates[b]),
                                   "loop_events_per_s": statistics.median(loops[b]),
                                   "calls": ncalls[b], "runs": rates[b]}
                rows.append(row)
                print(f"  {row['nodes']} nodes, W={workers}: " + ", ".join(
                    f"budget {b}: {row[str(b)]['events_per_s']:,.0f}" for b in budgets),
                    file=sys.stderr)
    finally:
        fastloop.loop, fastloop.BUDGET = kernel, default
    head = "| graph nodes | workers | op-events |"
    rule = "|---:|---:|---:|"
    for b in budgets:
        head += f" budget {b}: calls | op-events/s | loop only |"
        rule += "---:|---:|---:|"
    for b in budgets[1:]:
        head += f" {b} / {budgets[0]} |"
        rule += "---:|"
    print(f"median of {repeat} runs each, budgets interleaved")
    print(head)
    print(rule)
    for r in rows:
        line = f"| {r['nodes']:,} | {r['workers']} | {r['events']:,} |"
        for b in budgets:
            x = r[str(b)]
            line += (f" {x['calls']:,} | {x['events_per_s']:,.0f} |"
                     f" {x['loop_events_per_s']:,.0f} |")
        for b in budgets[1:]:
            line += f" {r[str(b)]['events_per_s'] / r[str(budgets[0])]['events_per_s']:.3f} |"
        print(line)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--profile", type=Path, nargs="*", default=[],
                   help="lab profile bundles for the W sweep (e.g. a ResNet-50 recording)")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--max-workers", type=int, default=16)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="processes for the profile sweep (default: all cores)")
    p.add_argument("--skip-synthetic", action="store_true", help="only the profile sweep")
    p.add_argument("--ps", type=int, default=None,
                   help="parameter servers of the profile sweep (default: the profile's)")
    p.add_argument("--worker-bandwidth", choices=("unlimited", "same"), default="unlimited",
                   help="workers' NICs in the profile sweep: unlimited (default), or the "
                        "links' rate (with --ps 2 or more they couple the PS links)")
    env = os.environ.get("GRADWIRE_ENGINE")
    p.add_argument("--engine", choices=("fast", "python", "both"),
                   default=env if env in ("fast", "python") else "fast",
                   help="event loop: compiled, Python, or both side by side (default: "
                        "$GRADWIRE_ENGINE if python or fast, else fast)")
    p.add_argument("--budgets", default=None,
                   help="compare the compiled loop's work units per kernel call instead of "
                        "the engines, comma-separated (0: one call per run), e.g. 0,262144")
    p.add_argument("--repeat", type=int, default=3,
                   help="runs of each row per budget with --budgets (medians)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    if args.budgets:
        budgets = [int(b) for b in args.budgets.split(",")]
        out: dict = {"budgets": budgets, "repeat": args.repeat,
                     "synthetic": budget_table(budgets, args.repeat)}
        if args.profile:
            out["sweep"] = {}
            for b in budgets:
                s = sweep(args.profile, args.steps, args.max_workers, args.jobs, args.ps,
                          args.worker_bandwidth, b)
                out["sweep"][str(b)] = s
                print(f"sweep W=1..{args.max_workers} x {s['steps']} steps, budget {b}: "
                      f"{s['seconds']:.1f} s, {s['events_per_s']:,.0f} op-events/s")
            if any(out["sweep"][str(b)]["rows"] != out["sweep"][str(budgets[0])]["rows"]
                   for b in budgets):
                raise SystemExit("budgets disagree on the sweep")
        if args.json:
            args.json.write_text(json.dumps(out, indent=1))
        return 0
    engines = ["fast", "python"] if args.engine == "both" else [args.engine]
    out = {"engines": engines}
    if not args.skip_synthetic:
        out["synthetic"] = synthetic_table(engines)
    if args.profile:
        out["sweep"] = {}
        for engine in engines:
            use_engine(engine)
            s = sweep(args.profile, args.steps, args.max_workers, args.jobs, args.ps,
                      args.worker_bandwidth)
            out["sweep"][engine] = s
            print(f"\nsweep W=1..{args.max_workers} x {s['steps']} steps on {s['profile']} "
                  f"(M={s['ps']}, worker NICs {s['worker_nics']}; {s['template_nodes']} nodes "
                  f"per step, {s['jobs']} processes, {engine}): "
                  f"{s['seconds']:.1f} s, {s['events_per_s']:,.0f} op-events/s")
        if len(engines) == 2 and out["sweep"]["fast"]["rows"] != out["sweep"]["python"]["rows"]:
            raise SystemExit("engines disagree on the sweep")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from benchcli import run_cli

    from gradwire.errors import GradwireError

    sys.exit(run_cli("bench_replay", main, (GradwireError,)))
