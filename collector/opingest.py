"""Every op a recorded bundle's steps executed, as op cost database rows (``opdb ingest``).

Reads each step's lossless ``step-NNNNNNNN.runmeta.pb`` (the RunMetadata the TraceHook
stored), finds each compute op's input and output shapes (``collector.opshapes``), and groups
the executions of one op type at one shape point (over the steps, and over the ops of one
step that share it) into one row: their count, median and percentiles. The machine is the one
the hook wrote in ``session.json``; a bundle recorded before it did (gradwire 0.1 bundles) is
keyed by its host name and TensorFlow version instead, so its rows never mix with a machine
whose processor is known.

RunMetadata is parsed with TensorFlow's descriptors shipped with gradwire
(``collector/runmetadata.py``): the ``protobuf`` package, not TensorFlow.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gradwire.bundle import Bundle, open_bundle, read_bytes, step_file
from gradwire.errors import BundleError
from gradwire.opdb import Machine, OpTiming, machine_of

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
    """One stored step's RunMetadata message (``collector/runmetadata.py``: no TensorFlow
    import); BundleError naming the file if unreadable."""
    from google.protobuf.message import DecodeError

    from gradwire.collector.runmetadata import missing_step_stats, run_metadata

    meta = run_metadata()
    data = read_bytes(path)  # a regular file, or an error naming what it is
    try:
        meta.ParseFromString(data)
    except DecodeError as exc:
        raise BundleError(f"cannot read the step's RunMetadata ({exc})", path=path) from None
    why = missing_step_stats(meta, empty=not data)
    if why:
        raise BundleError(why, path=path)
    return meta


def recorded_steps(b: Bundle) -> list[tuple[int, Any]]:
    """(step, RunMetadata) of each recorded step of bundle ``b`` whose ``runmeta.pb`` is there;
    BundleError when there is none. A step whose file is missing is left out; one that is
    there but cannot be read, or holds no step statistics, is an error naming it."""
    out = []
    for step in b.steps:
        path = step_file(b.path, step, "runmeta.pb")
        if os.path.lexists(path):
            out.append((step, read_run_metadata(path)))
    if not out:
        raise BundleError("no recorded step with its RunMetadata (trace/step-*.runmeta.pb): "
                          "record the bundle with the TraceHook", path=b.path)
    return out


def own_devices(meta: Any, task: str) -> set[str]:
    """The devices of ``meta``'s step stats that belong to the bundle's own ``task``
    (``worker:0``: ``/job:worker/replica:0/task:0/device:CPU:0``, and its GPUs), not the PS
    devices a worker's RunMetadata also reports; without a task, the worker and local ones."""
    devices = {d.device for d in meta.step_stats.dev_stats}
    if task:
        job, _, index = task.partition(":")
        return {d for d in devices if f"/job:{job}/" in d and f"/task:{index}/" in d}
    return {d for d in devices if "/job:worker/" in d or "/job:localhost/" in d} or devices


def own_steps(b: Bundle, compute_only: bool = True
              ) -> Iterator[tuple[int, Any, set[str], list[ExecutedOp]]]:
    """Each recorded step of ``b``: its index, RunMetadata, the bundle's own devices in it
    (``own_devices``) and the ops that ran on them (``executed_ops``)."""
    for step, meta in recorded_steps(b):
        devices = own_devices(meta, b.task)  # a worker's trace holds the PS's ops too
        yield step, meta, devices, [o for o in executed_ops(meta, compute_only=compute_only)
                                    if o.placed in devices]


def timings(ops: list[ExecutedOp], machine: Machine, source: str) -> list[OpTiming]:
    """One row per op type and shape point of ``ops`` (executions of it in one bundle)."""
    groups: dict[tuple[Any, ...], list[ExecutedOp]] = defaultdict(list)
    for o in ops:
        if any(s is None for s in o.inputs):
            continue  # an input the step recorded no shape of: no features
        groups[(o.op, o.inputs, o.attrs, o.dtype, o.device)].append(o)
    out = []
    for (op, inputs, attrs, dtype, device), items in groups.items():
        first = items[0]
        out.append(OpTiming.of_times(
            [o.duration_us for o in items], op=op, inputs=inputs, attrs=attrs, dtype=dtype,
            device=device, fingerprint=machine.fingerprint, source=source,
            outputs=first.outputs))
    return out


def ingest_bundle(path: Path, progress: Callable[[str], None] | None = None
                  ) -> tuple[Machine, list[OpTiming]]:
    """The machine and the op rows of one bundle's recorded steps, its own task's devices
    only (source ``trace:NAME``, NAME the bundle folder's name and its parent's:
    ``run1/worker0``)."""
    b = open_bundle(path)
    machine = bundle_machine(b.session, b.path)
    steps = [mine for _, _, _, mine in own_steps(b)]
    ops = [o for mine in steps for o in mine]
    if not ops:
        raise BundleError("no compute op in the recorded steps", path=b.path)
    if progress:
        progress(f"{b.path}: {len(ops)} op executions in {len(steps)} steps")
    source = f"trace:{b.path.resolve().parent.name}/{b.path.resolve().name}"
    return machine, timings(ops, machine, source)
