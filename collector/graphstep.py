"""Time a worker's whole step of compute from its recorded graph, on this machine.

The TraceHook keeps the traced session's graph in the bundle (``trace/graph.meta.pb``, a
MetaGraphDef with devices). ``gradwire opdb step`` runs this module as a child process, with
TensorFlow's threads and XLA's flags set before TensorFlow is imported (a session's
``intra_op_parallelism_threads`` does not bind devices already made: docs/notes/
issue23-xla-threads.md): it loads the graph with every op on this process's CPU, runs the
worker's compute (every tensor a worker op hands to a PS op: the gradients, and what else the
PS takes) as the step's targets, with the PS's ops (the variables and their reads) kept out of
XLA's clusters as a job under XLA must keep them (the lab's ``keep_xla_off_ps``), and times
each run by the wall clock after warm-up runs (XLA compiles in the first). Nothing crosses a
network: the variables are local, so the step's compute runs as it would with its parameters
already received and nothing else on the machine, the quiet time a compiled cluster runs at
once its inputs are in.

    python -m gradwire.collector.graphstep GRAPH RUNMETA [--xla] [--threads N] [--runs N]
        [--warmup N]

prints one JSON object: ``times_us`` (each timed run), ``cores_busy`` (process CPU time over
wall time in the timed runs), ``targets``, ``tf_version``, ``threads``, ``xla``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# XLA auto-clusters ops placed on CPU only with this flag (tensorflow/compiler/jit/flags.h)
XLA_CPU_FLAG = "--tf_xla_cpu_global_jit"
_JOB = re.compile(r"/job:([^/]+)")
PS_JOB = "ps"


def xla_flags(flags: str | None) -> str:
    """TF_XLA_FLAGS ``flags`` with ``XLA_CPU_FLAG`` added (once).

    >>> xla_flags(None), xla_flags("--tf_xla_min_cluster_size=2")
    ('--tf_xla_cpu_global_jit', '--tf_xla_min_cluster_size=2 --tf_xla_cpu_global_jit')
    """
    parts = (flags or "").split()
    return " ".join(parts if XLA_CPU_FLAG in parts else [*parts, XLA_CPU_FLAG])


def graph_digest(path: str | Path) -> str:
    """A recorded graph's key in the database: 16 hex digits of its file's SHA-256."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def job_of(device: str) -> str | None:
    """The job a device string names (``/job:ps/task:0`` -> ``ps``); None: none named."""
    m = _JOB.search(device)
    return m.group(1) if m else None


def _source(name: str) -> str | None:
    """The producing op of an input name (``^ctrl`` inputs: None)."""
    if name.startswith("^"):
        return None
    return name.split(":", 1)[0]


def sent_to_ps(nodes: Iterable[Any], ran: set[str]) -> tuple[list[str], list[str]]:
    """(worker ops whose outputs a PS op of the traced step takes, in graph order; the PS's
    ops): the step's targets and what stays out of XLA's clusters. ``nodes``: a GraphDef's
    NodeDefs; ``ran``: the names of the ops a traced step ran (its partition graphs'), so that
    the variables' initializers and the saver, which take worker tensors too, are left out."""
    nodes = list(nodes)
    on_ps = {n.name for n in nodes if job_of(n.device) == PS_JOB}
    targets: dict[str, None] = {}
    for n in nodes:
        if n.name not in on_ps or n.name not in ran:
            continue
        for i in n.input:
            src = _source(i)
            if src is not None and src not in on_ps:
                targets[src] = None
    return list(targets), sorted(on_ps)


def ran_in(run_metadata_path: Path) -> set[str]:
    """The names of the ops a traced step ran: its RunMetadata's partition graphs'."""
    from tensorflow.core.protobuf import config_pb2

    meta = config_pb2.RunMetadata()
    meta.ParseFromString(run_metadata_path.read_bytes())
    return {n.name for g in meta.partition_graphs for n in g.node}


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def time_step(graph_path: Path, run_metadata_path: Path, *, xla: bool, threads: int, runs: int,
              warmup: int) -> dict[str, Any]:
    """Time the worker's compute of the graph at ``graph_path`` (see the module's text), the
    ops of the traced step at ``run_metadata_path``; TensorFlow is imported here, so the
    caller sets its environment first."""
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2
    from tensorflow.core.protobuf import meta_graph_pb2

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    meta = meta_graph_pb2.MetaGraphDef()
    meta.ParseFromString(graph_path.read_bytes())
    targets, on_ps = sent_to_ps(meta.graph_def.node, ran_in(run_metadata_path))
    if not targets:
        raise ValueError("the graph places no op on a PS that takes a worker's tensor: "
                         "`opdb step` times a parameter-server job's worker step")
    keep_out = set(on_ps) | set(targets)  # a cluster whose outputs no op outside takes is
    # compiled to nothing (XLA drops dead code): the targets stand for the sends to the PS
    for n in meta.graph_def.node:
        if n.name in keep_out:
            n.attr["_XlaCompile"].CopyFrom(attr_value_pb2.AttrValue(b=False))
    for fn in meta.graph_def.library.function:  # a cond's branches keep their devices there
        for n in fn.node_def:
            n.device = ""
    config = tf1.ConfigProto(intra_op_parallelism_threads=threads,
                             inter_op_parallelism_threads=threads)
    if xla:
        config.graph_options.optimizer_options.global_jit_level = tf1.OptimizerOptions.ON_1
    graph = tf.Graph()
    with graph.as_default():
        tf1.train.import_meta_graph(meta, clear_devices=True)
        init = [tf1.global_variables_initializer(), tf1.local_variables_initializer()]
        ops = [graph.get_operation_by_name(name) for name in targets]
    with tf1.Session(graph=graph, config=config) as sess:
        sess.run(init)
        for _ in range(warmup):
            sess.run(ops)
        times, cpu0 = [], _cpu_s()
        for _ in range(runs):
            t0 = time.perf_counter()
            sess.run(ops)
            times.append((time.perf_counter() - t0) * 1e6)
        busy = (_cpu_s() - cpu0) / (sum(times) / 1e6)
    return {"times_us": [round(t, 1) for t in times], "cores_busy": round(busy, 3),
            "targets": len(targets), "tf_version": tf.__version__, "threads": threads,
            "xla": xla}


def _said(message: str) -> str:
    """The first line of an error's message that says something (TensorFlow's start with
    'Graph execution error:')."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    useful = [line for line in lines if not line.endswith("execution error:")]
    return (useful or lines or ["(no message)"])[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graph", type=Path)
    ap.add_argument("run_metadata", type=Path, help="a traced step's RunMetadata")
    ap.add_argument("--xla", action="store_true")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args(argv)
    if args.threads:  # before TensorFlow makes its devices
        os.environ["TF_NUM_INTRAOP_THREADS"] = os.environ["TF_NUM_INTEROP_THREADS"] = str(
            args.threads)
    if args.xla:
        os.environ["TF_XLA_FLAGS"] = xla_flags(os.environ.get("TF_XLA_FLAGS"))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        out = time_step(args.graph, args.run_metadata, xla=args.xla, threads=args.threads,
                        runs=args.runs, warmup=args.warmup)
    except Exception as exc:  # noqa: BLE001 (TensorFlow's errors: told to the parent)
        print(json.dumps({"error": f"{type(exc).__name__}: {_said(str(exc))}"}))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
