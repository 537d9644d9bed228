"""The batch-size what-if (issue 23): a profile recorded at batch B replayed at batch B'.

Each traced compute op's shapes are read from the profile's recorded RunMetadata
(``collector.opshapes``); every tensor of rank 2 or more whose leading dimension is B, and
that is not a variable's value nor of a variable's shape (a gradient), is the batch's, and
gets B' there. The op's time at B' is its
traced time times the op cost database's ratio, cost(shapes at B') / cost(shapes at B)
(``replay.opcost.CostModel``): the database's own bias (an op alone against an op among
others) cancels in the ratio, and only how the op's cost grows with the batch is taken from
it. An op whose type the database has no rows of scales with its bytes (memory-bound;
``predict -v`` says how much of the compute that was). A coarsened compute
op of the step template (``StepTemplate.members``) is rescaled by its members' traced
times, each times its ratio.

Tensors the step moves keep their sizes where they are the model's (a variable's value or
gradient: read from a variable, or of a variable's shape). The others are the batch's where
their recorded leading dimension is a positive multiple of B (``batch_edges``): a sparse
embedding's looked-up rows (B x lookups of them, pulled as (B, lookups, width) and pushed back
as (B * lookups, width) with their ids), a model-parallel activation. Each such transfer
carries B'/B times its bytes (``rebatch_transfers``; the message's few dozen framing bytes
scaled with them) and its parse after it keeps the profile's per-message cost
(the pull or push fit's beta) and scales the rest, as a partitioned tensor's does
(replay/tensorpasses.py).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gradwire.bundle import Bundle
from gradwire.collector.opshapes import NOT_COMPUTE, ExecutedOp, SentTensor
from gradwire.errors import PredictError
from gradwire.replay.opcost import CostModel, one_thread, shaped_row
from gradwire.replay.template import DELAY, DOWN, UP, WORKER, StepTemplate


@dataclass(frozen=True, kw_only=True)
class Rebatch:
    """The what-if's ratios: traced op name -> time at B' over time at B, how much of
    the traced compute time (share) the database costed, scaled by bytes, or left alone
    (no batch dimension), and which transfers scale with the batch."""

    batch_from: int
    batch_to: int
    ratios: dict[str, float]
    costed_share: float
    by_bytes_share: float
    unchanged_share: float
    compute_factor: float  # the step's compute time at B' over at B (traced-time weighted)
    # the rendezvous edges of the tensors of the batch, whose transfers scale with it
    # (``batch_edges``; empty until the what-if reads them)
    batch_edges: tuple[str, ...] = ()


def rescaled(shape: tuple[int, ...], batch_from: int, batch_to: int) -> tuple[int, ...]:
    """``shape`` with its leading dimension moved from the batch B to B' (rank >= 2 only)."""
    if len(shape) >= 2 and shape[0] == batch_from:
        return (batch_to, *shape[1:])
    return shape


def batch_ratios(ops: Sequence[ExecutedOp], batch_from: int, batch_to: int,
                 model: CostModel, known: dict[str, tuple[float, str]] | None = None
                 ) -> Rebatch:
    """The ratios of one traced step's compute ``ops`` (see the module); ``known``: ratios
    (and how they were found) of ops already costed at the same shapes in another step,
    grown with this step's."""
    known = {} if known is None else known
    ratios: dict[str, float] = {}
    time = {"costed": 0.0, "bytes": 0.0, "unchanged": 0.0}
    before = after = 0.0
    params = {s for o in ops for s, var in zip(o.inputs, o.from_variable, strict=False) if var}

    def batch(shape: tuple[int, ...]) -> tuple[int, ...]:
        return shape if shape in params else rescaled(shape, batch_from, batch_to)

    for o in ops:
        if o.op in NOT_COMPUTE or any(s is None for s in o.inputs):
            continue
        if o.name not in known:
            known[o.name] = _ratio(o, batch, model)
        ratio, how = known[o.name]
        ratios[o.name] = ratio
        time[how] += o.duration_us
        before += o.duration_us
        after += o.duration_us * ratio
    total = max(before, 1e-9)
    return Rebatch(batch_from=batch_from, batch_to=batch_to, ratios=ratios,
                   costed_share=time["costed"] / total, by_bytes_share=time["bytes"] / total,
                   unchanged_share=time["unchanged"] / total,
                   compute_factor=after / before if before > 0 else 1.0)


def _ratio(o: ExecutedOp, batch: Callable[[tuple[int, ...]], tuple[int, ...]],
           model: CostModel) -> tuple[float, str]:
    """One op's time at the new batch over at the old (``batch`` maps a shape), and how it
    was found: ``unchanged``, ``costed`` by the model, or scaled by ``bytes``."""
    flags = o.from_variable or (False,) * len(o.inputs)
    ins = [s if var else batch(s)  # type: ignore[arg-type]
           for s, var in zip(o.inputs, flags, strict=True)]
    outs = [batch(s) for s in o.outputs]
    old = shaped_row(o.op, o.inputs, o.outputs, o.attrs, o.dtype)  # type: ignore[arg-type]
    new = shaped_row(o.op, ins, outs, o.attrs, o.dtype)
    if new.inputs == old.inputs and tuple(outs) == o.outputs:
        return 1.0, "unchanged"
    # the model on both sides: a measured point beside a fitted one would put the
    # regression's error into the ratio
    t_old = model.predict_us(o.op, old, o.dtype, o.device, model_only=True)
    t_new = model.predict_us(o.op, new, o.dtype, o.device, model_only=True)
    if t_old and t_new is not None and t_old > 0:
        return t_new / t_old, "costed"
    return new.bytes_ / max(old.bytes_, 1.0), "bytes"


def rebatch_template(t: StepTemplate, ratios: dict[str, float]) -> StepTemplate:
    """``t`` with each coarsened compute op (``WORKER``; not the PS's work) rescaled: its time
    times the traced-time-weighted mean of its members' ratios (a member without a ratio keeps
    its time)."""
    amount = list(t.amount)
    for i, members in enumerate(t.members):
        traced = sum(us for _, us in members)
        if traced > 0 and t.kind[i] == WORKER:
            amount[i] *= sum(us * ratios.get(name, 1.0) for name, us in members) / traced
    return dataclasses.replace(t, amount=amount)


def worker_steps(b: Bundle, compute_only: bool = True) -> list[list[ExecutedOp]]:
    """Every recorded step's executed ops on the bundle's own devices (its RunMetadata; with
    ``compute_only`` off also the views and received tensors the memory estimator needs)."""
    from gradwire.collector.opingest import own_steps

    steps = [mine for _, _, _, mine in own_steps(b, compute_only=compute_only)]
    if not any(steps):
        raise PredictError("no compute op in the recorded steps, for the job what-ifs",
                           path=b.path)
    return steps


def profile_ratios(steps: Sequence[Sequence[ExecutedOp]], batch_from: int, batch_to: int,
                   model: CostModel) -> Rebatch:
    """One Rebatch over the recorded steps: each op's ratio (the same shapes each step), the
    shares their medians."""
    known: dict[str, tuple[float, str]] = {}  # each op costed once: its shapes every step
    with one_thread():
        each = [batch_ratios(ops, batch_from, batch_to, model, known) for ops in steps if ops]
    ratios: dict[str, float] = {}
    for r in each:
        ratios.update(r.ratios)
    return Rebatch(batch_from=batch_from, batch_to=batch_to, ratios=ratios,
                   costed_share=statistics.median(r.costed_share for r in each),
                   by_bytes_share=statistics.median(r.by_bytes_share for r in each),
                   unchanged_share=statistics.median(r.unchanged_share for r in each),
                   compute_factor=statistics.median(r.compute_factor for r in each))


def of_the_batch(t: SentTensor, batch: int) -> bool:
    """Whether sent tensor ``t`` is the batch's (see the module): not a variable's value or
    gradient, its recorded leading dimension a positive multiple of ``batch``."""
    return (not t.from_variable and t.shape is not None and len(t.shape) >= 1
            and t.shape[0] > 0 and t.shape[0] % batch == 0)


def batch_edges(b: Bundle, batch: int) -> set[str]:
    """The rendezvous edges of the tensors bundle ``b``'s recorded steps send that are the
    batch's (``of_the_batch``), in any of its steps."""
    from gradwire.collector.opingest import recorded_steps
    from gradwire.collector.opshapes import sent_tensors

    return {t.edge for _, meta in recorded_steps(b) for t in sent_tensors(meta)
            if of_the_batch(t, batch)}


def rebatch_transfers(t: StepTemplate, edges: set[str], ratio: float, pull_beta_us: float,
                      push_beta_us: float) -> tuple[StepTemplate, int]:
    """``t`` with each pull and push of an edge in ``edges`` carrying ``ratio`` times its
    bytes, and the parse right after it (its only successor, a delay) keeping its fit's beta
    (``pull_beta_us``, ``push_beta_us``; at most the parse) and the rest times ``ratio``;
    and how many transfers changed."""
    amount = list(t.amount)
    beta = {DOWN: pull_beta_us, UP: push_beta_us}
    changed = 0
    for i, (kind, name) in enumerate(zip(t.kind, t.name, strict=True)):
        if kind not in beta or name.split(" ", 1)[-1] not in edges:
            continue
        changed += 1
        amount[i] *= ratio
        if len(t.succ[i]) == 1 and t.kind[p := t.succ[i][0]] == DELAY:
            kept = min(beta[kind], amount[p])
            amount[p] = kept + (amount[p] - kept) * ratio
    return dataclasses.replace(t, amount=amount), changed


def network_phases(phases: dict[str, float], before: Sequence[StepTemplate],
                   after: Sequence[StepTemplate]) -> dict[str, float]:
    """The baselines' phases (``Profile.phases``) with the downlink's and uplink's times
    times the templates' bytes that way ``after`` over ``before`` (their sums)."""
    if not phases:
        return phases
    out = dict(phases)
    for key, kind in (("downlink", DOWN), ("uplink", UP)):
        old = sum(t.bytes_by(kind) for t in before)
        if old > 0 and key in out:
            out[key] *= sum(t.bytes_by(kind) for t in after) / old
    return out
