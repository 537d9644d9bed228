"""The software cost of one hop of TensorFlow's collective ring all-reduce on this machine:
the op type ``CollectiveRingHop`` of ``gradwire opdb build``.

A hop of TensorFlow's ring all-reduce (``CollectiveReduceV2`` with ``communication_hint='ring'``,
the RingReducer over gRPC ``RecvBuf`` calls) moves one chunk from a worker to the next. Before
the chunk goes on, the sender copies it into the response, gRPC serialises it, the receiver
parses it and copies it into its buffer, and in the reduce-scatter adds it to its own. These
copies do not overlap the wire. A capture of the lab's ring (mlp 20 MB, W = 3, 500 Mbit/s,
6.67 MB chunks) shows a median of 9.5 ms from a worker's last byte of one ring step to its first
byte of the next, where the replay had none (docs/predict.md, "Synchronous training").

**How it is measured.**
1. Two TensorFlow servers run on this machine's loopback, in two processes, on ports chosen free.
2. Each all-reduces 2 x chunk bytes of float32 at group size 2: one reduce-scatter hop and one
   all-gather hop, each of one chunk.
3. Three warm-up runs, then ``reps`` timed runs; then the same by a second and a third pair
   (``PAIRS``), every run kept in the row.

A hop's cost is half an all-reduce's time, less the time loopback TCP takes to stream one chunk.
That streaming time is timed alone, over a socket pair in the same process; on a real link that
part is the wire's, which the replay already counts.

Needs TensorFlow; run as ``python -m gradwire.collector.ringhop`` for each of the two tasks.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

from gradwire.collector.opgrid import LINK_ATTR, RING_HOP
from gradwire.errors import GradwireError
from gradwire.opdb import BUILD, Machine, OpTiming
from gradwire.opfeatures import DTYPE_SIZE

WARMUP = 3
# pairs of processes a hop is timed by: from one pair to the next the same hop moved by 1.2-1.6
# times on the 2-core machine (2026-11-30, docs/preregistered/issue22-hop-on-a-link-report.md),
# more than within a pair; three pairs' runs pooled keep one pair from setting the row
PAIRS = 3
TIMEOUT_S = 600.0  # for both processes, TensorFlow's start included


def hop_timing(chunk_elements: int, hop_us: Sequence[float], machine: Machine,
               link_payload_bps: float | None = None) -> OpTiming:
    """The database row of one chunk size: a hop of ``chunk_elements`` float32 took
    ``hop_us`` (µs, one per timed run) of software time on ``machine``, between two processes
    on loopback, or (``link_payload_bps``) across a link of that TCP payload rate (bit/s:
    the time beyond the chunk's bytes at that rate; scripts/diag_ring_hop_link.py)."""
    shape = ((chunk_elements,),)
    link = () if link_payload_bps is None else ((LINK_ATTR, round(link_payload_bps)),)
    return OpTiming.of_times([max(0.0, t) for t in hop_us], op=RING_HOP, inputs=shape,
                             outputs=shape, attrs=(("group_size", 2), *link), dtype="float32",
                             device="CPU", fingerprint=machine.fingerprint, source=BUILD)


def measure_hops(chunk_elements: Sequence[int], machine: Machine, reps: int = 10,
                 timeout_s: float = TIMEOUT_S, pairs: int = PAIRS) -> list[OpTiming]:
    """One row per chunk size (elements of float32), timed by ``pairs`` pairs of TensorFlow
    processes on loopback, one pair after another, with ``machine``'s threads (module
    docstring); a row holds every pair's runs. Raises GradwireError, with the peer's last
    words, when either process of a pair fails or it takes over ``timeout_s``."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    runs: dict[str, list[float]] = {str(n): [] for n in chunk_elements}
    for _ in range(pairs):
        addresses = [f"localhost:{p}" for p in free_ports(2)]
        allreduce_us = time_allreduces(
            lambda _task, argv: subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                                 stderr=subprocess.PIPE, text=True),
            addresses, chunk_elements, reps, machine.threads or 0, timeout_s)
        for n, times in allreduce_us.items():
            runs[n] += times
    rows = []
    for n in chunk_elements:
        stream = loopback_stream_us(n * DTYPE_SIZE["float32"])
        rows.append(hop_timing(n, [t / 2 - stream for t in runs[str(n)]], machine))
    return rows


def time_allreduces(start: Callable[[int, list[str]], subprocess.Popen[str]],
                    addresses: Sequence[str], chunk_elements: Sequence[int], reps: int,
                    threads: int, timeout_s: float = TIMEOUT_S) -> dict[str, list[float]]:
    """µs of each timed all-reduce of 2 x each chunk size (by chunk size, as text) between two
    TensorFlow servers at ``addresses`` ("host:port"), task k started by ``start(k, argv)``
    with its stdout and stderr piped as text (on this machine, or in a network namespace);
    ``threads``: their intra- and inter-op threads (0: TensorFlow's default). Raises
    GradwireError, with the peer's last words, when either fails or they take over
    ``timeout_s``."""
    argv = [sys.executable, "-m", "gradwire.collector.ringhop", ",".join(addresses)]
    sizes = ",".join(map(str, chunk_elements))
    procs = [start(task, [*argv, str(task), sizes, str(reps), str(threads)]) for task in (0, 1)]
    try:
        outs = [p.communicate(timeout=timeout_s) for p in procs]
    except subprocess.TimeoutExpired:
        raise GradwireError(f"the ring hop timing took over {timeout_s:.0f} s") from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_out, err) in zip(procs, outs, strict=True):
        if p.returncode != 0:
            last = (err.strip().splitlines() or ["no message"])[-1]
            raise GradwireError(f"the ring hop timing failed (exit {p.returncode}): {last}")
    return json.loads(outs[0][0].strip().splitlines()[-1])


def loopback_stream_us(nbytes: int, reps: int = 9) -> float:
    """Median µs loopback TCP takes to carry ``nbytes`` from one socket to another in this
    process (the kernel's copies: on a real link, the wire's time)."""
    data, buf = bytes(nbytes), bytearray(nbytes)
    times = []
    with socket.create_server(("127.0.0.1", 0)) as srv, \
            socket.create_connection(srv.getsockname()) as cli:
        conn, _ = srv.accept()
        with conn:
            def receive() -> None:
                view, got = memoryview(buf), 0
                while got < nbytes:
                    got += conn.recv_into(view[got:])

            for _ in range(reps):
                reader = threading.Thread(target=receive)
                t0 = time.perf_counter()
                reader.start()
                cli.sendall(data)
                reader.join()
                times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports of loopback that were free a moment ago (the tests' loopback
    clusters pick theirs here too)."""
    socks = [socket.create_server(("127.0.0.1", 0)) for _ in range(n)]
    try:
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _task(addresses: Sequence[str], task: int, chunk_elements: Sequence[int], reps: int,
          threads: int) -> None:
    """One of the two TensorFlow servers (``addresses``: both, "host:port"; ``threads``: intra-
    and inter-op, 0 for TensorFlow's default): all-reduce 2 x each chunk size, ``WARMUP`` then
    ``reps`` times; task 0 prints the timed runs (µs per all-reduce, by chunk size) as JSON."""
    import tensorflow as tf
    from tensorflow.python.ops import collective_ops

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    cluster = tf1.train.ClusterSpec({"worker": list(addresses)})
    config = tf1.ConfigProto(intra_op_parallelism_threads=threads,
                             inter_op_parallelism_threads=threads)
    config.experimental.collective_group_leader = "/job:worker/replica:0/task:0"
    server = tf1.train.Server(cluster, job_name="worker", task_index=task, config=config)
    ops = []
    with tf1.device(f"/job:worker/task:{task}/device:CPU:0"):
        for k, n in enumerate(chunk_elements):
            v = tf1.Variable(tf.random.uniform([2 * n]), name=f"gradients_{k}")
            ops.append(collective_ops.all_reduce_v2(v, 2, group_key=1, instance_key=k + 1,
                                                    communication_hint="ring").op)
    out: dict[str, list[float]] = {}
    with tf1.Session(server.target, config=config) as sess:
        sess.run(tf1.global_variables_initializer())
        for n, op in zip(chunk_elements, ops, strict=True):
            for _ in range(WARMUP):
                sess.run(op)
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                sess.run(op)
                times.append((time.perf_counter() - t0) * 1e6)
            out[str(n)] = times
    if task == 0:
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    both, which, chunks, n_reps, n_threads = sys.argv[1:6]
    _task(both.split(","), int(which), [int(x) for x in chunks.split(",")], int(n_reps),
          int(n_threads))
