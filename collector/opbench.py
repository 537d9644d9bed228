"""Time TensorFlow ops alone, one grid point at a time, for the op cost database.

Each point gets a variable scope of its own in a graph and session that time points one after
another (``PointTimer``): its inputs are variables (so nothing is fed or folded; drawn uniform,
standard deviation 0.098), the op under test is built on them, and its output is what the
session fetches (copying it out is not part of the op's time). After warm-up runs, each timed
run is preceded by a pass that adds a freshly filled tensor into a buffer (its size calibrated
on the machine by ``calibrate_pass``, ``collector.cachepass``; the buffer made once per
session),
so the op finds its inputs in memory as it does in a training step,
where each weight is read once per step and arrives fresh from the network or the previous op's
output has been pushed out by others. (On this project's lab profiles, the largest ops of the
MLP 20 MB model: 7.8 ms traced, 5.5 ms timed alone with warm caches, 7.9 ms with the flush.)
Each timed run asks for a full trace, and the op's own execution time is read from the step
stats (``collector.opshapes``): the clock a recorded trace's ops are timed with, so the
database and the traces agree on what an op's time is. The op is found by type, not by name,
since TensorFlow's graph rewrites (oneDNN, remapper fusion) rename it.

With ``xla`` a point's op is also compiled by XLA alone (its ops between the variables' reads
and the fetched output marked ``_XlaCompile``, as ``tf.xla.experimental.jit_scope`` marks them),
and what is timed is XLA's run of it (the step stats' ``_XlaRun``), keyed as TensorFlow's own
kernel is (its traced type, shapes and attributes, from one traced run of the op uncompiled) on
device ``XLA_`` + the device (``XLA_CPU``): what TensorFlow's auto-clustering would run in its
place. XLA's CPU code differs from oneDNN's most for some op types (a depthwise convolution ran
about 100 times as long on this project's machine), and ``predict --op-fusion`` costs a job's
ops from these rows.

Needs TensorFlow (the ``[tf]`` extra); ``PointTimer``, ``run_point`` (one point, a session of
its own) and ``calibrate_pass`` are the entries.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gradwire.opdb import BUILD, Machine, OpTiming
from gradwire.opfeatures import canonical_op, features
from gradwire.quiet import native_stderr_silenced

from .cachepass import PassCalibration, choose_pass, pass_ladder
from .opgrid import Point, families_named, points
from .opshapes import COST_ATTRS, attr_value, executed_ops

Builder = Callable[[Any, dict[str, Any], Any], Any]


def _var(tf: Any, shape: list[int], dtype: Any) -> Any:
    # uniform, standard deviation 0.098: a quarter of a normal draw's cost to initialise
    init = tf.compat.v1.random_uniform_initializer(-0.17, 0.17)
    v = tf.compat.v1.get_variable(f"v{len(tf.compat.v1.global_variables())}", shape=shape,
                                  dtype=tf.float32, initializer=init, use_resource=True)
    x = v.read_value()
    return x if dtype == tf.float32 else tf.cast(x, dtype)


def _image(tf: Any, p: dict[str, Any], dt: Any, c: int | None = None) -> Any:
    return _var(tf, [p["batch"], p["hw"], p["hw"], c or p.get("cin") or p["c"]], dt)


def _conv_parts(tf: Any, p: dict[str, Any], dt: Any) -> tuple[Any, Any, list[int]]:
    x = _image(tf, p, dt)
    w = _var(tf, [p["kernel"], p["kernel"], p["cin"], p["cout"]], dt)
    return x, w, [1, p["stride"], p["stride"], 1]


def _conv_grad(tf: Any, p: dict[str, Any], dt: Any) -> tuple[Any, Any, Any, list[int]]:
    x, w, strides = _conv_parts(tf, p, dt)
    out = (p["hw"] + p["stride"] - 1) // p["stride"]
    dy = _var(tf, [p["batch"], out, out, p["cout"]], dt)
    return x, w, dy, strides


def _depthwise_grad(tf: Any, p: dict[str, Any], dt: Any) -> tuple[Any, Any, Any, list[int]]:
    x = _image(tf, p, dt)
    w = _var(tf, [p["kernel"], p["kernel"], p["cin"], 1], dt)
    out = (p["hw"] + p["stride"] - 1) // p["stride"]
    dy = _var(tf, [p["batch"], out, out, p["cin"]], dt)
    return x, w, dy, [1, p["stride"], p["stride"], 1]


def _matrix(tf: Any, p: dict[str, Any], dt: Any) -> Any:
    return _var(tf, [p["rows"], p["cols"]], dt)


def _pool_args(p: dict[str, Any]) -> tuple[list[int], list[int]]:
    k = p["window"]
    return [1, k, k, 1], [1, k, k, 1]


def _pool_grad(tf: Any, p: dict[str, Any], dt: Any, pool: Any, grad: Any) -> Any:
    x = _image(tf, p, dt)
    ksize, strides = _pool_args(p)
    y = pool(x, ksize, strides, "SAME")
    dy = _var(tf, y.shape.as_list(), dt)
    return grad(x, y, dy, ksize, strides) if grad is not tf.raw_ops.AvgPoolGrad else grad(
        orig_input_shape=tf.shape(x), grad=dy, ksize=ksize, strides=strides, padding="SAME")


def _matmul(tf: Any, p: dict[str, Any], dt: Any) -> Any:
    ta, tb = p.get("transpose") == "a", p.get("transpose") == "b"
    a = _var(tf, [p["k"], p["m"]] if ta else [p["m"], p["k"]], dt)
    b = _var(tf, [p["n"], p["k"]] if tb else [p["k"], p["n"]], dt)
    return tf.linalg.matmul(a, b, transpose_a=ta, transpose_b=tb)


def _gather_indices(tf: Any, count: int, limit: int) -> Any:
    return tf.constant([(i * 7919) % limit for i in range(count)], dtype=tf.int32)


BUILDERS: dict[str, Builder] = {
    "matmul": _matmul,
    "fused_matmul": lambda tf, p, dt: tf.nn.relu(tf.nn.bias_add(
        _matmul(tf, p, dt), _var(tf, [p["n"]], dt))),
    "conv2d": lambda tf, p, dt: tf.nn.conv2d(*_conv_parts(tf, p, dt), "SAME"),
    "fused_conv2d": lambda tf, p, dt: tf.nn.relu(tf.nn.bias_add(
        tf.nn.conv2d(*_conv_parts(tf, p, dt), "SAME"), _var(tf, [p["cout"]], dt))),
    "conv2d_backprop_input": lambda tf, p, dt: _backprop(
        tf, tf.raw_ops.Conv2DBackpropInput, "input", *_conv_grad(tf, p, dt)),
    "conv2d_backprop_filter": lambda tf, p, dt: _backprop(
        tf, tf.raw_ops.Conv2DBackpropFilter, "filter", *_conv_grad(tf, p, dt)),
    "depthwise": lambda tf, p, dt: tf.nn.depthwise_conv2d(
        _image(tf, p, dt), _var(tf, [p["kernel"], p["kernel"], p["cin"], 1], dt),
        [1, p["stride"], p["stride"], 1], "SAME"),
    "depthwise_backprop_input": lambda tf, p, dt: _backprop(
        tf, tf.raw_ops.DepthwiseConv2dNativeBackpropInput, "input", *_depthwise_grad(tf, p, dt)),
    "depthwise_backprop_filter": lambda tf, p, dt: _backprop(
        tf, tf.raw_ops.DepthwiseConv2dNativeBackpropFilter, "filter",
        *_depthwise_grad(tf, p, dt)),
    "batch_norm": lambda tf, p, dt: tf.raw_ops.FusedBatchNormV3(
        x=_image(tf, p, dt), scale=_var(tf, [p["c"]], tf.float32),
        offset=_var(tf, [p["c"]], tf.float32), mean=tf.zeros([0]), variance=tf.zeros([0]),
        is_training=True)[0],
    "batch_norm_grad": lambda tf, p, dt: tf.raw_ops.FusedBatchNormGradV3(
        y_backprop=_image(tf, p, dt), x=_image(tf, p, dt), scale=_var(tf, [p["c"]], tf.float32),
        reserve_space_1=_var(tf, [p["c"]], tf.float32),
        reserve_space_2=_var(tf, [p["c"]], tf.float32),
        reserve_space_3=_var(tf, [p["c"]], tf.float32), is_training=True)[0],
    "max_pool": lambda tf, p, dt: tf.nn.max_pool2d(_image(tf, p, dt), *_pool_args(p), "SAME"),
    "max_pool_grad": lambda tf, p, dt: _pool_grad(
        tf, p, dt, tf.nn.max_pool2d, lambda x, y, dy, k, s: tf.raw_ops.MaxPoolGrad(
            orig_input=x, orig_output=y, grad=dy, ksize=k, strides=s, padding="SAME")),
    "avg_pool": lambda tf, p, dt: tf.nn.avg_pool2d(_image(tf, p, dt), *_pool_args(p), "SAME"),
    "avg_pool_grad": lambda tf, p, dt: _pool_grad(
        tf, p, dt, tf.nn.avg_pool2d, tf.raw_ops.AvgPoolGrad),
    "bias_add": lambda tf, p, dt: tf.nn.bias_add(_matrix(tf, p, dt), _var(tf, [p["cols"]], dt)),
    "bias_add_grad": lambda tf, p, dt: tf.raw_ops.BiasAddGrad(out_backprop=_matrix(tf, p, dt)),
    "relu": lambda tf, p, dt: tf.nn.relu(_matrix(tf, p, dt)),
    "relu_grad": lambda tf, p, dt: tf.raw_ops.ReluGrad(
        gradients=_matrix(tf, p, dt), features=_matrix(tf, p, dt)),
    "relu6": lambda tf, p, dt: tf.nn.relu6(_matrix(tf, p, dt)),
    "relu6_grad": lambda tf, p, dt: tf.raw_ops.Relu6Grad(
        gradients=_matrix(tf, p, dt), features=_matrix(tf, p, dt)),
    "add": lambda tf, p, dt: tf.math.add(_matrix(tf, p, dt), _matrix(tf, p, dt)),
    "mul": lambda tf, p, dt: tf.math.multiply(_matrix(tf, p, dt), _matrix(tf, p, dt)),
    "add_n": lambda tf, p, dt: tf.math.add_n([_matrix(tf, p, dt) for _ in range(p["terms"])]),
    "reduce_sum": lambda tf, p, dt: tf.math.reduce_sum(_matrix(tf, p, dt), axis=0),
    "apply_gradient_descent": lambda tf, p, dt: _apply_gradient_descent(tf, p, dt),
    "gather": lambda tf, p, dt: _gather(tf, p, dt),
    "segment_sum": lambda tf, p, dt: tf.math.unsorted_segment_sum(
        _var(tf, [p["lookups"], p["dim"]], dt), _gather_indices(tf, p["lookups"], p["segments"]),
        p["segments"]),
    "softmax_xent": lambda tf, p, dt: tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=_gather_indices(tf, p["batch"], p["classes"]),
        logits=_var(tf, [p["batch"], p["classes"]], dt)),
}


def _backprop(tf: Any, raw: Any, wrt: str, x: Any, w: Any, dy: Any, strides: list[int]) -> Any:
    """A convolution's gradient with respect to its input or its filter (``wrt``)."""
    if wrt == "input":
        return raw(input_sizes=tf.shape(x), filter=w, out_backprop=dy, strides=strides,
                   padding="SAME")
    return raw(input=x, filter_sizes=tf.shape(w), out_backprop=dy, strides=strides,
               padding="SAME")


def _apply_gradient_descent(tf: Any, p: dict[str, Any], dt: Any) -> Any:
    v = tf.compat.v1.get_variable("applied", shape=[p["rows"], p["cols"]], dtype=tf.float32,
                                  initializer=tf.compat.v1.zeros_initializer(),
                                  use_resource=True)
    return tf.raw_ops.ResourceApplyGradientDescent(
        var=v.handle, alpha=tf.constant(0.01), delta=_matrix(tf, p, dt))


def _gather(tf: Any, p: dict[str, Any], dt: Any) -> Any:
    table = tf.compat.v1.get_variable("table", shape=[p["rows"], p["dim"]], dtype=tf.float32,
                                      initializer=tf.compat.v1.zeros_initializer(),
                                      use_resource=True)
    return tf.raw_ops.ResourceGather(resource=table.handle,
                                     indices=_gather_indices(tf, p["lookups"], p["rows"]),
                                     dtype=tf.float32)


FLUSH_SCOPE = "cache_pass"


def _flush_op(tf: Any, size_bytes: int) -> tuple[Any, list[Any]]:
    """An op that adds a freshly filled ``size_bytes`` tensor into a buffer of that size
    (pushes the caches out), and the buffer's variable (to initialise once). The addend is
    filled on every run: read from a second variable instead, the pass is twice as fast but
    pushes out less for its size (docs/preregistered/issue23-build-speed-report.md)."""
    n = size_bytes // 4
    with tf.compat.v1.variable_scope(FLUSH_SCOPE):
        buf = tf.compat.v1.get_variable("buffer", shape=[n], dtype=tf.float32,
                                        initializer=tf.compat.v1.zeros_initializer(),
                                        use_resource=True)
    return tf.raw_ops.AssignAddVariableOp(resource=buf.handle, value=tf.ones([n])), [buf]


def _static_size(ops: list[Any]) -> tuple[float, float]:
    """The largest FLOP count and the largest bytes of any of ``ops``, from their static
    shapes (before running; float32 bytes)."""
    most = size = 0.0
    for op in ops:
        ins = [t.shape.as_list() if t.shape.rank is not None else None for t in op.inputs]
        outs = [t.shape.as_list() for t in op.outputs if t.shape.rank is not None]
        attrs = {k: v for k in COST_ATTRS if k in op.node_def.attr
                 and (v := attr_value(op.node_def.attr[k])) is not None}
        shapes_known = all(s is None or None not in s for s in (*ins, *outs))
        if shapes_known:
            n, b = features(canonical_op(op.type), ins, outs, attrs, "float32")
            most, size = max(most, n), max(size, b)
    return most, size


def _tf_reason(exc: Any) -> str:
    """The line of a TensorFlow OpError's message that says what went wrong: a run's error
    starts "Graph execution error:", and the reason is the line just before the
    ``[[{{node ...}}]]`` line that names the failing node."""
    lines = [ln for ln in str(getattr(exc, "message", exc)).splitlines() if ln.strip()]
    for before, line in zip(lines, lines[1:], strict=False):
        if line.lstrip().startswith("[[{{node"):
            return before.strip()
    return lines[0].strip() if lines else type(exc).__name__


XLA = "XLA_"  # the device prefix of rows timed as XLA compiled the op (``XLA_CPU``)
_NOT_COMPILED = frozenset({"VarHandleOp", "ReadVariableOp", "VarIsInitializedOp"})


def mark_for_xla(target: Any, built: list[Any]) -> list[Any]:
    """Mark the ops of ``built`` (what a builder made) that ``target`` (its fetched tensor or
    op) needs, back to the variables' reads (not the reads nor the variables), to be compiled
    by XLA as one cluster; returns them. The attributes are those
    ``tf.xla.experimental.jit_scope`` sets."""
    from tensorflow.core.framework import attr_value_pb2

    ours = {op.name for op in built}
    top = getattr(target, "op", target)
    todo, marked, seen = [top], [], {top.name}
    while todo:
        op = todo.pop()
        if op.type in _NOT_COMPILED or op.name not in ours:
            continue
        marked.append(op)
        for t in op.inputs:
            if t.op.name not in seen:
                seen.add(t.op.name)
                todo.append(t.op)
    for op in marked:
        op._set_attr("_XlaCompile", attr_value_pb2.AttrValue(b=True))
        op._set_attr("_XlaScope", attr_value_pb2.AttrValue(s=b"gradwire_opdb_point"))
        op._set_attr("_XlaSeparateCompiledGradients", attr_value_pb2.AttrValue(b=False))
    return marked


def _variable_bytes(variables: list[Any]) -> int:
    """What ``variables`` hold in memory (float32 bytes)."""
    return sum(4 * int(v.shape.num_elements() or 0) for v in variables)


class PointTimer:
    """Times grid points one after another in one graph and one session (``time``), so the
    cache pass's buffer is made and initialised once, not for every point. Each point is
    built in a variable scope of its own and initialises only its own variables; before a
    point, the session is replaced once it has tried ``max_points`` points (skipped ones too:
    they leave nodes in the graph) or holds ``max_held_bytes`` of variables (the pass's
    buffer counted), and after TensorFlow fails a point. ``flush_bytes``: the pass before
    each timed run (``calibrate_pass``); ``threads``: TensorFlow's intra- and inter-op threads
    for the session (0: its default, a thread per core); ``xla``: time each point's op as
    XLA compiles it alone (rows of device ``XLA_CPU``, see the module). Use as a context
    manager."""

    def __init__(self, tf: Any, *, flush_bytes: int = 64 << 20, threads: int = 0,
                 max_points: int = 64, max_held_bytes: int = 1 << 30, xla: bool = False
                 ) -> None:
        self.tf, self.flush_bytes, self.threads, self.xla = tf, flush_bytes, threads, xla
        self.max_points, self.max_held_bytes = max_points, max_held_bytes
        self._session: Any = None
        self._graph: Any = None
        self._flush: Any = None
        self._points = self._held = 0

    def __enter__(self) -> PointTimer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the session (its variables' memory goes with it)."""
        if self._session is not None:
            self._session.close()
        self._session = self._graph = self._flush = None

    def _open(self) -> None:
        tf = self.tf
        self.close()
        self._graph = tf.Graph()
        with self._graph.as_default():
            self._flush, buffers = _flush_op(tf, self.flush_bytes)
            init = tf.compat.v1.variables_initializer(buffers)
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=self.threads,
                                          inter_op_parallelism_threads=self.threads)
        config.graph_options.rewrite_options.constant_folding = 2  # OFF: keep inputs live
        try:
            with native_stderr_silenced():  # the first session's CUDA probe, on a CPU box
                self._session = tf.compat.v1.Session(graph=self._graph, config=config)
            self._session.run(init)
        except BaseException:
            self.close()
            raise
        self._points, self._held = 0, _variable_bytes(buffers)

    def time(self, point: Point, machine: Machine, *, warmup: int = 3, reps: int = 10,
             max_flops: float = 2e9, max_bytes: float = 2.5e8, budget_s: float = 2.0
             ) -> OpTiming | str:
        """Time ``point`` alone; its OpTiming, or a one-line reason it was skipped (larger
        than ``max_flops`` or ``max_bytes`` by its static shapes, TensorFlow refused it, or its
        op type never showed in the step stats). Fewer than ``reps`` timed runs are made when
        they would take over ``budget_s``; before each, the pass runs. A point TensorFlow fails
        in a session that timed others is tried once more in a fresh one (what failed may be
        the others' leftovers), and only then reported failed."""
        tf = self.tf
        while True:
            first = True  # a session opened for this point: its failure is the point's own
            try:
                if (self._session is None or self._points >= self.max_points
                        or self._held >= self.max_held_bytes):
                    self._open()
                first = self._points == 0
                return self._time_here(point, machine, warmup=warmup, reps=reps,
                                       max_flops=max_flops, max_bytes=max_bytes,
                                       budget_s=budget_s)
            except tf.errors.OpError as exc:
                self.close()  # the next point, or this one again, in a fresh session
                if first:
                    return f"failed: {_tf_reason(exc)}"

    def _time_here(self, point: Point, machine: Machine, *, warmup: int, reps: int,
                   max_flops: float, max_bytes: float, budget_s: float) -> OpTiming | str:
        """``time`` in the session open now; TensorFlow's errors running the point raise."""
        tf = self.tf
        self._points += 1
        graph, sess = self._graph, self._session
        with graph.as_default(), tf.compat.v1.variable_scope(f"point{self._points}"):
            ops_before = len(graph.get_operations())
            vars_before = len(tf.compat.v1.global_variables())
            try:
                # fetched: a NoOp depending on it would let grappler prune it away
                target = BUILDERS[point.family.builder](tf, dict(point.values),
                                                        getattr(tf, point.dtype))
                compiled = None
                if self.xla:  # the same op again, on inputs of its own, for XLA to compile
                    mid = len(graph.get_operations())
                    with tf.compat.v1.variable_scope("xla"):
                        compiled = BUILDERS[point.family.builder](tf, dict(point.values),
                                                                  getattr(tf, point.dtype))
                    mark_for_xla(compiled, graph.get_operations()[mid:])
            except (ValueError, TypeError, tf.errors.OpError) as exc:
                return f"not built: {str(exc).splitlines()[0]}"
            planned, planned_bytes = _static_size(graph.get_operations()[ops_before:])
            own = tf.compat.v1.global_variables()[vars_before:]
            init = tf.compat.v1.variables_initializer(own)
        if planned > max_flops or planned_bytes > max_bytes:
            return (f"{planned / 1e9:.1f} GFLOP, {planned_bytes / 1e6:.0f} MB: over the "
                    f"build's limits ({max_flops / 1e9:g} GFLOP, {max_bytes / 1e6:g} MB)")
        self._held += _variable_bytes(own)
        options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE,
                                          output_partition_graphs=True)
        times: list[float] = []
        found = None
        sess.run(init)
        if compiled is not None:  # the key: the op as TensorFlow's own kernel ran it
            meta = tf.compat.v1.RunMetadata()
            sess.run(target, options=options, run_metadata=meta)
            ops = [o for o in executed_ops(meta) if o.op == point.family.op]
            if not ops:
                return f"{point.family.op} not in the step stats"
            key = max(ops, key=lambda o: o.duration_us)
        timed, timed_op = (target, point.family.op) if compiled is None else (compiled, "XlaRun")
        each = []
        for _ in range(max(1, warmup)):
            t0 = time.perf_counter()
            sess.run(timed)
            each.append(time.perf_counter() - t0)
        # XLA compiles on the first run: the last says what a run takes
        once = each[-1] if compiled is not None else sum(each) / len(each)
        runs = min(reps, max(3, int(budget_s / max(once, 1e-6))))
        for _ in range(runs):
            sess.run(self._flush)
            meta = tf.compat.v1.RunMetadata()
            sess.run(timed, options=options, run_metadata=meta)
            ops = [o for o in executed_ops(meta) if o.op == timed_op]
            if not ops:
                break
            found = max(ops, key=lambda o: o.duration_us)
            times.append(found.duration_us)
        if found is None or not times:
            return ("XLA did not compile it" if compiled is not None
                    else f"{point.family.op} not in the step stats")
        if compiled is not None:
            found = key
        if any(s is None for s in found.inputs):
            return "an input's shape was not in the step stats"
        return OpTiming.of_times(
            times, op=found.op, inputs=found.inputs, attrs=found.attrs, dtype=found.dtype,
            device=(XLA + found.device) if compiled is not None else found.device,
            fingerprint=machine.fingerprint, source=BUILD, outputs=found.outputs)


def run_point(tf: Any, point: Point, machine: Machine, *, flush_bytes: int = 64 << 20,
              threads: int = 0, xla: bool = False, **limits: Any) -> OpTiming | str:
    """Time ``point`` alone in a session of its own (``PointTimer.time``, whose keyword
    arguments ``limits`` takes; ``xla``: as XLA compiles it)."""
    with PointTimer(tf, flush_bytes=flush_bytes, threads=threads, xla=xla) as timer:
        return timer.time(point, machine, **limits)


XLA_LAUNCH = "XlaLaunch"  # the row of a compiled cluster's launch (``time_xla_launch``)


def time_xla_launch(tf: Any, machine: Machine, *, reps: int = 30) -> OpTiming:
    """The time XLA's run of a compiled cluster takes around its work: ``_XlaRun`` of a
    cluster that adds 1 to a one-element variable, ``reps`` traced runs after 3 warm-up runs
    (the first compiles), as the row of op ``XLA_LAUNCH`` on device ``XLA_CPU``. A point's XLA
    row holds its op's work and this launch (the op compiled alone); in a job's cluster the ops
    share one launch, so predict takes it off each op's XLA time."""
    graph = tf.Graph()
    with graph.as_default():
        built_from = len(graph.get_operations())
        target = _var(tf, [1], tf.float32) + 1.0
        mark_for_xla(target, graph.get_operations()[built_from:])
        init = tf.compat.v1.global_variables_initializer()
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE,
                                      output_partition_graphs=True)
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=machine.threads or 0,
                                      inter_op_parallelism_threads=machine.threads or 0)
    times: list[float] = []
    with native_stderr_silenced(), tf.compat.v1.Session(graph=graph, config=config) as sess:
        sess.run(init)
        for _ in range(3):
            sess.run(target)
        for _ in range(reps):
            meta = tf.compat.v1.RunMetadata()
            sess.run(target, options=options, run_metadata=meta)
            times += [o.duration_us for o in executed_ops(meta) if o.op == "XlaRun"]
    if not times:
        raise RuntimeError("XLA did not compile the launch probe (TensorFlow without XLA?)")
    return OpTiming.of_times(times, op=XLA_LAUNCH, inputs=((1,),), attrs=(), dtype="float32",
                             device=XLA + "CPU",  # builds time ops on the CPU
                             fingerprint=machine.fingerprint, source=BUILD, outputs=((1,),))


PROBES = ("MatMul", "FusedConv2D", "Relu", "AddV2", "AvgPool", "ResourceApplyGradientDescent")


def times_after_passes(tf: Any, chosen: list[Point], machine: Machine, sizes: list[int], *,
                       rounds: int = 2, threads: int = 0, reps: int = 10,
                       tick: Callable[[], None] | None = None
                       ) -> tuple[dict[int, list[list[float]]], dict[int, list[float]]]:
    """Time each of ``chosen`` after a pass of each of ``sizes`` (bytes), ``rounds`` times,
    every other round in the reverse order of sizes: per size, each point's median times (µs,
    one per round it ran in) and the seconds each point's timing took (a round and size's
    first point's include opening its session and filling the pass's buffer). ``tick`` is
    called after each timing."""
    times: dict[int, list[list[float]]] = {s: [[] for _ in chosen] for s in sizes}
    seconds: dict[int, list[float]] = {s: [] for s in sizes}
    for r in range(rounds):
        for size in sizes if r % 2 == 0 else sizes[::-1]:
            with PointTimer(tf, flush_bytes=size, threads=threads) as timer:
                for i, point in enumerate(chosen):
                    t0 = time.perf_counter()
                    got = timer.time(point, machine, reps=reps)
                    seconds[size].append(time.perf_counter() - t0)
                    if not isinstance(got, str):
                        times[size][i].append(got.median_us)
                    if tick is not None:
                        tick()
    return times, seconds


def calibrate_pass(tf: Any, machine: Machine, reference: int, *, threads: int = 0,
                   reps: int = 10, tick: Callable[[], None] | None = None) -> PassCalibration:
    """Time the smallest float32 grid point of each ``PROBES`` family after passes doubling
    from 16 MiB to ``reference`` bytes, two rounds (the second in reverse order), and choose
    the pass (``collector.cachepass.choose_pass``). ``tick`` is called after each timing (for
    a progress bar: ``2 * len(PROBES) * len(pass_ladder(reference))`` in all)."""
    probes = [p for p in points(families_named(",".join(PROBES)), per_family=1)
              if p.dtype == "float32"]
    sizes = pass_ladder(reference)
    times, _ = times_after_passes(tf, probes, machine, sizes, threads=threads, reps=reps,
                                  tick=tick)
    kept = [i for i in range(len(probes)) if all(len(times[s][i]) == 2 for s in sizes)]
    if not kept:  # no probe ran: keep the reference, the rule before calibration
        return PassCalibration((reference,), (1.0,), 0.0, reference)
    return choose_pass({s: [times[s][i] for i in kept] for s in sizes})
