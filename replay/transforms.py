"""Graph transforms: a step graph in, an equivalent (or what-if) step graph out.

``fold_delays`` folds delays into their neighbours where that is exact; ``scale_compute`` is
the what-if of faster compute (Chang et al. section 8.6), ``add_layer_copies`` that of a
synthetic model with more copies of one layer (section 8.5); later transforms (tensor fusion,
partition, recomputation: dPRO section 5) take and return graphs the same way.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence

from gradwire.errors import PredictError
from gradwire.replay.template import DELAY, DOWN, GAP, PS, UP, WORKER, StepTemplate

LAYER_KINDS = (WORKER, DOWN, UP, PS)  # the ops a layer's copies repeat

Folded = tuple[list[list[int]], list[int], list[float], list[float], list[int], list[bool]]


def fold_delays(t: StepTemplate) -> Folded:
    """Fold delays into their neighbours where that is exact: a delay that is the only
    predecessor of its only successor becomes that successor's ``pre`` wait; a delay that is
    the only successor of its only predecessor becomes that predecessor's ``post`` wait.

    Returns successors, in-degrees, pre and post waits (us), weights (template ops each op
    stands for) and which ops are gone.
    """
    n = len(t.kind)
    succ = [list(x) for x in t.succ]
    indeg = list(t.indeg)
    preds = t.predecessors()
    pre, post = [0.0] * n, [0.0] * n
    weight = [1] * n
    gone = [False] * n
    for d in range(n):
        if t.kind[d] != DELAY:
            continue
        wait = t.amount[d] + pre[d] + post[d]
        if len(succ[d]) == 1 and indeg[succ[d][0]] == 1:
            s = succ[d][0]
            pre[s] += wait
            weight[s] += weight[d]
            preds[s] = preds[d]
            indeg[s] = indeg[d]
            for p in preds[d]:
                succ[p] = [s if x == d else x for x in succ[p]]
        elif len(preds[d]) == 1 and len(succ[preds[d][0]]) == 1:
            p = preds[d][0]
            post[p] += wait
            weight[p] += weight[d]
            succ[p] = succ[d]
            for x in succ[d]:
                preds[x] = [p if y == d else y for y in preds[x]]
        else:
            continue
        gone[d] = True
    return succ, indeg, pre, post, weight, gone


def is_compute(kind: str, name: str) -> bool:
    """Whether a template op is the worker's compute (a worker op, not the client's gap)."""
    return kind == WORKER and name != GAP


def scale_compute(t: StepTemplate, factor: float) -> StepTemplate:
    """``t`` with every worker compute op ``factor`` times as fast (its duration divided by
    ``factor``): a faster accelerator. The client's gap between steps (Python and the
    session's own overhead), the PS's work, the delays and the transfers are kept."""
    amount = [a / factor if is_compute(k, n) else a
              for k, n, a in zip(t.kind, t.name, t.amount, strict=True)]
    return dataclasses.replace(t, amount=amount)


def accumulate_gradients(t: StepTemplate, micro_steps: int, add_us: float,
                         rerun_us: float | None = None) -> StepTemplate:
    """``t`` as one update of gradient accumulation over ``micro_steps`` micro-steps (dPRO
    section 5): the first micro-step is a copy of the step's compute, each op waiting for the
    pulls it waited for (its forward pass overlaps the pulls as the profiled step's did); the
    middle ``micro_steps - 2`` run the whole compute one after another, and every micro-step
    but the last adds its gradients into the accumulators (``add_us`` each: the adds over
    the gradients' bytes); the last is the profiled compute, its gradients pushed as they are
    ready, so it overlaps the pushes. The pulls, the pushes and the PS's work happen once per
    update, as profiled. ``rerun_us``: what one micro-step's compute costs away from the
    transfers (replay/rerun.py; None: the template's own compute), which the first and the
    middle micro-steps cost in all, the first's ops each scaled alike: the profiled step ran
    its forward pass under the pulls and its backward pass under the pushes, and the
    accumulated update runs that much under them too, the rest (K - 1 passes) between them.
    The caller counts ``micro_steps`` batches per step."""
    if micro_steps < 1:
        raise PredictError(f"--accumulate must be >= 1 micro-steps, not {micro_steps}", usage=True)
    if micro_steps == 1:
        return t
    compute = [i for i, (k, n) in enumerate(zip(t.kind, t.name, strict=True))
               if is_compute(k, n)]
    if not compute:
        return t
    preds = t.predecessors()
    mine = set(compute)
    first = [i for i in compute if not any(p in mine for p in preds[i])]
    total = sum(t.amount[i] for i in compute)
    scale = 1.0 if rerun_us is None or total <= 0 else rerun_us / total
    from gradwire.replay.tensorpasses import topological

    s = dataclasses.replace(t, kind=list(t.kind), ps=list(t.ps), amount=list(t.amount),
                            succ=[list(x) for x in t.succ], indeg=list(t.indeg),
                            prio=list(t.prio), name=list(t.name), tic=list(t.tic),
                            earliest=list(t.earliest), obs_start=list(t.obs_start),
                            obs_end=list(t.obs_end), var=list(t.var), members=list(t.members),
                            control=list(t.control))
    n = len(t.kind)
    copy: dict[int, int] = {}
    for i in compute:  # index order: a compute op's compute predecessors come first
        copy[i] = s.add(WORKER, t.amount[i] * scale,
                        f"micro-step 1 of {micro_steps}: {t.name[i]}",
                        [copy.get(p, p) for p in preds[i]])
    middle = s.add(WORKER, (micro_steps - 2) * total * scale + (micro_steps - 1) * add_us,
                   f"micro-steps 2-{micro_steps - 1} of {micro_steps} and "
                   f"{micro_steps - 1} gradient adds", list(copy.values()))
    _align_kept(s, n)
    for i in first:
        s.succ[middle].append(i)
        s.indeg[i] += 1
    return topological(s)


def _align_kept(s: StepTemplate, n: int) -> None:
    """Extend ``s``'s per-op ``tic`` and ``earliest`` lists, where they were kept for its
    first ``n`` ops, over the ops added since (no priority, no earliest start: inf)."""
    for attr in ("tic", "earliest"):
        got = getattr(s, attr)
        if len(got) == n:
            got += [math.inf] * (len(s.kind) - n)


def one_cluster(t: StepTemplate) -> StepTemplate:
    """``t`` with the worker's compute run as one XLA cluster: TensorFlow runs a compiled
    cluster as one kernel (``_XlaRun``), which starts once every input it takes has arrived
    and hands over all its outputs when it ends. So every compute op waits for every op that
    feeds the compute from outside it (the pulls' parsing), and every op that takes the
    compute's outputs (the pushes) waits for all of it. Outside ops that themselves wait for
    compute (which TensorFlow's clustering would keep out, to make no cycle) keep their own
    edges. Two zero-time delays stand for the cluster's start and end."""
    from gradwire.replay.tensorpasses import topological

    n = len(t.kind)
    compute = [is_compute(k, name) for k, name in zip(t.kind, t.name, strict=True)]
    if not any(compute):
        return t
    preds = t.predecessors()
    after_compute = [False] * n  # waits for some compute op, through any path
    for i in range(n):  # index order is topological
        after_compute[i] = any(compute[p] or after_compute[p] for p in preds[i])
    before_compute = [False] * n  # some compute op waits for it
    for i in reversed(range(n)):
        before_compute[i] = any(compute[j] or before_compute[j] for j in t.succ[i])
    feeds = sorted({p for i in range(n) if compute[i] for p in preds[i]
                    if not compute[p] and not after_compute[p]})
    takes = sorted({j for i in range(n) if compute[i] for j in t.succ[i]
                    if not compute[j] and not before_compute[j]})
    s = copy.deepcopy(t)
    start = s.add(DELAY, 0.0, "XLA cluster starts", feeds)
    end = s.add(DELAY, 0.0, "XLA cluster ends", [i for i in range(n) if compute[i]])
    for i in range(n):
        if compute[i]:
            s.succ[start].append(i)
            s.indeg[i] += 1
    for j in takes:
        s.succ[end].append(j)
        s.indeg[j] += 1
    _align_kept(s, n)
    return topological(s)


def compute_totalling(t: StepTemplate, total_us: float) -> StepTemplate:
    """``t`` with its compute ops scaled alike to take ``total_us`` µs in all: a cluster whose
    whole time was measured (``gradwire opdb step``), run as ``one_cluster`` runs it. A
    template without compute is returned as it is."""
    now = sum(a for k, n, a in zip(t.kind, t.name, t.amount, strict=True) if is_compute(k, n))
    return t if now <= 0 else scale_compute(t, now / total_us)


def layer_ops(t: StepTemplate, scope: str) -> list[int]:
    """The ops of ``t`` that belong to the layer ``scope``: compute, pulls, pushes and PS
    work whose names contain it (a variable scope such as ``deep5/`` or ``block3_conv1``:
    transfers are named after their tensors, compute runs after their first op)."""
    return [i for i, (k, n) in enumerate(zip(t.kind, t.name, strict=True))
            if k in LAYER_KINDS and n != GAP and scope in n]


def add_layer_copies(t: StepTemplate, scope: str, copies: int) -> StepTemplate:
    """``t`` with ``copies`` more copies of the layer ``scope`` (``layer_ops``; Chang et al.
    section 8.5's synthetic models, made by repeating a module's trace): each of its ops
    lasts ``1 + copies`` times as long and each of its tensors is ``1 + copies`` times as
    big. The copies run in series with the layer (a stack of identical layers computes one
    after another) and their tensors travel with the layer's own, on its PS: with several
    PSes, placement would spread N distinct variables, which this does not."""
    scale = set(layer_ops(t, scope))
    factor = 1.0 + copies
    amount = [a * factor if i in scale else a for i, a in enumerate(t.amount)]
    return dataclasses.replace(t, amount=amount)


def parse_layer_copies(text: str) -> tuple[str, int]:
    """``SCOPE:N`` (``--add-layer``) as (scope, N); PredictError naming the fault."""
    scope, sep, count = text.rpartition(":")
    if not sep or not scope or not count.isdigit() or int(count) < 1:
        raise PredictError(f"--add-layer must be SCOPE:N (a layer's name and N >= 1 copies), "
                           f"not {text!r}", usage=True)
    return scope, int(count)


def layer_phase_factors(templates: Sequence[StepTemplate], scope: str, copies: int
                        ) -> dict[str, float]:
    """How ``add_layer_copies`` changes the 1-worker phases the baselines use: the ratio of
    each kind's total (pulled bytes, compute, pushed bytes, PS work) after to before, over
    ``templates``."""
    names = {DOWN: "downlink", WORKER: "worker", UP: "uplink", PS: "server"}
    before = dict.fromkeys(names, 0.0)
    after = dict.fromkeys(names, 0.0)
    for t in templates:
        scale = set(layer_ops(t, scope))
        for i, (k, n, a) in enumerate(zip(t.kind, t.name, t.amount, strict=True)):
            if k in names and n != GAP:
                before[k] += a
                after[k] += a * (1.0 + copies) if i in scale else a
    return {names[k]: after[k] / before[k] if before[k] > 0 else 1.0 for k in names}
