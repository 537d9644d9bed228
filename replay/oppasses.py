"""The op passes of dPRO section 5 on a traced step's executed ops (issue 23): each gives every
traced op's time after the pass over its traced time (a ratio), which ``rebatch_template``
applies to the step templates' coarsened compute ops, the way the batch what-if does.

- ``precision_ratios``: mixed precision's compute. Each float32 op's ratio is the op cost
  database's cost of it in ``bfloat16`` (TensorFlow's CPU half type; ``mixed_bfloat16``) over
  its cost in float32, both from the model (its own bias cancels); an op type the database
  timed in float32 only keeps its time.
- ``fusion_ratios``: XLA-style op fusion of element-wise chains (``ELEMENTWISE``): an
  element-wise op whose one element-wise producer feeds it alone joins that producer's chain.
  A fused chain writes and reads its intermediate tensors in registers, not memory, and is
  one kernel: each member is costed by the database's fit for its type with only its bytes
  from and to outside the chain, and every member but the first without the fit's fixed
  cost. Every other compute op, where the database timed its type as XLA compiles it
  (``opdb build --xla``: rows of device ``XLA_CPU``), runs XLA's code instead of TensorFlow's
  kernel (``xla_kernel_ratios``): its ratio is XLA's time over TensorFlow's at its shapes, both
  from the database's fits, XLA's less the launch of a compiled cluster (the ``XlaLaunch``
  row), which a job's clustered ops share; a PS's ops keep TensorFlow's. Without such rows
  XLA's kernels are taken as fast as TensorFlow's, and predict says so.
- ``recompute``: recomputation of the cheap activations (as memory-saving gradient
  checkpointing does for activations and adds): every element-wise forward op whose output a
  backward op reads, and whose own inputs the backward pass keeps anyway, is run again just
  before the first backward op that reads it, so its output need not live through the step
  and nothing else lives longer. Its time goes onto that backward op; ``recomputed_ops`` is
  the executed-op graph after the pass, for the memory estimator. With ``everything``
  (``--recompute all``: gradient checkpointing of every layer, as ``tf.recompute_grad``
  segments covering the model run it) every forward compute op that depends on a variable
  is run again, before the first backward op that reads it or, for an op no backward op
  reads (a bias add feeding a ReLU), that reads the nearest forward op fed by it.

Backward ops are TensorFlow's: named under ``gradients`` (tf.gradients, the optimizers'
``minimize``) or ``gradient_tape``.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gradwire.collector.opbench import XLA, XLA_LAUNCH
from gradwire.collector.opshapes import NOT_COMPUTE, ExecutedOp
from gradwire.opfeatures import tensor_bytes
from gradwire.replay.opcost import CostModel, one_thread, shaped_row

HALF = "bfloat16"  # the half-precision type the CPU kernels of TensorFlow run
ELEMENTWISE = frozenset({
    "Relu", "Relu6", "ReluGrad", "Relu6Grad", "Elu", "EluGrad", "Selu", "Softplus",
    "Sigmoid", "SigmoidGrad", "Tanh", "TanhGrad", "BiasAdd", "Add", "AddV2", "Sub", "Mul",
    "RealDiv", "Div", "Neg", "Square", "Sqrt", "Rsqrt", "Exp", "Log", "Cast", "Maximum",
    "Minimum", "SquaredDifference", "Select", "SelectV2", "Pow", "Reciprocal", "Abs",
    "LeakyRelu", "LeakyReluGrad"})
BACKWARD_SCOPES = ("gradients", "gradient_tape")


@dataclass(frozen=True, kw_only=True)
class OpRatios:
    """A pass's effect on one step: traced op name -> its time after over before, the step's
    compute time after over before (traced-time weighted), and the share of the traced
    compute time the pass changed."""

    ratios: dict[str, float]
    compute_factor: float
    changed_share: float


def summed(ops: Sequence[ExecutedOp], ratios: dict[str, float]) -> OpRatios:
    """The OpRatios of ``ratios`` over the traced ``ops``."""
    before = sum(o.duration_us for o in ops)
    after = sum(o.duration_us * ratios.get(o.name, 1.0) for o in ops)
    changed = sum(o.duration_us for o in ops if abs(ratios.get(o.name, 1.0) - 1.0) > 1e-9)
    return OpRatios(ratios=ratios, compute_factor=after / before if before > 0 else 1.0,
                    changed_share=changed / before if before > 0 else 0.0)


def faster_types(ops: Sequence[ExecutedOp], types: Sequence[str], factor: float) -> OpRatios:
    """Faster compute for some op types only (``predict --compute-scale X --compute-ops
    TYPES``; Chang et al. section 8.6, "we increased the speed of convolutions"): every traced
    compute op whose TensorFlow type contains one of ``types`` (``Conv``: Conv2D, its two
    gradients, the fused and depthwise convolutions) runs ``factor`` times as fast; the rest
    keep their time."""
    names = [x.strip() for x in types]
    ratios = {o.name: 1.0 / factor for o in ops
              if o.op not in NOT_COMPUTE and any(x in o.op for x in names)}
    return summed(ops, ratios)


def pass_times_us(ops: Iterable[ExecutedOp]) -> tuple[float, float]:
    """The traced compute time of the forward pass and of the backward pass
    (``is_backward``), us."""
    forward = backward = 0.0
    for o in ops:
        if o.op in NOT_COMPUTE:
            continue
        if is_backward(o.name):
            backward += o.duration_us
        else:
            forward += o.duration_us
    return forward, backward


def faster_passes(ops: Sequence[ExecutedOp], forward: float, backward: float) -> OpRatios:
    """Faster compute by pass: every traced compute op of the forward pass runs ``forward``
    times as fast, every backward op (``is_backward``) ``backward`` times. Hardware changes
    the two apart: Chang et al.'s Table 3 gives their GPUs' forward and backpropagation, whose
    ratio is not a CPU's (``scripts/bench_mechanisms.py --study`` scales a profile to both)."""
    if not (forward > 0 and backward > 0):
        raise ValueError(f"pass speed-ups must be above 0, not {forward} and {backward}")
    ratios = {o.name: 1.0 / (backward if is_backward(o.name) else forward)
              for o in ops if o.op not in NOT_COMPUTE}
    return summed(ops, ratios)


def time_by_type(ops: Iterable[ExecutedOp]) -> dict[str, float]:
    """Traced compute time per TensorFlow op type, us, most first."""
    out: dict[str, float] = defaultdict(float)
    for o in ops:
        if o.op not in NOT_COMPUTE:
            out[o.op] += o.duration_us
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def compute_ops(ops: Iterable[ExecutedOp]) -> list[ExecutedOp]:
    """The ops a cost model can cost: compute, every input's shape recorded."""
    return [o for o in ops if o.op not in NOT_COMPUTE and all(s is not None for s in o.inputs)]


def precision_ratios(ops: Sequence[ExecutedOp], model: CostModel) -> OpRatios:
    """Mixed precision's compute ratios (see the module)."""
    ratios: dict[str, float] = {}
    with one_thread():
        for o in compute_ops(ops):
            if o.dtype != "float32" or not model.has_model(o.op, HALF, o.device):
                continue
            t32 = model.predict_us(o.op, _row(o, o.dtype), o.dtype, o.device,
                                   model_only=True)
            t16 = model.predict_us(o.op, _row(o, HALF), HALF, o.device, model_only=True)
            if t32 and t16 is not None:
                ratios[o.name] = t16 / t32
    return summed(ops, ratios)


def _row(o: ExecutedOp, dtype: str):  # noqa: ANN202 (a ShapedRow)
    return shaped_row(o.op, o.inputs, o.outputs, o.attrs, dtype)  # type: ignore[arg-type]


def consumers(ops: Iterable[ExecutedOp]) -> dict[str, list[str]]:
    """Node name -> the ops (names) that read one of its outputs, in the step's order."""
    out: dict[str, list[str]] = defaultdict(list)
    for o in ops:
        for src in dict.fromkeys(o.input_nodes):
            out[src].append(o.name)
    return out


def elementwise_chains(ops: Sequence[ExecutedOp]) -> list[list[ExecutedOp]]:
    """The chains of two or more element-wise ops op fusion fuses (see the module), each in
    execution order: an element-wise op joins the chain of its one element-wise producer on
    its device, unless that producer already feeds another chain's next op, or one of the
    op's other inputs may depend on the producer (its own producer started after the
    producer ended: fusing the two would put the fused kernel on both sides of it, as a
    ReluGrad reading the forward Relu's output would). A producer whose output other ops read
    too (the backward pass, most often) still writes it: a fused kernel with two outputs, as
    XLA's multi-output fusion makes."""
    by_name = {o.name: o for o in ops}
    nxt: dict[str, str] = {}
    has_prev: set[str] = set()
    for o in compute_ops(ops):
        if o.op not in ELEMENTWISE:
            continue
        feeders = [by_name[s] for s in dict.fromkeys(o.input_nodes) if s in by_name
                   and by_name[s].op in ELEMENTWISE and by_name[s].placed == o.placed]
        if len(feeders) != 1 or feeders[0].name in nxt:
            continue
        p = feeders[0]
        if any(by_name[s].start_us >= p.end_us for s in o.input_nodes
               if s != p.name and s in by_name):
            continue
        nxt[p.name] = o.name
        has_prev.add(o.name)
    chains = []
    for o in ops:
        if o.name in nxt and o.name not in has_prev:
            chain = [o]
            while chain[-1].name in nxt:
                chain.append(by_name[nxt[chain[-1].name]])
            chains.append(chain)
    return chains


def fusion_ratios(ops: Sequence[ExecutedOp], model: CostModel) -> OpRatios:
    """Op fusion's ratios (see the module): a member reads from memory only its inputs from
    outside the chain, and writes its output only if it ends the chain or another op reads
    it. It is costed by the database's fit for its type, fixed cost a, FLOP term b and byte
    term c (``opcost``): an element-wise op's FLOPs and bytes grow together (a fit splits
    its work between them arbitrarily) and its work is its memory traffic (a FLOP or less per
    4 bytes, far below any CPU's balance point), so its work b FLOPs + c bytes shrinks with
    its bytes: (a + work x outside bytes / bytes) over (a + work), a dropped for all but the
    chain's first. A power-law fit scales by its bytes' exponent alone (it has no fixed cost
    to drop). The trees' correction of a roofline is the same on both sides and cancels."""
    ratios: dict[str, float] = {}
    readers = consumers(ops)
    chains = elementwise_chains(ops)
    for chain in chains:
        if "/job:ps" in chain[0].placed:  # not compiled on a PS (``xla_kernel_ratios``)
            continue
        for k, o in enumerate(chain):
            fit = model.fit_of(o.op, o.dtype, o.device)
            if fit is None:
                continue
            row = _row(o, o.dtype)
            inner_in = chain[k - 1].name if k > 0 else None
            ins = [s for s, src in zip(o.inputs, o.input_nodes, strict=False)
                   if src != inner_in]
            last = k == len(chain) - 1
            outs = list(o.outputs) if last or len(readers.get(o.name, ())) > 1 else []
            whole = tensor_bytes(list(o.inputs), o.dtype) + tensor_bytes(list(o.outputs),
                                                                         o.dtype)
            share = (tensor_bytes(ins, o.dtype) + tensor_bytes(outs, o.dtype)) / max(whole, 1.0)
            a, b, c = fit.coef
            if fit.kind == "power":
                ratio = ((1.0 + row.bytes_ * share) / (1.0 + row.bytes_)) ** c
            else:  # element-wise: its work is its memory traffic (see the docstring)
                work = b * row.flops + c * row.bytes_
                full = a + work
                ratio = ((a if k == 0 else 0.0) + work * share) / full if full > 0 else 1.0
            ratios[o.name] = min(1.0, max(0.0, ratio))
    chained = {o.name for chain in chains for o in chain}
    ratios.update(xla_kernel_ratios([o for o in ops if o.name not in chained], model))
    return summed(ops, ratios)


def xla_launch_us(model: CostModel) -> float:
    """The launch of a compiled cluster on this machine (µs; the ``XlaLaunch`` row of
    ``opdb build --xla``), 0 where the database has none."""
    row = shaped_row(XLA_LAUNCH, [(1,)], [(1,)], (), "float32")
    return model.predict_us(XLA_LAUNCH, row, "float32", XLA + "CPU") or 0.0


def xla_kernel_ratios(ops: Sequence[ExecutedOp], model: CostModel) -> dict[str, float]:
    """Each compute op's time as XLA's code over its traced time's kernel (see the module):
    the database's XLA fit at its shapes, less a cluster's launch, over TensorFlow's fit there;
    ops whose type (in its dtype, or float32's) the database timed both ways only. A PS's ops
    (its updates, in the worker's trace) keep TensorFlow's kernels: TensorFlow does not compile
    a cluster placed on a remote PS (it fails, "Multiple CPU devices"; the lab keeps them out,
    lab/node.py ``keep_xla_off_ps``)."""
    launch = xla_launch_us(model)
    ratios: dict[str, float] = {}
    with one_thread():
        for o in compute_ops(ops):
            if "/job:ps" in o.placed:
                continue
            xla = XLA + o.device
            if model.fit_of(o.op, o.dtype, xla) is None or model.fit_of(
                    o.op, o.dtype, o.device) is None:
                continue
            row = _row(o, o.dtype)
            native = model.predict_us(o.op, row, o.dtype, o.device, model_only=True)
            compiled = model.predict_us(o.op, row, o.dtype, xla, model_only=True)
            if native and compiled is not None and native > 0:
                ratios[o.name] = max(compiled - launch, 0.0) / native
    return ratios


def has_xla_rows(model: CostModel) -> bool:
    """Whether the database timed any op as XLA compiles it (``opdb build --xla``)."""
    return any(device.startswith(XLA) and op != XLA_LAUNCH
               for op, _, device, _ in model.groups)


def is_backward(name: str) -> bool:
    """Whether node ``name`` is of the backward pass (see the module)."""
    return name.split("/", 1)[0] in BACKWARD_SCOPES or any(
        f"/{s}/" in name for s in BACKWARD_SCOPES)


def recomputed(ops: Sequence[ExecutedOp]) -> dict[str, str]:
    """The forward ops recomputation runs again: name -> the first backward op (in start
    order) that reads its output. An op is recomputed when it is element-wise (cheap) and the
    backward pass keeps each of its inputs anyway (reads it too, or it is a variable or an
    input the step did not compute): its output then need not live through the step, and
    recomputing it keeps nothing else alive."""
    first: dict[str, tuple[float, str]] = {}
    read_back: set[str] = set()
    fwd = {o.name: o for o in compute_ops(ops) if not is_backward(o.name)}
    for o in ops:
        if not is_backward(o.name):
            continue
        for src in o.input_nodes:
            read_back.add(src)
            if src in fwd and (src not in first or o.start_us < first[src][0]):
                first[src] = (o.start_us, o.name)
    computed = {o.name for o in compute_ops(ops)}  # a variable's read is not: it is kept
    return {src: name for src, (_, name) in first.items()
            if fwd[src].op in ELEMENTWISE and all(
                i in read_back or i not in computed for i in fwd[src].input_nodes)}


def recomputed_all(ops: Sequence[ExecutedOp]) -> dict[str, str]:
    """Full recomputation's forward ops (the module's ``everything``): every forward compute op
    that depends on a variable -> the backward op it runs again before: the first (in start
    order) that reads it, else that reads the nearest forward op it feeds, else the step's
    first backward op."""
    comp = sorted(compute_ops(ops), key=lambda o: o.start_us)  # inputs end before readers start
    fwd = [o for o in comp if not is_backward(o.name)]
    backward = sorted((o for o in ops if is_backward(o.name)), key=lambda o: o.start_us)
    if not backward:
        return {}
    first: dict[str, ExecutedOp] = {}
    for o in backward:
        for src in o.input_nodes:
            first.setdefault(src, o)
    dep: set[str] = set()
    feeds: dict[str, list[str]] = defaultdict(list)
    for o in fwd:
        if any(o.from_variable) or any(i in dep for i in o.input_nodes):
            dep.add(o.name)
        for i in o.input_nodes:
            feeds[i].append(o.name)
    out: dict[str, str] = {}
    for name in (o.name for o in fwd if o.name in dep):
        level, seen = [name], {name}
        while level:
            found = [first[n] for n in level if n in first]
            if found:
                out[name] = min(found, key=lambda o: o.start_us).name
                break
            level = [c for n in level for c in feeds[n] if c not in seen]
            seen.update(level)
        else:
            out[name] = backward[0].name
    return out


def recompute(ops: Sequence[ExecutedOp], everything: bool = False) -> OpRatios:
    """Recomputation's ratios (see the module): each backward op that first reads recomputed
    activations lasts its own time plus theirs. ``everything``: full recomputation
    (``recomputed_all``), else the cheap activations (``recomputed``)."""
    by_name = {o.name: o for o in ops}
    extra: dict[str, float] = defaultdict(float)
    for src, reader in (recomputed_all(ops) if everything else recomputed(ops)).items():
        extra[reader] += by_name[src].duration_us
    ratios = {name: (by_name[name].duration_us + add) / max(by_name[name].duration_us, 1e-3)
              for name, add in extra.items()}
    return summed(ops, ratios)


def recomputed_ops(ops: Sequence[ExecutedOp], everything: bool = False) -> list[ExecutedOp]:
    """The step's executed ops after recomputation, for the memory estimator: each
    recomputed forward op's backward readers read a copy of it instead; a copy reads the
    copies of its recomputed inputs and is allocated when the first backward op that needs it
    (itself, or through a copy that reads it) starts. The original's output then lives only
    through the forward pass; the copies' time is the ratios', not moved into the estimate's
    timeline. ``everything``: as ``recompute``'s."""
    again = recomputed_all(ops) if everything else recomputed(ops)
    by_name = {o.name: o for o in ops}
    copy = {src: f"{src} (recomputed)" for src in again}
    at = {src: by_name[reader].start_us for src, reader in again.items()}
    for src in sorted(again, key=lambda n: by_name[n].start_us, reverse=True):
        for i in by_name[src].input_nodes:  # an input is recomputed before what reads it
            if i in at:
                at[i] = min(at[i], at[src])
    out = []
    for o in ops:
        if is_backward(o.name) and any(s in copy for s in o.input_nodes):
            o = dataclasses.replace(o, input_nodes=tuple(copy.get(s, s) for s in o.input_nodes))
        out.append(o)
    for src in again:
        o = by_name[src]
        out.append(dataclasses.replace(o, name=copy[src], start_us=at[src], end_us=at[src],
                                       input_nodes=tuple(copy.get(i, i)
                                                         for i in o.input_nodes)))
    return out
