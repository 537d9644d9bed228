"""How long one of the lab's training steps runs under XLA, and on how many cores: in one
TensorFlow session (``local``) or with a PS and a worker server in this process
(``distributed``, the lab's session configuration and device placement), with XLA's
auto-clustering on or off. Prints one JSON line: the steps' wall times (s), the cores the
process kept busy over them (CPU time over wall time), and one traced step's ``_XlaRun`` time
(ms; the compiled cluster's own run).

A session's ``intra_op_parallelism_threads`` does not bind a process whose first TensorFlow
device was made before it (tf_keras builds its models through the eager context, which makes
the devices with TensorFlow's defaults: a thread per core): ``--threads-env`` sets
``TF_NUM_INTRAOP_THREADS`` and ``TF_NUM_INTEROP_THREADS`` before TensorFlow is imported, as
the lab's one-thread nodes effectively run. docs/notes/issue23-xla-threads.md has what it
showed.

    .venv/bin/python scripts/xla_step_threads.py local|distributed [--model mobilenet]
        [--batch-size 32] [--steps 3] [--no-xla] [--threads-env]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _xla_run_ms(meta: Any) -> float:
    """The traced step's ``_XlaRun`` time, ms, summed over its clusters."""
    return sum(n.all_end_rel_micros for d in meta.step_stats.dev_stats for n in d.node_stats
               if "_XlaRun" in n.timeline_label) / 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("where", choices=("local", "distributed"))
    ap.add_argument("--model", default="mobilenet", help="a lab model (default mobilenet)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3, help="timed steps after the first")
    ap.add_argument("--no-xla", action="store_true", help="XLA's auto-clustering off")
    ap.add_argument("--threads-env", action="store_true",
                    help="one intra-op and inter-op thread through TensorFlow's environment")
    args = ap.parse_args()
    xla = not args.no_xla
    if xla:
        os.environ["TF_XLA_FLAGS"] = "--tf_xla_cpu_global_jit"
    if args.threads_env:
        os.environ["TF_NUM_INTRAOP_THREADS"] = os.environ["TF_NUM_INTEROP_THREADS"] = "1"
    import tensorflow as tf
    from lab import models, node

    tf.compat.v1.disable_eager_execution()
    config = node.session_config(tf, "worker", 0, xla=xla)
    target, setter = "", None
    if args.where == "distributed":
        cluster = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{_free_port()}"],
                                        "worker": [f"127.0.0.1:{_free_port()}"]})
        servers = [tf.distribute.Server(cluster, job_name="ps", task_index=0,
                                        config=node.session_config(tf, "ps", 0)),
                   tf.distribute.Server(cluster, job_name="worker", task_index=0,
                                        config=config)]
        target = servers[1].target
        setter = tf.compat.v1.train.replica_device_setter(worker_device="/job:worker/task:0",
                                                           cluster=cluster)
    with tf.compat.v1.device(setter):
        loss, _ = models.builder(args.model)(args.batch_size)
        step = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(
            loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    if target and xla:
        node.keep_xla_off_ps(tf.compat.v1.get_default_graph())
    with tf.compat.v1.Session(target, config=config) as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(step)  # XLA compiles here
        walls: list[float] = []
        cpu0 = _cpu_s()
        for _ in range(args.steps):
            t0 = time.perf_counter()
            sess.run(step)
            walls.append(time.perf_counter() - t0)
        cores = (_cpu_s() - cpu0) / sum(walls)
        meta = tf.compat.v1.RunMetadata()
        sess.run(step, options=tf.compat.v1.RunOptions(
            trace_level=tf.compat.v1.RunOptions.FULL_TRACE), run_metadata=meta)
    print(json.dumps({"where": args.where, "model": args.model, "batch": args.batch_size,
                      "xla": xla, "threads_env": args.threads_env,
                      "steps_s": [round(w, 3) for w in walls],
                      "median_step_s": round(statistics.median(walls), 3),
                      "cores_busy": round(cores, 2), "xla_run_ms": round(_xla_run_ms(meta), 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
