"""Synchronous PS training (replay/mechanisms.py): the barrier against closed forms, the
template transform, and profiles recorded with SyncReplicasOptimizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SAMPLE, gradwire

from gradwire.errors import ReplayError
from gradwire.replay.engine import SimConfig, Simulator
from gradwire.replay.mechanisms import (
    ASYNC_PS,
    NO_BARRIER,
    SYNC_PS,
    barrier_free,
    mechanism_templates,
    own_us,
    pushed_everywhere,
    synchronous,
)
from gradwire.replay.profile import load_profile
from gradwire.replay.template import BARRIER, DELAY, DOWN, PS, UP, WORKER, StepTemplate


def step_template(pull: float, compute_us: float, push: float, apply_us: float,
                  gap_us: float = 0.0, ps: int = 0) -> StepTemplate:
    """Pull ``pull`` bytes, compute, push ``push`` bytes, the PS applies it, the client's gap:
    the shape ``template.build_template`` gives a one-variable step."""
    t = StepTemplate(step=0)
    start = t.add(DELAY, 0.0, "step start")
    d = t.add(DOWN, pull, "pull w", [start], ps=ps)
    c = t.add(WORKER, compute_us, "compute", [d])
    u = t.add(UP, push, "push w", [c], ps=ps)
    p = t.add(DELAY, 0.0, "parse w", [u])
    a = t.add(PS, apply_us, "apply w", [p], ps=ps)
    t.add(WORKER, gap_us, "client gap", [c, p, a])
    return t


def ends(t: StepTemplate, workers: int, rate: float, mechanism: str, steps: int = 6,
         offsets: tuple[float, ...] = ()) -> list[list[float]]:
    sim = Simulator([t], SimConfig(workers=workers, ps=1, rate_bytes_per_us=rate,
                                   mechanism=mechanism, start_offsets_us=offsets))
    sim.run(steps)
    return sim.step_ends


@pytest.mark.parametrize("workers", [1, 2, 3, 8])
def test_a_synchronous_step_is_pulls_compute_pushes_and_two_updates(workers):
    # together: W pulls share the downlink (W G / B), compute C, W pushes share the uplink
    # (W G / B), each worker's accumulation A (a core of its own), the barrier, the update A,
    # the gap E: every worker's step n ends at n (C + 2 W G / B + 2 A + E)
    g, c, a, e, b = 3000.0, 700.0, 40.0, 25.0, 12.5
    step = c + 2 * workers * g / b + 2 * a + e
    for w_ends in ends(step_template(g, c, g, a, e), workers, b, SYNC_PS):
        assert w_ends == pytest.approx([step * (n + 1) for n in range(6)], rel=1e-12)


def test_the_barrier_waits_for_the_last_worker_to_arrive():
    # workers start 0, 500 and 200 us apart: the first step ends for all when the last one's
    # push is in; from then on they run in lock-step (all pull, all compute, all push)
    g, c, b, offsets = 1000.0, 300.0, 10.0, (0.0, 500.0, 200.0)
    got = ends(step_template(g, c, g, 0.0), 3, b, SYNC_PS, steps=4, offsets=offsets)
    first = {w[0] for w in got}
    assert len(first) == 1  # one barrier: every worker's first step ends at once
    for w_ends in got:
        gaps = [y - x for x, y in zip(w_ends, w_ends[1:], strict=False)]
        assert gaps == pytest.approx([c + 2 * 3 * g / b] * 3, rel=1e-12)


def test_asynchronous_workers_drift_where_synchronous_ones_wait():
    # 2 workers, one link direction each busy half the time: async workers interleave and
    # finish more steps than sync ones, which share every transfer
    t = step_template(1000.0, 100.0, 1000.0, 0.0)
    n_sync = ends(t, 2, 10.0, SYNC_PS, steps=40)[0][-1]
    n_async = ends(t, 2, 10.0, ASYNC_PS, steps=40, offsets=(0.0, 60.0))[0][-1]
    assert n_async < n_sync


def test_the_transform_adds_a_barrier_and_each_pss_update_before_the_gap():
    t = step_template(10.0, 5.0, 10.0, 7.0)
    t.add(PS, 3.0, "apply more", [4], ps=1)  # a second PS's work after the parse
    s, m = synchronous(t, [0, 0, 0, 0, 0, 0, 0, 1], 2)
    names = s.name
    bar = names.index("barrier: every worker's pushes")
    assert s.kind[bar] == BARRIER
    gap = names.index("client gap")
    ups = [i for i, n in enumerate(names) if n.startswith("update ps:")]
    assert [s.amount[i] for i in ups] == [7.0, 3.0] and [m[i] for i in ups] == [0, 1]
    assert all(gap in s.succ[i] for i in ups) and s.indeg[gap] == 2
    assert all(gap not in s.succ[i] for i in range(len(names)) if i not in ups)
    assert sorted(s.succ[bar]) == ups
    assert len(m) == len(s.kind) and len(s.tic) in (0, len(s.kind))
    # the input is not changed
    assert "barrier: every worker's pushes" not in t.name and t.indeg[6] == 3


def two_variable_template(g: float, c: float, a: float, e: float) -> StepTemplate:
    """Pull two variables of ``g`` bytes, compute, push variable 1's gradient and then
    variable 0's (``g`` bytes each, one after the other as backpropagation sends them), the
    PS accumulating each (``a`` us, its chunks in turn), the client's gap: the shape a
    SyncReplicasOptimizer trace gives, with its variable records."""
    t = StepTemplate(step=0)
    start = t.add(DELAY, 0.0, "step start")
    d = [t.add(DOWN, g, f"pull w{v}", [start], var=v) for v in (0, 1)]
    comp = t.add(WORKER, c, "compute", d)
    u1 = t.add(UP, g, "push w1", [comp], var=1)
    a1 = t.add(PS, a, "accumulate w1", [t.add(DELAY, 0.0, "parse w1", [u1])])
    u0 = t.add(UP, g, "push w0", [u1], var=0)
    a0 = t.add(PS, a, "accumulate w0", [t.add(DELAY, 0.0, "parse w0", [u0]), a1])
    t.add(WORKER, e, "client gap", [comp, a1, a0])
    return t


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_each_variable_is_applied_once_every_workers_gradient_of_it_is_in(workers):
    # SyncReplicasOptimizer's chief takes each accumulator's W gradients and applies that
    # variable at once: variable 1's update runs while variable 0's gradients are still on
    # the uplink, and only variable 0's is left after the last push. Every step: the pulls
    # (2 W G / B), C, the pushes (2 W G / B), variable 0's accumulation A and update A, E
    g, c, a, e, b = 2000.0, 300.0, 40.0, 25.0, 10.0
    step = c + 4 * workers * g / b + 2 * a + e
    for w_ends in ends(two_variable_template(g, c, a, e), workers, b, SYNC_PS):
        assert w_ends == pytest.approx([step * (n + 1) for n in range(6)], rel=1e-12)


def test_the_transform_joins_each_variable_then_applies_it_before_the_steps_barrier():
    t = two_variable_template(2000.0, 300.0, 40.0, 25.0)
    (s,), (m,) = mechanism_templates([t], [[0] * len(t.kind)], 1, SYNC_PS, 2)
    joins = {s.name[i]: m[i] for i in range(len(s.kind)) if s.kind[i] == BARRIER}
    assert joins == {"variable 0: every worker's gradient": 1,
                     "variable 1: every worker's gradient": 2,
                     "barrier: every worker's pushes": 0}
    ups = {s.name[i]: s.amount[i] for i in range(len(s.kind)) if s.name[i].startswith("update")}
    assert ups == {"update variable 0 (ps:0)": 40.0, "update variable 1 (ps:0)": 40.0}
    bar, gap = s.name.index("barrier: every worker's pushes"), s.name.index("client gap")
    assert s.succ[bar] == [gap] and s.indeg[gap] == 1
    assert all(bar in s.succ[s.name.index(n)] for n in ups)


def test_an_update_lasts_its_ps_works_own_ops_not_the_chunks_waits():
    # a PS work chunk runs from its pushes' receive to its last op's end, so it can carry the
    # PS's waits (the MLP 20 MB over 2 PSes at 1 Gbit/s: 29-38 ms for an accumulation of
    # 0.01 ms); the variable's update after it reads and writes the same bytes as its own ops
    t = two_variable_template(2000.0, 300.0, 40.0, 25.0)
    t.members[t.name.index("accumulate w1")] = (("ResourceAccumulatorApplyGradient_1", 3.0),
                                                ("Identity", 0.5))
    (s,), _ = mechanism_templates([t], [[0] * len(t.kind)], 1, SYNC_PS, 2)
    ups = {s.name[i]: s.amount[i] for i in range(len(s.kind)) if s.name[i].startswith("update")}
    assert ups == {"update variable 0 (ps:0)": 40.0, "update variable 1 (ps:0)": 3.5}
    assert s.amount[s.name.index("accumulate w1")] == 40.0  # the chunk itself as traced


def test_steps_pushing_different_variables_apply_every_update_after_the_barrier():
    # the joins are per variable and every lane must reach each: where the profile's steps
    # push different variables, the whole update waits for the step's barrier, as with no
    # variable records at all
    t = two_variable_template(2000.0, 300.0, 40.0, 25.0)
    other = two_variable_template(2000.0, 300.0, 40.0, 25.0)
    other.var = [-1 if v == 1 else v for v in other.var]
    assert pushed_everywhere([t, t]) == (0, 1) and pushed_everywhere([t, other]) == ()
    out, _ = mechanism_templates([t, other], [[0] * len(t.kind)] * 2, 1, SYNC_PS, 2)
    for s in out:
        assert [s.name[i] for i in range(len(s.kind)) if s.kind[i] == BARRIER] == [
            "barrier: every worker's pushes"]
        assert [s.amount[i] for i in range(len(s.kind)) if s.name[i] == "update ps:0"] == [80.0]


def test_a_template_without_one_client_gap_is_refused():
    t = StepTemplate(step=3)
    t.add(WORKER, 1.0, "compute")
    with pytest.raises(ReplayError, match="step 3.*0 client gaps"):
        synchronous(t, [0], 1)
    with pytest.raises(ReplayError, match="unknown mechanism"):
        mechanism_templates([t], [[0]], 1, "ring", 2)


# -- a real synchronous profile: the lab's small MLP (0.2 MB, 1 Gbit/s) run with
# SyncReplicasOptimizer, one worker (tests/data/small_sync_bundle, recorded like small_bundle
# with `scripts/lab --mode sync`)

SYNC_BUNDLE = Path(__file__).resolve().parent / "data" / "small_sync_bundle"


@pytest.fixture(scope="module")
def sync_profile():
    return load_profile([SYNC_BUNDLE])


def test_a_synchronous_profile_is_recognised_from_its_trace(sync_profile):
    assert sync_profile.mechanism == SYNC_PS
    assert load_profile([SAMPLE]).mechanism == ASYNC_PS


def test_a_profiles_ps_work_keeps_its_traced_ops_own_times(sync_profile):
    # what the update's length (own_us) is read from: each PS work chunk's traced ops, each
    # no longer than the chunk's span from its pushes' receive to its last op's end
    for t in sync_profile.templates:
        chunks = [i for i in range(len(t.kind)) if t.kind[i] == PS]
        assert chunks
        for i in chunks:
            assert t.members[i] and all(0.0 <= us <= t.amount[i] + 1e-6
                                        for _, us in t.members[i])
            assert own_us(t, i) == sum(us for _, us in t.members[i])


def test_predict_replays_a_synchronous_profile_as_synchronous_unless_asked(tmp_path):
    auto = gradwire("predict", str(SYNC_BUNDLE), "--workers", "1,2", "--format", "json",
                    "--steps", "20", "--replications", "2", "--max-replications", "2")
    assert auto.returncode == 0, auto.stderr
    rows = json.loads(auto.stdout)["rows"]
    assert {r["mechanism"] for r in rows} == {SYNC_PS}
    assert "recorded with" not in auto.stderr  # no what-if: no note
    both = gradwire("predict", str(SYNC_BUNDLE), "--workers", "2", "--mechanism",
                    "sync-ps,async-ps,ring-allreduce", "--model", "sim,sync-sum,ring-ab")
    assert both.returncode == 0, both.stderr
    assert "mechanism" in both.stdout and "ring-allreduce" in both.stdout
    assert "recorded with sync-ps training" in both.stderr and "async-ps" in both.stderr
    bad = gradwire("predict", str(SYNC_BUNDLE), "--mechanism", "carrier-pigeon")
    assert bad.returncode != 0 and "unknown mechanism 'carrier-pigeon'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_inspect_says_how_the_job_trained():
    sync = gradwire("inspect", str(SYNC_BUNDLE / "worker0"))
    assert sync.returncode == 0, sync.stderr
    assert "training: synchronous (SyncReplicasOptimizer" in sync.stdout
    plain = gradwire("inspect", str(SAMPLE / "worker0"))
    assert "training: asynchronous PS" in plain.stdout


def test_faster_compute_divides_the_workers_compute_only():
    from gradwire.replay.transforms import scale_compute

    t = step_template(3000.0, 700.0, 3000.0, 40.0, 25.0)
    s = scale_compute(t, 2.0)
    assert s.amount[t.name.index("compute")] == 350.0
    assert [s.amount[i] for i, n in enumerate(t.name) if n != "compute"] == [
        a for a, n in zip(t.amount, t.name, strict=True) if n != "compute"]
    assert t.amount[t.name.index("compute")] == 700.0  # the input is not changed
    # synchronous W = 2: C / 2 + 2 W G / B + 2 A + E
    sim = Simulator([s], SimConfig(workers=2, ps=1, rate_bytes_per_us=12.5, mechanism=SYNC_PS))
    sim.run(3)
    assert sim.step_ends[0][0] == pytest.approx(350.0 + 4 * 3000.0 / 12.5 + 80.0 + 25.0)


def test_predict_compute_scale_what_if():
    base = gradwire("predict", str(SYNC_BUNDLE), "--workers", "1", "--format", "json",
                    "--model", "sim,sync-sum")
    fast = gradwire("predict", str(SYNC_BUNDLE), "--workers", "1", "--format", "json",
                    "--model", "sim,sync-sum", "--compute-scale", "4")
    assert base.returncode == 0 and fast.returncode == 0, fast.stderr
    rate = {json.loads(p.stdout)["profile"]["compute_scale"]:
            {r["model"]: r["examples_per_s"] for r in json.loads(p.stdout)["rows"]}
            for p in (base, fast)}
    assert rate[4.0]["sim"] > rate[1.0]["sim"] and rate[4.0]["sync-sum"] > rate[1.0]["sync-sum"]
    bad = gradwire("predict", str(SYNC_BUNDLE), "--compute-scale", "0")
    assert bad.returncode != 0 and "--compute-scale must be a finite number > 0" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_predict_compute_ops_speeds_up_the_named_op_types_only():
    # --compute-ops MatMul: only the traced MatMuls (73% of this trace's compute) run 4x as
    # fast, so the step lands between the profile's and every op 4x as fast
    runs = {}
    for extra in ((), ("--compute-scale", "4", "--compute-ops", "MatMul"),
                  ("--compute-scale", "4")):
        p = gradwire("predict", str(SYNC_BUNDLE), "--workers", "1", "--format", "json",
                     "--model", "sim,sync-sum", *extra)
        assert p.returncode == 0, p.stderr
        # reading the trace imports TensorFlow, whose C++ start-up notes stay quiet
        assert "oneDNN" not in p.stderr and "InitializeLog" not in p.stderr
        runs[extra[-1] if extra else ""] = json.loads(p.stdout)
    assert runs["MatMul"]["profile"]["compute_ops"] == ["MatMul"]
    for model in ("sim", "sync-sum"):
        rate = {k: next(r["examples_per_s"] for r in d["rows"] if r["model"] == model)
                for k, d in runs.items()}
        assert rate[""] < rate["MatMul"] < rate["4"]
    bad = gradwire("predict", str(SYNC_BUNDLE), "--compute-scale", "2", "--compute-ops", "Foo")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert "--compute-ops Foo: no traced compute op has the type Foo" in bad.stderr
    assert "MatMul" in bad.stderr  # the trace's op types, to pick from
    bad = gradwire("predict", str(SYNC_BUNDLE), "--compute-scale", "2", "--compute-ops",
                   "MatMul,Foo")  # one mistyped in a list is not dropped silently
    assert bad.returncode != 0 and "no traced compute op has the type Foo " in bad.stderr
    alone = gradwire("predict", str(SYNC_BUNDLE), "--compute-ops", "MatMul")
    assert alone.returncode != 0 and "--compute-scale X (not 1)" in alone.stderr
    empty = gradwire("predict", str(SYNC_BUNDLE), "--compute-scale", "2", "--compute-ops", "")
    assert empty.returncode != 0 and "an empty op type" in empty.stderr


@pytest.mark.parametrize("workers", [1, 2, 4, 8])
def test_block_distribution_overlaps_the_workers_pushes_with_the_others_pulls(workers):
    # Chang et al. 9.4: the PS sends worker 0 its whole model, then worker 1, ... (--link
    # block): worker k has its pull at (k + 1) G / B, computes C and pushes; the pushes arrive
    # G / B apart, as fast as the uplink serves them, so the last ends at G / B + C + W G / B:
    # a step lasts (W + 1) G / B + C + 2 A + E, against 2 W G / B + C + 2 A + E when the
    # downlink is shared (round-robin order), nearly half at large W
    g, c, a, e, b = 3000.0, 700.0, 40.0, 25.0, 12.5
    step = (workers + 1) * g / b + c + 2 * a + e
    sim = Simulator([step_template(g, c, g, a, e)],
                    SimConfig(workers=workers, ps=1, rate_bytes_per_us=b, mechanism=SYNC_PS,
                              link="block"))
    sim.run(5)
    for w_ends in sim.step_ends:
        assert w_ends == pytest.approx([step * (n + 1) for n in range(5)], rel=1e-12)


def test_block_distribution_serves_the_lowest_worker_first_without_preempting():
    # asynchronous, two workers: worker 1 starts its pull 50 us before worker 0; the block
    # order lets it finish (no preemption), then serves worker 0 whole
    g, b = 1000.0, 10.0
    sim = Simulator([step_template(g, 0.0, 1.0, 0.0)],
                    SimConfig(workers=2, ps=1, rate_bytes_per_us=b, link="block", record=True,
                              start_offsets_us=(50.0, 0.0)))
    sim.run(1)
    pulls = sorted((r.end_us, r.worker) for r in sim.timeline if r.name == "pull w")
    # shared fairly, worker 1's pull would end at 150 us (alone for 50 us, then at half rate)
    assert [(round(e), lane) for e, lane in pulls[:2]] == [(100, 1), (200, 0)]


def test_predict_block_distribution_what_if():
    rows = {}
    for link in ("fair", "block"):
        p = gradwire("predict", str(SYNC_BUNDLE), "--workers", "4", "--format", "json",
                     "--link", link)
        assert p.returncode == 0, p.stderr
        rows[link] = json.loads(p.stdout)["rows"][0]["examples_per_s"]
    assert rows["block"] > rows["fair"]  # the pushes overlap the later workers' pulls


def durations(step_ends: list[float]) -> list[float]:
    """Each step's length after the first, us."""
    return [y - x for x, y in zip(step_ends[:-1], step_ends[1:], strict=True)]


def two_variable_step(g: float, compute_us: float) -> StepTemplate:
    """Pull variables 0 and 1 (``g`` bytes each), compute, push variable 1's gradient first,
    then variable 0's (backpropagation's order: the last layer's first)."""
    t = StepTemplate(step=0)
    start = t.add(DELAY, 0.0, "step start")
    pulls = [t.add(DOWN, g, f"pull v{v}", [start], var=v) for v in (0, 1)]
    c = t.add(WORKER, compute_us, "compute", pulls)
    pushes = [t.add(UP, g, f"push v{v}", [c], prio=1 - v, var=v) for v in (0, 1)]
    t.add(WORKER, 0.0, "client gap", [c, *pushes])
    return t


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_without_the_barrier_one_variable_is_the_synchronous_step(workers):
    # one variable: it comes back when every gradient is in, as with the barrier; the step
    # turns (compute, push, aggregate, update, pull) but lasts C + 2 W G / B + 2 A + E
    g, c, a, e, b = 3000.0, 700.0, 40.0, 25.0, 12.5
    t = step_template(g, c, g, a, e)
    t.var[t.name.index("pull w")] = t.var[t.name.index("push w")] = 0
    step = c + 2 * workers * g / b + 2 * a + e
    for w_ends in ends(t, workers, b, SYNC_PS + NO_BARRIER, steps=5):
        assert durations(w_ends) == pytest.approx([step] * 4, rel=1e-12)


def test_without_the_barrier_a_variable_pushed_early_comes_back_early():
    # W = 1, two variables of G bytes, pushed v1 then v0: with the barrier a step is
    # 2 G / B of pulls + C + 2 G / B of pushes; without it v1's pull runs while v0 is pushed
    # (the link's two directions): C + G / B + G / B + G / B
    g, c, b = 1000.0, 300.0, 10.0
    t = two_variable_step(g, c)
    for mech, step in ((SYNC_PS, c + 4 * g / b), (SYNC_PS + NO_BARRIER, c + 3 * g / b)):
        assert durations(ends(t, 1, b, mech, steps=5)[0]) == pytest.approx([step] * 4,
                                                                            rel=1e-12)


def test_the_barrier_free_transform_needs_the_variables():
    with pytest.raises(ReplayError, match="cannot be paired"):
        barrier_free(step_template(10.0, 1.0, 10.0, 1.0, 1.0), [0] * 7, 1)
    s, m = barrier_free(two_variable_step(10.0, 1.0), [0] * 7, 1)
    assert s.kind.count(BARRIER) == 2 and sorted(m[i] for i, k in enumerate(s.kind)
                                                 if k == BARRIER) == [0, 1]
    assert s.kind.count(DOWN) == 2 and DOWN not in s.kind[:4]  # the pulls moved to the end


def test_the_token_is_pulled_after_the_steps_pushes_not_after_a_fixed_delay(sync_profile):
    """SyncReplicasOptimizer's token leaves the PS only once the worker's pushes are in: its
    request waits on the pushes' PS work (the profile's latency beyond it is what is left:
    not the whole wait from the step's start, which a faster link would not shorten), and the
    compute that reads the token comes after it."""
    for t in sync_profile.templates:
        preds = t.predecessors()
        token = next(i for i, n in enumerate(t.name) if n.startswith("pull ")
                     and n.endswith("sync_token_q_Dequeue"))
        (request,) = preds[token]
        assert t.kind[request] == DELAY and t.name[request].startswith("request ")
        assert any(t.kind[p] == PS for p in preds[request])
        ps_done = max(t.obs_end[p] for p in preds[request])
        assert 0.0 <= t.amount[request] <= t.obs_start[token] - ps_done + 1e-6
        (parse,) = t.succ[token]
        readers = [c for c in t.succ[parse] if t.kind[c] == WORKER and t.name[c] != "client gap"]
        assert readers and all(t.obs_start[c] >= t.obs_end[parse] - 1e-6 for c in readers)
