"""Replayer speed: the compiled kernel (``replay/kernel.py``) against the compiled loop it
replaced, side by side in one run on the same step graphs; and how it scales to many workers.

Three sides: ``new``, today's ``engine.Simulator`` (the kernel over the generic task graph);
``old``, the compiled loop as it was at commit 2c23e2a (``replay/engine.py`` and
``replay/fastloop.py`` of that commit, read with ``git show`` and loaded as the modules
``legacy_engine`` and ``legacy_fastloop``, kept in ``~/.cache/gradwire/`` so that numba's
on-disk cache of them lasts between runs; its ``Simulator(..., engine="fast")``); and with
``--oracle`` the Python loop the tests compare against (``tests/pyloop.py``, synthetic table
only). Every side must give the same step end times to the bit (and the same op-event count),
else the run exits 1. Both compiled loops are compiled (or loaded from numba's cache) before
any timing. Each row runs every side ``--repeat`` times, interleaved (the order rotating from
one round to the next); the tables give medians. An op-event is one op of the step template
completed (delays folded into their neighbours counted too); "seconds" is set-up (building the
simulator: folding delays, step graphs, arrays, starting the workers) plus the run, "loop
only" the run alone; new / old is new's op-events/s over old's (above 1: new is faster).

1. Synthetic step graphs shaped like a profiled PS step (n pulls, each parsed and gating a
   forward chunk; n pushes released along the backward chunks, each applied on the PS: 6n + 2
   ops, sizes and durations drawn from a fixed seed), ``--sizes`` x ``--workers``
   (1,000..50,000 nodes x W = 1, 4, 16), one PS at 1 Gbit/s, about 200,000 op-events a row.
2. A scale sweep, ``--scale`` (W = 64, 256, 1024) x M = 1, 2 with worker NICs at the links'
   rate (coupled with two PSes), ``--scale-steps`` steps per worker, on the ``--profile``
   bundles if given, else on a synthetic graph the size of the ResNet-50 profile (2,087 ops per
   step); "vs W=64" is a side's op-events/s over its own at the first W of the sweep (flat
   when the cost of an event does not grow with W: heaps, not scans over workers; coupled
   max-min sharing rescans the active flows of a direction by design).
3. ``--budgets 0,262144`` instead compares the kernel's work units per call
   (``kernel.BUDGET``; 0: one call per run), new side only, on the same rows.

Markdown tables on stdout (for the README), progress on stderr, everything in ``--json``.

    .venv/bin/python scripts/bench_replay.py [--repeat 3] [--oracle] [--json out.json]
        [--sizes 1000,5000,20000,50000] [--workers 1,4,16] [--skip-synthetic]
        [--profile BUNDLES ...] [--scale 64,256,1024] [--scale-steps 20] [--skip-scale]
        [--budgets 0,262144]
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from gradwire.errors import GradwireError
from gradwire.replay import kernel
from gradwire.replay.engine import SimConfig, Simulator
from gradwire.replay.predict import GOODPUT, assign_ps
from gradwire.replay.template import DELAY, DOWN, PS, UP, WORKER, StepTemplate

ROOT = Path(__file__).resolve().parents[1]
OLD_COMMIT = "2c23e2a"  # the last commit with the two event loops (engine.py, fastloop.py)
RESNET50_OPS = 2087  # ops per step of the lab's 1-worker ResNet-50 profile


def synthetic_template(n: int, seed: int = 0) -> StepTemplate:
    """A step of ``n`` tensors (6n + 2 ops), shaped like a profiled PS step."""
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


def synthetic_graph(nodes: int) -> StepTemplate:
    """The synthetic step of about ``nodes`` ops (at most 5 fewer)."""
    return synthetic_template(max(1, (nodes - 3) // 6))


# -- the sides ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One row: templates and their PS map, a configuration, steps per worker."""

    templates: list[StepTemplate]
    ps_map: list[list[int]]
    workers: int
    ps: int
    rate: float  # each PS link per direction, bytes per microsecond
    worker_rate: float  # each worker's NIC per direction (inf: unconstrained)
    steps: int

    @property
    def nodes(self) -> int:
        """Ops per step (the templates' mean)."""
        return round(sum(len(t.kind) for t in self.templates) / len(self.templates))

    def config(self) -> dict[str, Any]:
        return {"workers": self.workers, "ps": self.ps, "rate_bytes_per_us": self.rate,
                "worker_rate_bytes_per_us": self.worker_rate}


Make = Callable[[Case], Any]  # a simulator of the case: run(steps), events, step_ends


def _git_show(commit: str, path: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{path}"],
                              capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        why = getattr(err, "stderr", "") or str(err)
        raise GradwireError(f"cannot read {path} of commit {commit} (the old loop) from the "
                            f"git repository at {ROOT}: {why.strip()}") from None


def _legacy_folder(commit: str) -> Path:
    """Where the old modules are written: a cache folder of this user's that lasts (numba's
    cache of them sits beside them), else a fresh temporary one."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = base / "gradwire" / f"bench-replay-legacy-{commit}"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if folder.stat().st_uid == os.getuid() and os.access(folder, os.W_OK):
            return folder
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix=f"gradwire-bench-legacy-{commit}-"))


def import_rewritten(commit: str, names: dict[str, str], folder: Path,
                     rewrite: Callable[[str, str], str]) -> None:
    """``replay/<short>.py`` of ``commit`` for each ``short`` of ``names``, its source passed
    through ``rewrite(short, source)`` (its imports of the others pointed at their new
    names), written to ``folder`` and imported as ``names[short]``. A file already there with
    the same text is left alone, so that numba's on-disk cache beside it holds."""
    for short, name in names.items():
        src = rewrite(short, _git_show(commit, f"replay/{short}.py"))
        path = folder / f"{name}.py"
        if not path.exists() or path.read_text() != src:
            path.write_text(src)
    for name in names.values():
        spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)


def load_old(commit: str = OLD_COMMIT) -> ModuleType:
    """The old engine module (``legacy_engine``), its compiled loop ``legacy_fastloop``."""
    names = {"fastloop": "legacy_fastloop", "engine": "legacy_engine"}

    def rewrite(short: str, src: str) -> str:
        src = src.replace("from gradwire.replay import fastloop",
                          "import legacy_fastloop as fastloop")
        for s, n in names.items():
            src = src.replace(f"gradwire.replay.{s}", n)
        left = re.search(r"gradwire\.replay(\.(engine|fastloop)\b| import (engine|fastloop))",
                         src)
        if left:
            raise GradwireError(f"replay/{short}.py of {commit}: import left unrewritten: "
                                f"{left.group(0)}")
        return src

    import_rewritten(commit, names, _legacy_folder(commit), rewrite)
    return sys.modules["legacy_engine"]


def load_oracle() -> ModuleType:
    """``tests/pyloop.py`` (``PythonSimulator``)."""
    path = ROOT / "tests" / "pyloop.py"
    spec = importlib.util.spec_from_file_location("bench_replay_pyloop", path)
    if spec is None or spec.loader is None or not path.exists():
        raise GradwireError("the Python oracle is missing", path=path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def sides(oracle: bool, commit: str) -> dict[str, Make]:
    """The simulators to compare, by side name."""
    old = load_old(commit)

    def make_new(c: Case) -> Any:
        return Simulator(c.templates, SimConfig(**c.config()), c.ps_map)

    def make_old(c: Case) -> Any:
        sim = old.Simulator(c.templates, old.SimConfig(**c.config()), c.ps_map, engine="fast")
        assert sim.engine == "fast", sim.engine
        return sim

    out: dict[str, Make] = {"new": make_new, "old": make_old}
    if oracle:
        py = load_oracle()

        def make_oracle(c: Case) -> Any:
            return py.PythonSimulator(c.templates, SimConfig(**c.config()), c.ps_map)

        out["oracle"] = make_oracle
    return out


def warm(makes: dict[str, Make]) -> None:
    """Compile the compiled loops (or load them from numba's cache): a small run of each side
    but the oracle, one and two PSes with finite NICs, before any timing."""
    tpl = [synthetic_template(3)]
    for name, make in makes.items():
        if name == "oracle":
            continue
        t0 = time.perf_counter()
        for ps in (1, 2):
            make(Case(tpl, assign_ps(tpl, ps), 2, ps, 100.0, 100.0, 2)).run(2)
        print(f"  {name}: compiled or loaded in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr)


def timed(make: Make, case: Case) -> dict[str, Any]:
    """One run of ``case``: set-up and loop seconds, op-events, step end times."""
    gc.collect()
    t0 = time.perf_counter()
    sim = make(case)
    t1 = time.perf_counter()
    sim.run(case.steps)
    t2 = time.perf_counter()
    return {"setup_s": t1 - t0, "loop_s": t2 - t1, "events": sim.events,
            "step_ends": sim.step_ends}


def compare(case: Case, makes: dict[str, Make], repeat: int, what: str) -> dict[str, Any]:
    """``case`` run by every side ``repeat`` times, interleaved; medians per side. Exits if
    the sides (or two runs of one side) disagree."""
    names = list(makes)
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(repeat):
        for n in names[r % len(names):] + names[:r % len(names)]:
            runs[n].append(timed(makes[n], case))
    ends = runs[names[0]][0]["step_ends"]
    events = runs[names[0]][0]["events"]
    for n in names:
        for x in runs[n]:
            if x["step_ends"] != ends:
                raise SystemExit(f"bench_replay: {n} and {names[0]} disagree on the step end "
                                 f"times of {what}")
            if x["events"] != events:
                raise SystemExit(f"bench_replay: {n} counts {x['events']:,} op-events and "
                                 f"{names[0]} {events:,} on {what}")
    row: dict[str, Any] = {"nodes": case.nodes, "workers": case.workers, "ps": case.ps,
                           "steps": case.steps, "events": events}
    for n in names:
        secs = [x["setup_s"] + x["loop_s"] for x in runs[n]]
        loops = [x["loop_s"] for x in runs[n]]
        s, lo = statistics.median(secs), statistics.median(loops)
        row[n] = {"seconds": s, "loop_s": lo, "setup_s": statistics.median(
                      x["setup_s"] for x in runs[n]),
                  "events_per_s": events / s, "loop_events_per_s": events / lo,
                  "runs_s": secs, "loop_runs_s": loops}
    if "old" in row:
        row["new_over_old"] = row["new"]["events_per_s"] / row["old"]["events_per_s"]
        row["new_over_old_loop"] = (row["new"]["loop_events_per_s"]
                                    / row["old"]["loop_events_per_s"])
    print(f"  {what}: " + ", ".join(f"{n} {row[n]['events_per_s']:,.0f}" for n in names)
          + " op-events/s", file=sys.stderr)
    return row


# -- the tables -----------------------------------------------------------------------------


def synthetic_cases(sizes: Sequence[int], workers: Sequence[int]) -> list[Case]:
    rate = 1e9 * GOODPUT / 8e6
    out = []
    for nodes in sizes:
        tpl = [synthetic_graph(nodes)]
        for w in workers:
            steps = max(2, 200_000 // (nodes * w))
            out.append(Case(tpl, assign_ps(tpl, 1), w, 1, rate, float("inf"), steps))
    return out


def _side_cells(row: dict, names: Sequence[str]) -> str:
    return "".join(f" {row[n]['seconds']:.3f} | {row[n]['events_per_s']:,.0f} |"
                   f" {row[n]['loop_events_per_s']:,.0f} |" for n in names)


def _side_head(names: Sequence[str]) -> tuple[str, str]:
    return ("".join(f" {n}: seconds | {n}: op-events/s | {n}: loop only |" for n in names),
            "---:|---:|---:|" * len(names))


def synthetic_table(cases: list[Case], makes: dict[str, Make], repeat: int) -> list[dict]:
    rows = [compare(c, makes, repeat, f"{c.nodes:,} nodes, W={c.workers}") for c in cases]
    names = list(makes)
    head, rule = _side_head(names)
    print(f"\nSynthetic step graphs, one PS at 1 Gbit/s; median of {repeat} run(s) per side, "
          f"sides interleaved.\n")
    print(f"| graph nodes | workers | steps/worker | op-events |{head} new / old |"
          f" new / old, loop |")
    print(f"|---:|---:|---:|---:|{rule}---:|---:|")
    for r in rows:
        print(f"| {r['nodes']:,} | {r['workers']} | {r['steps']} | {r['events']:,} |"
              f"{_side_cells(r, names)} {r['new_over_old']:.2f}x |"
              f" {r['new_over_old_loop']:.2f}x |")
    return rows


def scale_cases(templates: list[StepTemplate], bandwidth_bps: float, workers: Sequence[int],
                steps: int) -> list[Case]:
    rate = bandwidth_bps * GOODPUT / 8e6
    return [Case(templates, assign_ps(templates, m), w, m, rate, rate, steps)
            for m in (1, 2) for w in workers]


def scale_table(cases: list[Case], makes: dict[str, Make], repeat: int, graph: str
                ) -> list[dict]:
    rows = [compare(c, makes, repeat, f"M={c.ps}, W={c.workers}") for c in cases]
    names = list(makes)
    for r in rows:
        first = next(x for x in rows if x["ps"] == r["ps"])
        for n in names:
            r[n]["vs_first_w"] = r[n]["events_per_s"] / first[n]["events_per_s"]
    w0 = rows[0]["workers"] if rows else 0
    head, rule = _side_head(names)
    head += "".join(f" {n}: vs W={w0} |" for n in names)
    rule += "---:|" * len(names)
    print(f"\nScale: {graph}; worker NICs at the links' rate (coupled with M=2); median of "
          f"{repeat} run(s) per side, sides interleaved.\n")
    print(f"| M | workers | steps/worker | op-events |{head} new / old |")
    print(f"|---:|---:|---:|---:|{rule}---:|")
    for r in rows:
        print(f"| {r['ps']} | {r['workers']:,} | {r['steps']} | {r['events']:,} |"
              f"{_side_cells(r, names)}"
              + "".join(f" {r[n]['vs_first_w']:.2f} |" for n in names)
              + f" {r['new_over_old']:.2f}x |")
    return rows


def budget_table(cases: list[Case], budgets: list[int], repeat: int) -> list[dict]:
    """The rows on the kernel, each run with every budget in turn (work units per kernel
    call), ``repeat`` times; prints the medians and each budget's kernel calls."""
    default, loop = kernel.BUDGET, kernel.loop
    calls = [0]

    def counted(*args: Any) -> Any:  # the kernel, counting its calls
        calls[0] += 1
        return loop(*args)

    ncalls: dict[int, int] = {}

    def with_budget(b: int) -> Make:
        class Budgeted:
            """The new simulator, run with ``b`` work units per kernel call, its calls
            counted (not those of starting the workers)."""

            def __init__(self, c: Case) -> None:
                self.sim = Simulator(c.templates, SimConfig(**c.config()), c.ps_map)

            def run(self, steps: int) -> None:
                kernel.BUDGET, calls[0] = b, 0
                self.sim.run(steps)
                ncalls[b] = calls[0]
                self.events, self.step_ends = self.sim.events, self.sim.step_ends

        return Budgeted

    kernel.loop = counted
    rows = []
    try:
        makes = {str(b): with_budget(b) for b in budgets}
        for c in cases:
            row = compare(c, makes, repeat, f"{c.nodes:,} nodes, M={c.ps}, W={c.workers}")
            for b in budgets:
                row[str(b)]["calls"] = ncalls[b]
            rows.append(row)
    finally:
        kernel.loop, kernel.BUDGET = loop, default
    head = "| graph nodes | M | workers | op-events |"
    rule = "|---:|---:|---:|---:|"
    for b in budgets:
        head += f" budget {b}: calls | op-events/s | loop only |"
        rule += "---:|---:|---:|"
    for b in budgets[1:]:
        head += f" {b} / {budgets[0]} |"
        rule += "---:|"
    print(f"\nKernel budgets (work units per call); median of {repeat} run(s) each, budgets "
          f"interleaved.\n")
    print(head)
    print(rule)
    for r in rows:
        line = f"| {r['nodes']:,} | {r['ps']} | {r['workers']:,} | {r['events']:,} |"
        for b in budgets:
            x = r[str(b)]
            line += (f" {x['calls']:,} | {x['events_per_s']:,.0f} |"
                     f" {x['loop_events_per_s']:,.0f} |")
        for b in budgets[1:]:
            line += f" {r[str(b)]['events_per_s'] / r[str(budgets[0])]['events_per_s']:.3f} |"
        print(line)
    return rows


def _ints(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"bench_replay: error: not a comma-separated list of integers: "
                         f"{text!r}") from None
    if not out or min(out) < 0:
        raise SystemExit(f"bench_replay: error: need integers >= 0: {text!r}")
    return out


def main() -> int:
    from benchcli import OneLineParser, output_file, positive_int

    p = OneLineParser(prog="bench_replay",
                      description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--repeat", type=positive_int, default=3,
                   help="runs of each row per side, interleaved (medians; default 3)")
    p.add_argument("--oracle", action="store_true",
                   help="also time the Python oracle (tests/pyloop.py) on the synthetic rows")
    p.add_argument("--sizes", default="1000,5000,20000,50000",
                   help="synthetic graph sizes, ops per step")
    p.add_argument("--workers", default="1,4,16", help="workers of the synthetic rows")
    p.add_argument("--skip-synthetic", action="store_true", help="no synthetic table")
    p.add_argument("--profile", type=Path, nargs="*", default=[],
                   help="lab profile bundles for the scale sweep (default: a synthetic graph "
                        f"of {RESNET50_OPS:,} ops, ResNet-50's)")
    p.add_argument("--scale", default="64,256,1024", help="workers of the scale sweep")
    p.add_argument("--scale-steps", type=positive_int, default=20,
                   help="steps per worker in the scale sweep (default 20)")
    p.add_argument("--skip-scale", action="store_true", help="no scale sweep")
    p.add_argument("--budgets", default=None,
                   help="compare the kernel's work units per call instead of new and old, "
                        "comma-separated (0: one call per run), e.g. 0,262144")
    p.add_argument("--old-commit", default=OLD_COMMIT,
                   help=f"commit of the old compiled loop (default {OLD_COMMIT})")
    p.add_argument("--json", type=output_file, default=None, help="also write the results here")
    args = p.parse_args()
    sizes, workers, scale = _ints(args.sizes), _ints(args.workers), _ints(args.scale)
    if min(sizes) < 8 or min(workers) < 1 or min(scale) < 1:
        p.error("--sizes needs at least 8 ops, --workers and --scale at least 1")

    synth = [] if args.skip_synthetic else synthetic_cases(sizes, workers)
    scaled: list[Case] = []
    graph = ""
    if not args.skip_scale:
        if args.profile:
            from gradwire.replay.profile import load_profile

            prof = load_profile(args.profile)
            templates, bps = prof.templates, prof.profile_bandwidth_bps or 1e9
            graph = (f"profile {', '.join(map(str, args.profile))} ({len(templates)} "
                     f"templates)")
        else:
            templates, bps = [synthetic_graph(RESNET50_OPS)], 1e9
            graph = "a synthetic graph of ResNet-50's size"
        scaled = scale_cases(templates, bps, scale, args.scale_steps)
        graph += (f", {scaled[0].nodes:,} ops per step, links at {bps / 1e9:g} Gbit/s, "
                  f"{args.scale_steps} steps per worker")
    out: dict[str, Any] = {"repeat": args.repeat, "old_commit": args.old_commit}
    if args.budgets:
        budgets = _ints(args.budgets)
        print("warming the kernel", file=sys.stderr)
        warm({"new": lambda c: Simulator(c.templates, SimConfig(**c.config()), c.ps_map)})
        out["budgets"] = budgets
        out["rows"] = budget_table(synth + scaled, budgets, args.repeat)
    else:
        makes = sides(args.oracle, args.old_commit)
        out["sides"] = list(makes)
        print("warming the compiled loops", file=sys.stderr)
        warm(makes)
        if synth:
            out["synthetic"] = synthetic_table(synth, makes, args.repeat)
        if scaled:
            compiled = {n: makes[n] for n in ("new", "old")}
            out["scale"] = {"graph": graph, "steps": args.scale_steps,
                            "rows": scale_table(scaled, compiled, args.repeat, graph)}
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from benchcli import run_cli

    sys.exit(run_cli("bench_replay", main, (GradwireError,)))
