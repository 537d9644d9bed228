"""The tensor passes of dPRO section 5 as step-template transforms: a step graph in, the
what-if's step graph out (issue 23).

- ``partition_tensors``: tensor partition, TensorFlow's partitioned variables
  (``tf.compat.v1.min_max_variable_partitioner``): a variable of N bytes becomes
  ``min(K, ceil(N / MIN_SLICE_BYTES))`` slices of equal bytes, each a variable of its own that the
  PS placement (replay/placement.py) places on its own; its pulls, pushes, their parsing and
  the PS work only it unlocks split the same way, slice j of each waiting for slice j of the
  one before. A sparse variable's (an embedding's) gathered rows split with it: ids spread
  evenly over the slices. Each slice's pull and push is a message of its own, so its parse
  keeps the profile's per-message cost (the pull fit's ``beta_us``, the push fit's
  ``push_beta_us``) whole and splits only the rest: fusion's rule the other way round.
- ``fuse_tensors``: tensor fusion (Horovod's fusion buffer, BytePS's): the pushes to one PS,
  in the order they are ready, grouped into buckets of at least ``bucket_bytes``; a bucket
  goes when its last gradient is ready, as one message: one parse delay, the members' bytes
  times alpha plus one beta (the profile's push fit), instead of one beta each; it is copied
  into one buffer on the worker and, unless TensorFlow can slice it, out of it on the PS.
- ``halve_transfers``: the transfers of mixed precision (half the bytes of every tensor the
  step moves: 16-bit values on the wire, ``--precision``'s communication half).

Each works on one template and keeps the template's invariants: an op comes after every op
it waits for (index order is a topological order), and the lists indexed by op stay aligned.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Hashable, Mapping, Sequence

from gradwire.errors import PredictError
from gradwire.replay.template import DELAY, DOWN, PS, UP, WORKER, StepTemplate

# TensorFlow's min_max_variable_partitioner default min_slice_size: 256 KiB; a variable of at
# most one slice stays whole (tensorflow/python/ops/partitioned_variables.py)
MIN_SLICE_BYTES = 256 << 10
# the template's lists indexed by op, besides succ and indeg
PER_OP = ("kind", "ps", "amount", "prio", "name", "tic", "earliest", "obs_start", "obs_end",
          "var", "members", "control")


def slices_of(nbytes: float, max_parts: int, min_slice: int = MIN_SLICE_BYTES) -> int:
    """How many slices TensorFlow's ``min_max_variable_partitioner(max_parts, min_slice)``
    cuts a variable of ``nbytes`` into: ``ceil(nbytes / min_slice)``, at most ``max_parts``
    (its first dimension taken as no limit; checked against TF 2.21's partitioner).

    >>> slices_of(7.2e6, 2), slices_of(7.2e6, 64), slices_of(300e3, 4), slices_of(100, 3)
    (2, 28, 2, 1)
    """
    return max(1, min(max_parts, math.ceil(nbytes / min_slice)))


def split_ops(t: StepTemplate, parts: Mapping[int, int],
              var_parts: Mapping[int, Sequence[int]] | None = None,
              replace_vars: tuple[list[int], list[int]] | None = None,
              whole: frozenset[int] = frozenset(),
              fixed: Mapping[int, float] | None = None) -> StepTemplate:
    """``t`` with each op ``i`` of ``parts`` cut into ``parts[i]`` copies side by side, each
    of ``amount / parts[i]`` (the ops in ``whole``, delays that do not shrink with the bytes,
    each of ``amount``; an op of ``fixed``, each ``fixed[i]`` plus its share of the rest, a
    cost per message every copy pays): an edge between two ops cut alike joins copy j to copy
    j; any other edge joins every copy of one to every copy of the other. ``var_parts``: the
    variable index of each copy, by the op's old variable; ``replace_vars``: the template's new
    variable lists (var_ps, var_bytes), which also marks it to be placed again. A pull's copies
    keep its request (the copy cut alike, else the one) for the PS's write order."""
    preds = t.predecessors()
    new = StepTemplate(step=t.step, observed_us=t.observed_us,
                       quickest_receive_us=t.quickest_receive_us)
    new.var_ps, new.var_bytes = ((list(t.var_ps), list(t.var_bytes)) if replace_vars is None
                                 else (list(replace_vars[0]), list(replace_vars[1])))
    new.placed_again = t.placed_again or replace_vars is not None
    copies: list[list[int]] = []
    for i in range(len(t.kind)):
        k = parts.get(i, 1)
        mine = []
        base = min((fixed or {}).get(i, 0.0), t.amount[i])
        for j in range(k):
            var = t.var[i] if t.var else -1
            if var_parts is not None and var in var_parts:
                var = var_parts[var][j if k > 1 else 0]
            idx = _copy_op(new, t, i, t.amount[i] if i in whole else
                           base + (t.amount[i] - base) / k,
                           f"{t.name[i]} [{j + 1}/{k}]" if k > 1 else t.name[i], var)
            for p in preds[i]:
                kp = len(copies[p])
                for c in ([copies[p][j]] if kp == k and k > 1 else copies[p]):
                    new.succ[c].append(idx)
                    new.indeg[idx] += 1
            mine.append(idx)
        copies.append(mine)
    for d, (req, group, raw) in t.unfloored.items():
        for j, c in enumerate(copies[d]):
            asked = copies[req][j] if len(copies[req]) == len(copies[d]) else copies[req][0]
            new.unfloored[c] = (asked, group, raw)
    return new


def _copy_op(new: StepTemplate, t: StepTemplate, i: int, amount: float, name: str,
             var: int) -> int:
    """Append op ``i`` of ``t`` to ``new`` with ``amount``, ``name`` and ``var``, no edges;
    each list of ``t`` shorter than its ops (not kept by the template) stays so."""
    n = len(t.kind)
    for attr in PER_OP:
        src = getattr(t, attr)
        if len(src) == n:
            value = {"amount": amount, "name": name, "var": var}.get(attr, src[i])
            getattr(new, attr).append(value)
    new.succ.append([])
    new.indeg.append(0)
    return len(new.kind) - 1


def partition_tensors(t: StepTemplate, max_parts: int, min_slice: int = MIN_SLICE_BYTES,
                      beta_us: float = 0.0, pull_beta_us: float = 0.0) -> StepTemplate:
    """``t`` with its variables partitioned (see the module): each variable of more than
    ``min_slice`` bytes cut into ``slices_of`` slices, its slices listed where it was (the
    order TensorFlow creates them in, which the placement strategies follow); each slice's
    push parse keeps ``beta_us`` and each pull parse ``pull_beta_us`` (the profile's
    per-message parsing costs, us) whole, at most the parse. PredictError
    when the profile has no variable records to say which transfer carries which variable."""
    if not t.var_bytes or len(t.var) != len(t.kind) or all(v < 0 for v in t.var):
        raise PredictError("--partition: the profile has no variable records (bundles "
                           "recorded before the TraceHook kept them): which transfer carries "
                           "which variable is unknown")
    var_parts: dict[int, list[int]] = {}
    var_ps: list[int] = []
    var_bytes: list[int] = []
    for v, (ps, nbytes) in enumerate(zip(t.var_ps, t.var_bytes, strict=True)):
        k = slices_of(nbytes, max_parts, min_slice)
        var_parts[v] = list(range(len(var_ps), len(var_ps) + k))
        var_ps += [ps] * k
        var_bytes += _even(nbytes, k)
    cut = {v: len(p) for v, p in var_parts.items() if len(p) > 1}
    parts = {i: cut[v] for i, v in enumerate(t.var) if v in cut and t.kind[i] in (DOWN, UP)}
    # each slice is requested on its own (its own write order on its PS), whole; the parse
    # after a transfer, and the PS work only a push's parse unlocks, go with it
    preds = t.predecessors()
    asks = {req: d for d, (req, _, _) in t.unfloored.items()
            if d in parts and t.succ[req] == [d]}
    for i in range(len(t.kind)):  # index order: a delay's transfer is decided before it
        waits = {parts.get(p, 1) for p in preds[i] if t.kind[p] == DELAY}
        if i in asks:
            parts[i] = parts[asks[i]]
        elif t.kind[i] == DELAY and len(preds[i]) == 1 and preds[i][0] in parts:
            parts[i] = parts[preds[i][0]]
        elif (t.kind[i] == PS and len(waits) == 1 and min(waits) > 1
              and all(t.kind[p] in (DELAY, PS) for p in preds[i])):
            parts[i] = waits.pop()  # the work of one partitioned push (and the PS's queue)
    beta = {UP: beta_us, DOWN: pull_beta_us}
    parses = {t.succ[i][0]: beta[t.kind[i]] for i in parts if t.kind[i] in beta
              and len(t.succ[i]) == 1 and t.kind[t.succ[i][0]] == DELAY
              and t.succ[i][0] in parts}
    return split_ops(t, parts, var_parts, (var_ps, var_bytes), frozenset(asks), parses)


def _even(nbytes: int, k: int) -> list[int]:
    """``nbytes`` in ``k`` parts of whole bytes that differ by at most one."""
    return [nbytes // k + (1 if j < nbytes % k else 0) for j in range(k)]


def fuse_tensors(t: StepTemplate, bucket_bytes: float, beta_us: float,
                 copy_rate: float | None = None) -> StepTemplate:
    """``t`` with its pushes fused into buckets (see the module): per PS, in the order their
    gradients were ready (``ready_order``), a bucket closes once it holds ``bucket_bytes``
    (the optimizer's learning rate, 4 bytes the worker sends each step, rides in the first
    bucket: the updates wait for their gradients' bucket anyway). A bucket is one push of the
    members' bytes, waiting for everything any member waited for; its parse is one delay,
    the members' parse delays summed less ``beta_us`` (the profile's per-message parsing
    cost, us) for every member but one, and the members' PS work waits for it, woken once
    (``one_wakeup``). The bucket keeps its first member's variable (where it is placed).

    ``copy_rate`` (bytes per µs read or written; None: copies cost nothing): the bucket is
    made by copying its members into one buffer on the worker (a worker op before its push:
    each byte read once and written once), and split on the PS with a copy too unless every
    member starts at an ``ALIGN_BYTES`` boundary of the buffer (a PS op before the members'
    PS work), as TensorFlow's concat and split kernels do (``bucket_copies``). A bucket's
    size counts its members' tensor bytes (``tensor_bytes_of``), as the lab's buckets do."""
    if bucket_bytes <= 0:
        raise PredictError(f"--fuse-tensors must be a size > 0 bytes, not {bucket_bytes!r}",
                           usage=True)
    t = dataclasses.replace(t, succ=[list(s) for s in t.succ], indeg=list(t.indeg))
    for attr in PER_OP:  # the copies append ops: lists of their own
        setattr(t, attr, list(getattr(t, attr)))
    succ = t.succ
    parse_of = {i: succ[i][0] for i, k in enumerate(t.kind)
                if k == UP and len(succ[i]) == 1 and t.kind[succ[i][0]] == DELAY}
    preds = t.predecessors()
    buckets = push_buckets(t, preds, bucket_bytes)
    merge: dict[int, int] = {}  # op -> the op it merges into (the bucket's last member)
    for b in buckets:
        if len(b) < 2:
            continue
        head = b[-1]  # ready last: what the bucket waits for comes before it
        for j in b:
            merge[j] = head
        parses = [parse_of[j] for j in b if j in parse_of]
        copy_in_us, copy_out_us = bucket_copies(t, b, copy_rate)
        if copy_in_us > 0:
            append_op(t, WORKER, copy_in_us, f"fusion copy into {t.name[head]}", 0,
                      after=sorted({p for j in b for p in preds[j]}), before=[head])
        t.amount[head] = sum(t.amount[j] for j in b)
        if len(parses) == len(b):
            for p in parses:
                merge[p] = parses[-1]
            t.amount[parses[-1]] = max(0.0, sum(t.amount[p] for p in parses)
                                       - beta_us * (len(b) - 1))
            work = sorted({s for p in parses for s in succ[p] if t.kind[s] == PS})
            one_wakeup(t, work)
            if copy_out_us > 0:  # the members' PS work waits for the split
                for p in parses:
                    for s in work:
                        if s in succ[p]:
                            succ[p].remove(s)
                            t.indeg[s] -= 1
                append_op(t, PS, copy_out_us, f"fusion split of {t.name[head]}", t.ps[head],
                          after=parses, before=work)
    for b in buckets:
        if len(b) > 1:
            t.name[b[-1]] = f"{t.name[b[0]]} .. {t.name[b[-1]]} (fused: {len(b)} tensors)"
            if len(t.var) == len(t.kind):  # the bucket keeps its first member's variable
                t.var[b[-1]] = t.var[b[0]]
    return merge_ops(t, merge)


def one_wakeup(t: StepTemplate, work: Sequence[int]) -> None:
    """Cost the PS work chunks ``work`` (indices, in order) of one bucket's members as woken
    once: the first keeps its traced span, each other its traced ops' own times (its
    ``members``; at most its span). A PS work chunk's span runs from the end of the message
    that unlocks it to its last op's end, so it holds, besides its ops, the executor's wait
    to start them once the message is in; one message wakes the whole bucket's updates at
    once, so that wait is paid once. (The deep MLP 10 MB b36 at 600 Mbit/s: 78 chunks a step
    spanning 4.6-5.4 ms over 1.6-1.8 ms of ops in its plain profile; its 4 MB buckets' own
    profile 4 chunks spanning 1.7-1.9 ms.) Chunks without traced ops keep their spans."""
    if len(t.members) != len(t.kind):
        return
    for i in work[1:]:
        ops_us = sum(us for _, us in t.members[i])
        if ops_us > 0:
            t.amount[i] = min(t.amount[i], ops_us)


def ready_order(t: StepTemplate, preds: Sequence[Sequence[int]]) -> list[int]:
    """``t``'s pushes in the order their gradients were ready in the profile: by the latest
    observed end of the ops each waits for (its producer), then by index (the order the PS
    received them); by index alone where the template has no observed times."""
    ups = [i for i, k in enumerate(t.kind) if k == UP]
    if len(t.obs_end) != len(t.kind):
        return ups

    def ready(i: int) -> float:
        ends = [t.obs_end[p] for p in preds[i] if not math.isnan(t.obs_end[p])]
        return max(ends, default=-math.inf)

    return sorted(ups, key=lambda i: (ready(i), i))


# TensorFlow's EIGEN_MAX_ALIGN_BYTES on its x86 CPU builds: SplitV hands out slices of its
# input without a copy only when every output starts (and ends) at a multiple of it
# (tensorflow/core/kernels/split_v_op.cc, IsDim0SliceAligned); checked on TF 2.21 here: a
# 1-D split at 64-byte offsets took 31 us for 12.8 MB, at 32-byte offsets 952 us for 6.4 MB
ALIGN_BYTES = 64


def bucket_copies(t: StepTemplate, members: Sequence[int], copy_rate: float | None
                  ) -> tuple[float, float]:
    """The copies (µs) that make the bucket of pushes ``members`` (in bucket order) and
    undo it at ``copy_rate`` (bytes per µs; None: 0, 0): into one buffer on the worker
    (``rerun.copy_us`` of the members' tensor bytes), and out of it on the PS, where that is
    0 when every member's tensor starts at a multiple of ``ALIGN_BYTES`` in the buffer. A
    member's bytes are ``tensor_bytes_of``'s; where they are not its variable's (no variable
    records, a sparse or 16-bit gradient) the buffer's layout is not known and the split is
    taken to copy."""
    from gradwire.replay.rerun import copy_us

    if not copy_rate:
        return 0.0, 0.0
    sizes = [tensor_bytes_of(t, j) for j in members]
    known = all(_has_variable(t, j) and n == t.var_bytes[t.var[j]]
                for j, n in zip(members, sizes, strict=True))
    us = copy_us(sum(sizes), copy_rate)
    offsets = itertools.accumulate(sizes[:-1], initial=0.0)  # each member's start
    aligned = known and all(o % ALIGN_BYTES == 0 for o in offsets)
    return us, (0.0 if aligned else us)


def _has_variable(t: StepTemplate, i: int) -> bool:
    """Whether the template knows the variable op ``i``'s transfer carries."""
    return len(t.var) == len(t.kind) and 0 <= t.var[i] < len(t.var_bytes)


def tensor_bytes_of(t: StepTemplate, i: int) -> float:
    """The tensor bytes transfer ``i`` carries: its variable's (``t.var_bytes``) where the
    template knows it and the wire carried at least that (a dense tensor; its framing adds
    a little), else its bytes on the wire (a sparse gradient's rows, 16-bit values)."""
    if _has_variable(t, i) and t.var_bytes[t.var[i]] <= t.amount[i]:
        return float(t.var_bytes[t.var[i]])
    return t.amount[i]


def append_op(t: StepTemplate, kind: str, amount: float, name: str, ps: int,
              after: Sequence[int], before: Sequence[int]) -> int:
    """Append to ``t`` (in place) an op of ``kind`` that waits for ``after`` and that
    ``before`` wait for; the per-op lists ``t`` keeps get a new op's values (no transfer
    priority, no variable, not observed). Its index is past its successors':
    ``topological`` puts it in order."""
    n = len(t.kind)
    values = {"kind": kind, "ps": ps, "amount": amount, "prio": 0.0, "name": name,
              "tic": math.inf, "earliest": math.inf, "obs_start": math.nan,
              "obs_end": math.nan, "var": -1, "members": (), "control": False}
    for attr in PER_OP:
        if len(getattr(t, attr)) == n:
            getattr(t, attr).append(values[attr])
    t.succ.append(list(dict.fromkeys(before)))
    t.indeg.append(0)
    for j in before:
        t.indeg[j] += 1
    for a in dict.fromkeys(after):
        t.succ[a].append(n)
        t.indeg[n] += 1
    return n


def fusion_buckets(pushes: Sequence[tuple[Hashable, float]], bucket_bytes: float
                   ) -> list[list[int]]:
    """Tensor fusion's buckets (``fuse_tensors``, and the lab's ``--fuse-tensors``, which
    builds the same buckets in TensorFlow): ``pushes`` are the gradients as (destination,
    bytes) in the order they are ready; per destination, in that order, a bucket closes once
    it holds ``bucket_bytes``; the buckets still open at the end close then. Returns each
    bucket's indices into ``pushes``, buckets in the order they close.

    >>> fusion_buckets([("ps0", 4), ("ps1", 4), ("ps0", 4), ("ps0", 4)], 8)
    [[0, 2], [1], [3]]
    """
    out: list[list[int]] = []
    open_: dict[Hashable, list[int]] = {}
    held: dict[Hashable, float] = {}
    for i, (dest, nbytes) in enumerate(pushes):
        open_.setdefault(dest, []).append(i)
        held[dest] = held.get(dest, 0) + nbytes
        if held[dest] >= bucket_bytes:
            out.append(open_.pop(dest))
            held[dest] = 0
    return out + [b for b in open_.values() if b]


def push_buckets(t: StepTemplate, preds: Sequence[Sequence[int]], bucket_bytes: float
                 ) -> list[list[int]]:
    """``fuse_tensors``' buckets of ``t``'s pushes (op indices, each bucket in ready order):
    ``fusion_buckets`` over the pushes in ``ready_order`` with their tensor bytes."""
    ups = ready_order(t, preds)
    return [[ups[j] for j in b] for b in
            fusion_buckets([(t.ps[i], tensor_bytes_of(t, i)) for i in ups], bucket_bytes)]


def largest_bucket_bytes(t: StepTemplate, bucket_bytes: float) -> float:
    """The tensor bytes of ``t``'s largest bucket of pushes under ``fuse_tensors``' rule:
    the fusion buffer a worker holds (a bucket can pass ``bucket_bytes`` by its last
    gradient, and holds no more than the gradients of one PS)."""
    return max((sum(tensor_bytes_of(t, i) for i in b)
                for b in push_buckets(t, t.predecessors(), bucket_bytes)), default=0.0)


def merge_ops(t: StepTemplate, merge: Mapping[int, int]) -> StepTemplate:
    """``t`` with every op ``i`` of ``merge`` folded into op ``merge[i]`` (which maps to
    itself): the merged op keeps its own amount and waits for whatever any of its ops waited
    for; whatever waited for one of them waits for it (renumbered to stay in order)."""
    keep = [i for i in range(len(t.kind)) if merge.get(i, i) == i]
    index = {old: new for new, old in enumerate(keep)}
    return topological(rebuilt(t, keep, {i: index[merge.get(i, i)]
                                         for i in range(len(t.kind))}))


def topological(t: StepTemplate) -> StepTemplate:
    """``t`` with its ops renumbered so that each comes after every op it waits for (Kahn's
    order, lowest index first); ``t`` itself when it already is."""
    if all(j > i for i, out in enumerate(t.succ) for j in out):
        return t
    order = topological_order(t)
    return rebuilt(t, order, {old: new for new, old in enumerate(order)})


def topological_order(t: StepTemplate) -> list[int]:
    """The ops of ``t``, each after every op it waits for (Kahn's order, lowest index
    first)."""
    import heapq

    indeg = list(t.indeg)
    ready = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in t.succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, j)
    if len(order) != len(t.kind):
        raise ValueError("a step template with a cycle")
    return order


def rebuilt(t: StepTemplate, ops: Sequence[int], into: Mapping[int, int]) -> StepTemplate:
    """A template of ``t``'s ops ``ops`` in that order, each edge of ``t`` from i to j an edge
    from ``into[i]`` to ``into[j]`` (once; none where they are the same op)."""
    new = StepTemplate(step=t.step, observed_us=t.observed_us, var_ps=list(t.var_ps),
                       var_bytes=list(t.var_bytes), placed_again=t.placed_again,
                       relay_us=t.relay_us, relay_links=t.relay_links,
                       quickest_receive_us=t.quickest_receive_us)
    for i in ops:
        _copy_op(new, t, i, t.amount[i], t.name[i], t.var[i] if t.var else -1)
    for i, out in enumerate(t.succ):
        for j in out:
            a, b = into[i], into[j]
            if a != b and b not in new.succ[a]:
                new.succ[a].append(b)
                new.indeg[b] += 1
    kept = set(ops)
    new.unfloored = {into[d]: (into[req], group, raw)
                     for d, (req, group, raw) in t.unfloored.items()
                     if d in kept and req in kept and into[d] != into[req]}
    return new


def halve_transfers(t: StepTemplate) -> StepTemplate:
    """``t`` with every pull and push carrying half the bytes (16-bit values on the wire; the
    few bytes of framing and of a sparse update's integer ids are halved with them)."""
    amount = [a / 2 if k in (DOWN, UP) else a
              for k, a in zip(t.kind, t.amount, strict=True)]
    return dataclasses.replace(t, amount=amount)
