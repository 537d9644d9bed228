"""What ``gradwire predict`` writes: table rows, -o DIR's files (predictions.json, .csv,
throughput.png, the timeline), and the rows of a sweep stopped midway."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import sys
from pathlib import Path
from typing import Any

from gradwire import atomic
from gradwire.collector.transport import TransportStats
from gradwire.errors import GradwireError
from gradwire.replay.command import MAX_WORKERS
from gradwire.replay.grid import profile_bandwidth_bps, start_mode, worker_nic_bps
from gradwire.replay.predict import Prediction, replication_seed, simulate, start_offsets
from gradwire.replay.sweep import REPLICATED
from gradwire.replay.template import Profile
from gradwire.units import format_rate, parse_rate_bps

FIELDS = ("model", "workers", "ps", "bandwidth_bps", "order", "flow_control", "examples_per_s",
          "steps_per_s", "speedup", "ci_low", "ci_high", "phase_low", "phase_high", "start",
          "bottleneck", "utilisation", "ps_cores_busy", "steps", "events")

OUT_FILES = ("predictions.json", "predictions.csv", "throughput.png")  # what -o DIR holds

def rows_of(preds: list[Prediction]) -> list[dict[str, Any]]:
    """Table rows with the speedup over the same model/M/bandwidth at the smallest W."""
    base: dict[tuple, float] = {}
    for p in sorted(preds, key=lambda p: p.workers):
        base.setdefault((p.model, p.ps, p.bandwidth_bps), p.examples_per_s)
    out = []
    for p in preds:
        d = dataclasses.asdict(p)
        d["ci_low"], d["ci_high"] = d.pop("ci")
        d["phase_low"], d["phase_high"] = d.pop("phase_range") or (None, None)
        ref = base[(p.model, p.ps, p.bandwidth_bps)]
        d["speedup"] = p.examples_per_s / ref if ref else 0.0
        out.append({k: d[k] for k in FIELDS})
    return out

def write_outputs(args: argparse.Namespace, doc: dict[str, Any], rows: list[dict[str, Any]],
                   measured: list[dict[str, Any]], prof: Profile, win: float | None,
                   transport: TransportStats | None = None) -> list[Path]:
    """Write -o DIR's files (and the deprecated --json FILE); returns the paths written. Every
    file is made in memory first and then written back to back, so that a failure in making
    one (the timeline's simulation, the plot) leaves the folder as it was."""
    text = json.dumps(doc, indent=1) + "\n"
    files: list[tuple[Path, str | bytes, str]] = []
    if getattr(args, "json_path", None) is not None:
        files.append((args.json_path, text, "--json file"))
    if args.out:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
        from gradwire.replay.plot import plot_throughput

        png = io.BytesIO()
        name = ", ".join(Path(p).name for p in doc["profile"]["source"].split(", "))
        plot_throughput(rows, measured, png, title=name)  # the profile's folders, by name
        files += [(args.out / "predictions.json", text, "output file"),
                  (args.out / "predictions.csv", buf.getvalue(), "output file"),
                  (args.out / "throughput.png", png.getvalue(), "output file")]
    if args.timeline:
        files.append((args.out / timeline_name(args.timeline),
                      _timeline_text(args, prof, win, transport), "output file"))
    return [atomic.write_output(path, data, what) for path, data, what in files]

def parse_timeline_spec(spec: str) -> tuple[int, int, float]:
    """``W,M,BW`` -> (workers, ps, bits per second)."""
    try:
        w, m, bw = spec.split(",")
        workers, ps, bps = int(w), int(m), parse_rate_bps(bw)
    except ValueError:
        raise GradwireError(f"--timeline wants W,M,BANDWIDTH like 4,1,1Gbit: {spec!r}") from None
    if workers < 1 or ps < 1:
        raise GradwireError(f"--timeline needs at least 1 worker and 1 PS: {spec!r}")
    if max(workers, ps) > MAX_WORKERS:
        raise GradwireError(f"--timeline: at most {MAX_WORKERS} workers and PSes: {spec!r}")
    return workers, ps, bps

def timeline_name(spec: str) -> str:
    """The file name of ``--timeline W,M,BW``'s Chrome trace."""
    w, m, bw = parse_timeline_spec(spec)
    return f"timeline-W{w}-M{m}-{format_rate(bw)}.json"

def _timeline_text(args: argparse.Namespace, prof: Profile, win: float | None,
                   transport: TransportStats | None = None) -> str:
    """The Chrome trace JSON of ``--timeline``'s configuration (20 steps)."""
    from gradwire.replay.timeline import synthetic_trace

    w, m, bw = parse_timeline_spec(args.timeline)
    seed, offsets = args.seed, ()
    start = start_mode(args.start, transport, bw, profile_bandwidth_bps(prof))
    if start in REPLICATED:  # the first replication's phases
        seed = replication_seed(args.seed, 0)
        offsets = start_offsets(prof.templates, w, seed, start == "stratified")
    _, sim = simulate(prof.templates, prof.batch_size, w, m, bw, args.order, win, seed,
                      steps=20, max_steps=20, record=True, link=args.link,
                      worker_bandwidth_bps=worker_nic_bps(args, bw), start_offsets_us=offsets,
                      ps_cores=args.ps_cores)
    return json.dumps(synthetic_trace(sim)) + "\n"

def print_finished(finished: list[Prediction] | None, total: int, quiet: bool) -> None:
    """The table of the configurations a stopped sweep had finished (nothing is written to
    -o: it holds whole sweeps only)."""
    if not finished or quiet:  # (-q: no table)
        return
    from gradwire.render import print_predictions

    print(f"gradwire predict: stopped after {len(finished)} of {total} configurations; those "
          "finished (not written to --out or --json):", file=sys.stderr, flush=True)
    print_predictions(rows_of(finished), [])
