"""The WIN multiplexing model against real 1-worker captures, in ICPE'20 Table 1 statistics.

For each capture, WIN (and the link rate) is fitted on the downlink RecvTensor streams, as
``gradwire win`` does. The end-time errors ``|predicted - observed| / the step's phase on the
link`` are reported for the fitted and for the advertised WIN: average, median, 95th
percentile, maximum and number of streams (the columns of the paper's Table 1). A summary line
counts the captures whose fitted median is at most 8%, the paper's worst Table 1 median.

Sources (any mix, at least one):

``--accuracy DIR``
    The 1-worker profile of every configuration the accuracy benchmark recorded
    (``DIR/<config>/profile``, as ``scripts/bench_accuracy.py measure`` writes it): MLP, convnet
    and ResNet-50 at 250 Mbit/s to 1 Gbit/s, with 1 or 2 PSes and flow control on or off.
``--bundle PATH``
    A worker bundle recorded with ``gradwire collect``, or a folder of node bundles (every
    worker bundle with a capture is used).
``--fresh N``
    N fresh 1-worker lab runs of MLP 20 MB at 1 Gbit/s, 10 steps (the job of
    ``tests/test_win.py``), recorded under ``--work`` one at a time, each fitted and then
    deleted (about 0.8 GB of capture each) unless ``--keep``. Needs root and TensorFlow.

Prints a Markdown table and writes it, with the numbers, to ``--json`` (default
``bench-out/win.json``). Examples:

    .venv/bin/python scripts/bench_win.py --accuracy bench-out/accuracy
    .venv/bin/python scripts/bench_win.py --fresh 20 --work bench-out/win-runs
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
sys.path.insert(0, str(SCRIPTS))  # the lab, for --fresh

from benchcli import OneLineParser, positive_int, run_cli  # noqa: E402

from gradwire import atomic  # noqa: E402
from gradwire.bundle import find_bundles, open_bundle  # noqa: E402
from gradwire.collector.win import WinFit, fit_capture  # noqa: E402
from gradwire.errors import GradwireError  # noqa: E402
from gradwire.replay.netns import LabError  # noqa: E402

PROG = "bench_win"
PAPER_WORST_MEDIAN = 0.08  # ICPE'20 Table 1: medians 0.35%-8%
DEFAULT_JSON = REPO / "bench-out" / "win.json"


class BenchError(Exception):
    """A source the benchmark cannot use (one line)."""


def worker_bundles(path: Path) -> list[Path]:
    """The worker bundles with a capture at ``path`` (a bundle or a folder of node bundles)."""
    found = []
    for folder in find_bundles(path):
        bundle = open_bundle(folder)
        task = bundle.manifest.get("task") or {}
        if task.get("type") == "worker" and bundle.capture_file is not None:
            found.append(folder)
    if not found:
        raise BenchError(f"{path}: no worker bundle with a capture")
    return found


def fit_bundle(folder: Path) -> WinFit:
    """WIN fitted on the downlink streams of the worker bundle at ``folder``."""
    bundle = open_bundle(folder)
    fit, _ = fit_capture(bundle.capture_file, bundle.ports)
    if not fit.steps:
        raise BenchError(f"{folder}: no downlink RecvTensor streams to fit")
    return fit


def row(source: str, label: str, fit: WinFit) -> dict[str, Any]:
    """One table row: where the capture comes from, and the fit."""
    return {"source": source, "label": label, **asdict(fit)}


def accuracy_sources(root: Path) -> list[tuple[str, Path]]:
    """(configuration name, profile folder) of every configuration under ``root``."""
    if not root.is_dir():
        raise BenchError(f"{root}: no such folder")
    found = [(d.name, d / "profile") for d in sorted(root.iterdir()) if (d / "profile").is_dir()]
    if not found:
        raise BenchError(f"{root}: no <config>/profile folders (run bench_accuracy.py measure)")
    return found


def record_job(folder: Path) -> Path:
    """One 1-worker lab run of the WIN job (MLP 20 MB, 1 Gbit/s, 10 steps, steps 3-5 traced)
    collected into ``folder`` (created), its ``lab_result.json`` beside the bundles; returns
    ``folder``. Needs root and TensorFlow."""
    from lab.cluster import LabConfig, run_lab

    folder.mkdir(parents=True, exist_ok=True)
    result = run_lab(LabConfig(model="mlp", model_mb=20, workers=1, ps=1, steps=10,
                               bandwidth="1gbit", collect_dir=str(folder), trace_first=3,
                               trace_steps=3))
    (folder / "lab_result.json").write_text(json.dumps(result))
    return folder


def fresh_runs(n: int, work: Path) -> Iterator[tuple[str, Path]]:
    """Record ``n`` runs of the WIN job (``record_job``) under ``work``, one at a time: yields
    each run's (label, folder) before recording the next."""
    for k in range(1, n + 1):
        t0 = time.monotonic()
        folder = record_job(work / f"run{k:02d}-{time.strftime('%Y%m%d-%H%M%S')}")
        print(f"[{k}/{n}] lab run {folder.name}: {time.monotonic() - t0:.0f} s",
              file=sys.stderr, flush=True)
        yield f"fresh {k}", folder


def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


def table(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown table of ``rows`` and the summary lines."""
    lines = [
        "| source | capture | links | steps | streams | WIN fitted (bytes) | WIN advertised | "
        "avg % | median % | p95 % | max % | median %, advertised WIN |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        f, a = r["fitted"], r["advertised"]
        lines.append(
            f"| {r['source']} | {r['label']} | {r['links']} | {r['steps']} | {f['streams']} | "
            f"{r['fitted_win_bytes']:,} | {r['advertised_win_bytes']:,} | {_pct(f['average'])} | "
            f"{_pct(f['median'])} | {_pct(f['p95'])} | {_pct(f['maximum'])} | "
            f"{_pct(a['median'])} |"
        )
    medians = [r["fitted"]["median"] for r in rows]
    within = sum(m <= PAPER_WORST_MEDIAN for m in medians)
    lines += [
        "",
        f"Captures: {len(rows)}; fitted WIN's median error: median over captures "
        f"{_pct(statistics.median(medians))}%, largest {_pct(max(medians))}%; "
        f"{within} of {len(rows)} within the paper's worst Table 1 median (8%).",
    ]
    return lines


def build_parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    p = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--accuracy", type=Path, metavar="DIR",
                   help="the accuracy benchmark's output folder (its 1-worker profiles)")
    p.add_argument("--bundle", type=Path, action="append", default=[], metavar="PATH",
                   help="a worker bundle or a folder of node bundles (repeatable)")
    p.add_argument("--fresh", type=positive_int, metavar="N",
                   help="record N fresh 1-worker lab runs (root, TensorFlow)")
    p.add_argument("--work", type=Path, default=REPO / "bench-out" / "win-runs",
                   help="where --fresh records its runs (default: bench-out/win-runs)")
    p.add_argument("--keep", action="store_true",
                   help="keep each fresh run's bundles (about 0.8 GB each); by default a run "
                        "is deleted once fitted")
    p.add_argument("--json", type=Path, default=DEFAULT_JSON,
                   help="results file (default: bench-out/win.json)")
    return p


def _run(args: argparse.Namespace) -> int:
    rows = []

    def fit_all(source: str, label: str, path: Path) -> None:
        for folder in worker_bundles(path):
            name = label if folder == path else f"{label} {folder.name}"
            rows.append(row(source, name, fit_bundle(folder)))

    sources = [("bundle", str(p), p) for p in args.bundle]
    if args.accuracy:
        sources = [("accuracy", name, p) for name, p in accuracy_sources(args.accuracy)] + sources
    for source, label, path in sources:
        fit_all(source, label, path)
    for label, folder in fresh_runs(args.fresh or 0, args.work):
        fit_all("fresh", label, folder)
        if not args.keep:  # ~0.8 GB of capture per run
            shutil.rmtree(folder)
    lines = table(rows)
    print("\n".join(lines), flush=True)
    atomic.write_json(args.json, {"rows": rows, "table": lines})
    print(f"wrote {args.json}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    args = build_parser().parse_args(argv)
    if not (args.accuracy or args.bundle or args.fresh):
        print(f"{PROG}: error: give --accuracy DIR, --bundle PATH or --fresh N", file=sys.stderr)
        return 2
    return run_cli(PROG, lambda: _run(args), (BenchError, GradwireError, LabError))


if __name__ == "__main__":
    sys.exit(main())
