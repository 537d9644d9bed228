"""Add the partition graphs' variable records to bundles recorded before the TraceHook kept them.

A step table (``trace/step-NNNNNNNN.ops.json``) now lists the variables of the step's partition
graphs in node order (``StepTrace.variables``); ``gradwire predict`` needs them to place the
variables as TensorFlow does when it predicts another PS count (replay/placement.py). Bundles
from before keep the lossless ``step-NNNNNNNN.runmeta.pb`` beside each table: this script reads
the variables from it and adds them to the table, leaving its ops and dependencies as they are.
It needs TensorFlow (for the RunMetadata protobuf class): run it with the lab's venv.

    .venv/bin/python scripts/add_variables.py BUNDLE_OR_FOLDER...

Prints one line per table; a table that already has variables is left alone (``--force``
derives them again).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gradwire import atomic
from gradwire.bundle import find_bundles, read_json
from gradwire.collector.stepstats import partition_variables
from gradwire.errors import GradwireError
from gradwire.records import to_dict


def add_variables(table: Path, force: bool = False) -> str:
    """Add ``table``'s variables from the RunMetadata beside it (``force``: again, where it
    has them); returns what it did."""
    from tensorflow.core.protobuf.config_pb2 import RunMetadata

    raw = read_json(table)
    if raw.get("variables") and not force:
        return "has variables already"
    runmeta = table.with_name(table.name.replace(".ops.json", ".runmeta.pb"))
    if not runmeta.is_file():
        return f"no {runmeta.name} beside it: left alone"
    meta = RunMetadata()
    meta.ParseFromString(runmeta.read_bytes())
    variables = partition_variables(n for g in meta.partition_graphs for n in g.node)
    raw["variables"] = [to_dict(v) for v in variables]
    atomic.write_text(table, json.dumps(raw) + "\n")
    return f"added {len(variables)} variables"


def main(argv: list[str] | None = None) -> int:
    """Add the variables to every step table of the given bundles (or folders of them)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, help="bundles, or folders of bundles")
    ap.add_argument("--force", action="store_true",
                    help="derive the variables again where a table has them")
    args = ap.parse_args(argv)
    try:
        bundles = [b for p in args.paths for b in find_bundles(p)]
        for b in bundles:
            for table in sorted((Path(b) / "trace").glob("step-*.ops.json")):
                print(f"{table}: {add_variables(table, args.force)}")
    except GradwireError as exc:
        print(f"add_variables: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
