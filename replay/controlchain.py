"""The train op's control chain across parameter servers, on a PS count the profile did not run.

When an optimizer's updates sit on two or more PSes, TensorFlow's ``group`` of them is a tree:
one NoOp per PS after that PS's updates, and a root NoOp that the replica device setter puts
on the worker (it places every op but the variables there). ``apply_gradients`` then
increments the global step on its PS once the root has run. The graph partitioner sends each
control edge across devices as an empty float tensor from a dummy ``Const``
(``template.is_control``). So a step over several PSes ends with a chain a 1-PS step has not:
each PS's updates done -> a control tensor fetched by the worker -> the worker's root NoOp ->
a control tensor pushed to the global step's PS -> its increment. Over one PS the whole group
runs on that PS and no control tensor crosses the network. In the recommendation model's 2-PS
trace at 400 Mbit/s (2026-12-03, ``bench-out/chain``) the chain took 0.84 ms from PS 0's last
update to the increment's end, 2% of its step; over 1 PS the increment ran 0.01 ms after
the last update.

``with_control_chain`` fits a step template to the PSes its ops were placed on
(``predict.assign_ps``), for asynchronous PS training:

- a profile with the chain (``StepTemplate.control``: its control transfers, their request
  and parse delays and the worker's plumbing between them), placed with every PS op on one
  PS: the chain's ops take no time (they are kept as empty delays, so what waited for them
  now waits for the updates they waited for);
- a 1-PS profile placed with its PS ops on two or more PSes: the chain is added before the
  step's gap. For each PS holding PS ops, after the last of them (in template order, which
  is each PS's order), a control tensor pulled to the worker; once all are in, one pushed to
  the PS of the template's last PS op (where the profile's step ended: the increment).
  Its numbers, from the profile and TensorFlow alone: ``CONTROL_WIRE_BYTES`` on the wire
  each way; each receive the step's quickest receive in its direction
  (``StepTemplate.quickest_receive_us``, the fixed part of a receive: a control tensor has
  no bytes to parse); the PS's send and the worker's join take no time, as a push's release
  takes none in the template. In the 2-PS trace above those two were 0.09 and 0.14 ms, and
  the receives 0.29 ms (pull) and 0.21 ms (push) where the 1-PS profile's quickest were
  0.11-0.27 ms and 0.10-0.22 ms: the added chain is shorter than the real one, about
  0.3-0.5 ms against 0.84.

A profile with the chain placed again over two or more PSes keeps it as traced.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from gradwire.replay.template import DELAY, DOWN, GAP, PS, UP, StepTemplate
from gradwire.replay.tensorpasses import PER_OP, append_op, rebuilt, topological_order

# the wire bytes of a control tensor (an empty DT_FLOAT tensor in a RecvTensor response,
# gRPC framing included), as the captures of the lab's 2-PS profiles show it (2026-12-03)
CONTROL_WIRE_BYTES = 26.0


def with_control_chain(t: StepTemplate, where: Sequence[int]) -> tuple[StepTemplate, list[int]]:
    """``t`` and its ops' PSes ``where`` with the train op's control chain as TensorFlow
    would have it on those PSes (module docstring): dropped where every PS op is on one PS,
    added to a 1-PS profile's template placed over several; else as they are."""
    spans = {where[i] for i, k in enumerate(t.kind) if k == PS}
    if any(t.control) and len(spans) <= 1:
        return _without_chain(t), list(where)
    if not any(t.control) and max(t.ps, default=0) == 0 and len(spans) >= 2:
        return _with_chain(t, where)
    return t, list(where)


def _without_chain(t: StepTemplate) -> StepTemplate:
    """``t`` with its control chain's ops empty delays (no time, no bytes, no resource)."""
    chain = {i for i, c in enumerate(t.control) if c}
    return dataclasses.replace(
        t, kind=[DELAY if i in chain else k for i, k in enumerate(t.kind)],
        amount=[0.0 if i in chain else a for i, a in enumerate(t.amount)])


def _with_chain(t: StepTemplate, where: Sequence[int]) -> tuple[StepTemplate, list[int]]:
    """``t`` (a 1-PS profile's step) with the control chain over the PSes of ``where`` before
    its gap, renumbered so each op comes after what it waits for, and the PSes of its ops."""
    gaps = [i for i, n in enumerate(t.name) if n == GAP]
    if len(gaps) != 1:
        return t, list(where)
    last: dict[int, int] = {}  # per PS: its last PS op
    for i, k in enumerate(t.kind):
        if k == PS:
            last[where[i]] = i
    fetch_us, push_us = t.quickest_receive_us
    s = dataclasses.replace(t, **{a: list(getattr(t, a)) for a in PER_OP},
                            succ=[list(x) for x in t.succ], indeg=list(t.indeg))
    s.control += [False] * (len(s.kind) - len(s.control))
    placed = list(where)

    def add(kind: str, amount: float, name: str, ps: int, after: list[int]) -> int:
        placed.append(ps)
        i = append_op(s, kind, amount, name, 0, after, [])  # profiled on none: PS 0
        s.control[i] = True
        return i

    parsed = []
    for q, i in sorted(last.items()):
        down = add(DOWN, CONTROL_WIRE_BYTES, f"pull the control of PS {q}'s updates", q, [i])
        parsed.append(add(DELAY, fetch_us, f"parse the control of PS {q}'s updates", 0, [down]))
    head = where[max(last.values())]
    up = add(UP, CONTROL_WIRE_BYTES, f"push the updates' control to PS {head}", head, parsed)
    done = add(DELAY, push_us, "parse the updates' control", 0, [up])
    s.succ[done].append(gaps[0])
    s.indeg[gaps[0]] += 1
    order = topological_order(s)
    into = {old: new for new, old in enumerate(order)}
    return rebuilt(s, order, into), [placed[i] for i in order]
