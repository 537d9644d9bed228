"""Read TensorFlow timelines that exist without a bundle into StepTrace records.

Two formats are common in the wild: the Chrome trace JSON of ``tensorflow.python.client.timeline``
(``traceEvents`` with ``process_name`` metadata naming ``DEVICE Compute`` / ``DEVICE Tensors``
processes and ``X`` events per op), and ``str(RunMetadata)``, the RunMetadata text proto. Both
become the same records as a bundle's op tables, so later stages need not care where a trace came
from. A Chrome trace carries no tensor names or sizes for RecvTensor events, and no partition
graphs, so those fields stay empty.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gradwire import schema
from gradwire.bundle import read_json, read_text
from gradwire.errors import BundleError, TraceError
from gradwire.records import OpRecord, StepTrace


def chrome_trace_ops(doc: dict[str, Any], step: int = 0) -> StepTrace:
    """A Chrome trace document (already parsed JSON) as one StepTrace of its ``X`` op events.

    Events of the ``Compute`` processes are ops; ``Tensors`` and allocator processes are not.
    Processes that repeat a device name (a timeline merging client and remote step stats) map
    to the same device. The events are validated first (gradwire/schema.py ``CHROME_TRACE``:
    objects, finite times from 0, durations from 0 to a day); TraceError names the bad one.
    """
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise TraceError("not a Chrome trace: no 'traceEvents' list")
    schema.check(doc, schema.CHROME_TRACE, None, TraceError)
    devices: dict[Any, str] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            name = str(e.get("args", {}).get("name", ""))
            if name.endswith(" Compute"):
                devices[e.get("pid")] = name[: -len(" Compute")]
    ops = []
    for e in events:
        if e.get("ph") != "X" or e.get("pid") not in devices:
            continue
        args = e.get("args") or {}
        start = int(e["ts"])
        ops.append(OpRecord(step=step, name=str(args.get("name", e.get("name"))),
                            op_type=str(args.get("op", e.get("name"))),
                            device=devices[e["pid"]], start_us=start,
                            end_us=start + int(e.get("dur", 0))))
    ops.sort(key=lambda o: (o.start_us, o.end_us, o.device, o.name))
    return StepTrace(step=step, ops=tuple(_distinct_names(ops)), deps=(),
                     devices=tuple(dict.fromkeys(devices.values())))


def _distinct_names(ops: list[OpRecord]) -> list[OpRecord]:
    """Ops in time order, a name repeated on one device numbered from its second event
    (``RecvTensor``, ``RecvTensor#2``...): a step's op is known by device and name, and a Chrome
    trace names every server-side RecvTensor call alike."""
    import dataclasses

    seen: dict[tuple[str, str], int] = {}
    out = []
    for op in ops:
        k = seen[(op.device, op.name)] = seen.get((op.device, op.name), 0) + 1
        out.append(op if k == 1 else dataclasses.replace(op, name=f"{op.name}#{k}"))
    return out


def load_chrome_trace(path: str | Path, step: int = 0) -> StepTrace:
    """Read a TF timeline Chrome trace JSON file (see ``chrome_trace_ops``)."""
    path = Path(path)
    try:
        doc = read_json(path)  # refuses a FIFO, deep nesting, a 5,000-digit number
    except BundleError as exc:
        raise TraceError(f"not readable JSON: {exc.message}", path=path) from None
    try:
        return chrome_trace_ops(doc, step)
    except TraceError as exc:
        raise TraceError(exc.message, path=path) from None


def load_run_metadata_text(path: str | Path, step: int = 0) -> StepTrace:
    """Read a RunMetadata text proto (``str(run_metadata)``) into a StepTrace."""
    path = Path(path)
    try:
        from google.protobuf import text_format
    except ImportError:
        raise TraceError("reading a RunMetadata text proto needs the Python package "
                         "'protobuf': pip install 'gradwire[predict]' (a Chrome trace .json "
                         "does not)", path=path) from None
    from gradwire.collector.runmetadata import missing_step_stats, run_metadata
    from gradwire.collector.stepstats import parse_run_metadata

    md = run_metadata()
    try:
        text = read_text(path)  # a regular file: a FIFO would block
    except BundleError as exc:
        raise TraceError(exc.message, path=path) from None
    try:
        text_format.Parse(text, md)
    except (text_format.ParseError, RecursionError) as exc:
        raise TraceError(f"not a RunMetadata text proto ({exc})", path=path) from None
    why = missing_step_stats(md, empty=not text.strip())  # "" parses as an empty message
    if why:
        raise TraceError(why, path=path)
    return parse_run_metadata(md, step)
