"""Does the ring hop's database time depend on how the all-reduce's input is made?

A diagnostic for issue 22 (not part of ``gradwire``'s predictions). ``gradwire opdb build``
times a hop of TensorFlow's collective ring all-reduce (``CollectiveRingHop``,
collector/ringhop.py) as half an all-reduce of a *variable* (its read aliases the variable's
buffer, so the all-reduce cannot reduce in place and copies it first), nothing fetched. In a
training step the all-reduce's input is the fresh concatenation of the gradients, which
nothing else holds. The lab's rings left about 9 ms idle on the wire between two 5 MB hops,
where the database charges 15.7 (docs/notes/issue22-ring-wire.md).

Two TensorFlow servers on loopback (group size 2, one intra- and one inter-op thread, as the
lab's nodes) time, per chunk size (float32 elements; 2 x chunk all-reduced), interleaved run
by run, ``--reps`` runs after 3 warm-ups, by ``--pairs`` pairs of processes:

- ``variable``: the database's form (the all-reduce of a variable's read, nothing fetched);
- ``fresh``: the all-reduce of ``v * 1.0`` (a new tensor each run), its sum fetched;
- ``control``: the same as ``fresh`` without the all-reduce (the multiply and the sum alone).

and prints per chunk size (medians, ms): each form's run, the hop as the database takes it
(``variable / 2`` less loopback TCP's streaming of a chunk) and as a step would
(``(fresh - control) / 2`` less the same).

Usage, from the repo root, with nothing else running:

    .venv/bin/python scripts/diag_ring_hop_form.py [--chunks 625000,1250000] [--reps 10] \
        [--pairs 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

FORMS = ("variable", "fresh", "control")
WARMUP = 3
TIMEOUT_S = 600.0


def _task(addresses: list[str], task: int, chunks: list[int], reps: int) -> None:
    """One server of the pair: time every form at every chunk size, the forms interleaved
    run by run; task 0 prints {chunk: {form: [µs, ...]}} as JSON."""
    import tensorflow as tf
    from tensorflow.python.ops import collective_ops

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    config = tf1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
    config.experimental.collective_group_leader = "/job:worker/replica:0/task:0"
    server = tf1.train.Server(tf1.train.ClusterSpec({"worker": addresses}), job_name="worker",
                              task_index=task, config=config)
    graphs: dict[int, dict[str, object]] = {}
    with tf1.device(f"/job:worker/task:{task}/device:CPU:0"):
        for k, n in enumerate(chunks):
            v = tf1.Variable(tf.random.uniform([2 * n]), name=f"gradients_{k}")
            held = collective_ops.all_reduce_v2(v, 2, group_key=1, instance_key=2 * k + 1,
                                                communication_hint="ring").op
            fresh = v * 1.0
            reduced = collective_ops.all_reduce_v2(fresh, 2, group_key=1,
                                                   instance_key=2 * k + 2,
                                                   communication_hint="ring")
            graphs[n] = {"variable": held, "fresh": tf.reduce_sum(reduced),
                         "control": tf.reduce_sum(v * 1.0)}
    out: dict[str, dict[str, list[float]]] = {}
    with tf1.Session(server.target, config=config) as sess:
        sess.run(tf1.global_variables_initializer())
        for n in chunks:
            times: dict[str, list[float]] = {f: [] for f in FORMS}
            for rep in range(WARMUP + reps):
                for form in FORMS:
                    t0 = time.perf_counter()
                    sess.run(graphs[n][form])
                    if rep >= WARMUP:
                        times[form].append((time.perf_counter() - t0) * 1e6)
            out[str(n)] = times
    if task == 0:
        print(json.dumps(out), flush=True)


def _pair(chunks: list[int], reps: int) -> dict[str, dict[str, list[float]]]:
    """One pair of processes on loopback (this script's ``_task``, started and checked as
    ``ringhop.time_allreduces`` starts its own); task 0's times."""
    from gradwire.collector.ringhop import free_ports, time_allreduces

    addresses = [f"localhost:{p}" for p in free_ports(2)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    own = [sys.executable, __file__, "--chunks", ",".join(map(str, chunks)), "--reps", str(reps),
           "--task", ",".join(addresses)]
    return time_allreduces(  # type: ignore[return-value]  # this _task's JSON, by form
        lambda task, _argv: subprocess.Popen([*own, str(task)], env=env, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True),
        addresses, chunks, reps, 1, TIMEOUT_S)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", default="625000,1250000", help="float32 elements, comma-separated")
    ap.add_argument("--reps", type=int, default=10, help="timed runs of each form per pair")
    ap.add_argument("--pairs", type=int, default=3, help="pairs of processes, one after another")
    ap.add_argument("--json", type=Path, help="also write the runs here (a new file)")
    ap.add_argument("--task", nargs=2, metavar=("ADDRESSES", "INDEX"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    chunks = [int(x) for x in args.chunks.split(",")]
    if args.task:
        _task(args.task[0].split(","), int(args.task[1]), chunks, args.reps)
        return 0
    if args.json and args.json.exists():
        print(f"diag_ring_hop_form: {args.json}: exists; name a new file", file=sys.stderr)
        return 2
    from gradwire.collector.ringhop import loopback_stream_us
    from gradwire.errors import GradwireError

    runs = {str(n): {f: [] for f in FORMS} for n in chunks}
    for _ in range(args.pairs):
        try:
            pair = _pair(chunks, args.reps)
        except GradwireError as e:
            print(f"diag_ring_hop_form: {e}", file=sys.stderr)
            return 1
        for n, times in pair.items():
            for f in FORMS:
                runs[n][f] += times[f]
    print(f"{args.pairs} pair(s) x {args.reps} runs, medians (ms):")
    print("| chunk MB | variable | fresh | control | stream | hop as the database | "
          "hop as a step |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in chunks:
        med = {f: statistics.median(runs[str(n)][f]) for f in FORMS}
        stream = loopback_stream_us(4 * n)
        print(f"| {4 * n / 1e6:.2f} | {med['variable'] / 1e3:.2f} | {med['fresh'] / 1e3:.2f} | "
              f"{med['control'] / 1e3:.2f} | {stream / 1e3:.2f} | "
              f"{(med['variable'] / 2 - stream) / 1e3:.2f} | "
              f"{((med['fresh'] - med['control']) / 2 - stream) / 1e3:.2f} |")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
