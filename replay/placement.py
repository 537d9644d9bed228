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
goes where the strategy would have sent it). A profile with no variable records (bundles of
gradwire before 0.x kept none) falls back to ``balanced`` over the transfers themselves.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from gradwire.aligner.dfg import DfgStep

PLACEMENTS = ("greedy", "round-robin", "balanced")
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


def creation_order(ps_of: Sequence[int], nbytes: Sequence[int], strategy: str) -> list[int]:
    """The variables' creation order (indices into ``ps_of``/``nbytes``, which list them graph
    by graph), rebuilt by running ``strategy`` over each PS's list; graph order when the lists
    are not what the strategy makes (or for ``balanced``, which does not depend on order)."""
    m = max(ps_of, default=0) + 1
    if m == 1 or strategy == "balanced":
        return list(range(len(ps_of)))
    queues: list[deque[int]] = [deque() for _ in range(m)]
    for i, p in enumerate(ps_of):
        queues[p].append(i)
    load, out = [0] * m, []
    for k in range(len(ps_of)):
        p = k % m if strategy == "round-robin" else min(range(m), key=lambda s: (load[s], s))
        if not queues[p]:
            return list(range(len(ps_of)))
        i = queues[p].popleft()
        out.append(i)
        load[p] += nbytes[i]
    return out


def place(nbytes: Sequence[int], order: Sequence[int], ps: int, strategy: str) -> list[int]:
    """The PS (0..ps-1) of each variable, placed by ``strategy`` in creation ``order``."""
    where = [0] * len(nbytes)
    load = [0] * ps
    if strategy == "balanced":
        order = sorted(range(len(nbytes)), key=lambda i: (-nbytes[i], i))
    for k, i in enumerate(order):
        p = k % ps if strategy == "round-robin" else min(range(ps), key=lambda s: (load[s], s))
        where[i] = p
        load[p] += nbytes[i]
    return where
