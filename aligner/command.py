"""``gradwire align BUNDLE... -o OUT``: offsets.json, dfg.json, dfg.graphml, timeline.json."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gradwire import atomic
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
        "See docs/align.md.",
        epilog="Example:\n  gradwire align bundles/ -o aligned/\n"
        "  gradwire align bundles/ps0 bundles/worker0 -o aligned/ --bandwidth 1Gbit",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("bundles", type=Path, nargs="+", help="node bundles, or folders of them")
    a.add_argument("-o", "--out", type=Path, required=True, help="output folder (created)")
    a.add_argument("--objective", choices=OBJECTIVE_NAMES, default="centre",
                   help="how to pick offsets inside the feasible region (default: centre; "
                   "min-norm is dPRO's)")
    a.add_argument("--reference", default=None,
                   help="bundle name whose clock the others align to (default: first PS)")
    a.add_argument("--bandwidth", type=rate_arg, default=None,
                   help="link rate (e.g. 1Gbit) to add each tensor's wire time to op bounds")
    a.add_argument("--json", action="store_true", help="print offsets.json instead of a table")


def run(args: argparse.Namespace) -> int:
    """Run ``gradwire align``; returns the exit code (1 when the graph has problems)."""
    from gradwire.aligner.align import align
    from gradwire.aligner.chrome import chrome_trace
    from gradwire.aligner.dfg import build_dfg, dfg_document, write_graphml
    from gradwire.render import print_alignment

    def progress(msg: str) -> None:  # on a terminal, or with -v
        if sys.stderr.isatty() or args.verbose:
            print(f"gradwire align: {msg}", file=sys.stderr)

    out: Path = atomic.ready_folder(args.out)  # before the solve: fail fast, lose nothing
    al = align(args.bundles, args.objective, args.reference, args.bandwidth, progress)
    for node in al.nodes:
        if node.capture_problem:
            print(f"gradwire align: warning: {node.path}: {node.capture_problem}; aligned "
                  f"{node.name} from its trace alone", file=sys.stderr)
    progress("building the global data-flow graph")
    g, report = build_dfg(al)
    summary = al.summary()
    summary["dfg"] = {"counts": report.counts, "problems": report.problems}
    atomic.write_text(out / "offsets.json", json.dumps(summary, indent=1) + "\n")
    meta = {"reference": al.offsets.reference, "objective": al.offsets.objective,
            "time_unit": "us, reference clock"}
    atomic.write_text(out / "dfg.json", json.dumps(dfg_document(g, report, meta)) + "\n")
    write_graphml(g, out / "dfg.graphml")
    atomic.write_text(out / "timeline.json", json.dumps(chrome_trace(g)) + "\n")
    if args.json:
        json.dump(summary, sys.stdout, indent=1)
        print()
    else:
        print_alignment(summary)
    print(f"gradwire align: wrote {out}/offsets.json, dfg.json, dfg.graphml, timeline.json",
          file=sys.stderr)
    for problem in report.problems:
        print(f"gradwire align: problem: {problem}", file=sys.stderr)
    return 1 if report.problems else 0
