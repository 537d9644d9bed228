"""Graph transforms: a step graph in, an equivalent (or what-if) step graph out.

``fold_delays`` folds delays into their neighbours where that is exact; ``scale_compute`` is
the what-if of faster compute (Chang et al. section 8.6); later transforms (tensor fusion,
partition, recomputation: dPRO section 5) take and return graphs the same way.
"""

from __future__ import annotations

import dataclasses

from gradwire.replay.template import DELAY, GAP, WORKER, StepTemplate

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


def scale_compute(t: StepTemplate, factor: float) -> StepTemplate:
    """``t`` with every worker compute op ``factor`` times as fast (its duration divided by
    ``factor``): a faster accelerator. The client's gap between steps (Python and the
    session's own overhead), the PS's work, the delays and the transfers are kept."""
    amount = [a / factor if k == WORKER and n != GAP else a
              for k, n, a in zip(t.kind, t.name, t.amount, strict=True)]
    return dataclasses.replace(t, amount=amount)
