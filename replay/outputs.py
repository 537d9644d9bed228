"""What ``gradwire predict`` writes: table rows, the results on standard output, -o DIR's files
(predictions.json, .csv, throughput.png, the timeline), the list of files written, and the rows
of a sweep stopped midway. Nothing here computes a prediction."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradwire import atomic, emit, export
from gradwire.replay.options import FORMATS, PredictOptions
from gradwire.units import format_rate

if TYPE_CHECKING:
    from gradwire.replay.engine import Simulator
    from gradwire.replay.predict import Prediction

FIELDS = ("model", "mechanism", "workers", "ps", "bandwidth_bps", "order", "flow_control",
          "examples_per_s", "steps_per_s", "speedup", "ci_low", "ci_high", "phase_low",
          "phase_high", "start", "bottleneck", "utilisation", "ps_cores_busy", "steps", "events")
OUT_FILES = ("predictions.json", "predictions.csv", "throughput.png")  # what -o DIR holds


def rows_of(preds: list[Prediction]) -> list[dict[str, Any]]:
    """Table rows with the speedup over the same model/mechanism/M/bandwidth at the smallest
    W."""
    base: dict[tuple, float] = {}
    for p in sorted(preds, key=lambda p: p.workers):
        base.setdefault((p.model, p.mechanism, p.ps, p.bandwidth_bps), p.examples_per_s)
    out = []
    for p in preds:
        d = dataclasses.asdict(p)
        d["ci_low"], d["ci_high"] = d.pop("ci")
        d["phase_low"], d["phase_high"] = d.pop("phase_range") or (None, None)
        ref = base[(p.model, p.mechanism, p.ps, p.bandwidth_bps)]
        d["speedup"] = p.examples_per_s / ref if ref else 0.0
        out.append({k: d[k] for k in FIELDS})
    return out


def timeline_name(workers: int, ps: int, bandwidth_bps: float) -> str:
    """The file name of ``--timeline W,M,BW``'s Chrome trace."""
    return f"timeline-W{workers}-M{ps}-{format_rate(bandwidth_bps)}.json"


def write_outputs(opts: PredictOptions, doc: dict[str, Any], rows: list[dict[str, Any]],
                  measured: list[dict[str, Any]], timeline: Simulator | None = None
                  ) -> list[Path]:
    """Write -o DIR's files (and the deprecated --json FILE); returns the paths written.
    ``timeline``: ``--timeline``'s recorded run. Every file is made in memory first and then
    written as one (``atomic.write_outputs``), so that a failure in making or writing any of
    them (the plot, a FIFO without a reader, a full disk) leaves the folder as it was."""
    text = json.dumps(doc, indent=1) + "\n"
    files: list[tuple[Path, str | bytes, str]] = []
    if opts.json_path is not None:
        files.append((opts.json_path, text, "--json file"))
    if opts.out:
        buf = io.StringIO()
        export.write_rows(rows, "csv", FIELDS, out=buf)  # cells as --format csv writes them
        from gradwire.replay.plot import plot_throughput

        png = io.BytesIO()
        name = ", ".join(Path(p).name for p in doc["profile"]["source"].split(", "))
        plot_throughput(rows, measured, png, title=name)  # the profile's folders, by name
        files += [(opts.out / "predictions.json", text, "output file"),
                  (opts.out / "predictions.csv", buf.getvalue(), "output file"),
                  (opts.out / "throughput.png", png.getvalue(), "output file")]
    if opts.timeline and opts.out and timeline is not None:
        from gradwire.replay.timeline import synthetic_trace

        files.append((opts.out / timeline_name(*opts.timeline),
                      json.dumps(synthetic_trace(timeline, opts.timeline[2])) + "\n",
                      "output file"))
    return atomic.write_outputs(files)


def _cli_args(opts: PredictOptions) -> argparse.Namespace:
    """What the CLI convention's writers (gradwire/emit.py) read of a command's arguments."""
    return argparse.Namespace(command="predict", format=opts.format, quiet=opts.quiet, out=None)


def show_results(opts: PredictOptions, doc: dict[str, Any], rows: list[dict[str, Any]],
                 measured: list[dict[str, Any]]) -> None:
    """The results on standard output: the table (not with -q) and ``--explain``'s critical
    path, or ``--format`` json/csv."""
    from gradwire.render import print_critical_path, print_predictions

    def table(con: Any) -> None:
        print_predictions(rows, measured, con)
        if "critical_path" in doc:
            print_critical_path(doc["critical_path"], con)

    emit.emit(_cli_args(opts), FORMATS, table=table, doc=doc,
              rows=rows if opts.format == "csv" else None, columns=list(FIELDS),
              out_is_folder=True)


def say_notes(notes: list[str]) -> None:
    """The notes, a line each on standard error."""
    for note in notes:
        print(f"gradwire predict: {note}", file=sys.stderr)


def say_written(opts: PredictOptions, written: list[Path]) -> None:
    """The closing line listing the files written (not with -q)."""
    emit.wrote(_cli_args(opts), written)


def print_finished(finished: list[Prediction] | None, total: int, quiet: bool) -> None:
    """The table of the configurations a stopped sweep had finished (nothing is written to
    -o: it holds whole sweeps only)."""
    if not finished or quiet:  # (-q: no table)
        return
    from gradwire.render import print_predictions

    print(f"gradwire predict: stopped after {len(finished)} of {total} configurations; those "
          "finished (not written to --out or --json):", file=sys.stderr, flush=True)
    print_predictions(rows_of(finished), [])
