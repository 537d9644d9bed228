"""``gradwire align BUNDLE... [-o OUT]``: the alignment's report, and in OUT offsets.json,
dfg.json, dfg.graphml and timeline.json."""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path
from typing import Any

from gradwire import atomic, emit
from gradwire.argtypes import path_arg
from gradwire.units import rate_arg

OBJECTIVE_NAMES = ("centre", "min-norm", "max-slack")  # = clock.OBJECTIVES, without cvxpy


def add_parser(sub: Any) -> None:
    """Register the ``align`` subcommand."""
    a = sub.add_parser(
        "align", help="align the nodes' clocks and build the global data-flow graph",
        description="Read the bundles of all nodes, match every tensor transfer (producer op, "
        "packets on both ends, receive op), check that each host's capture and TF clocks agree, "
        "solve one clock offset per host with CVXPY, and write OUT/offsets.json, the global DFG "
        "(OUT/dfg.json, node-link JSON, and OUT/dfg.graphml), and the aligned timeline "
        "OUT/timeline.json (Chrome trace: open it in ui.perfetto.dev or chrome://tracing). "
        "Without -o it prints the alignment's report and writes nothing. See docs/align.md.",
        epilog="Examples:\n  gradwire align bundles/ -o aligned/\n"
        "  gradwire align bundles/ps0 bundles/worker0 -o aligned/ --bandwidth 1Gbit\n"
        "  gradwire align --sample",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("bundles", type=path_arg, nargs="*", help="node bundles, or folders of them")
    a.add_argument("--sample", action="store_true",
                   help="align the sample bundle shipped with gradwire")
    a.add_argument("-o", "--out", type=path_arg, default=None, metavar="DIR",
                   help="output folder (created; files of the names above in it are replaced; "
                   "default: none, the report only)")
    a.add_argument("--objective", choices=OBJECTIVE_NAMES, default="centre",
                   help="how to pick offsets inside the feasible region (default: centre; "
                   "min-norm is dPRO's)")
    a.add_argument("--reference", default=None, metavar="BUNDLE",
                   help="bundle name whose clock the others align to (default: first PS)")
    a.add_argument("--bandwidth", type=rate_arg, default=None,
                   help="link rate (e.g. 1Gbit) to add each tensor's wire time to op bounds "
                   "(default: none, no wire-time bound)", metavar="RATE")
    emit.add_format(a, ("table", "json"), out_is_folder=True)


def run(args: argparse.Namespace) -> int:
    """Run ``gradwire align``; returns the exit code (1 when the graph has problems)."""
    from gradwire.aligner.align import align
    from gradwire.aligner.chrome import chrome_trace
    from gradwire.aligner.dfg import build_dfg, dfg_document, write_graphml
    from gradwire.bundle import given_or_sample
    from gradwire.render import print_alignment

    def progress(msg: str) -> None:
        if emit.shows_progress(args):
            print(f"gradwire align: {msg}", file=sys.stderr)

    bundles = given_or_sample(args.bundles, args.sample,
                              "the bundles to align (each node's, or their folder)")
    names = ("offsets.json", "dfg.json", "dfg.graphml", "timeline.json")
    out: Path | None = None
    if args.out is not None:
        atomic.refuse_file_name(args.out, "align", names[0])
        out = atomic.ready_folder(args.out)  # before the solve: fail fast, lose nothing
        for name in names:
            atomic.ready_file(out / name)
    al = align(bundles, args.objective, args.reference, args.bandwidth, progress)
    for node in al.nodes:
        if node.capture_problem:
            print(f"gradwire align: warning: {node.path}: {node.capture_problem}; aligned "
                  f"{node.name} from its trace alone", file=sys.stderr)
    progress("building the global data-flow graph")
    g, report = build_dfg(al)
    summary = al.summary()
    summary["dfg"] = {"counts": report.counts, "problems": report.problems}
    meta = {"reference": al.offsets.reference, "objective": al.offsets.objective,
            "time_unit": "us, reference clock"}
    written = []
    if out is not None:
        graphml = io.BytesIO()
        write_graphml(g, graphml, meta)
        texts = (json.dumps(summary, indent=1) + "\n", json.dumps(dfg_document(g, report, meta))
                 + "\n", graphml.getvalue(), json.dumps(chrome_trace(g)) + "\n")
        written = atomic.write_outputs([(out / name, text, "output file")
                                        for name, text in zip(names, texts, strict=True)])
    emit.emit(args, ("table", "json"), table=lambda con: print_alignment(summary, con),
              doc=summary, out_is_folder=True)
    emit.wrote(args, written)
    for problem in report.problems:
        print(f"gradwire align: problem: {problem}", file=sys.stderr)
    return 1 if report.problems else 0
