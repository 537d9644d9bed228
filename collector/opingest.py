"""Every op a recorded bundle's steps executed, as op cost database rows (``opdb ingest``).

Reads each step's lossless ``step-NNNNNNNN.runmeta.pb`` (the RunMetadata the TraceHook
stored), finds each compute op's input and output shapes (``collector.opshapes``), and groups
the executions of one op type at one shape point (over the steps, and over the ops of one
step that share it) into one row: their count, median and percentiles. The machine is the one
the hook wrote in ``session.json``; a bundle recorded before it did (gradwire 0.1 bundles) is
keyed by its host name and TensorFlow version instead, so its rows never mix with a machine
whose processor is known.

Parsing RunMetadata needs TensorFlow's protobuf classes (the ``[tf]`` extra).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gradwire.bundle import open_bundle
from gradwire.errors import BundleError
from gradwire.opdb import Machine, OpTiming, machine_of
from gradwire.opfeatures import features

from .opshapes import ExecutedOp, executed_ops


def bundle_machine(session: dict[str, Any] | None, path: Path) -> Machine:
    """The machine a bundle's trace ran on: ``session.json``'s ``machine``, else one named by
    its host and TensorFlow version (``host NAME``)."""
    if not session:
        raise BundleError("no trace/session.json: not a bundle with a TensorFlow trace",
                          path=path)
    m = session.get("machine")
    if m:
        return Machine(**m)
    return machine_of(f"host {session.get('hostname', '?')}", 0,
                      str(session.get("tf_version") or "?"))


def read_run_metadata(path: Path) -> Any:
    """One stored step's RunMetadata message; BundleError naming the file if unreadable."""
    import os

    from google.protobuf.message import DecodeError

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # not TensorFlow's start-up notes
    from tensorflow.core.protobuf.config_pb2 import RunMetadata  # first: names the [tf] extra

    meta = RunMetadata()
    try:
        meta.ParseFromString(path.read_bytes())
    except (OSError, DecodeError) as exc:
        raise BundleError(f"cannot read the step's RunMetadata ({exc})", path=path) from None
    return meta


def timings(ops: list[ExecutedOp], machine: Machine, source: str) -> list[OpTiming]:
    """One row per op type and shape point of ``ops`` (executions of it in one bundle)."""
    groups: dict[tuple[Any, ...], list[ExecutedOp]] = defaultdict(list)
    for o in ops:
        if any(s is None for s in o.inputs):
            continue  # an input the step recorded no shape of: no features
        groups[(o.op, o.inputs, o.attrs, o.dtype, o.device)].append(o)
    out = []
    for (op, inputs, attrs, dtype, device), items in groups.items():
        t = sorted(o.duration_us for o in items)
        first = items[0]
        n_flops, size = features(op, inputs, first.outputs, dict(attrs), dtype)
        out.append(OpTiming(
            op=op, inputs=inputs, attrs=attrs, dtype=dtype, device=device,
            fingerprint=machine.fingerprint, source=source, outputs=first.outputs,
            flops=n_flops, bytes_=size, reps=len(t), median_us=statistics.median(t),
            p10_us=t[int(0.1 * (len(t) - 1))], p90_us=t[int(0.9 * (len(t) - 1) + 0.5)]))
    return out


def ingest_bundle(path: Path, progress: Callable[[str], None] | None = None
                  ) -> tuple[Machine, list[OpTiming]]:
    """The machine and the op rows of one bundle's recorded steps (source ``trace:NAME``,
    NAME the bundle folder's name and its parent's: ``run1/worker0``)."""
    b = open_bundle(path)
    machine = bundle_machine(b.session, b.path)
    ops: list[ExecutedOp] = []
    files = [p.with_name(p.name.replace(".ops.json", ".runmeta.pb")) for p in b.step_files]
    for f in files:
        if f.is_file():
            ops.extend(executed_ops(read_run_metadata(f)))
    if not ops:
        raise BundleError("no recorded step with compute ops (trace/step-*.runmeta.pb)",
                          path=b.path)
    if progress:
        progress(f"{b.path}: {len(ops)} op executions in {len(files)} steps")
    source = f"trace:{b.path.resolve().parent.name}/{b.path.resolve().name}"
    return machine, timings(ops, machine, source)
