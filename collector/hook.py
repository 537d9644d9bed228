"""TraceHook: the two-line session hook that records per-op timelines into a bundle.

    from gradwire import TraceHook
    with tf.compat.v1.train.MonitoredTrainingSession(..., hooks=[TraceHook()]) as sess: ...

Works wherever a ``tf.compat.v1.train.SessionRunHook`` does (MonitoredTrainingSession, a plain
hooks list, Estimator). For each recorded step it asks TensorFlow for FULL_TRACE step stats and
the partition graphs, stores the RunMetadata losslessly and a derived op table beside it.
"""

from __future__ import annotations

import json
import logging
import operator
import os
import socket
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import tensorflow as tf

from gradwire import __version__, atomic, bundle
from gradwire.collector.stepstats import parse_run_metadata
from gradwire.errors import BundleError, CollectError
from gradwire.opdb import local_machine
from gradwire.records import to_dict

log = logging.getLogger(__name__)
ENV_BUNDLE = bundle.ENV_BUNDLE
MAX_STEP_TIMES = 100_000  # step wall times kept in session.json (about 1 MB)
_tf1 = tf.compat.v1


def static_tensor_bytes(graph: Any, producer: str) -> int | None:
    """Bytes of tensor ``producer`` ('node:slot') from the graph's static shape, or None."""
    try:
        tensor = graph.get_tensor_by_name(producer)
    except (KeyError, ValueError):
        return None
    shape = tensor.shape
    if not shape.is_fully_defined() or tensor.dtype.size == 0:
        return None
    return int(tensor.dtype.size * shape.num_elements())


class TraceHook(_tf1.train.SessionRunHook):
    """Record FULL_TRACE RunMetadata and partition graphs for a window of training steps.

    Args:
        out_dir: bundle folder; defaults to ``$GRADWIRE_BUNDLE`` (set by ``gradwire collect``).
        first_step: index of the first step to record (0-based ``session.run`` count), so that
            warm-up steps are skipped.
        num_steps: how many steps to record; ``None`` records every eligible step.
        every: record one step in ``every`` from ``first_step`` on.
        cluster_spec: optional cluster description (dict) stored in the bundle; by default it
            is read from ``TF_CONFIG`` when set.
        batch_size: examples this worker takes per step, stored in the bundle so that
            ``gradwire predict`` reports examples/s without ``--batch-size``; ``None``: not
            recorded (the lab's ``lab_result.json``, or ``--batch-size``, then says it).
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str] | None = None,
        first_step: int = 10,
        num_steps: int | None = 5,
        every: int = 1,
        cluster_spec: dict[str, Any] | None = None,
        batch_size: int | None = None,
    ) -> None:
        target = out_dir if out_dir is not None else os.environ.get(ENV_BUNDLE)
        for name, value, low in (("first_step", first_step, 0), ("every", every, 1),
                                 ("num_steps", num_steps, 1), ("batch_size", batch_size, 1)):
            if value is None and name in ("num_steps", "batch_size"):
                continue
            try:
                ok = not isinstance(value, bool) and operator.index(value) >= low
            except TypeError:
                ok = False
            if not ok:
                raise CollectError(f"TraceHook: {name}={value!r} must be an integer >= {low}"
                                   + (" or None" if name in ("num_steps", "batch_size")
                                      else ""))
        self.out_dir = Path(target) if target else Path()
        if not target:  # the two lines left in a script run without collect: train anyway
            log.warning("gradwire TraceHook: no output folder (out_dir= or %s, which gradwire "
                        "collect sets): recording nothing", ENV_BUNDLE)
            self._disabled = True
        else:
            # a second hook of this same process (a new TraceHook per train() call) records
            # nothing rather than crash the training: its step numbers would restart at 0
            self._disabled = _check_out_dir(self.out_dir)
        self.first_step = first_step
        self.num_steps = num_steps
        self.every = every
        self.batch_size = None if batch_size is None else operator.index(batch_size)
        self.cluster_spec = cluster_spec if cluster_spec is not None else _tf_config_cluster()
        self.recorded: list[int] = []
        self.record_seconds: list[float] = []
        self.step_seconds: list[float] = []  # every session.run's wall time, traced or not
        # when each session.run began, s since the epoch (CLOCK_REALTIME): which steps ran
        # after a capture that `gradwire collect --duration` ended early
        self.step_starts: list[float] = []
        self._run_t0 = 0.0
        self._step = 0
        self._recording = False
        self._own_manifest = False
        self.threads = 0  # the session's intra-op threads (0: TensorFlow's default)

    # -- SessionRunHook -------------------------------------------------------------------
    def begin(self) -> None:
        """Create the bundle folder (and a manifest when no `gradwire collect` made one)."""
        if self._disabled:
            return
        (self.out_dir / bundle.TRACE_DIR).mkdir(parents=True, exist_ok=True)
        if not (self.out_dir / bundle.MANIFEST).exists():
            manifest = bundle.new_manifest(created_by="hook", mode="hook")
            manifest["tf_version"] = tf.__version__
            manifest["cluster_spec"] = self.cluster_spec
            manifest["processes"] = [{"role": "training", "pid": os.getpid()}]
            bundle.write_manifest(self.out_dir, manifest)
            self._own_manifest = True
        self._write_session(status="running")

    def after_create_session(self, session: Any, coord: Any) -> None:
        """Note the intra-op threads the session's ops run with (its ConfigProto's
        ``intra_op_parallelism_threads``; 0: TensorFlow's default, a thread per core), part
        of the machine the trace was timed on: the op cost database costs the trace's ops
        with rows of the same threads."""
        config = getattr(session, "_config", None)  # tf.Session keeps the ConfigProto it got
        self.threads = max(0, int(getattr(config, "intra_op_parallelism_threads", 0) or 0))
        if not self._disabled:
            self._write_graph(session.graph)

    def _write_graph(self, graph: Any) -> None:
        """Keep the session's graph (a MetaGraphDef, devices and variable collections
        included) in the bundle, once: ``gradwire opdb step`` runs the worker's compute from
        it on a machine to time it whole (compiled by XLA, or not). A graph that cannot be
        exported (over protobuf's 2 GB) is left out with a warning; nothing else depends on it."""
        try:
            meta = _tf1.train.export_meta_graph(graph=graph)
            data = meta.SerializeToString()
        except (ValueError, TypeError) as exc:
            log.warning("gradwire TraceHook: the graph is not kept (%s)", exc)
            return
        atomic.write_bytes(self.out_dir / bundle.TRACE_DIR / bundle.GRAPH_FILE, data,
                           "the traced graph")

    def _wants(self, step: int) -> bool:
        if step < self.first_step or (step - self.first_step) % self.every:
            return False
        return self.num_steps is None or len(self.recorded) < self.num_steps

    def before_run(self, run_context: Any) -> Any:
        """Ask for FULL_TRACE and partition graphs on the steps to record."""
        if self._disabled:
            return None
        self._run_t0 = time.perf_counter()
        if len(self.step_starts) < MAX_STEP_TIMES:
            self.step_starts.append(time.time())
        self._recording = self._wants(self._step)
        if not self._recording:
            return None
        options = _tf1.RunOptions(
            trace_level=_tf1.RunOptions.FULL_TRACE, output_partition_graphs=True
        )
        return _tf1.train.SessionRunArgs(fetches=None, options=options)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        """Store the step's RunMetadata and its derived op table (both atomically)."""
        step = self._step
        self._step += 1
        if self._disabled:
            return
        if len(self.step_seconds) < MAX_STEP_TIMES:
            self.step_seconds.append(time.perf_counter() - self._run_t0)
        if not self._recording:
            return
        t0 = time.perf_counter()
        metadata = run_values.run_metadata
        graph = run_context.session.graph
        trace = parse_run_metadata(
            metadata, step, static_bytes=lambda p: static_tensor_bytes(graph, p)
        )
        bundle.write_step(self.out_dir, trace, metadata.SerializeToString())
        self.recorded.append(step)
        self.record_seconds.append(time.perf_counter() - t0)
        # kept current, so a run killed before end() still says what it recorded
        self._write_session(status="running")
        self.record_seconds[-1] = time.perf_counter() - t0  # storing, as the step's gap saw it
        log.debug("recorded step %d: %d ops", step, len(trace.ops))

    def end(self, session: Any) -> None:
        """Write the final session summary (and close the manifest the hook owns)."""
        if self._disabled:
            return
        if not self.recorded:
            log.warning("gradwire TraceHook: recorded no step: the session ran %d step(s) and "
                        "first_step is %d", self._step, self.first_step)
        self._write_session(status="complete")
        if self._own_manifest:
            manifest = json.loads((self.out_dir / bundle.MANIFEST).read_text())
            manifest["status"] = "complete"
            manifest["clock_samples"]["end"] = to_dict(bundle.clock_sample())
            bundle.write_manifest(self.out_dir, manifest)

    def _write_session(self, status: str) -> None:
        atomic.write_json(
            self.out_dir / bundle.TRACE_DIR / bundle.SESSION_FILE,
            {
                "status": status,
                "gradwire_version": __version__,
                "tf_version": tf.__version__,
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "cluster_spec": self.cluster_spec,
                "options": {
                    "first_step": self.first_step,
                    "num_steps": self.num_steps,
                    "every": self.every,
                    **({} if self.batch_size is None else {"batch_size": self.batch_size}),
                },
                "steps_run": self._step,
                "steps_recorded": list(self.recorded),
                "record_seconds": [round(s, 6) for s in self.record_seconds],
                "step_seconds": [round(s, 6) for s in self.step_seconds],
                "step_starts_unix_s": [round(s, 6) for s in self.step_starts],
                "clock_sample": to_dict(bundle.clock_sample()),
                "machine": asdict(local_machine(tf.__version__, self.threads)),
            },
        )


def _tf_config_cluster() -> dict[str, Any] | None:
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return None
    try:
        cluster = json.loads(raw).get("cluster")
    except (json.JSONDecodeError, AttributeError):
        log.warning("TF_CONFIG is not valid JSON; cluster spec not recorded")
        return None
    return cluster if isinstance(cluster, dict) else None


def _check_out_dir(folder: Path) -> bool:
    """Refuse a folder the hook would spoil: a file, or a bundle with steps recorded by another
    process (its steps would mix with this run's). True when this process recorded them: the
    new hook is then to record nothing (with a warning)."""
    if folder.exists() and not folder.is_dir():
        raise CollectError("TraceHook: out_dir is a file, not a folder", path=folder)
    old = sorted((folder / bundle.TRACE_DIR).glob("step-*.ops.json"))
    if not old:
        return False
    try:  # read_json: a FIFO, deep nesting or a huge number is refused, not waited on
        session = bundle.read_json(folder / bundle.TRACE_DIR / bundle.SESSION_FILE)
    except BundleError:
        session = {}
    if isinstance(session, dict) and session.get("pid") == os.getpid():
        log.warning("%s already holds %d steps recorded by an earlier TraceHook of this process; "
                    "this one records nothing (use one TraceHook per process)", folder, len(old))
        return True
    raise CollectError(f"TraceHook: out_dir already holds {len(old)} recorded step(s) of an "
                       "earlier run; give a new or empty folder", path=folder)
