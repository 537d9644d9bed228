"""What the op cost database adds to ``gradwire predict``'s time: a job what-if costed from
``--opdb`` against the plain prediction, today's code against an earlier commit's, side by
side in one run on the same profiles and the same database.

Sides (each a ``gradwire predict`` process, timed from start to exit, wall clock):

* ``now``: this checkout (the installed gradwire).
* ``before``: the code of ``--before REV`` (default 7d96e64, the last commit that chose every
  op type's regression by cross-validation in each predict and read a trace's RunMetadata
  with TensorFlow's classes), taken with ``git archive`` into ``~/.cache/gradwire/`` and run
  with ``PYTHONPATH`` ahead of the installed package; it reads a copy of the database brought
  back to its schema (3: no kept choices).

Per profile, each side runs ``plain`` (``--workers W``) and ``what-if`` (the same with
``--to-batch-size 2B --opdb DB``); every command runs once untimed (numba's cache, the page
cache), then ``--repeat`` times interleaved, the order rotating. The rows of both sides must
agree to the printed digit, else the run exits 1. The table gives medians (s) and the what-if
over plain per side; ``before / now`` is the what-if's median before over now.

    .venv/bin/python scripts/bench_opdb_predict.py --db ops.sqlite [--profile BUNDLES ...]
        [--workers 1,2] [--repeat 3] [--pairs 0] [--before REV] [--json out.json]

``--pairs N`` also runs each side's what-if as two processes started together, N times, and
gives each process's seconds (median) beside the what-if alone: the machine's cores shared.

Without ``--profile``: the sample bundle shipped with gradwire (batch 32).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchcli import OneLineParser, output_file, positive_int, revision, run_cli

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path.home() / ".cache" / "gradwire"
PACKAGES = ("collector", "aligner", "replay")  # gradwire.X lives in X/ at the root


def before_tree(rev: str) -> Path:
    """A folder holding commit ``rev``'s ``gradwire`` package, importable with PYTHONPATH
    (``gradwire/`` with ``collector``, ``aligner`` and ``replay`` inside it)."""
    out = CACHE / f"bench-opdb-{rev}"
    if (out / "gradwire" / "__init__.py").is_file():
        return out
    tmp = Path(tempfile.mkdtemp(dir=CACHE))
    for what, into in (("gradwire", tmp), *((p, tmp / "gradwire") for p in PACKAGES)):
        into.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, what],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    tmp.rename(out)
    return out


def schema_3_copy(db: Path, into: Path) -> Path:
    """A copy of ``db`` as the code before kept choices read it (schema 3)."""
    out = into / f"{db.stem}-schema3.sqlite"
    shutil.copyfile(db, out)
    with sqlite3.connect(out) as conn:
        conn.executescript("DROP TABLE IF EXISTS model_choices; PRAGMA user_version = 3;")
    return out


def side_envs(rev: str, cwd: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The environments of the ``before`` side (commit ``rev``'s code, ``before_tree``) and
    of the ``now`` side, checked to import their own code from ``cwd``."""
    env_now = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    tree = before_tree(rev)
    env_before = {**env_now, "PYTHONPATH": str(tree)}
    if not loaded_from(env_before, cwd).is_relative_to(tree) or \
            loaded_from(env_now, cwd).is_relative_to(tree):
        raise RuntimeError(f"the sides do not import their own code ({tree})")
    return env_before, env_now


def sim_rows(stdout: str) -> list[tuple]:
    """The sim rows of ``predict --format json``: (W, M, examples/s to 0.1)."""
    doc = json.loads(stdout)
    return [(r["workers"], r["ps"], round(r["examples_per_s"], 1)) for r in doc["rows"]
            if r["model"] == "sim"]


def loaded_from(env: dict[str, str], cwd: Path) -> Path:
    """Where a process with ``env``, started in ``cwd``, imports ``gradwire.replay`` from."""
    code = "import gradwire.replay as r; print(r.__file__)"
    return Path(subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, check=True,
                               capture_output=True, text=True).stdout.strip())


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, list[tuple]]:
    """Seconds ``argv`` took (run in ``cwd``, away from the checkout's own ``gradwire/``,
    which ``python -m`` would import first) and its sim rows."""
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr.strip()[-500:]}")
    return took, sim_rows(proc.stdout)


def timed_pair(argv: list[str], env: dict[str, str], cwd: Path) -> list[float]:
    """Seconds each of two copies of ``argv`` took, started together (run as ``timed``)."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    took = [0.0, 0.0]
    for i, p in enumerate(procs):
        _, err = p.communicate()
        took[i] = time.perf_counter() - t0
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {err.strip()[-500:]}")
    return took


def _markdown(header: list[str], rows: list[list[str]]) -> None:
    """Print a Markdown table: ``header``, then ``rows``, all but the first column right."""
    print("| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(header) - 1))
    for cells in rows:
        print("| " + " | ".join(cells) + " |")


def _name(profile: str) -> str:
    """A profile's name in the tables: its configuration's folder for ``.../NAME/profile``."""
    where = Path(profile)
    return where.parent.name if where.name == "profile" else where.name


def main() -> int:
    from gradwire.replay.profile import load_profile

    ap = OneLineParser(prog="bench_opdb_predict.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", type=Path, required=True, help="an op cost database file")
    ap.add_argument("--profile", type=Path, nargs="+", default=None,
                    help="profile bundles, one folder each (default: the sample bundle)")
    ap.add_argument("--workers", default="1,2", help="predict's --workers (default 1,2)")
    ap.add_argument("--repeat", type=positive_int, default=3, help="timed runs per command")
    ap.add_argument("--before", type=revision, default="7d96e64",
                    help="the commit to compare with")
    ap.add_argument("--pairs", type=int, default=0,
                    help="also time the what-if run twice at once (2 processes on the "
                    "machine's cores), this many times per side")
    ap.add_argument("--json", type=output_file, default=None,
                    help="also write the results here")
    args = ap.parse_args()
    from gradwire.bundle import SAMPLE_BUNDLE, find_bundles
    from gradwire.errors import GradwireError
    from gradwire.opdb import check_database

    try:
        check_database(args.db)  # before the warm-ups: a wrong file is one line
        for prof in args.profile or ():
            find_bundles(prof)
    except GradwireError as exc:
        ap.error(str(exc))

    profiles = args.profile or [SAMPLE_BUNDLE]
    CACHE.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-opdb-"))
    try:
        old_db, new_db = schema_3_copy(args.db.resolve(), work), work / "now.sqlite"
        shutil.copyfile(args.db, new_db)
        env_before, env_now = side_envs(args.before, work)
        sides = {"before": (env_before, old_db), "now": (env_now, new_db)}
        results = []
        for prof in (p.resolve() for p in profiles):
            batch = load_profile([prof]).batch_size
            base = [sys.executable, "-m", "gradwire", "predict", str(prof), "--workers",
                    args.workers, "--model", "sim", "--format", "json", "-q"]
            cmds = {(side, kind): (env, base + ([] if kind == "plain" else
                                                ["--to-batch-size", str(2 * batch),
                                                 "--opdb", str(db)]))
                    for side, (env, db) in sides.items() for kind in ("plain", "what-if")}
            times: dict[tuple[str, str], list[float]] = {k: [] for k in cmds}
            rows = {}
            for k, (env, argv) in cmds.items():  # untimed: numba's cache, the page cache
                print(f"{prof}: {k[0]} {k[1]}: warming up", file=sys.stderr, flush=True)
                rows[k] = timed(argv, env, work)[1]
            for kind in ("plain", "what-if"):
                if rows[("before", kind)] != rows[("now", kind)]:
                    print(f"{prof}: {kind}: the sides' rows differ: {rows[('before', kind)]} "
                          f"against {rows[('now', kind)]}", file=sys.stderr)
                    return 1
            order = list(cmds)
            for i in range(args.repeat):
                for k in order[i % len(order):] + order[:i % len(order)]:
                    env, argv = cmds[k]
                    times[k].append(timed(argv, env, work)[0])
                print(f"{prof}: round {i + 1}/{args.repeat} done", file=sys.stderr, flush=True)
            for i in range(args.pairs):
                for side in ("before", "now") if i % 2 == 0 else ("now", "before"):
                    env, argv = cmds[(side, "what-if")]
                    times.setdefault((side, "what-if, two at once"), []).extend(
                        timed_pair(argv, env, work))
                print(f"{prof}: pair {i + 1}/{args.pairs} done", file=sys.stderr, flush=True)
            med = {f"{s} {k}": statistics.median(v) for (s, k), v in times.items()}
            results.append({"profile": str(prof), "batch": batch, "medians_s": med,
                            "times_s": {f"{s} {k}": v for (s, k), v in times.items()},
                            "rows": rows[("now", "what-if")]})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    meds = [(r, r["medians_s"]) for r in results]
    _markdown(["profile (batch -> 2x)", "plain, before", "what-if, before", "plain, now",
               "what-if, now", "what-if / plain, before", "now", "what-if, before / now"],
              [[f"{_name(r['profile'])} ({r['batch']})", f"{m['before plain']:.1f}",
                f"{m['before what-if']:.1f}", f"{m['now plain']:.1f}", f"{m['now what-if']:.1f}",
                f"{m['before what-if'] / m['before plain']:.2f}",
                f"{m['now what-if'] / m['now plain']:.2f}",
                f"{m['before what-if'] / m['now what-if']:.2f}"] for r, m in meds])
    if args.pairs:
        print()
        _markdown(["profile", "what-if alone, before", "two at once, before", "alone, now",
                   "two at once, now"],
                  [[_name(r["profile"]), *(f"{m[k]:.1f}" for k in (
                      "before what-if", "before what-if, two at once", "now what-if",
                      "now what-if, two at once"))] for r, m in meds])
    if args.json:
        args.json.write_text(json.dumps({"before": args.before, "db": str(args.db),
                                         "workers": args.workers, "results": results},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli("bench_opdb_predict.py", main, (OSError, RuntimeError,
                                                      subprocess.CalledProcessError)))
