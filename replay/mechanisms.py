"""Synchronisation mechanisms as template transforms: a profile's step templates (as the
asynchronous-PS generator runs them) in, the templates of another mechanism out.

``async-ps`` (ICPE'20): each worker pulls, computes and pushes on its own; the PS applies each
push as it comes. The templates are the profile's, unchanged.

``sync-ps``: TensorFlow's ``SyncReplicasOptimizer`` with ``replicas_to_aggregate = W`` (Chang
et al. section 3, synchronous PS with a global barrier). Each worker's pushes go into the
PSes' gradient accumulators (the PS work each push unlocks, as profiled); the chief's queue
runner takes each accumulator's W gradients, applies the averaged update to the variable and
then hands every worker a token; a worker's step ends when it gets its token, and its next
step pulls the updated variables. In steady state (the first tokens let each worker run one
step ahead, and gradients of that step are dropped as stale) a step ends for every worker at
once, when the last worker's pushes are in and the update is applied: a barrier (a JOIN task,
``replay/taskgraph.py``) after everything a worker's step does, then each PS's update, then
the client's gap before the next step. The update reads each accumulated gradient and writes
its variable, the same bytes a push's accumulation (or an asynchronous profile's apply)
touches: it lasts, per PS, as long as the profiled PS work of one worker's pushes to that PS
(physics of the op, not a fitted constant; a few ms on the lab's models).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from gradwire.errors import ReplayError
from gradwire.replay.template import BARRIER, PS, StepTemplate

ASYNC_PS, SYNC_PS = "async-ps", "sync-ps"
MECHANISMS = (ASYNC_PS, SYNC_PS)
GAP = "client gap"  # the template op between a step's end and the next step's first request


# the ops through which SyncReplicasOptimizer's workers hand their gradients to the PS
# (ConditionalAccumulator and SparseConditionalAccumulator, resource and ref variants)
ACCUMULATE_OPS = frozenset({"AccumulatorApplyGradient", "ResourceAccumulatorApplyGradient",
                            "SparseAccumulatorApplyGradient",
                            "ResourceSparseAccumulatorApplyGradient"})


def recorded_mechanism(op_types: Iterable[str]) -> str:
    """The mechanism a traced step's ``op_types`` show: ``sync-ps`` where the gradients went
    into SyncReplicasOptimizer's accumulators, else ``async-ps``."""
    return SYNC_PS if any(o in ACCUMULATE_OPS for o in op_types) else ASYNC_PS


def mechanism_templates(templates: Sequence[StepTemplate], ps_map: Sequence[Sequence[int]],
                        ps: int, mechanism: str
                        ) -> tuple[list[StepTemplate], list[list[int]]]:
    """``templates`` and their ops' PS indices (``ps_map``, for ``ps`` PSes) as ``mechanism``
    runs them (module docstring)."""
    if mechanism == ASYNC_PS:
        return list(templates), [list(m) for m in ps_map]
    if mechanism == SYNC_PS:
        out = [synchronous(t, m, ps) for t, m in zip(templates, ps_map, strict=True)]
        return [t for t, _ in out], [m for _, m in out]
    raise ReplayError(f"unknown mechanism {mechanism!r}: use {', '.join(MECHANISMS)}")


def synchronous(t: StepTemplate, ps_of: Sequence[int], ps: int
                ) -> tuple[StepTemplate, list[int]]:
    """``t`` (op i on PS ``ps_of[i]`` of ``ps``) as one worker's step of synchronous PS
    training: what ended the step now reaches a barrier, then each PS applies its update
    (as long as the PS work of ``t``'s pushes to it), then the client's gap."""
    n = len(t.kind)
    gaps = [i for i in range(n) if t.name[i] == GAP]
    if len(gaps) != 1:
        raise ReplayError(f"step {t.step}'s template has {len(gaps)} client gaps, not one: "
                          "it cannot be made synchronous")
    gap = gaps[0]
    s = StepTemplate(step=t.step, kind=list(t.kind), ps=list(t.ps), amount=list(t.amount),
                     succ=[list(x) for x in t.succ], indeg=list(t.indeg), prio=list(t.prio),
                     name=list(t.name), observed_us=t.observed_us, tic=list(t.tic),
                     earliest=list(t.earliest), obs_start=list(t.obs_start),
                     obs_end=list(t.obs_end), var=list(t.var), var_ps=list(t.var_ps),
                     var_bytes=list(t.var_bytes))
    m = list(ps_of)
    before = [i for i in range(n) if gap in s.succ[i]]
    for i in before:
        s.succ[i].remove(gap)
    barrier = s.add(BARRIER, 0.0, "barrier: every worker's pushes", before)
    update = [0.0] * ps
    for i in range(n):
        if t.kind[i] == PS:
            update[m[i]] += t.amount[i]
    ends = []
    for p, us in enumerate(update):
        if us > 0:
            ends.append(s.add(PS, us, f"update ps:{p}", [barrier], ps=p))
    s.succ[barrier if not ends else ends[0]].append(gap)
    for e in ends[1:]:
        s.succ[e].append(gap)
    s.indeg[gap] = max(1, len(ends))
    m += [0] + [p for p, us in enumerate(update) if us > 0]
    for name in ("tic", "earliest"):
        lst = getattr(s, name)
        if lst:
            lst += [math.inf] * (len(s.kind) - len(lst))
    return s, m
