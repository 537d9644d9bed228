"""Speed of ``--link hostqueue`` (the PS's own queue, packet by packet: replay/hqkernel.py)
against the kernel of an older commit and against equal sharing, side by side in one run on
the same profiles.

Three sides, each a replay of ``--steps`` steps per worker of the same profile, workers and
bandwidth, one PS, from the same seed and start phases:

- ``new``: today's kernel through the host queue;
- ``old``: ``replay/kernel.py`` and ``replay/hqkernel.py`` of ``--commit`` (default
  39b235e, the last whose host-queue functions took the kernel's whole state tuple), read
  with ``git show`` and loaded as the modules ``legacy_kernel`` and ``legacy_hqkernel``
  (kept in ``~/.cache/gradwire/`` so that numba's on-disk cache of them lasts between runs);
- ``fair``: today's kernel with equal sharing (``--link fair``), the fluid model, for what
  the packets cost beside it.

``new`` and ``old`` must give the same step end times to the bit, else the run exits 1. Every
side is compiled (or loaded from numba's cache) before any timing; each row runs every side
``--repeat`` times, interleaved, and the table gives the medians of the loop's time
(milliseconds, set-up excluded) and the ratios old / new and new / fair. A markdown table on
stdout (for the README), progress on stderr.

    .venv/bin/python scripts/bench_hostqueue.py --profile DIR [--profile DIR ...]
        [--workers 2,6] [--steps 20] [--repeat 3] [--commit 39b235e]

``--profile``: a profile folder (a bundle set ``gradwire predict`` takes), replayed at its own
bandwidth as a synchronous or asynchronous PS, as its trace says.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from bench_replay import _legacy_folder, import_rewritten

from gradwire.errors import GradwireError
from gradwire.replay import engine
from gradwire.replay.engine import Simulator
from gradwire.replay.grid import measured_burst_bytes, measured_window_bytes
from gradwire.replay.predict import assign_ps, replication_seed, sim_config, start_offsets
from gradwire.replay.profile import Profile, load_profile

OLD_COMMIT = "39b235e"


def load_old_kernel(commit: str) -> ModuleType:
    """``replay/kernel.py`` of ``commit`` as ``legacy_kernel``, with its ``hqkernel``."""
    names = {"hqkernel": "legacy_hqkernel", "kernel": "legacy_kernel"}

    def rewrite(short: str, src: str) -> str:
        for s, n in names.items():
            src = src.replace(f"gradwire.replay.{s} ", f"{n} ")
        if "gradwire.replay.hqkernel" in src or "gradwire.replay.kernel " in src:
            raise GradwireError(f"replay/{short}.py of {commit}: an import left unrewritten")
        return src

    import_rewritten(commit, names, _legacy_folder(f"hq-{commit}"), rewrite)
    return sys.modules["legacy_kernel"]


def simulator(prof: Profile, workers: int, link: str, kernel_class: Any = None) -> Simulator:
    """A replay of ``prof`` at its own bandwidth, one PS, seed 0's first replication; built
    with ``kernel_class`` in place of today's kernel if given."""
    bw = prof.profile_bandwidth_bps or prof.link_rate_bps
    seed = replication_seed(0, 0)
    cfg = sim_config(workers, 1, bw, "observed", prof.fitted_win_bytes, seed, False, link,
                     None, start_offsets(prof.templates, workers, seed, False), None,
                     measured_burst_bytes(prof), measured_window_bytes(prof), prof.mechanism)
    saved = engine.Kernel
    if kernel_class is not None:
        engine.Kernel = kernel_class
    try:
        return Simulator(prof.templates, cfg, assign_ps(prof.templates, 1, "greedy"))
    finally:
        engine.Kernel = saved


def timed(sim: Simulator, steps: int) -> tuple[float, list[list[float]]]:
    """The loop's seconds for ``steps`` steps per worker of ``sim``, and the step end
    times."""
    gc.collect()
    t0 = time.perf_counter()
    sim.run(steps)
    return time.perf_counter() - t0, sim.step_ends


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", action="append", required=True, metavar="DIR")
    ap.add_argument("--workers", default="2,6", help="comma-separated (default 2,6)")
    ap.add_argument("--steps", type=int, default=20, help="per worker (default 20)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--commit", default=OLD_COMMIT)
    args = ap.parse_args()
    try:
        workers = [int(w) for w in args.workers.split(",")]
        if min(workers) < 1 or args.steps < 1 or args.repeat < 1:
            raise ValueError("workers, steps and repeat must be at least 1")
        old = load_old_kernel(args.commit)
        profiles = [(Path(p).name if Path(p).name != "profile" else Path(p).parent.name,
                     load_profile([p])) for p in args.profile]
    except (GradwireError, ValueError) as err:
        ap.error(str(err))
    sides: dict[str, Callable[[Profile, int], Simulator]] = {
        "new": lambda p, w: simulator(p, w, "hostqueue"),
        "old": lambda p, w: simulator(p, w, "hostqueue", old.Kernel),
        "fair": lambda p, w: simulator(p, w, "fair"),
    }
    t0 = time.perf_counter()
    for make in sides.values():  # compile, or load from numba's cache, before any timing
        make(profiles[0][1], 2).run(1)
    print(f"compiled or loaded in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    print(f"| profile ({args.steps} steps per worker) | mechanism | W | new ms | old ms | fair ms "
          "| old / new | new / fair |")
    print("|---|---|---|---|---|---|---|---|")
    for name, prof in profiles:
        for w in workers:
            secs: dict[str, list[float]] = {s: [] for s in sides}
            ends: dict[str, Any] = {}
            for k in range(args.repeat):
                order = list(sides)[k % 3:] + list(sides)[:k % 3]
                for side in order:
                    s, e = timed(sides[side](prof, w), args.steps)
                    secs[side].append(s)
                    ends.setdefault(side, e)
            if ends["new"] != ends["old"]:
                print(f"{name} W={w}: the old and new kernels' step ends differ", file=sys.stderr)
                return 1
            med = {s: statistics.median(v) for s, v in secs.items()}
            print(f"| {name} | {prof.mechanism} | {w} | {1e3 * med['new']:.2f} "
                  f"| {1e3 * med['old']:.2f} | {1e3 * med['fair']:.2f} "
                  f"| {med['old'] / med['new']:.1f}x "
                  f"| {med['new'] / med['fair']:.1f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
