"""Which parameter server holds each variable when a prediction changes the PS count.

A transfer carries one variable's value (a pull) or its update (a push); the variable's PS is
where TensorFlow's ``replica_device_setter`` put it. The setter calls its ``ps_strategy`` once
per variable, in the order the model creates them, and TensorFlow keeps a graph's nodes in
creation order, so the profile's partition graphs list the variables in that order
(``StepTrace.variables``; checked on the lab's MobileNetV2: replaying the 1-PS profile's
variables through the greedy strategy for 3 PSes put all 263 on the PSes a 3-PS run used, with
3.78, 3.04 and 7.34 MB, the bytes its captures carried). The strategies (``--placement``):

- ``greedy``: each variable to the PS with the fewest bytes so far, ties to the lowest index:
  TF 1.x's ``GreedyLoadBalancingStrategy`` with ``byte_size_load_fn`` (the lab's).
- ``round-robin``: variable k to PS k mod M: ``replica_device_setter``'s default.
- ``balanced``: the biggest variable first, each to the least-loaded PS (longest processing
  time first): the most even split by bytes a placement by whole variables gets near.

A profile recorded with several PSes lists each PS's variables graph by graph; the order they
were created in is rebuilt by running the strategy over those lists (each PS's next variable
goes where the strategy would have sent it). A profile with no variable records (bundles
recorded before the TraceHook kept them) falls back to ``balanced`` over the transfers
themselves. An optimizer's slot variables are colocated with their variable, so TensorFlow
places them without the strategy; they are left out (``replay/profile.py``'s
``ps_variables``). Limits: a chunk of update work on the PS (coarsened over several variables)
goes whole to the PS of the first push it waits for.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the aligner's graph (networkx, numpy) is not loaded to build the CLI
    from gradwire.aligner.dfg import DfgStep

PLACEMENTS = ("greedy", "round-robin", "balanced")
log = logging.getLogger(__name__)
MAX_HOPS = 4  # graph edges from a transfer's PS-side node to its variable, at most


def data_adjacency(st: DfgStep) -> dict[str, list[str]]:
    """The step's partition-graph data edges within each device, undirected: node -> nodes
    (node names are unique across a step's partition graphs)."""
    adj: dict[str, list[str]] = {}
    for d in st.deps:
        if d.src_device == d.dst_device and not d.control:
            adj.setdefault(d.src, []).append(d.dst)
            adj.setdefault(d.dst, []).append(d.src)
    return adj


def transfer_variable(adj: dict[str, list[str]], var_index: dict[str, int], ps_node: str
                      ) -> int:
    """The index (in ``var_index``: variable node name -> index) of the variable nearest to
    ``ps_node`` over ``adj`` (``data_adjacency``), at most ``MAX_HOPS`` edges; -1 if none. A
    pull's PS-side node is the op feeding its ``_Send`` (a ``ReadVariableOp`` next to its
    ``VarHandleOp``); a push's is its ``_Recv``, two edges from the variable through the apply
    op. Ties go to the variable created first."""
    seen, frontier = {ps_node}, [ps_node]
    for _ in range(MAX_HOPS):
        nxt = [m for n in frontier for m in adj.get(n, ()) if m not in seen]
        hits = [var_index[m] for m in nxt if m in var_index]
        if hits:
            return min(hits)
        seen.update(nxt)
        frontier = nxt
    return -1


def _check(strategy: str) -> None:
    if strategy not in PLACEMENTS:
        raise ValueError(f"unknown placement {strategy!r}: expected one of {PLACEMENTS}")


def _next_ps(k: int, load: Sequence[float], strategy: str) -> int:
    """The PS ``strategy`` gives the k-th variable it places (0-based), PS loads ``load``."""
    if strategy == "round-robin":
        return k % len(load)
    return min(range(len(load)), key=lambda s: (load[s], s))


def creation_order(ps_of: Sequence[int], nbytes: Sequence[int], strategy: str,
                   ps_count: int | None = None) -> list[int]:
    """The variables' creation order (indices into ``ps_of``/``nbytes``, which list each
    PS's variables in its graph's order), rebuilt by running ``strategy`` over ``ps_count``
    PSes (default: the highest index + 1): the next variable is the next one of the PS the
    strategy picks. Where the lists stop matching (the PS picked has none left: the profile was
    not placed this way), the rest follow in graph order, with a warning. ``balanced`` does
    not depend on the order: graph order."""
    _check(strategy)
    m = ps_count or max(ps_of, default=0) + 1
    if m == 1 or strategy == "balanced":
        return list(range(len(ps_of)))
    queues: list[deque[int]] = [deque() for _ in range(m)]
    for i, p in enumerate(ps_of):
        queues[p].append(i)
    load, out = [0.0] * m, []
    for k in range(len(ps_of)):
        p = _next_ps(k, load, strategy)
        if not queues[p]:
            rest = sorted(i for q in queues for i in q)
            log.warning("the profile's %d PSes do not hold its variables as the %s strategy "
                        "would (%d of %d rebuilt in order); the rest keep their graph order",
                        m, strategy, k, len(ps_of))
            return out + rest
        i = queues[p].popleft()
        out.append(i)
        load[p] += nbytes[i]
    return out


def place(nbytes: Sequence[float], order: Sequence[int], ps: int, strategy: str,
          load: list[float] | None = None) -> list[int]:
    """The PS (0..ps-1) of each variable (or tensor), placed by ``strategy`` in creation
    ``order`` (``balanced``: biggest first, whatever the order) on top of ``load``, the
    PSes' bytes so far (updated)."""
    _check(strategy)
    where = [0] * len(nbytes)
    load = load if load is not None else [0.0] * ps
    if strategy == "balanced":
        order = sorted(order, key=lambda i: (-nbytes[i], i))
    for k, i in enumerate(order):
        p = _next_ps(k, load, strategy)
        where[i] = p
        load[p] += nbytes[i]
    return where
