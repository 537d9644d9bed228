"""The compiled kernel (replay/kernel.py, run by engine.Simulator) against the reference oracle,
the Python event loop it replaced (tests/pyloop.py): the same step starts and ends, op-events,
simulated time, worker, PS and link busy times, timelines, to the bit, over repeated ``run(n)``
calls, for every option (orders, WIN, links fair and fifo, coupled worker NICs, PS core limits,
start offsets), on synthetic templates, the shipped sample and random graphs (hypothesis)."""

from __future__ import annotations

import itertools
import json
import math
import random

import pytest
from conftest import SAMPLE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyloop import PythonSimulator

from gradwire.errors import ReplayError
from gradwire.replay import generators, kernel, predict
from gradwire.replay.engine import CompileCache, SimConfig, Simulator
from gradwire.replay.predict import assign_ps, simulate, simulate_phases
from gradwire.replay.profile import load_profile
from gradwire.replay.template import DELAY, DOWN, PS, UP, WORKER, StepTemplate

RUNS = (1, 2, 5, 12)  # run(n) again and again, as predict does when it doubles its steps


def synthetic(n: int, seed: int, ties: bool = False) -> StepTemplate:
    """A PS step of ``n`` tensors (as scripts/bench_replay.py), with request delays before the
    pulls (folded into them) and parse delays after them (folded into the pulls too). With
    ``ties``, round amounts, so many events fall on the same instant."""
    rng = random.Random(seed)

    def draw(lo: float, hi: float) -> float:
        return float(rng.randrange(1, 4) * hi // 4) if ties else rng.uniform(lo, hi)

    t = StepTemplate(step=seed)
    start = t.add(DELAY, 100.0, "start")
    prev = start
    for j in range(n):
        rel = t.add(DELAY, draw(0, 200) if j % 3 else 0.0, f"request{j}", [start])
        d = t.add(DOWN, draw(1e3, 4e5), f"pull{j}", [rel], prio=j)
        p = t.add(DELAY, draw(50, 300), f"parse{j}", [d])
        prev = t.add(WORKER, draw(20, 400), f"fwd{j}", [prev, p])
    ends = []
    for k in range(n):
        prev = t.add(WORKER, draw(20, 400), f"bwd{k}", [prev])
        u = t.add(UP, draw(1e3, 4e5), f"push{k}", [prev], prio=k)
        a = t.add(DELAY, draw(10, 50), f"parse up{k}", [u])
        ends.append(t.add(PS, draw(10, 100), f"apply{k}", [a]))
    t.add(WORKER, 2000.0, "client gap", ends)
    t.tic = [float(rng.randrange(5)) if k == DOWN else float("inf") for k in t.kind]
    return t


TEMPLATES = [synthetic(6, 1), synthetic(9, 2), synthetic(4, 3)]
TIES = [synthetic(5, 4, ties=True), synthetic(5, 5, ties=True)]


def outputs(sim: Simulator | PythonSimulator) -> tuple:
    return (sim.now, sim.events, sim.worker_busy_us, list(sim.ps_busy_us),
            [list(e) for e in sim.step_starts], [list(e) for e in sim.step_ends],
            sim.link_busy_share(), list(sim.timeline))


def assert_same(templates: list[StepTemplate], cfg: SimConfig, runs=RUNS,
                ps_map: list[list[int]] | None = None) -> None:
    """The kernel and the oracle on ``cfg``, compared after construction and after every
    run(n)."""
    ps_map = ps_map or assign_ps(templates, cfg.ps)
    fast = Simulator(templates, cfg, ps_map)
    slow = PythonSimulator(templates, cfg, ps_map)
    assert outputs(fast) == outputs(slow)
    for n in runs:
        fast.run(n)
        slow.run(n)
        assert outputs(fast) == outputs(slow), (cfg, n)
    assert slow.events > 0


WINS = (None, 20_000.0, 1e6)


@pytest.mark.parametrize("workers", [1, 2, 3, 7])
@pytest.mark.parametrize("ps", [1, 2])
@pytest.mark.parametrize("link", ["fair", "fifo"])
def test_synthetic_templates_every_order_and_window(workers, ps, link):
    for order, win in itertools.product(("observed", "tic", "reverse", "random"), WINS):
        cfg = SimConfig(workers=workers, ps=ps, rate_bytes_per_us=120.0, win_bytes=win,
                        order=order, link=link, seed=workers + 10 * ps)
        assert_same(TEMPLATES, cfg)


@pytest.mark.parametrize("workers", [2, 3, 7])
@pytest.mark.parametrize("link", ["fair", "fifo"])
@pytest.mark.parametrize("win", [None, 1000.0])
def test_simultaneous_events_break_ties_the_same_way(workers, link, win):
    # round sizes and durations at 1 byte/us: many events share an instant and the
    # sequence counter (and then kind, worker, op) decides their order
    for ps, order in itertools.product((1, 2), ("observed", "reverse", "random")):
        cfg = SimConfig(workers=workers, ps=ps, rate_bytes_per_us=1.0, win_bytes=win,
                        order=order, link=link, seed=3)
        assert_same(TIES, cfg, runs=(1, 3, 6))


def test_a_served_op_is_sequenced_before_the_successors_of_the_op_that_freed_it():
    # X and Y compute on the worker, Y queued behind X. When X ends, Python serves Y (its end
    # event takes the next sequence number) before X's successor Z, a delay, is released: Y
    # and Z end at the same instant, Y first, so Y's pull queues before Z's (same priority);
    # the step ends at 16 us, at 21 the other way round
    t = StepTemplate(step=0)
    x = t.add(WORKER, 1.0, "x")
    y = t.add(WORKER, 2.0, "y")
    z = t.add(DELAY, 2.0, "z", [x])
    t.add(DELAY, 0.0, "z2", [z])  # keeps z a delay of its own (no folding)
    t.add(DOWN, 5.0, "pull z", [z])
    t.add(WORKER, 10.0, "use y", [t.add(DOWN, 3.0, "pull y", [y])])  # the order shows
    for link, win in itertools.product(("fair", "fifo"), (None, 1.0)):
        cfg = SimConfig(workers=1, ps=1, rate_bytes_per_us=1.0, link=link, win_bytes=win)
        assert_same([t], cfg, runs=(1, 2))
    rec = Simulator([t], SimConfig(workers=1, ps=1, rate_bytes_per_us=1.0, record=True))
    rec.run(1)
    ends = {name: end for _w, _k, name, _s, end in rec.timeline}
    assert ends["pull y"] == 6.0 and ends["pull z"] == 11.0 and rec.step_ends == [[16.0]]


@pytest.mark.parametrize("link", ["fair", "fifo"])
def test_start_offsets(link):
    offsets = (0.0, 1500.0, 0.0, 250.5, 1500.0)  # some workers start late, two together
    for workers, win in itertools.product((2, 5, 7), (None, 20_000.0)):
        cfg = SimConfig(workers=workers, ps=2, rate_bytes_per_us=50.0, win_bytes=win,
                        link=link, start_offsets_us=offsets, order="random", seed=1)
        assert_same(TEMPLATES + TIES, cfg)


def test_independent_links_with_a_finite_worker_nic():
    # one PS (nothing to couple) and fifo links (never coupled)
    for ps, link in ((1, "fair"), (1, "fifo"), (2, "fifo")):
        cfg = SimConfig(workers=3, ps=ps, rate_bytes_per_us=100.0, link=link,
                        worker_rate_bytes_per_us=100.0, win_bytes=20_000.0)
        assert_same(TEMPLATES, cfg)


@pytest.mark.parametrize("ps", [2, 3])
def test_worker_nics_coupling_the_ps_links(ps):
    """Max-min sharing over PS and worker NICs: worker NICs slower than, as fast as and
    faster than the PS links, WIN on and off, every order, late starters, ties."""
    for nic, win, order in itertools.product((30.0, 50.0, 120.0), (None, 20_000.0),
                                             ("observed", "tic", "reverse", "random")):
        cfg = SimConfig(workers=4, ps=ps, rate_bytes_per_us=50.0, win_bytes=win, order=order,
                        worker_rate_bytes_per_us=nic, start_offsets_us=(0.0, 700.0, 0.0, 25.0),
                        seed=2)
        assert_same(TEMPLATES + TIES, cfg)


def test_unprofiled_ps_map_and_one_template():
    # every op on PS 0 of 3 (links 1 and 2 idle), and a single template
    t = TEMPLATES[1]
    cfg = SimConfig(workers=3, ps=3, rate_bytes_per_us=80.0, win_bytes=5000.0)
    assert_same([t], cfg, runs=(2, 1, 6), ps_map=[[0] * len(t.kind)])


@pytest.fixture(scope="module")
def sample():
    prof = load_profile([SAMPLE])
    batch = json.loads((SAMPLE / "lab_result.json").read_text())["config"]["batch_size"]
    assert batch == prof.batch_size
    return prof


@pytest.mark.parametrize("workers", [1, 2, 3, 7])
def test_sample_profile(sample, workers):
    rate = (sample.profile_bandwidth_bps or 1e9) * 1448 / 1514 / 8e6
    for ps, link, order, win in (
            (1, "fair", "observed", None), (1, "fifo", "tic", 4096.0),
            (2, "fair", "random", 1 << 25), (2, "fifo", "reverse", None),
            (1, "fair", "tic", 65536.0), (2, "fair", "observed", 4096.0)):
        cfg = SimConfig(workers=workers, ps=ps, rate_bytes_per_us=rate, win_bytes=win,
                        order=order, link=link, seed=workers)
        assert_same(sample.templates, cfg, runs=(1, 4, 10, 25))


def test_predictions_are_the_same(sample, monkeypatch):
    # simulate() as predict runs it: doubles its steps until the CI is tight
    fast, fsim = simulate(sample.templates, sample.batch_size, 4, 2, 1e9, order="random",
                          seed=5, steps=50, max_steps=400)
    monkeypatch.setattr(predict, "Simulator", PythonSimulator)
    slow, ssim = simulate(sample.templates, sample.batch_size, 4, 2, 1e9, order="random",
                          seed=5, steps=50, max_steps=400)
    assert isinstance(fsim, Simulator) and isinstance(ssim, PythonSimulator)
    assert fast == slow and outputs(fsim) == outputs(ssim)


def test_phase_replications_are_the_same(sample, monkeypatch):
    # predict's default: replications from random start phases; with a PS core limit too
    for cores in (None, 1):
        preds = []
        for sim in (Simulator, PythonSimulator):
            monkeypatch.setattr(predict, "Simulator", sim)
            preds.append(simulate_phases(sample.templates, sample.batch_size, 3, 2, 1e9,
                                         order="random", win_bytes=4096.0, seed=2, steps=20,
                                         replications=4, max_replications=8, ps_cores=cores))
        assert preds[0] == preds[1]


def test_arrays_grow_between_and_within_runs(monkeypatch):
    # no spare room: the loop stops for more template picks, step slots and event heap (40
    # pulls at once per worker), and for its budget, and resumes where it stopped, with the
    # same results
    statuses = []
    compiled = kernel.loop

    def loop(*args):
        statuses.append(compiled(*args))
        return statuses[-1]

    monkeypatch.setattr(kernel, "SLACK", 0)
    monkeypatch.setattr(kernel, "BUDGET", 5000)
    monkeypatch.setattr(kernel, "loop", loop)
    wide = [synthetic(40, 7)]
    for workers, offsets, templates in ((7, (0.0, 5e4), TEMPLATES), (7, (), wide),
                                        (3, (), TEMPLATES), (1, (), TEMPLATES)):
        for record in (False, True):
            cfg = SimConfig(workers=workers, ps=2, rate_bytes_per_us=30.0, win_bytes=20_000.0,
                            order="random", start_offsets_us=offsets, record=record)
            assert_same(templates, cfg, runs=(3, 1, 40, 90))
    assert set(statuses) == {kernel.OK, kernel.NEED_PICKS, kernel.NEED_STEPS,
                             kernel.NEED_HEAP, kernel.BUDGET_SPENT, kernel.NEED_ROWS}


@pytest.mark.parametrize("budget", [1, 7, 1000])
@pytest.mark.parametrize(("ps", "nic", "win", "link"), [
    (1, math.inf, None, "fair"), (2, math.inf, 20_000.0, "fifo"),
    (2, 30.0, 20_000.0, "fair"),  # coupled worker NICs: max-min's scans count too
])
def test_a_budget_per_call_gives_what_one_call_gives(monkeypatch, budget, ps, nic, win, link):
    """The kernel returning to Python every ``budget`` work units (for signals) and resumed
    gives the same outputs, and the same prediction, as one call per run, to the bit."""
    compiled = kernel.loop
    calls = []

    def loop(*args):
        calls.append(args[5])  # the budget
        return compiled(*args)

    monkeypatch.setattr(kernel, "loop", loop)
    cfg = SimConfig(workers=3, ps=ps, rate_bytes_per_us=30.0, worker_rate_bytes_per_us=nic,
                    win_bytes=win, link=link, order="random", seed=3,
                    start_offsets_us=(0.0, 700.0))
    ps_map = assign_ps(TEMPLATES, ps)
    got = {}
    for b in (0, budget):
        monkeypatch.setattr(kernel, "BUDGET", b)
        calls.clear()
        sim = Simulator(TEMPLATES, cfg, ps_map)
        states = []
        for n in (1, 4, 9):
            sim.run(n)
            states.append(outputs(sim))
        pred = simulate_phases(TEMPLATES, 32, 3, ps, 1e9, win_bytes=win, link=link,
                               worker_bandwidth_bps=None if nic == math.inf else 1e9,
                               seed=1, steps=12, replications=2, max_replications=2)
        got[b] = (states, pred, sum(1 for x in calls if x))
    assert got[budget][:2] == got[0][:2]
    assert got[0][2] == 0 and got[budget][2] > 10  # it did return to Python, often


def _graph(draw) -> StepTemplate:
    """A random step graph: ops of every kind, amounts from a small set (ties), random edges
    to earlier ops, random PS indices and priorities, then a last op of 1 us after the rest."""
    n = draw(st.integers(2, 14))
    t = StepTemplate(step=0)
    for i in range(n):
        kind = draw(st.sampled_from([DELAY, DELAY, WORKER, PS, DOWN, UP]))
        after = draw(st.lists(st.integers(0, i - 1), max_size=3)) if i else []
        amount = draw(st.sampled_from([0.0, 1.0, 2.0, 5.0, 7.5, 40.0]))
        t.add(kind, amount, f"op{i}", after, ps=draw(st.integers(0, 1)),
              prio=draw(st.sampled_from([0, 1, 2])))
    # every step takes time: a worker whose steps took none would loop at one instant forever
    # (in both engines) while others wait for the clock to move
    t.add(WORKER, 1.0, "end", [i for i in range(n) if not t.succ[i]])
    t.tic = [float(p) for p in t.prio]
    return t


@st.composite
def cases(draw):
    templates = [_graph(draw) for _ in range(draw(st.integers(1, 3)))]
    cfg = SimConfig(workers=draw(st.integers(1, 5)), ps=draw(st.integers(1, 2)),
                    rate_bytes_per_us=draw(st.sampled_from([0.5, 1.0, 3.0])),
                    worker_rate_bytes_per_us=draw(st.sampled_from([math.inf, 0.5, 2.0])),
                    win_bytes=draw(st.sampled_from([None, 1.0, 3.0])),
                    order=draw(st.sampled_from(["observed", "tic", "reverse", "random"])),
                    link=draw(st.sampled_from(["fair", "fifo"])), seed=draw(st.integers(0, 9)),
                    ps_cores=draw(st.sampled_from([None, None, 1, 2])), record=draw(st.booleans()),
                    start_offsets_us=tuple(draw(st.lists(st.sampled_from([0.0, 1.0, 3.0]),
                                                         max_size=4))),
                    burst_bytes=draw(st.sampled_from([(0.0, 0.0), (0.0, 0.0), (2.0, 0.0),
                                                      (1.0, 5.0)])),
                    window_bytes=draw(st.sampled_from([(0.0, 0.0), (0.0, 0.0), (1.0, 3.0),
                                                       (4.0, 2.0), (2.0, 2.0)])),
                    standing_bytes=draw(st.sampled_from([0.0, 0.0, 5.0, math.inf])),
                    share_windows=draw(st.sampled_from([((), ()), ((), ()), ((1.0, 3.0), (2.0,)),
                                                        ((1.0, 2.0, 4.0), ()),
                                                        ((2.5,), (1.0, 1.0, 5.0))])))
    return templates, cfg


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_random_graphs_and_configurations(case):
    templates, cfg = case
    ps_map = [[p % cfg.ps for p in t.ps] for t in templates]
    assert_same(templates, cfg, runs=(1, 2, 4), ps_map=ps_map)


# -- PS core limits and timelines, in the kernel since issue 20 ----------------------------------


@pytest.mark.parametrize("cores", [1, 2])
@pytest.mark.parametrize("link", ["fair", "fifo"])
def test_ps_core_limits(cores, link):
    # workers' updates wait for one of a PS's cores, first come first served
    for workers, ps, order, win in itertools.product((1, 3, 7), (1, 2), ("observed", "random"),
                                                     (None, 20_000.0)):
        cfg = SimConfig(workers=workers, ps=ps, rate_bytes_per_us=400.0, win_bytes=win,
                        order=order, link=link, ps_cores=cores, seed=workers,
                        start_offsets_us=(0.0, 300.0))
        assert_same(TEMPLATES + TIES, cfg)


@pytest.mark.parametrize("link", ["fair", "fifo"])
def test_token_buckets(link):
    # links whose idle spells refill a bucket of bytes sent at once, as the profile measures
    for workers, ps, win, burst in itertools.product((1, 3), (1, 2), (None, 20_000.0),
                                                     ((30_000.0, 0.0), (5_000.0, 80_000.0))):
        cfg = SimConfig(workers=workers, ps=ps, rate_bytes_per_us=120.0, win_bytes=win,
                        link=link, seed=workers, burst_bytes=burst, ps_cores=1)
        assert_same(TEMPLATES, cfg)


@pytest.mark.parametrize("windows", [(65_000.0, 260_000.0), (300_000.0, 90_000.0),
                                     (100_000.0, 100_000.0)])
def test_two_way_traffic(windows):
    # each PS link's directions coupled by their flows' windows, with and without buckets
    for workers, ps, win, burst in itertools.product((1, 3, 6), (1, 2), (None, 20_000.0),
                                                     ((0.0, 0.0), (30_000.0, 30_000.0))):
        cfg = SimConfig(workers=workers, ps=ps, rate_bytes_per_us=120.0, win_bytes=win,
                        seed=workers, burst_bytes=burst, window_bytes=windows,
                        start_offsets_us=(0.0, 500.0, 90.0))
        assert_same(TEMPLATES + TIES, cfg)


@pytest.mark.parametrize("standing", [150_000.0, math.inf])
@pytest.mark.parametrize("windows", [(65_000.0, 260_000.0), (100_000.0, 100_000.0)])
def test_two_way_traffic_counting_connections(windows, standing):
    # --link-windows same: every connection counted, the standing queue at most `standing`
    for workers, ps, win, burst in itertools.product((1, 3, 6), (1, 2), (None, 20_000.0),
                                                     ((0.0, 0.0), (30_000.0, 30_000.0))):
        cfg = SimConfig(workers=workers, ps=ps, rate_bytes_per_us=120.0, win_bytes=win,
                        seed=workers, burst_bytes=burst, window_bytes=windows,
                        standing_bytes=standing, start_offsets_us=(0.0, 500.0, 90.0))
        assert_same(TEMPLATES + TIES, cfg)


@pytest.mark.parametrize("shares", [((1.0, 3.0), (2.0, 0.5, 1.0)), ((5.0, 1.0, 2.0, 2.0), ())])
def test_shares_by_window(shares):
    # --link-shares windows: a lane's chunks take the weight its step draws, on links coupled
    # both ways or not, counted or not, with and without buckets
    for workers, ps, win, windows, standing in itertools.product(
            (1, 3, 6), (1, 2), (None, 20_000.0), ((0.0, 0.0), (65_000.0, 260_000.0)),
            (0.0, 150_000.0)):
        cfg = SimConfig(workers=workers, ps=ps, rate_bytes_per_us=120.0, win_bytes=win,
                        seed=workers, burst_bytes=(30_000.0, 0.0), window_bytes=windows,
                        standing_bytes=standing, share_windows=shares,
                        start_offsets_us=(0.0, 500.0, 90.0))
        assert_same(TEMPLATES + TIES, cfg)


def test_a_heavier_share_ends_sooner_and_the_link_stays_busy():
    # two lanes' pulls of B bytes start together on one link of rate C: the one whose step drew
    # weight a ends at B (a + b) / (a C), the other at 2 B / C whatever the weights
    t = StepTemplate(step=0)
    start = t.add(DELAY, 0.0, "start")
    pull = t.add(DOWN, 1e6, "pull", [start], prio=0)
    t.add(WORKER, 1e9, "compute", [pull])
    windows = (1.0, 3.0)
    cfg = SimConfig(workers=2, ps=1, rate_bytes_per_us=100.0, record=True, seed=3,
                    share_windows=(windows, ()))
    sim = Simulator([t], cfg, [[0, 0, 0]])
    sim.run(1)
    row = generators.link_share_rows((windows, ()), 1, 0, 3)[0]
    a, b = (float(row[kernel._share_pick(w, 1, 0, len(row))]) for w in (0, 1))
    ends = {r.worker: r.end_us for r in sim.timeline if r.name == "pull"}
    assert a != b  # the seed draws lane 0 and lane 1 apart (else the test says nothing)
    first, last = (0, 1) if a > b else (1, 0)
    heavy, light = max(a, b), min(a, b)
    assert ends[first] == pytest.approx(1e6 * (heavy + light) / (heavy * 100.0))
    assert ends[last] == pytest.approx(2e6 / 100.0)
    equal = Simulator([t], SimConfig(workers=2, ps=1, rate_bytes_per_us=100.0, record=True,
                                     seed=3), [[0, 0, 0]])
    equal.run(1)
    assert {r.end_us for r in equal.timeline if r.name == "pull"} == {2e6 / 100.0}


def test_timelines():
    # every op of every step, in the order they end, with PS core limits and coupled NICs
    for ps, cores, nic in ((1, None, math.inf), (2, 1, 60.0), (2, None, 60.0)):
        cfg = SimConfig(workers=3, ps=ps, rate_bytes_per_us=100.0, record=True, seed=4,
                        ps_cores=cores, worker_rate_bytes_per_us=nic, win_bytes=20_000.0)
        assert_same(TEMPLATES, cfg, runs=(1, 3))
    sim = Simulator(TEMPLATES, SimConfig(workers=2, ps=1, rate_bytes_per_us=100.0, record=True))
    sim.run(2)
    assert {t.worker for t in sim.timeline} == {0, 1}
    assert {t.name for t in sim.timeline} >= {"start", "pull0", "client gap"}
    assert all(t.start_us <= t.end_us for t in sim.timeline)


def test_without_numba_the_kernel_runs_as_python(monkeypatch):
    # gradwire.jit leaves the kernel plain Python without numba: the same results
    cfg = SimConfig(workers=2, ps=2, rate_bytes_per_us=100.0, win_bytes=5000.0,
                    worker_rate_bytes_per_us=70.0, order="random")
    want = Simulator(TEMPLATES, cfg, assign_ps(TEMPLATES, 2))
    want.run(2)
    compiled = [name for name, f in vars(kernel).items() if hasattr(f, "py_func")]
    assert "loop" in compiled and "_maxmin" in compiled
    for name in compiled:
        monkeypatch.setattr(kernel, name, getattr(kernel, name).py_func)
    got = Simulator(TEMPLATES, cfg, assign_ps(TEMPLATES, 2))
    got.run(2)
    assert outputs(got) == outputs(want)


@pytest.mark.parametrize(("order", "ps", "nic"), [
    ("observed", 1, float("inf")), ("random", 1, float("inf")), ("tic", 2, float("inf")),
    ("reverse", 2, 30.0),  # coupled worker NICs
])
def test_replications_sharing_a_compile_cache_give_the_same_results(
        order: str, ps: int, nic: float) -> None:
    """A CompileCache shared by replications (as simulate_phases does) changes nothing: each
    simulator's outputs equal those of one built alone, random priorities included."""
    ps_map = assign_ps(TEMPLATES, ps)
    cache = CompileCache(TEMPLATES)
    for seed in range(4):
        cfg = SimConfig(workers=3, ps=ps, rate_bytes_per_us=40.0, order=order, seed=seed,
                        worker_rate_bytes_per_us=nic, start_offsets_us=(0.0, 900.0 * seed, 50.0))
        shared, alone = Simulator(TEMPLATES, cfg, ps_map, cache=cache), Simulator(
            TEMPLATES, cfg, ps_map)
        for sim in (shared, alone):
            sim.run(7)
        assert outputs(shared) == outputs(alone)
    assert (cache.compiled is None) == (order == "random")
    with pytest.raises(ReplayError, match="compile cache made for"):
        Simulator(TEMPLATES, SimConfig(workers=2, ps=ps, rate_bytes_per_us=40.0, order=order),
                  ps_map, cache=cache)
