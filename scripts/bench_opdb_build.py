"""How long ``gradwire opdb build`` takes a grid point, today's code against an earlier
commit's, side by side in one run on the same grid, and whether the rows they time agree.

Sides (each a ``gradwire opdb build`` process into a fresh database file of its own):

* ``before`` and ``before-again``: the code of ``--before REV`` (taken with ``git archive``
  and run with ``PYTHONPATH`` ahead of the installed package, as bench_opdb_predict.py does),
  twice: ``before-again / before`` is the machine's own disagreement with itself;
* ``now``: this checkout, with ``--now-reps N`` timed runs a point where given (the build's
  default otherwise): with ``--before HEAD`` the sides differ in their runs a point alone.

The op families (all but the ring hop, which times two processes of its own) are dealt into
``--groups`` groups; for each group every side builds ``--points`` points per family and
dtype (``--threads``, and the pass fixed by ``--cache-pass``, so nothing is calibrated), the
sides' order rotating from group to group. A side's seconds per grid point are its build
processes' wall time (TensorFlow's import and the choices at the end included, the same work
on every side) over the grid points it was given. Rows: per op type, the median of B's time
over A's for the keys both files hold (scripts/opdb_compare.py), for ``now / before`` and
``before-again / before``.

    .venv/bin/python scripts/bench_opdb_build.py [--before REV] [--now-reps N] [--points 8]
        [--groups 4] [--threads 1] [--cache-pass 64MiB] [--out DIR] [--json out.json]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_opdb_predict import CACHE, _markdown, side_envs
from benchcli import OneLineParser, output_file, output_folder, positive_int, revision, size_text
from opdb_compare import _by_key, _quantile, compare

SIDES = ("before", "before-again", "now")


def main() -> int:
    from gradwire.collector.opgrid import FAMILIES, RING_HOP, points
    from gradwire.replay.opcost import build_rows
    from gradwire.units import parse_size_bytes

    ap = OneLineParser(prog="bench_opdb_build.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=revision, default="b934493",
                    help="the commit to compare with")
    ap.add_argument("--now-reps", type=positive_int, default=None,
                    help="the now side's build --reps (default: the build's own default)")
    ap.add_argument("--points", type=positive_int, default=8,
                    help="build's --points (default 8)")
    ap.add_argument("--groups", type=positive_int, default=4, help="family groups (default 4)")
    ap.add_argument("--threads", type=positive_int, default=1,
                    help="build's --threads (default 1)")
    ap.add_argument("--cache-pass", type=size_text, default="64MiB",
                    help="build's --cache-pass (64MiB)")
    ap.add_argument("--out", type=output_folder, default=None,
                    help="keep the three database files here (default: a temporary folder)")
    ap.add_argument("--json", type=output_file, default=None,
                    help="also write the results here")
    args = ap.parse_args()
    families = [f for f in FAMILIES if f.op != RING_HOP]
    if args.groups > len(families):
        ap.error(f"--groups {args.groups}: at most one group per op family ({len(families)})")
    groups = [families[i::args.groups] for i in range(args.groups)]
    CACHE.mkdir(parents=True, exist_ok=True)
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-opdb-build-"))
    out.mkdir(parents=True, exist_ok=True)
    dbs = {side: (out / f"{side}.sqlite").resolve() for side in SIDES}
    if any(db.exists() for db in dbs.values()):
        ap.error(f"{out}: holds a database of an earlier run; give another --out")
    env_before, env_now = side_envs(args.before, out)
    envs = {"before": env_before, "before-again": env_before, "now": env_now}
    pass_bytes = parse_size_bytes(args.cache_pass)
    seconds = {side: 0.0 for side in SIDES}
    grid = 0
    for g, group in enumerate(groups):
        ops = ",".join(f.op for f in group)
        n = sum(1 for _ in points(tuple(group), per_family=args.points))
        grid += n
        order = SIDES[g % 3:] + SIDES[:g % 3]
        for side in order:
            argv = [sys.executable, "-m", "gradwire", "opdb", "build", "--db", str(dbs[side]),
                    "--points", str(args.points), "--threads", str(args.threads),
                    "--cache-pass", f"{pass_bytes:.0f}", "--ops", ops, "-q"]
            if side == "now" and args.now_reps:
                argv += ["--reps", str(args.now_reps)]
            t0 = time.perf_counter()
            proc = subprocess.run(argv, env=envs[side], cwd=out, capture_output=True,
                                  text=True)
            took = time.perf_counter() - t0
            if proc.returncode != 0:
                print(f"{side}: build failed: {proc.stderr.strip()[-500:]}", file=sys.stderr)
                return 1
            seconds[side] += took
            print(f"group {g + 1}/{len(groups)} ({n} grid points): {side} {took:.0f} s",
                  file=sys.stderr, flush=True)
    rows = {side: build_rows(dbs[side], None)[0] for side in SIDES}
    per_point = {side: seconds[side] / grid for side in SIDES}
    print(f"{grid} grid points per side, {len(groups)} groups, --points {args.points}, "
          f"--threads {args.threads}, --cache-pass {args.cache_pass}; before = {args.before}"
          + (f"; now with --reps {args.now_reps}" if args.now_reps else ""))
    _markdown(["side", "s a grid point", "over before's"],
              [[side, f"{per_point[side]:.3f}", f"{per_point[side] / per_point['before']:.2f}"]
               for side in SIDES])
    print()
    result = {"grid_points": grid, "before": args.before, "now_reps": args.now_reps,
              "seconds": seconds,
              "per_point_s": per_point, "rows": {}}
    for b in ("now", "before-again"):
        table = compare(rows["before"], rows[b], 1000.0)
        if not table:
            print(f"{b} and before timed no shape in common", file=sys.stderr)
            return 1
        types = [t for t in table if t[0] != "all"]
        pooled = next(t for t in table if t[0] == "all")
        meds = [t[3] for t in types]
        ka, kb = _by_key(rows["before"]), _by_key(rows[b])
        every = [kb[k].median_us / ka[k].median_us for k in ka.keys() & kb.keys()
                 if ka[k].median_us > 0]
        summary = {"keys": pooled[2], "median": pooled[3], "all_p10": _quantile(every, 0.1),
                   "all_p90": _quantile(every, 0.9), "p10": pooled[6],
                   "p90": pooled[7], "keys_1ms": pooled[4], "median_1ms": pooled[5],
                   "op_types": len(types),
                   "op_type_median_p10": _quantile(meds, 0.1),
                   "op_type_median_p90": _quantile(meds, 0.9)}
        result["rows"][b] = {"summary": summary, "per_type": [list(t) for t in table]}
    _markdown(["B / before", "keys", "median", "10%", "90%", "keys >= 1 ms", "median",
               "their 10%", "90%", "op types", "op types' medians, 10%", "90%"],
              [[b, str(s["keys"]), f"{s['median']:.3f}", f"{s['all_p10']:.3f}",
                f"{s['all_p90']:.3f}", str(s["keys_1ms"]),
                f"{s['median_1ms']:.3f}", f"{s['p10']:.3f}", f"{s['p90']:.3f}",
                str(s["op_types"]), f"{s['op_type_median_p10']:.2f}",
                f"{s['op_type_median_p90']:.2f}"]
               for b, s in ((b, result["rows"][b]["summary"]) for b in ("now", "before-again"))])
    print()
    by_type = {b: {(t[0], t[1]): t[3] for t in result["rows"][b]["per_type"]}
               for b in ("now", "before-again")}
    _markdown(["op", "dtype", "now / before", "before-again / before"],
              [[op, dtype, f"{by_type['now'][(op, dtype)]:.2f}",
                f"{by_type['before-again'].get((op, dtype), float('nan')):.2f}"]
               for op, dtype in sorted(by_type["now"]) if op != "all"])
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.out is None:
        print(f"databases: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
