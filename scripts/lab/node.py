"""One lab node: a TensorFlow parameter server or worker (tf.compat.v1, graph mode, gRPC).

Run inside the node's network namespace by the orchestrator::

    python -m lab.node --role worker --index 0 --cluster '{"ps": [...], "worker": [...]}' \
        --model mlp --batch-size 32 --steps 20 --mode async --out /tmp/w0.json

A PS starts its server and joins forever (the orchestrator stops it by PID). A worker builds the
model under ``replica_device_setter`` (variables spread over the PSes by bytes), trains with
GradientDescent (async, or SyncReplicasOptimizer with ``--mode sync``; with ``--mode ring`` there
are no PSes: every worker holds the variables and the gradients are averaged by a collective ring
all-reduce, ``ring_train_op``), and after every step rewrites (atomically) its result JSON: step
end times (``time.time()``, seconds since the epoch), batch size, examples per step, its own CPU
time and the machine's CPU ticks at each step end. If ``GRADWIRE_BUNDLE`` is set, gradwire's
TraceHook records steps ``--trace-first``.. into that bundle. With ``--partition K`` (K > 1) a PS
worker builds the model under TensorFlow's ``min_max_variable_partitioner`` (tensor partition):
each big variable is split along its first axis into up to K parts, each a variable that
``--ps-strategy`` places on its own. With ``--accumulate K`` (K > 1, async PS only) each update
(one ``session.run``) reads every variable once, runs K micro-steps of ``--batch-size`` examples
one after another and applies the mean of their gradients once (``accumulate_train_op``). With
``--mixed-precision`` (async PS, mlp and deepmlp) the variables stay float32 on the PSes, each is
read once per step and cast to bfloat16 on its PS, the worker computes in bfloat16 and pushes
bfloat16 gradients, cast back to float32 on the PS before the update (``precision_train_op``). With
``--fuse-tensors BYTES`` each PS's gradients are concatenated on the worker into buckets of at
least BYTES, one tensor pushed per bucket (``fused_train_op``). With ``--xla`` the worker's
session auto-clusters for XLA (``global_jit_level`` ON_1, and
``TF_XLA_FLAGS=--tf_xla_cpu_global_jit`` set before TensorFlow is imported, as XLA auto-clusters
CPU ops only with that flag). The PSes' ops are kept out of the clusters
(``keep_xla_off_ps``): TensorFlow compiles a cluster placed on a remote PS against the PS's
``/job:localhost`` device and fails ("Multiple CPU devices"), as it did on MobileNetV2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import socket
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

if __package__ in (None, ""):  # run as a file path: make `import lab` work
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gradwire.collector.graphstep import XLA_CPU_FLAG, xla_flags  # noqa: E402
from gradwire.procstat import host_cpu_ticks  # noqa: E402
from gradwire.replay.tensorpasses import fusion_buckets  # noqa: E402
from lab import models  # noqa: E402  (after the path fix; no TensorFlow at import)

# --run-on-file: a worker never runs more than this many times its --steps (the file may never
# come, if the orchestrator died)
RUN_ON_MAX_FACTOR = 10



def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Arguments of one node process."""
    p = argparse.ArgumentParser(prog="lab.node", description=__doc__.splitlines()[0])
    p.add_argument("--role", choices=("ps", "worker"), required=True)
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--cluster", required=True, help="cluster spec as JSON {'ps': [...], ...}")
    p.add_argument("--model", default="mlp")
    p.add_argument("--model-mb", type=float, default=50.0, help="mlp parameter size, MB")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--run-on-file", default=None,
                   help="after --steps, keep stepping until this file exists and --run-on-s "
                   f"seconds have passed since it was written (at most {RUN_ON_MAX_FACTOR} "
                   "times --steps in all)")
    p.add_argument("--run-on-s", type=float, default=0.0)
    p.add_argument("--mode", choices=models.MODES, default="async")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--ps-strategy", choices=models.PS_STRATEGIES, default="greedy",
                   help="replica_device_setter's ps_strategy: greedy (the fewest bytes so far) "
                   "or round-robin (TensorFlow's default)")
    p.add_argument("--partition", type=int, default=1, metavar="K",
                   help="split each variable into min(K, ceil(bytes / 256 KiB)) parts "
                   "(min_max_variable_partitioner; models built by tf1.get_variable only); "
                   "1: off")
    p.add_argument("--accumulate", type=int, default=1, metavar="K",
                   help="gradient accumulation: each update reads the variables once, runs K "
                   "micro-steps of --batch-size examples one after another and applies the mean "
                   "of their gradients once (async PS mode; models "
                   f"{', '.join(models.ACCUMULATE_MODELS)}); 1: off")
    p.add_argument("--recompute", type=int, default=0, metavar="K",
                   help="recomputation: the model's layers in segments of K, each a "
                   "tf.recompute_grad checkpoint whose forward runs again in the backward pass "
                   f"(models {', '.join(models.RECOMPUTE_MODELS)}); 0: off")
    p.add_argument("--mixed-precision", action="store_true",
                   help="bfloat16 compute and transfers over float32 variables: each variable "
                   "read once per step and cast to bfloat16 on its PS, the gradients cast back "
                   "to float32 there (async PS mode; models "
                   f"{', '.join(models.PRECISION_MODELS)})")
    p.add_argument("--fuse-tensors", type=float, default=0.0, metavar="BYTES",
                   help="tensor fusion: each PS's gradients, in the order the backward pass "
                   "makes them, concatenated on the worker into buckets of at least BYTES, one "
                   "tensor pushed per bucket, split on the PS before the updates (async PS "
                   "mode, dense models); 0: off")
    p.add_argument("--xla", action="store_true",
                   help="XLA auto-clustering in the worker's session (global_jit_level ON_1, "
                   f"TF_XLA_FLAGS={XLA_CPU_FLAG})")
    p.add_argument("--trace-first", type=int, default=10, help="TraceHook first_step")
    p.add_argument("--trace-steps", type=int, default=5, help="TraceHook num_steps")
    p.add_argument("--out", help="worker result JSON path")
    return p.parse_args(argv)


def session_config(tf: Any, role: str, index: int, mode: str = "async", xla: bool = False
                   ) -> Any:
    """One intra-op and one inter-op thread; a PS worker only talks to the PSes and itself, a
    ring worker to every worker (task 0 leads the collective group, as in
    MultiWorkerMirroredStrategy). ``xla``: XLA auto-clustering (``global_jit_level`` ON_1; on
    CPU it needs ``XLA_CPU_FLAG`` in TF_XLA_FLAGS too, see ``xla_flags``)."""
    filters = None if role == "ps" or mode == "ring" else ["/job:ps", f"/job:worker/task:{index}"]
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=1,
        inter_op_parallelism_threads=1,
        device_filters=filters,
        allow_soft_placement=False,
    )
    if mode == "ring":
        config.experimental.collective_group_leader = "/job:worker/replica:0/task:0"
    if xla:
        config.graph_options.optimizer_options.global_jit_level = (
            tf.compat.v1.OptimizerOptions.ON_1)
    return config


def on_ps(op: Any) -> bool:
    """Whether graph op ``op`` runs on a PS: placed there, colocated with an op placed there
    (a variable's initializer), or reading a resource handle of one (``ReadVariableOp``)."""
    if "/job:ps" in op.device:
        return True
    graph = op.graph
    for group in op.colocation_groups():
        name = group.decode()[len("loc:@"):]
        if name != op.name and "/job:ps" in graph.get_operation_by_name(name).device:
            return True
    return any(t.dtype.name == "resource" and "/job:ps" in t.op.device for t in op.inputs)


def keep_xla_off_ps(graph: Any) -> int:
    """Mark every op of ``graph`` that runs on a PS ``_XlaCompile`` false, so XLA's
    auto-clustering leaves the PSes' ops (updates, initializers, reads) as they are and
    clusters only the worker's. Without it TensorFlow compiles a cluster placed on a PS against
    that process's ``/job:localhost`` device and fails with "Multiple CPU devices" (MobileNetV2's
    variable initializers). Returns how many ops were marked."""
    from tensorflow.core.framework import attr_value_pb2

    marked = 0
    for op in graph.get_operations():
        if on_ps(op):
            op._set_attr("_XlaCompile", attr_value_pb2.AttrValue(b=False))
            marked += 1
    return marked


def _write_json(path: str, obj: dict[str, Any]) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def runs_on(run_on_file: str | None, run_on_s: float, now_s: float) -> bool:
    """Whether a worker past its ``--steps`` steps on: until ``run_on_file`` exists (the
    orchestrator writes it when the captures end) and ``run_on_s`` seconds have passed since
    the time written in it (``time.time()`` when the captures ended; its modification time
    where it holds none: that clock is the kernel's coarse one, up to a tick behind
    ``time.time()``); False without a file to wait for."""
    if not run_on_file:
        return False
    try:
        text = Path(run_on_file).read_text()
    except FileNotFoundError:
        return True
    try:
        written = float(text)
    except ValueError:  # no time in it (an empty flag)
        written = os.stat(run_on_file).st_mtime
    return now_s < written + run_on_s


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _trace_hook(first_step: int, num_steps: int) -> Any | None:
    """gradwire's TraceHook when GRADWIRE_BUNDLE is set; None otherwise."""
    if not os.environ.get("GRADWIRE_BUNDLE"):
        return None
    try:
        from gradwire import TraceHook
    except ImportError as e:  # gradwire is being built alongside; keep the lab usable
        print(f"lab.node: GRADWIRE_BUNDLE set but TraceHook unavailable: {e}", file=sys.stderr)
        return None
    return TraceHook(first_step=first_step, num_steps=num_steps)


class GreedyBytes:
    """ps_strategy for replica_device_setter: each variable goes to the PS with the fewest bytes
    so far (TF 1.x's contrib GreedyLoadBalancingStrategy with byte_size_load_fn)."""

    def __init__(self, num_ps: int) -> None:
        self.loads = [0] * num_ps

    def __call__(self, op: Any) -> int:
        try:
            shape, dtype = op.get_attr("shape"), op.get_attr("dtype")
            import tensorflow as tf

            n = tf.TensorShape(shape).num_elements() or 1
            size = n * tf.as_dtype(dtype).size
        except (ValueError, TypeError):
            size = 1
        task = min(range(len(self.loads)), key=self.loads.__getitem__)
        self.loads[task] += size
        return task


def check_job(args: argparse.Namespace) -> None:
    """SystemExit with a one-line message when a change to the job (``--partition``,
    ``--accumulate``, ``--mixed-precision``, ``--recompute``, ``--fuse-tensors``) cannot apply
    (``models.job_refusal``)."""
    why = models.job_refusal(args.mode, args.model, args.partition, args.accumulate,
                             args.mixed_precision, args.recompute, args.fuse_tensors)
    if why:
        raise SystemExit(f"lab.node: {why}")


def read_once_getter(tf: Any, then: Any, worker_device: str, tag: str,
                     skip: Any = lambda var: False) -> tuple[Any, list[tuple[Any, Any]]]:
    """A ``variable_scope`` custom getter that hands every build, instead of a trainable
    variable (one ``skip`` does not refuse), one read of it made once: a ``ReadVariableOp`` on
    the variable's own device (``var.value()`` would drop every device constraint), outside
    any control dependency or name scope of the build, passed through ``then(value, var)``; a
    partitioned variable's parts are read so each and concatenated on the worker. Returns the
    getter and the list of (read, variable) pairs it fills, in the order it reads them."""
    from tensorflow.python.ops.variables import PartitionedVariable

    tf1 = tf.compat.v1
    graph = tf1.get_default_graph()
    reads: dict[str, Any] = {}  # variable name (as built) -> what the builds get
    pairs: list[tuple[Any, Any]] = []

    def read(var: Any) -> Any:
        with tf1.control_dependencies(None), graph.name_scope(None):
            with tf1.device(var.device):
                value = tf.raw_ops.ReadVariableOp(resource=var.handle, dtype=var.dtype,
                                                  name=f"{var.op.name}/{tag.title()}Read")
            return then(value, var)

    def custom_getter(getter: Any, name: str, *a: Any, **kw: Any) -> Any:
        var = getter(name, *a, **kw)  # variable_scope calls it with keywords: keep the names
        if kw.get("trainable") is False or skip(var):
            return var
        if name not in reads:
            parts = list(var) if isinstance(var, PartitionedVariable) else [var]
            got = [read(p) for p in parts]
            pairs.extend(zip(got, parts, strict=True))
            if len(got) == 1:
                reads[name] = got[0]
            else:
                with tf1.control_dependencies(None), graph.name_scope(None), \
                        tf1.device(worker_device):
                    reads[name] = tf.concat(got, var._partition_axes()[0],
                                            name=f"{name}/{tag}_concat")
        return reads[name]

    return custom_getter, pairs


def precision_train_op(args: argparse.Namespace, tf: Any, opt: Any, global_step: Any,
                       worker_device: str) -> tuple[Any, int]:
    """One step of ``--mixed-precision``: the train op and its examples.

    The model is built (its inputs cast to ``models.HALF``) in a variable scope with a custom
    getter: the enclosing device setter places the float32 variable it creates, and the model
    gets, instead of the variable, one read of it cast to bfloat16, both ops on the variable's
    own device (a PS: the tensor the worker pulls is bfloat16, half the bytes; a partitioned
    variable: each part read and cast on its PS, concatenated on the worker). The gradients
    with respect to those bfloat16 reads (computed on the worker in bfloat16, so pushed in
    bfloat16) are cast to float32 on the variable's device and applied there by ``opt`` to the
    float32 variable (the master weights)."""
    tf1 = tf.compat.v1

    def read_half(value: Any, var: Any) -> Any:
        with tf1.device(var.device):  # cast on the PS: the pulled tensor is bfloat16
            return tf.cast(value, models.HALF, name=f"{var.op.name}/to_{models.HALF}")

    custom_getter, pairs = read_once_getter(
        tf, read_half, worker_device, "precision",
        skip=lambda var: not var.dtype.base_dtype.is_floating)
    build = models.builder(args.model, args.model_mb, dtype=models.HALF)
    with tf1.variable_scope(tf1.get_variable_scope(), custom_getter=custom_getter):
        loss, examples = build(args.batch_size)
    grads = tf1.gradients(loss, [h for h, _ in pairs])
    if any(isinstance(g, tf.IndexedSlices) for g in grads):
        raise SystemExit(f"lab.node: model {args.model} has sparse gradients: "
                         "--mixed-precision needs a dense model")
    pairs_out = []
    for g, (_, var) in zip(grads, pairs, strict=True):
        if g is None:
            continue
        with tf1.device(var.device):  # the push is bfloat16; float32 again on the PS
            pairs_out.append((tf.cast(g, var.dtype.base_dtype,
                                      name=f"{var.op.name}/grad_to_float32"), var))
    return opt.apply_gradients(pairs_out, global_step=global_step), int(examples)


def accumulate_train_op(args: argparse.Namespace, tf: Any, build: Any, opt: Any,
                        global_step: Any, worker_device: str) -> tuple[Any, int]:
    """One update of ``--accumulate K`` micro-steps: the train op and its examples.

    The model is built K times in a variable scope with ``reuse=AUTO_REUSE`` and a custom
    getter: the first build creates the variables (placed by the enclosing device setter), and
    every build gets, instead of the variable, one read of it made once: a ``ReadVariableOp``
    on the variable's own device (a PS) and an identity on the worker, so each variable is
    pulled once per update, as without accumulation (a partitioned variable: each part read
    so, concatenated on the worker). Micro-step i computes the gradients of its loss (a fresh
    batch of the builder's synthetic inputs) with respect to those reads; they are added to
    the running sum, and micro-step i + 1's ops run only after that sum (control dependencies:
    the micro-steps do not overlap, so activations of one micro-batch live at a time). The sum
    over K is applied once by ``opt`` (one push of each gradient to its PS)."""
    tf1 = tf.compat.v1
    k = args.accumulate

    def read_once(value: Any, var: Any) -> Any:
        with tf1.device(worker_device):
            return tf.identity(value, name=f"{var.op.name}/accumulate_read")

    custom_getter, pairs = read_once_getter(tf, read_once, worker_device, "accumulate")
    total: list[Any] | None = None
    examples = 0
    after: list[Any] = []  # the previous micro-step's sums
    with tf1.variable_scope(tf1.get_variable_scope(), reuse=tf1.AUTO_REUSE,
                            custom_getter=custom_getter):
        for i in range(k):
            with tf1.name_scope(f"micro{i}"), tf1.control_dependencies(after):
                loss, n = build(args.batch_size)
            examples += int(n)
            xs = [r for r, _ in pairs]
            grads = tf1.gradients(loss, xs, name=f"micro{i}_gradients")
            if any(isinstance(g, tf.IndexedSlices) for g in grads):
                raise SystemExit(f"lab.node: model {args.model} has sparse gradients: "
                                 "--accumulate needs a dense model")
            with tf1.name_scope(f"micro{i}_sum"), tf1.device(worker_device):
                total = grads if total is None else [
                    t if g is None else g if t is None else t + g
                    for t, g in zip(total, grads, strict=True)]
                after = [tf.group(*[t for t in total if t is not None], name="done")]
    assert total is not None
    with tf1.name_scope("accumulate_mean"), tf1.device(worker_device):
        pairs_out = [(t / float(k), v) for t, (_, v) in zip(total, pairs, strict=True)
                     if t is not None]
    return opt.apply_gradients(pairs_out, global_step=global_step), examples


def fused_train_op(args: argparse.Namespace, tf: Any, opt: Any, loss: Any, global_step: Any,
                   worker_device: str) -> Any:
    """The train op of ``--fuse-tensors BYTES``: the gradients, in the order the backward
    pass makes them (the variables' reverse order), grouped per PS into buckets of at least
    BYTES (``fusion_buckets``, the rule gradwire predict's ``--fuse-tensors`` follows); each
    bucket of two or more is flattened and concatenated on the worker (the one tensor the PS
    pulls for it), split and reshaped back on the variables' PS, and applied there by
    ``opt``. A bucket of one gradient is pushed as it is."""
    tf1 = tf.compat.v1
    pairs = [(g, v) for g, v in opt.compute_gradients(loss) if g is not None][::-1]
    if any(isinstance(g, tf.IndexedSlices) for g, _ in pairs):
        raise SystemExit(f"lab.node: model {args.model} has sparse gradients: "
                         "--fuse-tensors needs a dense model")
    sizes = [int(v.shape.num_elements()) for _, v in pairs]
    buckets = fusion_buckets([(v.device, n * v.dtype.base_dtype.size)
                              for (_, v), n in zip(pairs, sizes, strict=True)],
                             args.fuse_tensors)
    out = []
    for b, members in enumerate(buckets):
        if len(members) == 1:
            out.append(pairs[members[0]])
            continue
        with tf1.name_scope(f"fusion/bucket{b}"):
            with tf1.device(worker_device):
                flat = tf.concat([tf.reshape(pairs[i][0], [-1]) for i in members], 0)
            with tf1.device(pairs[members[0]][1].device):
                parts = tf.split(flat, [sizes[i] for i in members])
                out += [(tf.reshape(part, pairs[i][1].shape), pairs[i][1])
                        for part, i in zip(parts, members, strict=True)]
    return opt.apply_gradients(out[::-1], global_step=global_step)


def run_ps(args: argparse.Namespace, tf: Any, cluster: Any) -> int:
    """Start the PS server and serve until killed."""
    server = tf.compat.v1.train.Server(
        cluster, job_name="ps", task_index=args.index, config=session_config(tf, "ps", args.index)
    )
    print(f"lab.node: ps{args.index} serving at {server.target}", flush=True)
    server.join()
    return 0


def ps_train_op(args: argparse.Namespace, tf: Any, cluster: Any, hooks: list[Any],
                is_chief: bool) -> tuple[Any, int]:
    """The train op of PS training (variables on the PSes by ``--ps-strategy``; async, or
    SyncReplicasOptimizer, whose hook goes into ``hooks``) and the examples per step. With
    ``--partition K`` > 1 the model's variables are built under ``min_max_variable_partitioner``
    (K parts at most, one per started ``models.PARTITION_MIN_SLICE_BYTES``): every part is
    a variable of its own, which the ps_strategy places on its own. With ``--accumulate K`` > 1
    one update runs K micro-steps (``accumulate_train_op``); with ``--mixed-precision`` the
    worker computes in bfloat16 over bfloat16 reads of the variables (``precision_train_op``)."""
    check_job(args)
    tf1 = tf.compat.v1
    num_ps = len(cluster.job_tasks("ps"))
    num_workers = len(cluster.job_tasks("worker"))
    worker_device = f"/job:worker/task:{args.index}"
    strategy = GreedyBytes(num_ps) if args.ps_strategy == "greedy" else None  # None: round-robin
    with tf1.device(
        tf1.train.replica_device_setter(
            ps_tasks=num_ps, worker_device=worker_device, cluster=cluster, ps_strategy=strategy
        )
    ):
        global_step = tf1.train.get_or_create_global_step()
        build = models.builder(args.model, args.model_mb, recompute=args.recompute)
        opt = tf1.train.GradientDescentOptimizer(args.lr)
        scope = (tf1.variable_scope(tf1.get_variable_scope(),
                                    partitioner=tf1.min_max_variable_partitioner(
                                        max_partitions=args.partition, axis=0,
                                        min_slice_size=models.PARTITION_MIN_SLICE_BYTES))
                 if args.partition > 1 else contextlib.nullcontext())
        with scope:
            if args.accumulate > 1:
                return accumulate_train_op(args, tf, build, opt, global_step, worker_device)
            if args.mixed_precision:
                return precision_train_op(args, tf, opt, global_step, worker_device)
            loss, examples_per_step = build(args.batch_size)
            if args.fuse_tensors > 0:
                return (fused_train_op(args, tf, opt, loss, global_step, worker_device),
                        examples_per_step)
        if args.mode == "sync":
            opt = tf1.train.SyncReplicasOptimizer(
                opt, replicas_to_aggregate=num_workers, total_num_replicas=num_workers
            )
            hooks.append(opt.make_session_run_hook(is_chief))
        return opt.minimize(loss, global_step=global_step), examples_per_step


def ring_train_op(args: argparse.Namespace, tf: Any, num_workers: int) -> tuple[Any, int]:
    """The train op of synchronous data parallelism by collective ring all-reduce, as
    MultiWorkerMirroredStrategy builds it in a graph with ``CommunicationImplementation.RING``
    and the default ``bytes_per_pack`` 0 (``tensorflow/python/distribute/cross_device_ops.py``,
    ``CollectiveAllReduce``): every worker holds its own copy of the variables; the dense
    gradients, in reverse order, flattened and concatenated into one pack, go through one
    ``CollectiveReduceV2`` (``communication_hint='ring'``: TensorFlow's RingReducer over gRPC
    among the workers), are divided by W, split back and applied by each worker. Sparse
    (IndexedSlices) gradients, which the strategy all-gathers instead, are refused."""
    from tensorflow.python.ops import collective_ops

    tf1 = tf.compat.v1
    with tf1.device(f"/job:worker/task:{args.index}/device:CPU:0"):
        global_step = tf1.train.get_or_create_global_step()
        loss, examples_per_step = models.builder(args.model, args.model_mb)(args.batch_size)
        pairs = [(g, v) for g, v in zip(tf1.gradients(loss, tf1.trainable_variables()),
                                        tf1.trainable_variables(), strict=True) if g is not None]
        grads, variables = [g for g, _ in pairs], [v for _, v in pairs]
        if any(isinstance(g, tf.IndexedSlices) for g in grads):
            raise SystemExit(f"lab.node: model {args.model} has sparse gradients, which "
                             "MultiWorkerMirroredStrategy all-gathers: mode ring needs a dense "
                             "model")
        pack = list(reversed(grads))
        sizes = [int(g.shape.num_elements()) for g in pack]
        flat = tf.concat([tf.reshape(g, [-1]) for g in pack], axis=0)
        reduced = collective_ops.all_reduce_v2(
            flat, num_workers, group_key=1, instance_key=1, communication_hint="ring"
        ) / num_workers
        averaged = [tf.reshape(r, g.shape)
                    for r, g in zip(tf.split(reduced, sizes), pack, strict=True)]
        opt = tf1.train.GradientDescentOptimizer(args.lr)
        train_op = opt.apply_gradients(
            list(zip(reversed(averaged), variables, strict=True)), global_step=global_step
        )
    return train_op, examples_per_step


def xla_off_ps_hook(tf: Any, scaffold: Any) -> Any:
    """A session hook whose ``begin`` makes ``scaffold``'s ops (initialisation, readiness)
    and then keeps every PS op of the graph out of XLA's clusters (``keep_xla_off_ps``); it
    goes last among the hooks, so that every op the session will run exists by then."""

    class XlaOffPs(tf.compat.v1.train.SessionRunHook):
        def begin(self) -> None:
            scaffold.finalize()  # makes the scaffold's ops, then finalizes the graph
            graph = tf.compat.v1.get_default_graph()
            graph._unsafe_unfinalize()
            keep_xla_off_ps(graph)
            graph.finalize()

    return XlaOffPs()


def run_worker(args: argparse.Namespace, tf: Any, cluster: Any) -> int:
    """Build the model, train ``--steps`` steps, rewrite the result JSON after every step."""
    from tensorflow.python.training import session_manager

    tf1 = tf.compat.v1
    t_start = time.time()
    num_workers = len(cluster.job_tasks("worker"))
    # a ring worker holds its own variables and initialises them itself: each is a chief
    is_chief = args.index == 0 or args.mode == "ring"
    config = session_config(tf, "worker", args.index, args.mode, xla=args.xla)
    server = tf1.train.Server(cluster, job_name="worker", task_index=args.index, config=config)
    hooks: list[Any] = []
    if args.mode == "ring":
        train_op, examples_per_step = ring_train_op(args, tf, num_workers)
    else:
        train_op, examples_per_step = ps_train_op(args, tf, cluster, hooks, is_chief)
    param_bytes = sum(v.shape.num_elements() * v.dtype.size for v in tf1.trainable_variables())
    trace = _trace_hook(args.trace_first, args.trace_steps)
    if trace is not None:
        hooks.append(trace)

    class _Creator(tf1.train.ChiefSessionCreator if is_chief else tf1.train.WorkerSessionCreator):
        """Like MonitoredTrainingSession's, but non-chiefs poll for the model every 0.5 s
        instead of every 30 s."""

        def _get_session_manager(self) -> Any:
            if self._session_manager is None:
                self._session_manager = session_manager.SessionManager(
                    local_init_op=self._scaffold.local_init_op,
                    local_init_feed_dict=self._scaffold.local_init_feed_dict,
                    ready_op=self._scaffold.ready_op,
                    ready_for_local_init_op=self._scaffold.ready_for_local_init_op,
                    graph=tf1.get_default_graph(),
                    recovery_wait_secs=0.5,
                )
            return self._session_manager

    scaffold = tf1.train.Scaffold()
    if args.xla:
        hooks.append(xla_off_ps_hook(tf, scaffold))  # last: after every other hook's ops
    creator = _Creator(scaffold=scaffold, master=server.target, config=config)
    result: dict[str, Any] = {
        "role": "worker",
        "index": args.index,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "model": args.model,
        "mode": args.mode,
        "partition": args.partition,
        "accumulate": args.accumulate,
        "recompute": args.recompute,
        "fuse_tensors": args.fuse_tensors,
        "xla": args.xla,
        "mixed_precision": args.mixed_precision,
        "batch_size": args.batch_size,
        "examples_per_step": int(examples_per_step),
        "param_bytes": int(param_bytes),
        "steps_requested": args.steps,
        "process_start_time_s": t_start,
        "step_end_times_s": [],
        "cpu_s_at_step_end": [],
        # the machine's (busy, softirq) CPU ticks at each step end: its CPU between any two
        # step ends, however short the span (the orchestrator samples every 0.5 s)
        "host_ticks_at_step_end": [],
        "done": False,
    }
    with tf1.train.MonitoredSession(
        session_creator=creator, hooks=hooks, stop_grace_period_secs=2
    ) as sess:
        result["session_ready_time_s"] = time.time()
        result["cpu_s_at_session_ready"] = _cpu_s()
        step = 0
        # run on past --steps judged at the last step's end (its recorded time), so the last
        # step ends at least --run-on-s after the flag's time, not microseconds before it
        while step < args.steps or (step < RUN_ON_MAX_FACTOR * args.steps and runs_on(
                args.run_on_file, args.run_on_s, result["step_end_times_s"][-1])):
            if sess.should_stop():
                break
            step += 1
            sess.run(train_op)
            result["step_end_times_s"].append(time.time())
            result["cpu_s_at_step_end"].append(_cpu_s())
            result["host_ticks_at_step_end"].append(host_cpu_ticks())
            if args.out:
                _write_json(args.out, result)
        result["done"] = True
        if args.out:
            _write_json(args.out, result)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of one node process."""
    args = parse_args(argv)
    check_job(args)
    if args.xla and args.role == "worker":  # read by TensorFlow's XLA flags, so before import
        os.environ["TF_XLA_FLAGS"] = xla_flags(os.environ.get("TF_XLA_FLAGS"))
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    spec = json.loads(args.cluster)
    cluster = tf.train.ClusterSpec(spec)
    if args.role == "ps":
        return run_ps(args, tf, cluster)
    return run_worker(args, tf, cluster)


if __name__ == "__main__":
    sys.exit(main())
