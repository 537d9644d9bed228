"""Re-predict the configurations of a stored accuracy report with today's gradwire.

A report written by ``scripts/bench_accuracy.py report`` (docs/preregistered/*-report*.md)
keeps each configuration's measured examples/s per W and the predictions of its day; the lab
runs behind it may be gone. This script reads those measured numbers, predicts the same
configurations from the 1-worker profiles given on the command line (``NAME=PROFILE``, NAME
the report's section heading, e.g. ``deepmlp10-b32-500mbit-ps1-fcon-sync``), and prints one
table per configuration and the summary: today's default, each ``--variant``, and the
report's own pre-registered numbers, side by side. A configuration of the benchmark's
(``bench_accuracy.CONFIGS``) is predicted with its job's options (``--partition``,
``--accumulate``...), as the benchmark's predict stage does. The runs were seen before these
predictions, so the result is post hoc, and the output says so.

    python scripts/repredict_report.py docs/preregistered/issue22-sync-matrix-report-2.md \\
        deepmlp10-b32-500mbit-ps1-fcon-sync=bench-out/.../profile ... [--variant fair=--link,fair]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

from bench_accuracy import CONFIGS, BenchError, _predict_json, job_options

GRADWIRE = [sys.executable, "-m", "gradwire"]
ROW = re.compile(r"^\| (\d+) \| ([\d.]+) \|")


def measured_tables(report: Path) -> dict[str, dict[str, list]]:
    """Per section (configuration): its rate and PS count (from the description line), and
    per W the measured examples/s and the pre-registered signed error (%), as the report
    wrote them."""
    out: dict[str, dict[str, list]] = {}
    name, header = None, []
    for line in report.read_text().splitlines():
        if line.startswith("## "):
            name, header = line[3:].strip(), []
            continue
        if name is None:
            continue
        m = re.search(r", (\d+(?:mbit|gbit))", line)
        if m and "rate" not in out.get(name, {}):
            ps = re.search(r"M=(\d+) PS", line)
            out.setdefault(name, {"rate": [m.group(1)], "ps": [ps.group(1) if ps else "1"],
                                  "rows": []})
        if line.startswith("| W |"):
            header = [c.strip() for c in line.strip("|").split("|")]
        elif ROW.match(line) and header and name in out:
            cells = [c.strip() for c in line.strip("|").split("|")]
            reg = cells[header.index("sim pre-registered %")] if (
                "sim pre-registered %" in header) else "nan"
            out[name]["rows"].append((int(cells[0]), float(cells[1]), float(reg)))
    return {k: v for k, v in out.items() if v["rows"]}


def predict(profile: str, rate: str, ps: str, workers: list[int], extra: list[str]
            ) -> dict[int, float]:
    """The sim's examples/s per W at ``ps`` PSes (gradwire predict, JSON)."""
    cmd = [*GRADWIRE, "predict", profile, "--workers", ",".join(map(str, workers)),
           "--worker-bandwidth", "unlimited", "--bandwidth", rate, "--ps", ps, "--model", "sim",
           "--format", "json", "-q", *extra]
    try:
        rows = _predict_json(cmd, profile)["rows"]
    except BenchError as exc:
        raise SystemExit(f"repredict_report: {exc}") from None
    return {r["workers"]: r["examples_per_s"] for r in rows if r["model"] == "sim"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", type=Path)
    ap.add_argument("profiles", nargs="+", metavar="NAME=PROFILE")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL=ARG,ARG",
                    help="another column: predict options, comma-separated")
    args = ap.parse_args(argv)
    if not args.report.is_file():
        ap.error(f"{args.report}: no such report")
    tables = measured_tables(args.report)
    given = dict(p.split("=", 1) for p in args.profiles if "=" in p)
    unknown = sorted(set(given) - set(tables))
    if unknown or len(given) != len(args.profiles):
        ap.error(f"give NAME=PROFILE with NAME one of {', '.join(tables)}; not: "
                 f"{', '.join(unknown) or 'a pair without ='}")
    variants = {"default": []} | {v.split("=", 1)[0]: v.split("=", 1)[1].split(",")
                                  for v in args.variant}
    errors: dict[str, list[tuple[int, float]]] = {k: [] for k in [*variants, "registered"]}
    print(f"Post hoc: the runs of {args.report} were seen before these predictions.")
    for name, profile in given.items():
        rows, rate, ps = tables[name]["rows"], tables[name]["rate"][0], tables[name]["ps"][0]
        ws = [w for w, _, _ in rows]
        job = next((job_options(c) for c in CONFIGS if c.name == name), [])
        preds = {k: predict(profile, rate, ps, ws, [*job, *extra])
                 for k, extra in variants.items()}
        print(f"\n| {name} | " + " | ".join(f"W = {w}" for w in ws) + " |")
        print("|---|" + "---|" * len(ws))
        print("| lab | " + " | ".join(f"{m:.1f}" for _, m, _ in rows) + " |")
        for k, p in preds.items():
            cells = []
            for w, m, _ in rows:
                e = 100 * (p[w] / m - 1)
                errors[k].append((w, abs(e)))
                cells.append(f"{p[w]:.1f} ({e:+.1f}%)")
            print(f"| {k} | " + " | ".join(cells) + " |")
        errors["registered"] += [(w, abs(r)) for w, _, r in rows]
        print("| pre-registered then | " + " | ".join(f"{r:+.1f}%" for _, _, r in rows) + " |")
    print()
    for k, e in errors.items():
        vals = [x for _, x in e if x == x]
        if vals:
            print(f"{k}: median |error| {statistics.median(vals):.1f}%, max {max(vals):.1f}%, "
                  f"beyond 10%: {sum(x > 10 for x in vals)} of {len(vals)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
