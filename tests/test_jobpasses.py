"""The job passes of issue 23 (dPRO section 5) on hand-made graphs: tensor partition, tensor
fusion, mixed precision's transfers, gradient accumulation (replay/tensorpasses.py,
replay/transforms.py), op fusion, mixed precision's compute and recomputation
(replay/oppasses.py), the plan (replay/jobwhatifs.py) and its predict options."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from conftest import gradwire

from gradwire.collector.opshapes import ExecutedOp
from gradwire.errors import PredictError
from gradwire.opdb import OpTiming
from gradwire.replay import rerun
from gradwire.replay.engine import SimConfig, Simulator
from gradwire.replay.jobwhatifs import Plan
from gradwire.replay.memory import estimated_peak_bytes
from gradwire.replay.opcost import CostModel
from gradwire.replay.oppasses import (
    elementwise_chains,
    faster_passes,
    faster_types,
    fusion_ratios,
    is_backward,
    pass_times_us,
    precision_ratios,
    recompute,
    recomputed_all,
    recomputed_ops,
    time_by_type,
)
from gradwire.replay.options import PredictOptions
from gradwire.replay.predict import assign_ps
from gradwire.replay.template import (
    DELAY,
    DOWN,
    GAP,
    PS,
    UP,
    WORKER,
    StepTemplate,
    written_in_order,
)
from gradwire.replay.tensorpasses import (
    MIN_SLICE_BYTES,
    fuse_tensors,
    halve_transfers,
    largest_bucket_bytes,
    merge_ops,
    partition_tensors,
    ready_order,
    slices_of,
)
from gradwire.replay.transforms import accumulate_gradients

BIG, SMALL = 2_000_000, 100_000


def two_variables(big: int = BIG, small: int = SMALL) -> StepTemplate:
    """Pull a (``big`` bytes) and b (``small``), parse each (5 us), compute f then g (1000
    and 2000 us), push both gradients after g, parse them (7 us), apply a then b on the PS
    (300 and 30 us), the client's gap (50 us). Both variables on PS 0."""
    t = StepTemplate(step=0, var_ps=[0, 0], var_bytes=[big, small])
    s = t.add(DELAY, 0.0, "step start")
    d0 = t.add(DOWN, big, "pull a", [t.add(DELAY, 10.0, "request a", [s])], var=0)
    p0 = t.add(DELAY, 5.0, "parse a", [d0])
    d1 = t.add(DOWN, small, "pull b", [t.add(DELAY, 10.0, "request b", [s])], var=1, prio=1)
    p1 = t.add(DELAY, 5.0, "parse b", [d1])
    c0 = t.add(WORKER, 1000.0, "compute f", [s, p0, p1], members=(("f", 1000.0),))
    c1 = t.add(WORKER, 2000.0, "compute g", [c0], members=(("g", 1500.0), ("h", 500.0)))
    a0 = t.add(DELAY, 7.0, "parse a", [t.add(UP, big, "push a", [c1], var=0)])
    a1 = t.add(DELAY, 7.0, "parse b", [t.add(UP, small, "push b", [c1], var=1, prio=1)])
    s0 = t.add(PS, 300.0, "apply a", [a0])
    s1 = t.add(PS, 30.0, "apply b", [a1, s0])
    t.add(WORKER, 50.0, GAP, [c1, a0, a1, s1])
    return t


def well_formed(t: StepTemplate) -> None:
    """Every list aligned, every edge forward (index order is topological), in-degrees
    right."""
    n = len(t.kind)
    assert len(t.amount) == len(t.name) == len(t.succ) == len(t.indeg) == len(t.var) == n
    assert all(j > i for i, out in enumerate(t.succ) for j in out)
    assert t.indeg == [sum(i in out for out in t.succ) for i in range(n)]


def step_us(t: StepTemplate, ps: int = 1, rate: float = 1000.0) -> float:
    """One worker's second step (us) on ``ps`` PSes at ``rate`` bytes/us, placed greedily."""
    sim = Simulator([t], SimConfig(workers=1, ps=ps, rate_bytes_per_us=rate),
                    assign_ps([t], ps, "greedy"))
    sim.run(4)
    return sim.step_ends[0][2] - sim.step_ends[0][1]


def test_slices_follow_tensorflows_min_max_partitioner():
    # ceil(N / 256 KiB), at most K: TF 2.21's rule (a 300 kB variable makes 2 slices)
    assert [slices_of(n, 3) for n in (100, MIN_SLICE_BYTES, MIN_SLICE_BYTES + 1, 7.2e6)] == [
        1, 1, 2, 3]


def test_partition_cuts_a_variables_transfers_parses_and_ps_work_alike():
    t = two_variables()
    p = partition_tensors(t, 4)
    well_formed(p)
    assert p.var_bytes == [500_000] * 4 + [SMALL] and p.placed_again
    for kind in (DOWN, UP):  # bytes kept, a's in 4 slices of its 4 variables
        assert sum(a for k, a in zip(p.kind, p.amount, strict=True) if k == kind) == BIG + SMALL
        assert sorted(v for k, v in zip(p.kind, p.var, strict=True) if k == kind) == [
            0, 1, 2, 3, 4]
    apply_a = [i for i, n in enumerate(p.name) if n.startswith("apply a")]
    assert len(apply_a) == 4 and all(p.amount[i] == 75.0 for i in apply_a)
    # slice j's apply waits for slice j's push only (through its parse)
    for j, i in enumerate(apply_a):
        pre = [q for q, out in enumerate(p.succ) if i in out]
        assert [p.name[q] for q in pre] == [f"parse a [{j + 1}/4]"]
    # the two PSes of a 2-PS prediction each get half of a: placed again, at any count
    m = assign_ps([p], 2, "greedy")[0]
    pulls = [(m[i], p.amount[i]) for i, k in enumerate(p.kind) if k == DOWN]
    assert sorted({ps for ps, _ in pulls}) == [0, 1]
    assert assign_ps([t], 1)[0] == t.ps


def test_each_pushed_slice_pays_the_per_message_parse():
    # a slice's push is a message of its own: its parse keeps the push fit's beta (3 us here)
    # whole and splits only the rest, 3 + (7 - 3) / 4 = 4 us each, 16 us for a's four slices
    # where the whole variable's parse took 7 (fusion's rule the other way round); the pulls'
    # parses with the pull fit's beta (2 us): 2 + (5 - 2) / 4; a beta above a parse: whole
    t = two_variables()
    for beta, each, pull_beta, pull in ((3.0, 4.0, 2.0, 2.75), (0.0, 7.0 / 4, 0.0, 5.0 / 4),
                                        (10.0, 7.0, 9.0, 5.0)):
        p = partition_tensors(t, 4, beta_us=beta, pull_beta_us=pull_beta)
        well_formed(p)
        parses = [p.amount[i] for i, n in enumerate(p.name)
                  if n.startswith("parse a [") and p.kind[p.predecessors()[i][0]] == UP]
        assert parses == pytest.approx([each] * 4)
        pulls = [p.amount[i] for i, n in enumerate(p.name)
                 if n.startswith("parse a [") and p.kind[p.predecessors()[i][0]] == DOWN]
        assert pulls == pytest.approx([pull] * 4)


def test_partition_over_two_pses_halves_a_link_bound_step():
    # W = 1, the big variable's pull and push on the path: cut over 2 PSes, each moves half
    t = two_variables(big=20_000_000)
    whole, cut = step_us(t, ps=2), step_us(partition_tensors(t, 2), ps=2)
    assert whole - cut == pytest.approx(2 * 10_000_000 / 1000.0, rel=0.02)


def test_each_slice_is_requested_whole_and_written_in_order_on_its_ps():
    """A partitioned variable's slices are variables of their own: each is requested apart
    (its request delay whole, not cut with the bytes) and the PS that holds it writes it in
    the connection's order (``written_in_order`` on the rebuilt template; docs/predict.md,
    "The PS's write order"). Fusion's renumbering keeps each pull's request."""
    t = two_variables()
    req_a, req_b = t.name.index("request a"), t.name.index("request b")
    t.unfloored = {req_a + 1: (req_a, 0, 10.0), req_b + 1: (req_b, 0, 2.0)}
    t.amount[req_b] = 10.0  # b written after a on their one PS: floored by a's delay
    p = partition_tensors(t, 4)
    well_formed(p)
    slices = [i for i, n in enumerate(p.name) if n.startswith("pull a")]
    assert len(slices) == 4 and sorted(p.unfloored) == sorted([*slices, p.name.index("pull b")])
    for c in slices:
        req = p.unfloored[c][0]
        assert p.name[req].startswith("request a [") and p.succ[req] == [c]
        assert p.amount[req] == 10.0
    b = p.name.index("pull b")

    def delay_of_b(ps_of):
        out = written_in_order(p, ps_of, p.prio)
        return out.amount[out.unfloored[b][0]]

    one = list(p.ps)
    assert delay_of_b(one) == 10.0  # behind a's slices on the one connection
    apart = [0 if i in slices else 2 for i in range(len(p.kind))]
    assert delay_of_b(apart) == 2.0  # a PS of its own: its own delay
    f = fuse_tensors(t, 1e9, 3.0)
    for d, (req, _, _) in f.unfloored.items():
        assert f.kind[d] == DOWN and f.name[req] == "request " + f.name[d][len("pull "):]


def test_partition_needs_variable_records():
    t = two_variables()
    t.var = [-1] * len(t.kind)
    with pytest.raises(PredictError, match="no variable records"):
        partition_tensors(t, 2)


def test_fusion_sends_a_bucket_when_its_last_gradient_is_ready():
    t = two_variables()
    f = fuse_tensors(t, 10 * BIG, beta_us=4.0)
    well_formed(f)
    pushes = [i for i, k in enumerate(f.kind) if k == UP]
    assert len(pushes) == 1 and f.amount[pushes[0]] == BIG + SMALL
    assert "fused: 2 tensors" in f.name[pushes[0]] and f.var[pushes[0]] == 0
    parse = f.succ[pushes[0]]
    assert len(parse) == 1 and f.amount[parse[0]] == 7.0 + 7.0 - 4.0  # one message: one beta
    # both PS ops wait for the bucket's parse; a bucket below one tensor changes nothing
    assert {f.name[j] for j in f.succ[parse[0]]} >= {"apply a", "apply b"}
    assert fuse_tensors(t, 1.0, 4.0).amount == t.amount


def test_one_bucket_wakes_its_updates_once():
    """a's and b's updates span 300 and 30 us from their messages' ends in the profile, over
    200 and 10 us of ops: in one bucket the first keeps its span (the wait to start once the
    message is in) and b costs its ops' 10 us; with no traced ops b keeps its span, and two
    buckets wake each their own."""
    t = two_variables()
    apply_a, apply_b = t.name.index("apply a"), t.name.index("apply b")
    t.members[apply_a] = (("ApplyA", 200.0),)
    t.members[apply_b] = (("ApplyB", 10.0),)
    f = fuse_tensors(t, 10 * BIG, beta_us=4.0)
    well_formed(f)
    assert f.amount[f.name.index("apply a")] == 300.0
    assert f.amount[f.name.index("apply b")] == 10.0
    t.members[apply_b] = ()
    untraced = fuse_tensors(t, 10 * BIG, beta_us=4.0)
    assert untraced.amount[untraced.name.index("apply b")] == 30.0
    t.members[apply_b] = (("ApplyB", 10.0),)
    apart = fuse_tensors(t, 1.0, beta_us=4.0)
    assert apart.amount[apart.name.index("apply b")] == 30.0


def test_fusion_copies_the_bucket_in_on_the_worker_and_out_on_the_ps_unless_aligned():
    """At a copy rate of 1000 bytes/us the bucket (a's and b's tensor bytes) is copied in by
    a worker op after g, before the push: each byte read and written once; a and b start at
    64-byte offsets (0 and BIG), so TensorFlow's split hands out slices without a copy."""
    t = two_variables()
    f = fuse_tensors(t, 10 * BIG, beta_us=4.0, copy_rate=1000.0)
    well_formed(f)
    copy = [i for i, n in enumerate(f.name) if n.startswith("fusion copy into")]
    assert len(copy) == 1 and f.kind[copy[0]] == WORKER
    assert f.amount[copy[0]] == pytest.approx(2 * (BIG + SMALL) / 1000.0)
    push = next(i for i, k in enumerate(f.kind) if k == UP)
    assert f.succ[copy[0]] == [push]
    assert f.name.index("compute g") in [q for q, out in enumerate(f.succ) if copy[0] in out]
    assert not any(n.startswith("fusion split") for n in f.name)
    assert step_us(f) == pytest.approx(step_us(fuse_tensors(t, 10 * BIG, 4.0))
                                       + 2 * (BIG + SMALL) / 1000.0)
    # b at an offset that is not a multiple of 64 bytes: the PS copies the bucket apart
    # before either apply
    t.var_bytes = [BIG - 4, SMALL]
    g = fuse_tensors(t, 10 * BIG, beta_us=4.0, copy_rate=1000.0)
    well_formed(g)
    split = [i for i, n in enumerate(g.name) if n.startswith("fusion split")]
    assert len(split) == 1 and g.kind[split[0]] == PS
    assert g.amount[split[0]] == pytest.approx(2 * (BIG - 4 + SMALL) / 1000.0)
    assert {g.name[j] for j in g.succ[split[0]]} == {"apply a", "apply b"}
    parse = g.succ[next(i for i, k in enumerate(g.kind) if k == UP)]
    assert sorted(g.name[j] for j in g.succ[parse[0]]) == ["client gap", "fusion split of push b"]


def test_fusion_groups_the_pushes_in_the_order_their_gradients_were_ready():
    """The PS received a before b, but b's producer ended first in the profile: with a
    bucket of b's size, b goes alone as soon as it is ready and a after it."""
    t = two_variables()
    push_a, push_b = t.name.index("push a"), t.name.index("push b")
    c0, c1 = t.name.index("compute f"), t.name.index("compute g")
    t.succ[c1].remove(push_b)
    t.succ[c0].append(push_b)  # b's gradient comes from f
    t.obs_start = [math.nan] * len(t.kind)
    t.obs_end = [math.nan] * len(t.kind)
    t.obs_end[c0], t.obs_end[c1] = 1000.0, 3000.0
    assert ready_order(t, t.predecessors()) == [push_b, push_a]
    f = fuse_tensors(t, SMALL, beta_us=4.0)
    well_formed(f)
    assert sorted(f.name[i] for i, k in enumerate(f.kind) if k == UP) == ["push a", "push b"]


def test_compute_the_buckets_move_away_from_the_pushes_costs_its_quiet_time():
    """a's gradient comes from f and was pushed while g ran, so g was not quiet in the
    profile; one bucket holds a's push until g ends, so g runs with nothing in flight and
    costs its ops' quiet times (g 750 us instead of 1500, h unchanged: 2000 -> 1250 us); f
    was quiet before and after (every push waits for it) and keeps its time."""
    t = two_variables()
    push_a, c0 = t.name.index("push a"), t.name.index("compute f")
    c1 = t.name.index("compute g")
    t.succ[c1].remove(push_a)
    t.indeg[push_a] -= 1
    t.succ[c0].append(push_a)
    t.indeg[push_a] += 1
    assert rerun.quiet_compute_ops(t) == [c0]
    was = rerun.quiet_members(t)
    f = fuse_tensors(t, 10 * BIG, beta_us=4.0)
    g_at = f.name.index("compute g")
    assert g_at in rerun.quiet_compute_ops(f)
    q = rerun.run_quiet(f, was, {"f": 100.0, "g": 750.0, "h": 900.0})
    assert q.amount[g_at] == pytest.approx(1250.0)
    assert q.amount[f.name.index("compute f")] == 1000.0


def test_the_moved_compute_runs_at_the_rate_of_the_step_run_whole():
    """The same bucket moves g's ops (g, h) away from a's push; f stays quiet. Where the
    step run whole on the machine (``gradwire opdb step``) took 1850 us, f keeps its least
    traced 100 us and g and h (least 750 + 900 us, traced beside the push) have 1750 left:
    more than theirs, so they keep them (the scale caps at 1). At 1200 us they take
    1100 / 1650 of them, 500 and 600 us (each at most its traced 1500 and 500 us: g's chunk
    1250 -> 1000 us). Where f's alone take more than the step, every op shares it."""
    t = two_variables()
    push_a, c0 = t.name.index("push a"), t.name.index("compute f")
    t.succ[t.name.index("compute g")].remove(push_a)
    t.indeg[push_a] -= 1
    t.succ[c0].append(push_a)
    t.indeg[push_a] += 1
    was = rerun.quiet_members(t)
    f = fuse_tensors(t, 10 * BIG, beta_us=4.0)
    moved = rerun.moved_names([f], [was])
    assert moved == {"g", "h"}
    least = {"f": 100.0, "g": 750.0, "h": 900.0}
    assert rerun.step_scale(least, moved, 1850.0) == 1.0
    scale = rerun.step_scale(least, moved, 1200.0)
    assert scale == pytest.approx(1100.0 / 1650.0)
    q = rerun.run_quiet(f, was, {n: us * scale if n in moved else us
                                 for n, us in least.items()})
    assert q.amount[f.name.index("compute g")] == pytest.approx(1000.0)
    assert rerun.step_scale(least, moved, 80.0) == pytest.approx(80.0 / 1750.0)
    assert rerun.step_scale({}, set(), 80.0) == 1.0


def test_the_fusion_buffer_is_the_largest_bucket():
    """a's 2 MB and b's 100 kB, ready together, a first: buckets of at least 3 MB hold both,
    so the buffer is 2.1 MB whatever size beyond it is asked; at 1 MB a closes a bucket of
    its own, and the buffer is a's 2 MB."""
    t = two_variables()
    assert largest_bucket_bytes(t, 3e6) == largest_bucket_bytes(t, 64e6) == BIG + SMALL
    assert largest_bucket_bytes(t, 1e6) == largest_bucket_bytes(t, 1.0) == BIG


def test_fusion_buckets_doctest():
    import doctest

    from gradwire.replay import tensorpasses

    assert doctest.testmod(tensorpasses).failed == 0


def test_fusion_keeps_pses_apart():
    t = two_variables()
    t.ps = [1 if n.endswith(" b") else 0 for n in t.name]
    f = fuse_tensors(t, 10 * BIG, 4.0)
    assert sum(k == UP for k in f.kind) == 2


def test_merge_renumbers_when_a_merged_op_moves_past_its_successors():
    t = StepTemplate(step=0)
    a = t.add(WORKER, 1.0, "a")
    b = t.add(DELAY, 1.0, "b", [a])  # waits for a, which merges into c, after it
    c = t.add(WORKER, 1.0, "c")
    t.add(DELAY, 1.0, "d", [b, c])
    m = merge_ops(t, {a: c})
    well_formed(m)
    assert m.name == ["c", "b", "d"]


def test_mixed_precision_halves_the_transfers_only():
    t = two_variables()
    h = halve_transfers(t)
    for k, a, b in zip(t.kind, t.amount, h.amount, strict=True):
        assert b == (a / 2 if k in (DOWN, UP) else a)


def test_accumulation_runs_the_earlier_micro_steps_before_the_last():
    t = two_variables()
    g = accumulate_gradients(t, 3, add_us=330.0)
    well_formed(g)
    first = [g.name.index(f"micro-step 1 of 3: compute {x}") for x in "fg"]
    middle = g.name.index("micro-steps 2-2 of 3 and 2 gradient adds")
    assert [g.amount[i] for i in first] == [1000.0, 2000.0]
    assert g.amount[middle] == 1 * (1000.0 + 2000.0) + 2 * 330.0
    # micro-step 1 waits for the pulls as the profiled compute did; the last (profiled)
    # micro-step waits for the middle ones, and only it releases the pushes
    pre = g.predecessors()
    assert {g.name[p] for p in pre[first[0]]} == {"step start", "parse a", "parse b"}
    assert g.succ[middle] == [g.name.index("compute f")]
    assert all(g.kind[j] != UP for i in first for j in g.succ[i])
    assert accumulate_gradients(t, 1, 0.0) is t
    # a compute-bound step (fast link) grows by exactly the earlier micro-steps
    assert step_us(g, rate=1e9) - step_us(t, rate=1e9) == pytest.approx(2 * 3330.0, rel=1e-6)
    # a link-bound one whose first layer needs only the first pull: micro-step 1's f runs
    # while b is still arriving (pulled second, 1000 us at 100 B/us), as the profiled step's
    # did, so the update grows by the K - 1 micro-steps alone (waiting for every pull before
    # the earlier micro-steps would add f's 1000 us)
    layered = StepTemplate(step=0)
    s0 = layered.add(DELAY, 0.0, "step start")
    pa = layered.add(DOWN, 100_000, "pull a", [s0])
    pb = layered.add(DOWN, 100_000, "pull b", [pa])
    f = layered.add(WORKER, 1000.0, "compute f", [s0, pa])
    g2 = layered.add(WORKER, 2000.0, "compute g", [f, pb])
    layered.add(WORKER, 50.0, GAP, [layered.add(UP, 1000, "push", [g2])])
    grown = (step_us(accumulate_gradients(layered, 3, 330.0), rate=100.0)
             - step_us(layered, rate=100.0))
    assert grown == pytest.approx(2 * 3330.0, rel=1e-6)


def test_accumulation_costs_its_rerun_micro_steps_as_given():
    t = two_variables()
    g = accumulate_gradients(t, 3, add_us=40.0, rerun_us=1500.0)  # half the traced 3000 us
    well_formed(g)
    first = [g.name.index(f"micro-step 1 of 3: compute {x}") for x in "fg"]
    middle = g.name.index("micro-steps 2-2 of 3 and 2 gradient adds")
    assert [g.amount[i] for i in first] == [500.0, 1000.0]  # each op scaled alike
    assert g.amount[middle] == 1500.0 + 2 * 40.0
    assert [g.amount[g.name.index(f"compute {x}")] for x in "fg"] == [1000.0, 2000.0]
    # compute-bound: the update grows by K - 1 quiet micro-steps and their adds
    assert step_us(g, rate=1e9) - step_us(t, rate=1e9) == pytest.approx(2 * 1540.0, rel=1e-6)


def test_rerun_costs_come_from_the_least_interfered_traced_ops():
    from gradwire.replay import rerun

    def step(scale: float) -> list[ExecutedOp]:  # a matmul and a relu-grad, slowed by scale
        return [op("mm", "MatMul", ("x", "w"), us=100.0 * scale),
                op("rg", "ReluGrad", ("g", "a"), start=200.0, us=8.0 * scale, shape=(64, 256))]
    steps = [step(1.5), step(1.0), step(2.0)]
    assert rerun.least_times_us(steps) == {"mm": 100.0, "rg": 8.0}
    assert rerun.rerun_compute_us(steps) == 108.0
    assert rerun.rerun_compute_us(steps, {"mm": 0.5}) == 58.0
    assert rerun.rerun_compute_us([]) == 0.0
    # ReluGrad reads two 64 x 256 float32 tensors and writes one: 196,608 bytes in 8 us
    assert rerun.elementwise_rate(steps) == pytest.approx(3 * 4 * 64 * 256 / 8.0)
    assert rerun.elementwise_rate([[op("mm", "MatMul", ("x", "w"))]]) is None
    assert rerun.add_us(1_000_000, 100.0) == 30_000.0  # 3 MB moved at 100 B/us


def test_the_database_costs_a_rerun_op_where_it_times_it_below_its_least_traced_time():
    from gradwire.replay import rerun

    steps = [[op("mm", "MatMul", ("x", "w"), us=100.0),
              op("rg", "ReluGrad", ("g", "a"), start=200.0, us=8.0, shape=(64, 256))]]
    fast = CostModel(_timings("ReluGrad", "float32", 1.0))  # a quiet ReluGrad: ~2 us
    quiet = rerun.quiet_times_us(steps, fast)
    assert quiet["mm"] == 100.0  # no MatMul in the database: its least traced time
    assert 0.0 < quiet["rg"] < 8.0
    assert rerun.rerun_compute_us(steps, model=fast) == pytest.approx(100.0 + quiet["rg"])
    # a database slower than the traced op (a lone call's overheads) leaves the trace's time
    slow = CostModel(_timings("ReluGrad", "float32", 1e5))
    assert rerun.quiet_times_us(steps, slow) == rerun.least_times_us(steps) == {
        "mm": 100.0, "rg": 8.0}


def op(name: str, kind: str, ins: tuple[str, ...] = (), start: float = 0.0, us: float = 10.0,
       shape: tuple[int, ...] = (256, 256), dtype: str = "float32") -> ExecutedOp:
    """An executed op on one CPU reading ``ins``, its output of ``shape``."""
    return ExecutedOp(name=name, op=kind, device="CPU", inputs=tuple(shape for _ in ins),
                      outputs=(shape,), dtype=dtype, attrs=(), duration_us=us,
                      input_nodes=ins, start_us=start, end_us=start + us,
                      output_bytes=(4 * math.prod(shape),), placed="/job:worker/CPU:0")


def toy_step() -> list[ExecutedOp]:
    """x -> MatMul -> BiasAdd -> Relu -> MatMul -> a 1 MB loss, then the backward pass, which
    reads the activations: y and the loss (y's gradient), relu and bias (ReluGrad)."""
    return [
        op("x", "MatMul", ("in",), 0, 100),
        op("bias", "BiasAdd", ("x",), 100, 10),
        op("relu", "Relu", ("bias",), 110, 10),
        op("y", "MatMul", ("relu",), 120, 100),
        op("loss", "MatMul", ("y",), 220, 80, shape=(1024, 256)),
        op("gradients/y_grad", "MatMul", ("loss", "y"), 300, 100),
        op("gradients/relu_grad", "ReluGrad", ("gradients/y_grad", "relu", "bias"), 400, 10),
        op("gradients/x_grad", "MatMul", ("gradients/relu_grad", "in"), 410, 100),
    ]


def test_element_wise_chains_and_the_backward_pass():
    chains = elementwise_chains(toy_step())
    assert [[o.name for o in c] for c in chains] == [["bias", "relu"]]
    assert is_backward("gradients/y_grad") and is_backward("tower/gradient_tape/a")
    assert not is_backward("dense/MatMul")


def test_recomputation_adds_the_forward_time_and_frees_the_activations():
    ops = toy_step()
    # relu is element-wise and its input (bias) is kept for ReluGrad: run again before
    # ReluGrad; y and the loss (products) and bias (its input x is not kept) are kept
    r = recompute(ops)
    assert r.ratios == {"gradients/relu_grad": pytest.approx((10 + 10) / 10)}
    assert r.compute_factor == pytest.approx((510 + 10) / 510)
    again = recomputed_ops(ops)
    assert [o.name for o in again if "recomputed" in o.name] == ["relu (recomputed)"]
    # the peak is y's gradient (bias, relu, y, the loss, its output: 2 MB); relu's 256 kB
    # are no longer alive there
    assert estimated_peak_bytes(ops) == 8 * 256 * 256 * 4
    assert estimated_peak_bytes(again) == 7 * 256 * 256 * 4


def test_full_recomputation_runs_every_layer_again_before_its_gradients():
    """``--recompute all``: every forward op fed by a variable runs again before the first
    backward op reading it (y and the loss before y's gradient), or reading the nearest op it
    feeds (x, read by no backward op, before ReluGrad, which reads the bias add x feeds)."""
    ops = [dataclasses.replace(o, from_variable=(True,)) if o.name == "x" else o
           for o in toy_step()]
    assert recomputed_all(ops) == {"x": "gradients/relu_grad", "bias": "gradients/relu_grad",
                                   "relu": "gradients/relu_grad", "y": "gradients/y_grad",
                                   "loss": "gradients/y_grad"}
    r = recompute(ops, everything=True)
    assert r.ratios == {"gradients/y_grad": pytest.approx((100 + 100 + 80) / 100),
                        "gradients/relu_grad": pytest.approx((10 + 100 + 10 + 10) / 10)}
    assert r.compute_factor == pytest.approx((510 + 300) / 510)  # the forward pass once more
    # for the memory estimate, each copy reads its inputs' copies and is made when the first
    # backward op needing it, itself or through a copy, starts: here the whole forward pass at
    # y's gradient (the toy is one segment, so nothing is saved)
    again = {o.name: o for o in recomputed_ops(ops, everything=True) if "recomputed" in o.name}
    assert {n: (o.start_us, o.input_nodes) for n, o in again.items()} == {
        "x (recomputed)": (300, ("in",)), "bias (recomputed)": (300, ("x (recomputed)",)),
        "relu (recomputed)": (300, ("bias (recomputed)",)),
        "y (recomputed)": (300, ("relu (recomputed)",)),
        "loss (recomputed)": (300, ("y (recomputed)",))}
    assert recomputed_all(toy_step()) == {}  # nothing fed by a variable: nothing to recompute


def _timings(op_name: str, dtype: str, us_per_mb: float) -> list[OpTiming]:
    """Rows of an element-wise op timed at 8 sizes: 2 us + ``us_per_mb`` per MB touched."""
    rows = []
    for n in (64, 128, 256, 512, 1024, 2048, 4096, 8192):
        size = (n, 256)
        touched = 2 * 4 * n * 256 / (2 if dtype == "bfloat16" else 1)
        rows.append(OpTiming.of_times([2.0 + us_per_mb * touched / 1e6], op=op_name,
                                      inputs=(size,), attrs=(), dtype=dtype, device="CPU",
                                      fingerprint="test", source="build", outputs=(size,)))
    return rows


def test_op_fusion_and_half_precision_from_a_fitted_database():
    model = CostModel(_timings("Relu", "float32", 100.0) + _timings("BiasAdd", "float32", 100.0)
                      + _timings("Relu", "bfloat16", 100.0))
    ops = toy_step()
    fused = fusion_ratios(ops, model)
    # relu joins bias's chain: it reads bias's output from registers (its input traffic
    # gone) and pays no launch of its own; bias still writes its output
    assert set(fused.ratios) == {"bias", "relu"}
    assert fused.ratios["bias"] == pytest.approx(1.0, rel=0.05)
    assert fused.ratios["relu"] < 0.6
    half = precision_ratios(ops, model)  # only Relu has bfloat16 rows: half the bytes
    assert set(half.ratios) == {"relu"} and half.ratios["relu"] < 0.8


def _matmul_rows(device: str, fixed_us: float, us_per_mflop: float) -> list[OpTiming]:
    """MatMul rows at 8 sizes on ``device``: ``fixed_us`` + ``us_per_mflop`` per MFLOP."""
    rows = []
    for n in (16, 32, 64, 128, 256, 512, 1024, 2048):
        flops = 2.0 * n * 256 * 256
        rows.append(OpTiming.of_times([fixed_us + us_per_mflop * flops / 1e6], op="MatMul",
                                      inputs=((n, 256),), attrs=(), dtype="float32",
                                      device=device, fingerprint="test", source="build",
                                      outputs=((n, 256),)))
    return rows


def test_op_fusion_costs_the_other_ops_as_xla_runs_them():
    """``opdb build --xla`` rows (device XLA_CPU): each op outside the element-wise chains
    costs XLA's time over TensorFlow's at its shapes, XLA's less a cluster's launch (the
    ``XlaLaunch`` row: a job's ops share one); without XLA rows only the chains change."""
    from gradwire.collector.opbench import XLA_LAUNCH
    from gradwire.replay.oppasses import has_xla_rows, xla_launch_us

    launch = OpTiming.of_times([50.0], op=XLA_LAUNCH, inputs=((1,),), attrs=(),
                               dtype="float32", device="XLA_CPU", fingerprint="test",
                               source="build", outputs=((1,),))
    plain = (_timings("Relu", "float32", 100.0) + _timings("BiasAdd", "float32", 100.0)
             + _matmul_rows("CPU", 2.0, 1.0))
    xla = CostModel([*plain, *_matmul_rows("XLA_CPU", 50.0, 3.0), launch])
    assert has_xla_rows(xla) and not has_xla_rows(CostModel(plain))
    assert xla_launch_us(xla) == pytest.approx(50.0) and xla_launch_us(CostModel(plain)) == 0.0
    ops = toy_step()
    fused = fusion_ratios(ops, xla)
    for name, rows in (("x", 256), ("y", 256), ("loss", 1024)):  # on the rows' line
        work = 2 * rows * 256 * 256 / 1e6  # MFLOP
        assert fused.ratios[name] == pytest.approx(3.0 * work / (2.0 + work), rel=0.02), name
    assert fused.ratios["gradients/y_grad"] > 1.5 and fused.ratios["gradients/x_grad"] > 1.5
    before = fusion_ratios(ops, CostModel(plain))
    assert set(before.ratios) == {"bias", "relu"}  # the chain's, the same either way
    assert {n: fused.ratios[n] for n in ("bias", "relu")} == pytest.approx(before.ratios)
    assert fused.compute_factor > 2.0 > 1.0 > before.compute_factor


def test_one_xla_cluster_waits_for_every_input_and_hands_over_at_its_end():
    """Layer by layer the step overlaps: f needs only a's pull, a's push goes after f. As one
    XLA cluster (a compiled cluster is one kernel) f waits for b's pull too and a's push for g;
    the client's gap, which waits for the pushes, is untouched; nothing else changes."""
    from gradwire.replay.transforms import one_cluster

    t = StepTemplate(step=0, var_ps=[0, 0], var_bytes=[BIG, SMALL])
    s = t.add(DELAY, 0.0, "step start")
    pa = t.add(DELAY, 5.0, "parse a", [t.add(DOWN, BIG, "pull a", [s], var=0)])
    pb = t.add(DELAY, 5.0, "parse b", [t.add(DOWN, SMALL, "pull b", [s], var=1)])
    f = t.add(WORKER, 1000.0, "compute f", [pa], members=(("f", 1000.0),))
    g = t.add(WORKER, 2000.0, "compute g", [f, pb], members=(("g", 2000.0),))
    ua = t.add(UP, BIG, "push a", [f], var=0)
    ub = t.add(UP, SMALL, "push b", [g], var=1)
    t.add(WORKER, 50.0, GAP, [ua, ub])
    c = one_cluster(t)
    well_formed(c)
    names = c.name
    waits = {names[i]: sorted(names[p] for p in ps) for i, ps in enumerate(c.predecessors())}
    assert waits["XLA cluster starts"] == ["parse a", "parse b"]
    assert waits["compute f"] == ["XLA cluster starts", "parse a"]
    assert waits["XLA cluster ends"] == ["compute f", "compute g"]
    assert waits["push a"] == ["XLA cluster ends", "compute f"]
    assert waits[GAP] == ["push a", "push b"]
    assert sorted(c.amount) == sorted([*t.amount, 0.0, 0.0])
    assert one_cluster(StepTemplate(step=0)) == StepTemplate(step=0)  # no compute: as it was


def test_a_measured_cluster_time_is_shared_out_over_the_compute_alone():
    """`opdb step --xla` timed the job's step compiled whole at 600 us: the cluster's compute
    ops, 1000 and 2000 us traced, take 200 and 400 (the same shares); the transfers, their
    parsing and the client's gap keep their amounts; a template without compute is as it was."""
    from gradwire.replay.transforms import compute_totalling, one_cluster

    t = StepTemplate(step=0, var_ps=[0], var_bytes=[BIG])
    pa = t.add(DELAY, 5.0, "parse a", [t.add(DOWN, BIG, "pull a", [t.add(DELAY, 0.0, "s")])])
    f = t.add(WORKER, 1000.0, "compute f", [pa], members=(("f", 1000.0),))
    g = t.add(WORKER, 2000.0, "compute g", [f], members=(("g", 2000.0),))
    t.add(WORKER, 50.0, GAP, [t.add(UP, BIG, "push a", [g], var=0)])
    c = compute_totalling(one_cluster(t), 600.0)
    well_formed(c)
    got = dict(zip(c.name, c.amount, strict=True))
    assert got["compute f"] == pytest.approx(200.0) and got["compute g"] == pytest.approx(400.0)
    assert (got["pull a"], got["parse a"], got["push a"], got[GAP]) == (BIG, 5.0, BIG, 50.0)
    assert compute_totalling(StepTemplate(step=0), 600.0) == StepTemplate(step=0)


def test_a_step_timed_whole_stands_where_the_graph_that_runs_is_the_profiles():
    """Under op fusion alone (a partition or tensor fusion besides changes no compute) the
    step compiled whole is the one cluster, and the op passes then leave fusion's out; under
    accumulation the plain step is each rerun micro-step, and under tensor fusion the rate
    of the compute the buckets move away from the pushes; with mixed precision or
    recomputation the graph that would run is another one, and op fusion with accumulation
    is K micro-steps in one cluster, which was not timed."""
    from gradwire.replay.jobwhatifs import Plan, passes_besides, timed_step_device

    for plan in (Plan(op_fusion=True), Plan(op_fusion=True, partition=2, fuse_bytes=1e6)):
        assert timed_step_device(plan) == "XLA_CPU"
        assert passes_besides(plan, 8660.0) == dataclasses.replace(plan, op_fusion=False)
        assert passes_besides(plan, None) == plan
    assert timed_step_device(Plan(accumulate=4, partition=2)) == "CPU"
    assert timed_step_device(Plan(fuse_bytes=4e6, partition=2)) == "CPU"
    assert passes_besides(Plan(fuse_bytes=4e6), 7200.0) == Plan(fuse_bytes=4e6)
    assert passes_besides(Plan(accumulate=4), 7200.0) == Plan(accumulate=4)
    for plan in (Plan(), Plan(op_fusion=True, mixed_precision=True), Plan(partition=2),
                 Plan(op_fusion=True, recompute="all"), Plan(op_fusion=True, accumulate=2),
                 Plan(accumulate=2, mixed_precision=True)):
        assert timed_step_device(plan) is None


def test_under_op_fusion_the_baselines_worker_phase_is_all_the_compute():
    """The profile's worker phase (its pulls' end to its pushes' start) is shorter than its
    compute, which overlapped the transfers layer by layer; one XLA cluster runs all of it in
    between, so the baselines' worker phase becomes the templates' mean compute, and without
    op fusion it scales with the compute as before."""
    from conftest import SAMPLE

    from gradwire.replay.jobwhatifs import apply_plan
    from gradwire.replay.profile import load_profile
    from gradwire.replay.transforms import is_compute

    prof = load_profile([SAMPLE])
    compute_s = [sum(a for k, n, a in zip(t.kind, t.name, t.amount, strict=True)
                     if is_compute(k, n)) / 1e6 for t in prof.templates]
    mean = sum(compute_s) / len(compute_s)
    assert prof.phases["worker"] < 0.9 * mean  # some of the sample's compute overlapped
    fused = apply_plan(prof, Plan(op_fusion=True), {}, lambda _: None)
    assert fused.phases["worker"] == pytest.approx(mean)
    assert fused.phases["downlink"] == prof.phases["downlink"]
    plain = apply_plan(prof, Plan(mixed_precision=True), {}, lambda _: None)
    assert plain.phases["worker"] == pytest.approx(prof.phases["worker"])


def test_plan_options_and_their_errors(tmp_path: Path):
    assert Plan(partition=2, fuse_bytes=4e6, mixed_precision=True).describe() == (
        "--mixed-precision --partition 2 --fuse-tensors 4MB")
    assert Plan().empty and Plan().describe() == "as profiled"
    with pytest.raises(PredictError, match="--op-fusion needs --opdb FILE"):
        PredictOptions(bundles=(tmp_path,), plan=Plan(op_fusion=True))
    r = gradwire("predict", "--sample", "--fuse-tensors", "4XB")
    assert r.returncode == 2 and "bad size '4XB'" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_predict_and_optimize_the_sample():
    r = gradwire("predict", "--sample", "--workers", "1,2", "--fuse-tensors", "1MB",
                 "--accumulate", "2", "--format", "json", timeout=300)
    assert r.returncode == 0, r.stderr
    import json

    doc = json.loads(r.stdout)
    assert doc["profile"]["plan"] == "--fuse-tensors 1MB --accumulate 2"
    r = gradwire("optimize", "--sample", "--workers", "2", "--format", "json", timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["tried"] and doc["path"][0]["plan"] == "as profiled"
    assert doc["best"]["speedup"] >= 1.0 and doc["path"][0]["critical_path_share"]
    # over a budget no plan meets: recomputation is tried, the cheap activations and every
    # layer's; none fits, so the job stays as profiled ("tried" is sorted by throughput)
    r = gradwire("optimize", "--sample", "--workers", "2", "--memory-budget", "1KB",
                 "--format", "json", timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {"as profiled", "--recompute cheap", "--recompute all"} <= {
        t["plan"] for t in doc["tried"]}
    assert all(t["peak_bytes"] > 1000 for t in doc["tried"])
    assert [p["plan"] for p in doc["path"]] == ["as profiled"]
    assert doc["best"]["fits_budget"] is False
    r = gradwire("optimize", "--sample", "--workers", "2", "--memory-budget", "1KB",
                 timeout=600)  # the table says so, and its peaks tell 0.6 MB from 1.1 MB
    assert r.returncode == 0 and "no plan tried fits the memory budget of 0.001 MB" in r.stdout
    assert "0.639" in r.stdout and "1.13" in r.stdout, r.stdout  # (all read 1 before)


def test_the_search_tries_each_pass_on_what_it_shortens():
    from gradwire.replay.optimize import TARGETS, neighbours, path_kind

    assert [path_kind(r) for r in ("downlink ps:1", "uplink ps:0", "compute ps:2", "worker",
                                   "delay", "wait for worker")] == [
        DOWN, UP, PS, WORKER, DELAY, "wait for worker"]
    plans = neighbours(Plan(), ps=2, has_opdb=False)
    assert [p.describe() for _, p in plans] == [
        "--partition 2", "--partition 4", "--fuse-tensors 1MB", "--fuse-tensors 4MB",
        "--fuse-tensors 16MB", "--fuse-tensors 64MB"]
    # one PS: nothing to partition over; with a database: precision and op fusion too
    fields = [f for f, _ in neighbours(Plan(partition=2), ps=1, has_opdb=True)]
    assert "partition" not in fields and {"mixed_precision", "op_fusion"} <= set(fields)
    assert TARGETS["op_fusion"] == {WORKER}


def test_optimize_refuses_bad_input_in_one_line():
    r = gradwire("optimize", "--sample", "--memory-budget", "lots")
    assert r.returncode == 2 and "bad size 'lots'" in r.stderr and "Traceback" not in r.stderr
    r = gradwire("optimize", "--sample", "tests")
    assert r.returncode != 0 and "not both" in r.stderr and "Traceback" not in r.stderr
    r = gradwire("optimize", "--sample", "--mechanism", "sync-ps,ring-allreduce")
    assert r.returncode == 2 and "optimize searches one mechanism at a time" in r.stderr


def test_a_memory_budget_on_a_trace_that_cannot_be_read_is_refused(tmp_path):
    """--memory-budget with a RunMetadata cut short: the budget cannot be applied, which was
    said only with -v while every plan ran unbudgeted (exit 0)."""
    import os
    import shutil

    from gradwire.bundle import SAMPLE_BUNDLE

    copy = tmp_path / "cut"
    shutil.copytree(SAMPLE_BUNDLE, copy)
    meta = copy / "worker0" / "trace" / "step-00000004.runmeta.pb"
    meta.write_bytes(meta.read_bytes()[:100])
    r = gradwire("optimize", str(copy), "--workers", "2", "--memory-budget", "1MB",
                 env={**os.environ, "GRADWIRE_CACHE": "off"})
    assert r.returncode == 2 and "--memory-budget needs the peak memory" in r.stderr
    assert "step-00000004.runmeta.pb" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_optimizes_predict_command_gives_its_figure():
    """The command optimize prints for its best plan dropped --worker-bandwidth and
    --batch-size, and named no bundle ('BUNDLES', with --sample): it predicted another
    figure. Run as printed, it gives the same one."""
    import json
    import shlex

    r = gradwire("optimize", "--sample", "--ps", "2", "--bandwidth", "100Mbit",
                 "--worker-bandwidth", "unlimited", "--batch-size", "48", "--format", "json",
                 timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    words = shlex.split(doc["predict_command"])
    assert words[:3] == ["gradwire", "predict", "--sample"] and doc["best"]["plan"] != \
        "as profiled" and {"--worker-bandwidth", "--batch-size"} <= set(words)
    p = gradwire(*words[1:], "--model", "sim", "--format", "json", timeout=600)
    assert p.returncode == 0, p.stderr
    row = json.loads(p.stdout)["rows"][0]
    assert row["examples_per_s"] == pytest.approx(doc["best"]["examples_per_s"], rel=1e-9)


def test_faster_passes_scales_the_forward_and_the_backward_apart():
    # forward ops 2x as fast, backward ops 4x: the step's compute is F / 2 + B / 4
    ops = toy_step()
    fwd, bwd = pass_times_us(ops)
    assert fwd > 0 and bwd > 0
    assert fwd + bwd == pytest.approx(sum(o.duration_us for o in ops))
    assert bwd == pytest.approx(sum(o.duration_us for o in ops if is_backward(o.name)))
    r = faster_passes(ops, 2.0, 4.0)
    assert {r.ratios[o.name] for o in ops if is_backward(o.name)} == {0.25}
    assert {r.ratios[o.name] for o in ops if not is_backward(o.name)} == {0.5}
    assert r.compute_factor == pytest.approx((fwd / 2 + bwd / 4) / (fwd + bwd))
    assert r.changed_share == pytest.approx(1.0)
    with pytest.raises(ValueError, match="above 0"):
        faster_passes(ops, 0.0, 1.0)


def test_faster_types_speeds_up_the_named_types_only():
    # the toy step's MatMuls (forward and backward) 4x as fast, every other op as traced
    ops = toy_step()
    r = faster_types(ops, ("MatMul",), 4.0)
    mm = {o.name for o in ops if o.op == "MatMul"}
    assert mm and set(r.ratios) == mm and set(r.ratios.values()) == {0.25}
    total = sum(o.duration_us for o in ops)
    share = sum(o.duration_us for o in ops if o.op == "MatMul") / total
    assert r.changed_share == pytest.approx(share)
    assert r.compute_factor == pytest.approx(1 - 0.75 * share)
    assert faster_types(ops, ("Conv",), 4.0).changed_share == 0.0
    assert list(time_by_type(ops))[0] == "MatMul"
