"""Synchronisation mechanisms as template transforms: a profile's step templates (as the
asynchronous-PS generator runs them) in, the templates of another mechanism out.

``async-ps`` (ICPE'20): each worker pulls, computes and pushes on its own; the PS applies each
push as it comes. The templates are the profile's, unchanged.

``sync-ps``: TensorFlow's ``SyncReplicasOptimizer`` with ``replicas_to_aggregate = W`` (Chang
et al. section 3, synchronous PS with a global barrier). Each worker's pushes go into the
PSes' gradient accumulators (the PS work each push unlocks, as profiled); the chief's queue
runner takes each accumulator's W gradients as soon as they are in, applies the averaged
update to that variable, and once every variable is applied hands every worker a token; a
worker's step ends when it gets its token, and its next step pulls the updated variables. In
steady state (the first tokens let each worker run one step ahead, and gradients of that step
are dropped as stale) a step ends for every worker at once: per variable a barrier (a JOIN
task, ``replay/taskgraph.py``) of every worker's gradient of it, then its update, while later
gradients are still arriving; then the step's barrier after everything a worker's step does
and every update, then the client's gap before the next step (``synchronous``). An update
reads the accumulated gradient and writes the variable, the same bytes a push's accumulation
(or an asynchronous profile's apply) touches: it lasts as long as the profiled PS work of one
worker's push of that variable (physics of the op, not a fitted constant; a few ms a step on
the lab's models).

``ring-allreduce``: synchronous data parallelism without PSes (Horovod's ring, TensorFlow's
``MultiWorkerMirroredStrategy`` with ``CollectiveCommunication.RING``; Chang et al. section 3.3.2
with parameter messaging, section 8.2.1). Each worker holds the variables: a step is the
worker's profiled compute (forward and backward, one after another as traced, without the
waits for pulls), then the all-reduce of every gradient byte G (the profile's pushes): the
gradients cut into W equal chunks, W - 1 reduce-scatter steps and W - 1 all-gather steps, in
each of which every worker sends one chunk, G / W bytes, to the next worker on its own link
while receiving one from the previous; then every worker applies the averaged update itself
(the profiled PS work of one worker's pushes, as for ``sync-ps``), then the client's gap. A
ring step starts when every worker has finished the previous one (a barrier: exact when the
workers are alike, as a profile's replicas are: the ring moves in lock-step). The ring's
links are the workers' NICs, each direction at the configuration's bandwidth; there is no PS.
With an op cost database (``predict --opdb``) each hop of a peer mechanism also costs
TensorFlow's software time before its chunk can go on (copies, parsing, the reduction:
``_relay``, timed on the machine by ``gradwire opdb build``, collector/ringhop.py).

``ring-allreduce+multicast`` (the all-gather by one multicast step), ``butterfly`` (butterfly
mixing: log2 W whole exchanges) and the modifiers (``@whole``: messaging off; ``@nobarrier``:
synchronous PS without its global barrier; ``@overlap``: a ring or butterfly per gradient
during backpropagation) are described where they are made: ``ring_allreduce``, ``butterfly``,
``in_network``, ``barrier_free``, ``ring_by_gradient``, ``butterfly_by_gradient``.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Any

from gradwire.collector.stepstats import ACCUMULATE_OPS
from gradwire.errors import ReplayError
from gradwire.replay.template import (
    BARRIER,
    DELAY,
    DOWN,
    GAP,
    NIC_IN,
    NIC_OUT,
    PS,
    UP,
    WORKER,
    StepTemplate,
)

ASYNC_PS, SYNC_PS, RING = "async-ps", "sync-ps", "ring-allreduce"
SYNC_MULTICAST, SYNC_INA = "sync-ps+multicast", "sync-ps+ina"
SYNC_MULTICAST_INA = "sync-ps+multicast+ina"
RING_MULTICAST, BUTTERFLY = "ring-allreduce+multicast", "butterfly"
MECHANISMS = (ASYNC_PS, SYNC_PS, SYNC_MULTICAST, SYNC_INA, SYNC_MULTICAST_INA, RING,
              RING_MULTICAST, BUTTERFLY)
# the mechanisms without a PS: the workers exchange the gradients among themselves
PEER_MECHANISMS = frozenset({RING, RING_MULTICAST, BUTTERFLY})
# the mechanisms whose transfers use each worker's own NIC as a link of its own
NIC_MECHANISMS = frozenset({SYNC_MULTICAST, SYNC_INA, SYNC_MULTICAST_INA}) | PEER_MECHANISMS
# "@whole": without parameter messaging (Chang et al. 9.2): a relay (a ring hop, the switch of
# multicast or in-network aggregation) forwards a parameter only once all of it has arrived
WHOLE = "@whole"
RELAY_MECHANISMS = (SYNC_MULTICAST, SYNC_INA, SYNC_MULTICAST_INA, RING, RING_MULTICAST)
# "@nobarrier": synchronous PS without the step's global barrier (Chang et al. 9.3): each
# variable goes back to the workers as soon as every worker's gradient of it is in
NO_BARRIER = "@nobarrier"
PS_SYNC_MECHANISMS = (SYNC_PS, SYNC_MULTICAST, SYNC_INA, SYNC_MULTICAST_INA)
# "@overlap": ring all-reduce (or butterfly mixing) of each gradient as soon as
# backpropagation has computed it (Horovod without tensor fusion; Chang et al.'s ring and
# butterfly), not of one pack after the last
OVERLAP = "@overlap"
MODIFIERS = {WHOLE: RELAY_MECHANISMS, NO_BARRIER: PS_SYNC_MECHANISMS,
             OVERLAP: (RING, BUTTERFLY)}


def base_mechanism(name: str) -> str:
    """``name`` without its modifiers (``MODIFIERS``: ``@whole``, ``@nobarrier``,
    ``@overlap``)."""
    return name.split("@", 1)[0]


def modifiers(name: str) -> set[str]:
    """The modifiers of ``name`` (``MODIFIERS``' keys)."""
    return {"@" + m for m in name.split("@")[1:]}


def canonical_mechanism(name: str) -> str:
    """``name`` with its modifiers in one order (``sync-ps@whole@nobarrier`` and
    ``sync-ps@nobarrier@whole`` are one mechanism)."""
    return base_mechanism(name) + "".join(m for m in MODIFIERS if m in modifiers(name))


def check_mechanism(name: str) -> None:
    """ReplayError unless ``name`` is one of ``MECHANISMS`` with modifiers that apply to it:
    ``@whole`` to ``RELAY_MECHANISMS`` (the others relay nothing, so messaging does not
    apply), ``@nobarrier`` to the synchronous PS ones (``PS_SYNC_MECHANISMS``),
    ``@overlap`` to ring all-reduce and butterfly mixing."""
    base = base_mechanism(name)
    if base not in MECHANISMS:
        raise ReplayError(f"unknown mechanism {name!r}: use {', '.join(MECHANISMS)} (with "
                          f"{WHOLE}: messaging off; {NO_BARRIER}: no global barrier; "
                          f"{OVERLAP}: exchange each gradient during backpropagation)")
    if len(modifiers(name)) != name.count("@"):
        raise ReplayError(f"mechanism {name!r}: a modifier given twice")
    for mod in sorted(modifiers(name)):
        if mod not in MODIFIERS:
            raise ReplayError(f"mechanism {name!r}: unknown modifier {mod!r}: use "
                              f"{' or '.join(MODIFIERS)}")
        if base not in MODIFIERS[mod]:
            what = {WHOLE: "relays no parameter, so messaging does not apply",
                    NO_BARRIER: "has no global barrier to remove",
                    OVERLAP: "has no per-gradient form"}[mod]
            raise ReplayError(f"mechanism {name!r}: {base} {what}; {mod} applies to "
                              f"{', '.join(MODIFIERS[mod])}")
    if {WHOLE, OVERLAP} <= set(modifiers(name)):  # the replay has no whole-message overlap
        raise ReplayError(f"mechanism {name!r}: {WHOLE} and {OVERLAP} do not combine: "
                          f"{OVERLAP} exchanges each gradient as backpropagation makes it, "
                          f"with messaging; {WHOLE} is the one pack sent whole")


def shown_ps(cfg: Any) -> int:
    """The PS count a replay's outputs show for its configuration ``cfg`` (a ``SimConfig``):
    0 for a peer mechanism (ring all-reduce, butterfly: no PS; the replay is given 1), else
    its PS count, as the table's rows show them."""
    return 0 if base_mechanism(cfg.mechanism) in PEER_MECHANISMS else cfg.ps


def peer_mechanisms(mechanisms: Iterable[str]) -> list[str]:
    """Those of ``mechanisms`` without PSes (ring all-reduce, butterfly), modifiers kept."""
    return [m for m in mechanisms if base_mechanism(m) in PEER_MECHANISMS]


def recorded_mechanism(op_types: Iterable[str]) -> str:
    """The mechanism a traced step's ``op_types`` show: ``sync-ps`` where the gradients went
    into SyncReplicasOptimizer's accumulators, else ``async-ps``."""
    return SYNC_PS if any(o in ACCUMULATE_OPS for o in op_types) else ASYNC_PS


def mechanism_templates(templates: Sequence[StepTemplate], ps_map: Sequence[Sequence[int]],
                        ps: int, mechanism: str, workers: int
                        ) -> tuple[list[StepTemplate], list[list[int]]]:
    """``templates`` and their ops' PS indices (``ps_map``, for ``ps`` PSes) as ``mechanism``
    runs them with ``workers`` workers (module docstring); the peer mechanisms have no PS, and
    their ops' indices are all 0. Modifiers: ``MODIFIERS``."""
    check_mechanism(mechanism)
    mods, mechanism = modifiers(mechanism), base_mechanism(mechanism)
    whole, free = WHOLE in mods, NO_BARRIER in mods
    if mechanism == ASYNC_PS:
        return list(templates), [list(m) for m in ps_map]
    if mechanism in PS_SYNC_MECHANISMS:
        if free and len({len(variable_pairs(t)) for t in templates}) > 1:
            raise ReplayError("the profile's steps pull different numbers of variables: the "
                              "barrier cannot be removed variable by variable")
        if free:
            out = [barrier_free(t, m, ps) for t, m in zip(templates, ps_map, strict=True)]
        else:
            common = pushed_everywhere(templates)
            out = [synchronous(t, m, ps, common) for t, m in zip(templates, ps_map, strict=True)]
        if mechanism != SYNC_PS:
            out = [in_network(t, m, workers, multicast="multicast" in mechanism,
                              aggregate="ina" in mechanism, cut_through=not whole)
                   for t, m in out]
        return [t for t, _ in out], [m for _, m in out]
    if OVERLAP in mods:
        by_gradient = butterfly_by_gradient if mechanism == BUTTERFLY else ring_by_gradient
        out = [by_gradient(t, workers) for t in templates]
        return out, [[0] * len(t.kind) for t in out]
    if mechanism in PEER_MECHANISMS:
        out = [butterfly(t, workers) if mechanism == BUTTERFLY
               else ring_allreduce(t, workers, multicast=mechanism == RING_MULTICAST,
                                   whole=whole)
               for t in templates]
        return out, [[0] * len(t.kind) for t in out]
    raise ReplayError(f"unknown mechanism {mechanism!r}: use {', '.join(MECHANISMS)}")


def pushed_everywhere(templates: Sequence[StepTemplate]) -> tuple[int, ...]:
    """The variables (trace records) every one of ``templates`` pushes, sorted, where all push
    the same ones; () where they differ or have no records (then ``synchronous`` updates
    every variable after the step's barrier)."""
    sets = {frozenset(v for k, v in zip(t.kind, t.var, strict=True) if k == UP and v >= 0)
            for t in templates}
    return tuple(sorted(sets.pop())) if len(sets) == 1 else ()


def synchronous(t: StepTemplate, ps_of: Sequence[int], ps: int,
                variables: Sequence[int] = ()) -> tuple[StepTemplate, list[int]]:
    """``t`` (op i on PS ``ps_of[i]`` of ``ps``) as one worker's step of synchronous PS
    training, as TensorFlow's ``SyncReplicasOptimizer`` builds it: the chief's update takes
    each accumulator's gradients once all W are in (``take_grad``) and applies that variable
    at once, while later gradients are still arriving; the token that ends every worker's
    step is handed out when every variable is applied.

    So for each of ``variables`` (the trace's records, the same in every template of the
    run, as ``pushed_everywhere`` gives them) that ``t`` pushes: a barrier of every worker's
    push of it and the PS work it unlocked (a join of its own, 1, 2, ...), then its update on
    its PS, as long as that PS work's own ops (``own_us``: the same bytes, read the
    accumulated gradient, write the variable; not the chunk's waits). The step's barrier
    (join 0) waits for everything the step did and every update, then the client's gap. PS
    work no listed variable's push unlocked is applied after the step's barrier, per PS (all
    of it, where ``variables`` is empty: a profile whose steps push different variables, or a
    hand-made template without records)."""
    n = len(t.kind)
    gap = _gap(t, "made synchronous")
    s = copy.deepcopy(t)
    m = list(ps_of)
    before = [i for i in range(n) if gap in s.succ[i]]
    for i in before:
        s.succ[i].remove(gap)
    pushes: dict[int, list[int]] = {}
    for i in range(n):
        if t.kind[i] == UP:
            pushes.setdefault(t.var[i], []).append(i)
    claimed: set[int] = set()  # each PS op counts towards one variable's update
    for join, v in enumerate(variables, start=1):
        push_ops = pushes.get(v)
        if not push_ops:
            continue
        work = [i for i in _after_push(t, push_ops) if i not in claimed]
        claimed.update(work)
        every = s.add(BARRIER, 0.0, f"variable {v}: every worker's gradient", work or push_ops)
        m.append(join)
        us = sum(own_us(t, i) for i in work if t.kind[i] == PS)
        if us > 0:
            p = ps_of[next(i for i in work if t.kind[i] == PS)]
            before.append(s.add(PS, us, f"update variable {v} (ps:{p})", [every], ps=p))
            m.append(p)
        else:
            before.append(every)
    barrier = s.add(BARRIER, 0.0, "barrier: every worker's pushes", before)
    m.append(0)
    update = [0.0] * ps
    for i in range(n):
        if t.kind[i] == PS and i not in claimed:
            update[m[i]] += t.amount[i]
    ends = []
    for p, us in enumerate(update):
        if us > 0:
            ends.append(s.add(PS, us, f"update ps:{p}", [barrier], ps=p))
            m.append(p)
    for e in ends or [barrier]:
        s.succ[e].append(gap)
    s.indeg[gap] = max(1, len(ends))
    _pad_orders(s)
    return s, m


def barrier_free(t: StepTemplate, ps_of: Sequence[int], ps: int
                 ) -> tuple[StepTemplate, list[int]]:
    """``t`` (op i on PS ``ps_of[i]``) as one worker's step of synchronous PS training
    without the global barrier (Chang et al. section 9.3, after Poseidon): each variable goes
    back to the workers as soon as every worker's gradient of it is in, while the others are
    still being aggregated.

    The step is turned so that it ends with the next step's pulls: its compute (which waited
    for the pulls the previous step ended with), its pushes and their PS work, then for each
    variable v a barrier of every worker's gradient of v (join v), v's update on its PS (as
    long as this worker's PS work for v, as in ``synchronous``) and the pull of v; the
    client's gap waits for every pull. So a worker's forward pass starts once it has all the
    variables (the first layer, needed first, is the last one backpropagation sends: the
    pipelining gains little there, as the paper notes), and a variable pushed early comes
    back while later ones are still on their way. The very first step runs without pulls.

    A push is tied to its variable's pull through the trace's variable records: the n-th
    variable pushed to (an accumulator in a SyncReplicasOptimizer trace, created in the
    variables' order) is the n-th variable pulled; ReplayError when they do not pair up."""
    gap = _gap(t, "made synchronous without a barrier")
    pairs = variable_pairs(t)
    s = copy.deepcopy(t)
    m = list(ps_of)
    preds = t.predecessors()
    for pull_ops, _ in pairs:  # no pulls ahead of the compute, nor their request latencies
        for i in pull_ops:
            s.kind[i], s.amount[i] = DELAY, 0.0
            for r in preds[i]:
                if t.kind[r] == DELAY:
                    s.amount[r] = 0.0
    claimed: set[int] = set()  # each PS op counts towards one variable's update
    moved: list[tuple[int, int]] = []  # (the pull at the end, the pull it was)
    for v, (pull_ops, push_ops) in enumerate(pairs):
        work = [i for i in _after_push(t, push_ops) if i not in claimed]
        claimed.update(work)
        barrier = s.add(BARRIER, 0.0, f"variable {v}: every worker's gradient",
                        work or push_ops)
        m.append(v)
        update = sum(own_us(t, i) for i in work if t.kind[i] == PS)
        p = ps_of[pull_ops[0]]
        prev = barrier
        if update > 0:
            prev = s.add(PS, update, f"update variable {v} (ps:{p})", [barrier], ps=p)
            m.append(p)
        for i in pull_ops:
            back = s.add(DOWN, t.amount[i], t.name[i], [prev], ps=p, prio=t.prio[i],
                         var=t.var[i])
            m.append(p)
            s.succ[back].append(gap)
            s.indeg[gap] += 1
            moved.append((back, i))
    _pad_orders(s)
    for name in ("tic", "earliest"):  # the moved pulls keep their place in --order
        lst, old = getattr(s, name), getattr(t, name)
        for new, i in moved if lst else ():
            lst[new] = old[i]
    return s, m


def variable_pairs(t: StepTemplate) -> list[tuple[list[int], list[int]]]:
    """Each variable's pulls and pushes in ``t``, paired through the trace's variable records:
    by identity when the same variables are pulled and pushed (an asynchronous trace), else
    in creation order (the n-th variable pushed to, an accumulator in a SyncReplicasOptimizer
    trace, created in the variables' order, is the n-th pulled). ReplayError when they do not
    pair up."""
    pulls: dict[int, list[int]] = {}
    pushes: dict[int, list[int]] = {}
    for i, (k, var) in enumerate(zip(t.kind, t.var, strict=True)):
        if var >= 0 and k in (DOWN, UP):
            (pulls if k == DOWN else pushes).setdefault(var, []).append(i)
    if not pulls or len(pulls) != len(pushes):
        raise ReplayError(f"step {t.step}: {len(pushes)} variables pushed and {len(pulls)} "
                          "pulled in the trace's variable records: they cannot be paired, so "
                          "the barrier cannot be removed variable by variable")
    if set(pulls) == set(pushes):
        return [(pulls[v], pushes[v]) for v in sorted(pulls)]
    return [(pulls[a], pushes[b]) for a, b in zip(sorted(pulls), sorted(pushes), strict=True)]


def own_us(t: StepTemplate, i: int) -> float:
    """Op ``i``'s own time, us: its traced ops' (``members``) added up where it has them, else
    its amount. A PS work chunk lasts from its pushes' receive to its last op's end, so at
    W = 1 it carries the PS's waits for its executor and its receives too (the MLP 20 MB over
    2 PSes at 1 Gbit/s: a 7.2 MB gradient's chunk 29-38 ms, its accumulation 0.01 ms); the
    variable's update reads and writes the same bytes as its own ops."""
    members = t.members[i] if i < len(t.members) else ()
    return sum(us for _, us in members) if members else t.amount[i]


def _after_push(t: StepTemplate, push_ops: list[int]) -> list[int]:
    """The ops that end a worker's part of its pushes ``push_ops``: the PS work they unlock
    through delays (not the PS's later chunks, which wait for the chunk before them), and the
    delays on the way that lead to no PS work, else the pushes."""
    ends, todo, seen = [], list(push_ops), set(push_ops)
    while todo:
        i = todo.pop()
        nxt = [] if t.kind[i] == PS else [x for x in t.succ[i] if t.kind[x] in (DELAY, PS)]
        if t.kind[i] == PS or not nxt:
            ends.append(i)
        for x in nxt:
            if x not in seen:
                seen.add(x)
                todo.append(x)
    return sorted(ends)


def ring_allreduce(t: StepTemplate, workers: int, multicast: bool = False,
                   whole: bool = False) -> StepTemplate:
    """``t`` as one worker's step of ring all-reduce among ``workers`` (module docstring):
    its compute, 2 (W - 1) ring steps of G / W bytes each behind a barrier, the update, the
    client's gap. Sends are ``NIC_OUT`` ops (on the worker's own link), barriers ``BARRIER``
    ops, all of the one join (each lane reaches it once per ring step).

    ``multicast`` (Chang et al. sections 3.4.1, 8.4: IP multicast in the second ring): after
    the W - 1 reduce-scatter steps each worker owns one reduced chunk and multicasts it once,
    G / W out of its NIC, while its NIC takes in the W - 1 chunks of the others,
    (W - 1) G / W: one step, as long as the longer of the two (the receiving side, for W >=
    2), so the all-gather costs what the ring's W - 1 steps do and multicast gains nothing
    but the steps' latencies, as the paper finds.

    ``whole`` (messaging off, Chang et al. sections 8.2.1, 9.2): the parameters (the
    profile's pushes) are not cut into chunks; each goes whole around the ring from its
    owner, the pushes owned in turn (push k by worker k mod W). In each ring step every
    worker sends the parameters of one owner, all of them, so under the steps' barrier a step
    lasts as long as the biggest owner's bytes, max_j G_j, over the link (the lanes' template
    carries that many; the others' links idle meanwhile): 2 (W - 1) max_j G_j / B, which one
    huge parameter (VGG-16's 5.4 Gbit layer) makes "prohibitively large"."""
    s, _ = _peer_compute(t, "replayed as ring all-reduce")
    prev = len(s.kind) - 1
    grad = t.bytes_by(UP)
    chunk, into_bytes = grad / workers, grad * (workers - 1) / workers
    if whole and workers > 1:
        owned = [0.0] * workers
        for k, nbytes in enumerate(a for kd, a in zip(t.kind, t.amount, strict=True)
                                   if kd == UP):
            owned[k % workers] += nbytes
        chunk, into_bytes = max(owned), max(grad - g for g in owned)
    rings = workers - 1 if multicast else 2 * (workers - 1)
    for k in range(rings):
        phase = "reduce-scatter" if k < workers - 1 else "all-gather"
        prev = s.add(BARRIER, 0.0, f"ring step {k + 1} of {rings}: every worker ready", [prev])
        prev = s.add(NIC_OUT, chunk, f"ring step {k + 1} of {rings} ({phase})", [prev])
        prev = _relay(s, t, chunk, prev, f"ring step {k + 1} of {rings}")
    if multicast and workers > 1:
        ready = s.add(BARRIER, 0.0, "all-gather by multicast: every worker ready", [prev])
        out = s.add(NIC_OUT, chunk, "multicast of the owned chunk", [ready])
        into = s.add(NIC_IN, into_bytes, "multicast chunks of the others", [ready])
        prev = s.add(DELAY, 0.0, "all-gathered", [out, into])
    return _peer_update(s, t, prev)


def ring_by_gradient(t: StepTemplate, workers: int) -> StepTemplate:
    """``t`` as one worker's step of ring all-reduce that starts each gradient as soon as
    backpropagation has computed it (``@overlap``; Horovod without tensor fusion, Chang et
    al.'s ring with messaging, section 8.2.1): the compute as ``ring_allreduce`` runs it, and
    for each of the profile's pushes, once the compute op it waited for has run, 2 (W - 1)
    ring steps of its bytes / W on the worker's own link, one after another, the gradients
    queueing on the link in the order they are ready; then a barrier of every worker (the
    step's exchanges all done), the update and the client's gap. Without a barrier per ring step
    the workers keep pace through the step's barrier (exact for alike workers)."""
    return _by_gradient(t, 2 * (workers - 1), 1.0 / workers, "ring step",
                        "replayed as ring all-reduce")


def butterfly_by_gradient(t: StepTemplate, workers: int) -> StepTemplate:
    """``t`` as one worker's step of butterfly mixing pipelined per parameter during
    backpropagation (``butterfly@overlap``; Chang et al. section 8.2.2: "once each parameter
    is calculated, it will be sent log W times ... this process can be pipelined between
    workers"): the compute as ``butterfly`` runs it, and for each of the profile's pushes,
    once the compute op it waited for has run, ceil(log2 W) rounds of its whole bytes on the
    worker's own link (round r to worker w XOR 2^r), one after another, the parameters
    queueing on the link in the order they are ready; then a barrier of every worker, the
    update and the client's gap. A parameter's round r + 1 needs its partner's round r, which
    alike workers have sent at the same time, so no barrier per round (as ``ring_by_gradient``).
    The last parameter's rounds still follow the compute: ceil(log2 W) G_last / B at least."""
    rounds = _rounds(workers)
    return _by_gradient(t, rounds, 1.0, "butterfly round", "replayed as butterfly mixing")


def _rounds(workers: int) -> int:
    """Butterfly mixing's rounds among ``workers``: ceil(log2 W), 0 for one worker."""
    return math.ceil(math.log2(workers)) if workers > 1 else 0


def _by_gradient(t: StepTemplate, hops: int, share: float, hop: str, what: str
                 ) -> StepTemplate:
    """The per-gradient peer step (``ring_by_gradient``, ``butterfly_by_gradient``): ``t``'s
    compute (``_peer_compute``), each push's ``hops`` sends of its bytes x ``share`` on the
    worker's own link after the compute op it waited for, each followed by the hop's software
    time (``_relay``), named ``hop`` k of ``hops``; then every worker's barrier, the update
    and the gap."""
    s, compute_of = _peer_compute(t, what)
    preds = t.predecessors()
    ends = [len(s.kind) - 1]
    for i, kind in enumerate(t.kind):
        if kind != UP or hops == 0:
            continue
        after = [_compute_before(t, preds, i, compute_of)]
        nbytes = t.amount[i] * share
        for n in range(hops):
            name = f"{t.name[i]}: {hop} {n + 1} of {hops}"
            after = [_relay(s, t, nbytes, s.add(NIC_OUT, nbytes, name, after), name)]
        ends += after
    done = s.add(BARRIER, 0.0, "every worker's exchanges done", ends)
    return _peer_update(s, t, done)


def _compute_before(t: StepTemplate, preds: list[list[int]], i: int,
                    compute_of: dict[int, int]) -> int:
    """The op of the peer template (``compute_of``) that stands for the last compute op op
    ``i`` of ``t`` waited for (through delays); 0, the step's start, if none."""
    best, todo, seen = 0, list(preds[i]), set(preds[i])
    while todo:
        j = todo.pop()
        if j in compute_of:
            best = max(best, compute_of[j])
            continue
        for x in preds[j]:
            if x not in seen:
                seen.add(x)
                todo.append(x)
    return best


def butterfly(t: StepTemplate, workers: int) -> StepTemplate:
    """``t`` as one worker's step of butterfly mixing among ``workers`` (Chang et al.
    sections 3.3.2, 8.2.2): its compute, then ceil(log2 W) rounds, in each of which every
    worker sends its whole (partly averaged) gradients, G bytes, to one partner (worker w and
    w XOR 2^r in round r) and receives the partner's, both on its own NIC, behind a barrier
    (the partner's values of the last round are needed); then the update and the client's
    gap. A step lasts C + ceil(log2 W) G / B + A + E: fewer steps than the ring's 2 (W - 1),
    each W / 2 times bigger. W not a power of two (which the paper leaves open) takes the
    rounds of the next power of two, the missing partners' rounds idle. The averaging's own
    compute (adds of G bytes) is not in the profile and is left out, as the paper does,
    unless an op cost database gives each round a hop's software time (``_relay``) for its
    G bytes."""
    s, _ = _peer_compute(t, "replayed as butterfly mixing")
    prev = len(s.kind) - 1
    grad = t.bytes_by(UP)
    rounds = _rounds(workers)
    for r in range(rounds):
        prev = s.add(BARRIER, 0.0, f"butterfly round {r + 1} of {rounds}: every worker ready",
                     [prev])
        prev = s.add(NIC_OUT, grad, f"butterfly round {r + 1} of {rounds} (to worker w xor "
                     f"{1 << r})", [prev])
        prev = _relay(s, t, grad, prev, f"butterfly round {r + 1} of {rounds}")
    return _peer_update(s, t, prev)


def hop_line_at(links: Sequence[tuple[float, float, float]], loopback: tuple[float, float],
                rate_bytes_per_us: float) -> tuple[float, float]:
    """The hop's (µs per hop, µs per byte) on a link of ``rate_bytes_per_us``: linear in the
    wire's time per byte (1 / rate) between the timed links that bracket it (``links``:
    ``opcost.ring_hop_links``), and between the fastest of them and ``loopback`` (the line
    timed on loopback, a link of no time per byte); the slowest link's line below it."""
    points = [(0.0, *loopback), *((1.0 / rate, f, b) for rate, f, b in reversed(links))]
    x = 1.0 / rate_bytes_per_us if rate_bytes_per_us > 0 else math.inf
    for (x0, f0, b0), (x1, f1, b1) in itertools.pairwise(points):
        if x <= x1:
            a = (x - x0) / (x1 - x0)
            return f0 + a * (f1 - f0), b0 + a * (b1 - b0)
    return points[-1][1], points[-1][2]


def _relay(s: StepTemplate, t: StepTemplate, nbytes: float, sent: int, what: str) -> int:
    """After op ``sent`` of ``s``, a hop's send of ``nbytes``: the software time before its
    bytes can go on (``t.relay_us``: TensorFlow's copies, parsing and reduction of a chunk, µs
    per hop and per byte, from the op cost database), as a delay; ``sent`` itself when that is
    not known. Every worker runs it on its own, alike, so the ring step's barrier waits for it
    once."""
    fixed, per_byte = t.relay_us
    if fixed <= 0 and per_byte <= 0:
        return sent
    return s.add(DELAY, fixed + per_byte * nbytes, f"{what}: copies and reduction", [sent])


def _peer_compute(t: StepTemplate, what: str) -> tuple[StepTemplate, dict[int, int]]:
    """A new template of a peer mechanism's step (no PS) with ``t``'s compute ops in their
    traced order, one after another (no pulls to wait for), its last op the last of them; and
    which op of it each of ``t``'s compute ops became. ReplayError (saying ``t`` cannot be
    ``what``) unless ``t`` has one client gap."""
    gap = _gap(t, what)
    s = StepTemplate(step=t.step, observed_us=t.observed_us)
    prev = s.add(DELAY, 0.0, "step start")
    compute_of: dict[int, int] = {}
    for i, kind in enumerate(t.kind):
        if kind == WORKER and i != gap:
            prev = compute_of[i] = s.add(WORKER, t.amount[i], t.name[i], [prev])
    return s, compute_of


def _peer_update(s: StepTemplate, t: StepTemplate, prev: int) -> StepTemplate:
    """``s`` ended, after its op ``prev``, by each worker's own update (the PS work of
    ``t``'s pushes) and ``t``'s client gap (``_peer_compute`` checked there is one)."""
    update = sum(a for k, a in zip(t.kind, t.amount, strict=True) if k == PS)
    if update > 0:
        prev = s.add(WORKER, update, "update (the averaged gradients)", [prev])
    s.add(WORKER, t.amount[t.name.index(GAP)], GAP, [prev])
    return s


def in_network(t: StepTemplate, ps_of: Sequence[int], workers: int, multicast: bool,
               aggregate: bool, cut_through: bool = True) -> tuple[StepTemplate, list[int]]:
    """A synchronous step ``t`` (``synchronous``'s output, op i on PS ``ps_of[i]``) with the
    network's help (Chang et al. sections 3.4, 8.1): ``multicast``, the PS sends each
    variable once and the switch copies it to every worker; ``aggregate`` (in-network
    aggregation), the switch sums the W workers' gradients of a variable and sends the PS one,
    which the PS applies in its update after the barrier: the PS work each push unlocked
    (SyncReplicasOptimizer's accumulation of one worker's gradient) is the switch's now, and
    costs the PS nothing.

    A transfer of G bytes becomes two parts that both must end: the worker's own NIC carries
    G (``NIC_IN`` for a pull, ``NIC_OUT`` for a push), and the PS's link carries G / W for this
    worker, so that the W workers' parts make the one copy (they share the link equally, so W
    parts started together end together, as one copy of G would). A push's aggregate is
    complete when every worker has sent its part: a barrier of that variable's own (join 1,
    2, ...; join 0 is the step's) before what the push unlocked (the PS's work). The PS link
    may carry a worker's part before a slower worker has sent its own: a cut-through switch,
    at most as fast as the last worker. Pulls start together (after the step's barrier), so
    their parts need no barrier.

    Without ``cut_through`` (messaging off, ``@whole``), the switch stores a whole parameter
    before it forwards it: a multicast pull's NIC part starts when its PS-link part has
    ended, and an aggregate's PS-link part when every worker's NIC part has."""
    s = copy.deepcopy(t)
    m = list(ps_of)
    n = len(t.kind)
    preds = t.predecessors()
    join = max((m[i] for i in range(n) if t.kind[i] == BARRIER), default=0)
    for i in range(n):
        if not ((t.kind[i] == DOWN and multicast) or (t.kind[i] == UP and aggregate)):
            continue
        nbytes, after, then = t.amount[i], preds[i], list(t.succ[i])
        s.kind[i] = NIC_IN if t.kind[i] == DOWN else NIC_OUT
        for j in _after_push(t, [i]) if t.kind[i] == UP else ():
            if t.kind[j] == PS:  # the switch summed the gradients: the PS accumulates none
                s.amount[j] = 0.0
        if not cut_through:
            join += t.kind[i] == UP
            _store_and_forward(s, m, i, t.kind[i], nbytes / workers, after, then, join)
            continue
        part = s.add(t.kind[i], nbytes / workers, f"{t.name[i]} (PS link part)", after,
                     ps=m[i], prio=t.prio[i])
        m.append(m[i])
        if t.kind[i] == DOWN:  # multicast: the pull has arrived when both parts have
            for x in then:
                s.succ[part].append(x)
                s.indeg[x] += 1
            continue
        join += 1  # in-network aggregation: every worker's part, then what the push unlocked
        s.succ[i] = []
        done = s.add(BARRIER, 0.0, f"aggregated {t.name[i]}", [i, part])
        m.append(join)
        s.succ[done] = then
    _pad_orders(s)
    return s, m


def _store_and_forward(s: StepTemplate, m: list[int], i: int, kind: str, part_bytes: float,
                       after: list[int], then: list[int], join: int) -> None:
    """``in_network`` without cut-through for transfer ``i`` of ``s`` (now its NIC part, of
    original ``kind``, ops ``after`` before it and ``then`` after): a pull's PS-link part,
    then its NIC part; a push's NIC part, the barrier ``join`` of every worker's, then its
    PS-link part."""
    name, ps = s.name[i], m[i]
    if kind == DOWN:
        for x in after:  # the PS-link part takes the NIC part's place after its predecessors
            s.succ[x].remove(i)
        s.indeg[i] = 1
        part = s.add(kind, part_bytes, f"{name} (PS link part)", after, ps=ps, prio=s.prio[i])
        m.append(ps)
        s.succ[part].append(i)  # the NIC part now waits for the part only
        return
    s.succ[i] = []
    done = s.add(BARRIER, 0.0, f"aggregated {name} at the switch", [i])
    m.append(join)
    part = s.add(kind, part_bytes, f"{name} (PS link part)", [done], ps=ps, prio=s.prio[i])
    m.append(ps)
    s.succ[part] = then


def _gap(t: StepTemplate, what: str) -> int:
    """The index of ``t``'s client gap; ReplayError (saying it cannot be ``what``) unless it
    has exactly one."""
    gaps = [i for i, n in enumerate(t.name) if n == GAP]
    if len(gaps) != 1:
        raise ReplayError(f"step {t.step}'s template has {len(gaps)} client gaps, not one: "
                          f"it cannot be {what}")
    return gaps[0]


def _pad_orders(s: StepTemplate) -> None:
    """Give the ops added to ``s`` no place in the ``--order`` priorities it has (inf)."""
    for name in ("tic", "earliest"):
        lst = getattr(s, name)
        if lst:
            lst += [math.inf] * (len(s.kind) - len(lst))
