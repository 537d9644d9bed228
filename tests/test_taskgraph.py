"""The kernel on hand-made task graphs with closed-form answers: a toy synchronous-PS generator
(a barrier is a join task), a pool of cores, and the critical path of replayed steps
(replay/critical.py) on graphs whose path is known."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from gradwire.replay.critical import BARRIER, ReplayPaths, walk
from gradwire.replay.engine import SimConfig, Simulator
from gradwire.replay.kernel import Kernel
from gradwire.replay.taskgraph import (
    JOIN,
    LINK,
    POOL,
    SERIAL,
    ReplayError,
    ResourceTable,
    StepGraph,
    graph_arrays,
)
from gradwire.replay.template import DELAY, DOWN, PS, UP, WORKER, StepTemplate

i8 = np.int64


def table(workers: int, kinds: list[int], dest: list[int], links: int = 0, rate: float = 1.0,
          pools: list[int] = (), joins: list[int] = (), burst: float = 0.0,
          fifo: int = 0) -> ResourceTable:
    """A resource table whose slot s names the same ``dest[s]`` for every lane."""
    r = len(kinds)
    return ResourceTable(
        kind=np.array(kinds, dtype=i8), acc=np.array([0] + [-1] * (r - 1), dtype=i8),
        group=np.full(r, -1, dtype=i8), dest=np.tile(np.array(dest, dtype=i8), (workers, 1)),
        port2=np.full((workers, r), -1, dtype=i8), link_cap=np.full(links, rate),
        link_fifo=np.full(links, fifo, dtype=i8), link_burst=np.full(links, burst),
        link_rev=np.full(links, -1, dtype=i8), link_win=np.zeros(links),
        pool_cores=np.array(pools, dtype=i8),
        join_need=np.array(joins, dtype=i8), port_cap=np.zeros((0, 1)),
        port_link=np.zeros((0, 1), dtype=i8), nports=np.zeros(0, dtype=i8), nacc=1)


def chain(slots: list[int], amounts: list[float]) -> StepGraph:
    """Tasks one after the other."""
    n = len(slots)
    return StepGraph(slot=slots, amount=amounts, prio=[0.0] * n, quantum=[0.0] * n,
                     pre=[0.0] * n, post=[0.0] * n, weight=[1] * n, indeg=[0] + [1] * (n - 1),
                     succ=[[i + 1] for i in range(n - 1)] + [[]], roots=[0], ops=n)


def ends_of(k: Kernel, workers: int) -> list[list[float]]:
    starts: list[list[float]] = [[] for _ in range(workers)]
    ends: list[list[float]] = [[] for _ in range(workers)]
    k.sync_steps(starts, ends)
    return ends


def sync_ps(workers: int, compute_us: float, grad_bytes: float, rate: float) -> tuple:
    """A toy synchronous PS: compute, push the gradient, wait for every worker at a barrier,
    pull the new parameters. Slots: 0 compute, 1 the PS's uplink, 2 the barrier, 3 its
    downlink."""
    graph = graph_arrays([chain([0, 1, 2, 3], [compute_us, grad_bytes, 0.0, grad_bytes])])
    return graph, table(workers, [SERIAL, LINK, JOIN, LINK], [-1, 0, 0, 1], links=2, rate=rate,
                        joins=[workers])


@pytest.mark.parametrize("workers", [1, 2, 5, 16])
def test_synchronous_ps_barrier_closed_form(workers):
    # together: W pushes share the uplink, all end at C + W G / B; the barrier lets every
    # pull go at once; W pulls share the downlink: a step is C + 2 W G / B, for every worker
    c, g, b = 700.0, 3000.0, 12.5
    k = Kernel(*sync_ps(workers, c, g, b), random.Random(0))
    k.run(6)
    step = c + 2 * workers * g / b
    for ends in ends_of(k, workers):
        assert ends == pytest.approx([step * (n + 1) for n in range(6)], rel=1e-12)


def test_a_barrier_waits_for_the_last_worker():
    # compute, barrier, pull; workers start at 0, 7 and 3 us: the first step ends for all at
    # max(offset) + C + W G / B, each later one C + W G / B after
    c, g, b, offsets = 50.0, 100.0, 4.0, (0.0, 7.0, 3.0)
    graph = graph_arrays([chain([0, 1, 2], [c, 0.0, g])])
    tab = table(3, [SERIAL, JOIN, LINK], [-1, 0, 0], links=1, rate=b, joins=[3])
    k = Kernel(graph, tab, random.Random(0), offsets, record=True)
    k.run(4)
    step = c + 3 * g / b
    for ends in ends_of(k, 3):
        assert ends == pytest.approx([7.0 + c + 3 * g / b + step * n for n in range(4)])
    # worker 0's first step: its pull, then worker 1's compute (the last to reach the
    # barrier), then worker 1's late start as a wait
    ri, rf = k.rows()
    names = {0: "compute", 1: "barrier", 2: "pull"}
    kinds = {0: "worker", 1: BARRIER, 2: "downlink"}
    segs = walk(ri, rf, k.step_end_rows(0)[0], 0.0, lambda _g, t: (kinds[t], names[t]))
    assert [(s.node, s.kind, s.duration_us) for s in segs] == [
        ("worker:1/compute", "wait", 7.0), ("worker:1/compute", "worker", c),
        ("worker:0/pull", "downlink", pytest.approx(3 * g / b))]


@pytest.mark.parametrize(("workers", "cores"), [(3, 1), (5, 2), (2, 2)])
def test_a_pool_of_cores_serves_first_come_first_served(workers, cores):
    # each step one task of D us needing a core: the pool ends `cores` tasks per D; with one
    # core, worker w's step n ends at (W n + w + 1) D (round robin in arrival order)
    d = 10.0
    k = Kernel(graph_arrays([chain([0], [d])]), table(workers, [POOL], [0], pools=[cores]),
               random.Random(0))
    k.run(20)
    ends = ends_of(k, workers)
    assert k.now == pytest.approx(max(e[-1] for e in ends))
    done = sum(len(e) for e in ends)
    assert done / k.now == pytest.approx(cores / d, rel=workers / done)
    if cores == 1:
        for w, e in enumerate(ends):
            assert e == [(workers * n + w + 1) * d for n in range(20)]


@pytest.mark.parametrize("fifo", [0, 1])
def test_a_token_bucket_sends_its_bytes_at_once_and_refills_while_idle(fifo):
    # one lane: a transfer of X bytes, then D us of compute, on a link of rate C whose bucket
    # holds B bytes (full at the start). Step 1: the bucket sends B at once, the rest takes
    # (X - B) / C. While the link idles D us the bucket refills by C D (here less than B): the
    # next transfer takes (X - C D) / C, so every later step is X / C: the idle spell's
    # refill is exactly what the compute time gives back
    x, b, c, d = 1000.0, 300.0, 2.0, 50.0
    graph = graph_arrays([chain([0, 1], [x, d])])
    k = Kernel(graph, table(1, [LINK, SERIAL], [0, -1], links=1, rate=c, burst=b, fifo=fifo),
               random.Random(0))
    k.run(4)
    first = (x - b) / c + d
    assert ends_of(k, 1)[0] == pytest.approx([first + n * x / c for n in range(4)], rel=1e-12)
    # a transfer smaller than the bucket goes at once, and what it left serves the next
    graph = graph_arrays([chain([0, 1], [100.0, 1.0])])
    k = Kernel(graph, table(1, [LINK, SERIAL], [0, -1], links=1, rate=c, burst=b, fifo=fifo),
               random.Random(0))
    k.run(3)  # 300 -> 200 (+2 refilled) -> 102 (+2) -> 4: all three at once
    assert ends_of(k, 1)[0] == pytest.approx([1.0, 2.0, 3.0])
    # two lanes: only the one that found the link idle gets the bucket. FIFO: lane 0 ends at
    # (X - B) / C, lane 1 X / C later. Fair: lane 0 needs X - B at half the rate; lane 1 then
    # shares again with lane 0's next transfer (the link is busy: no bucket), at half the rate
    graph = graph_arrays([chain([0], [x])])
    k = Kernel(graph, table(2, [LINK], [0], links=1, rate=c, burst=b, fifo=fifo),
               random.Random(0))
    k.run(1)
    assert sorted(e[0] for e in ends_of(k, 2)) == pytest.approx(
        [(x - b) / c, (2 * x - b) / c] if fifo else [2 * (x - b) / c, 2 * x / c])


@pytest.mark.parametrize(("windows", "ends"), [
    ((0.0, 0.0), [7000.0, 8000.0]),  # independent directions
    ((1.0, 4.0), [7000.0, 8750.0]),  # a pull beside a push runs at a quarter of the rate
    ((4.0, 1.0), [8500.0, 8750.0]),  # a push beside a pull runs at a quarter of the rate
    ((2.0, 2.0), [7000.0, 8000.0]),  # equal windows: both directions at the full rate
])
def test_two_way_traffic_runs_the_smaller_window_at_its_share(windows, ends):
    # links 0 (pulls) and 1 (pushes) are the two directions of one link of rate 1 byte/us;
    # a step pulls X, pushes Y (1,000 bytes each), computes D (5,000 us). Lane 0 starts at 0,
    # lane 1 at 1,000 us, when lane 0's pull ends: lane 1 pulls while lane 0 pushes.
    # Windows (1, 4): lane 1's pull runs at 1/4 until lane 0's push ends at 2,000 (250 bytes),
    # the rest alone: 2,750; its push alone: 3,750; + D. Windows (4, 1): lane 0's push runs
    # at 1/4 beside lane 1's pull (250 bytes by 2,000), then shares with lane 1's push at 1/2:
    # its 750 bytes end at 3,500; lane 1's push has 250 left then: 3,750. (0, 0) or equal
    # windows: the directions do not slow each other, lane 1 ends at 3,000 + D.
    graph = graph_arrays([chain([0, 1, 2], [1000.0, 1000.0, 5000.0])])
    tab = table(2, [LINK, LINK, SERIAL], [0, 1, -1], links=2, rate=1.0)
    if windows[0] > 0:
        tab = tab._replace(link_rev=np.array([1, 0], dtype=i8), link_win=np.array(windows))
    k = Kernel(graph, tab, random.Random(0), offsets_us=(0.0, 1000.0))
    k.run(1)
    assert [e[0] for e in ends_of(k, 2)] == pytest.approx(ends, rel=1e-12)


def test_two_way_traffic_leaves_a_direction_of_two_connections_at_its_rate():
    # as above, windows (1, 4), but two lanes (1 and 2) start pulling at 1,000 us while lane 0
    # pushes: two connections fill the pull direction (a W = 6 capture: 0.97-1.07 of the rate
    # beside pushes, 0.82 with one), so they share it at 1/2 each: 500 bytes each by 2,000,
    # when lane 0's push ends (not slowed: its window is the bigger), the rest by 3,000; their
    # pushes share the other direction: 5,000; + D. (One window per direction would give 1/8
    # each until 2,000 and end them at 10,750.)
    graph = graph_arrays([chain([0, 1, 2], [1000.0, 1000.0, 5000.0])])
    tab = table(3, [LINK, LINK, SERIAL], [0, 1, -1], links=2, rate=1.0)._replace(
        link_rev=np.array([1, 0], dtype=i8), link_win=np.array([1.0, 4.0]))
    k = Kernel(graph, tab, random.Random(0), offsets_us=(0.0, 1000.0, 1000.0))
    k.run(1)
    assert [e[0] for e in ends_of(k, 3)] == pytest.approx([7000.0, 10000.0, 10000.0],
                                                          rel=1e-12)


@pytest.mark.parametrize(("standing", "lane0_end"), [(math.inf, 8000.0), (1.5, 7500.0)])
def test_counting_connections_slows_a_lone_push_beside_two_pulls(standing, lane0_end):
    # as above, equal windows (1, 1), with every connection counted (--link-windows same):
    # lane 0's lone push sees two pulls' windows standing in the other direction, 2 (or the
    # queue's 1.5), so it runs at 1/2 (2/3) from 1,000 while the two pulls share their
    # direction at 1/2 each. Unbounded: all three end at 3,000, lane 0 at 3,000 + D; the two
    # pushes then share: 5,000 + D. Capped at 1.5: lane 0's push ends at 2,500 (+ D), the
    # pulls' last 250 bytes each alone at 1/2 by 3,000. (The one-window rule: 7,000.)
    graph = graph_arrays([chain([0, 1, 2], [1000.0, 1000.0, 5000.0])])
    tab = table(3, [LINK, LINK, SERIAL], [0, 1, -1], links=2, rate=1.0)._replace(
        link_rev=np.array([1, 0], dtype=i8), link_win=np.array([1.0, 1.0]),
        link_standing=np.array([standing, standing]))
    k = Kernel(graph, tab, random.Random(0), offsets_us=(0.0, 1000.0, 1000.0))
    k.run(1)
    assert [e[0] for e in ends_of(k, 3)] == pytest.approx([lane0_end, 10000.0, 10000.0],
                                                          rel=1e-12)


def test_bad_tables_are_refused_with_what_is_wrong():
    graph = graph_arrays([chain([0], [1.0])])
    with pytest.raises(ReplayError, match="slot 3"):
        Kernel(graph_arrays([chain([3], [1.0])]), table(1, [SERIAL], [-1]), None)
    with pytest.raises(ReplayError, match="a join must wait for 1 to 2 lanes"):
        Kernel(graph, table(2, [JOIN], [0], joins=[3]), None)
    with pytest.raises(ReplayError, match="names a link out of range"):
        Kernel(graph, table(1, [LINK], [2], links=1), None)
    with pytest.raises(ReplayError, match="link bursts must be finite and >= 0"):
        Kernel(graph, table(1, [LINK], [0], links=1, burst=-1.0), None)
    two = table(1, [LINK], [0], links=2)
    with pytest.raises(ReplayError, match="link 0 is paired with 1, which is not paired back"):
        Kernel(graph, two._replace(link_rev=np.array([1, -1], dtype=i8)), None)
    with pytest.raises(ReplayError, match="link disciplines must be 0"):
        Kernel(graph, two._replace(link_fifo=np.array([0, 4], dtype=i8)), None)
    with pytest.raises(ReplayError, match="link 0 is FIFO or lane-ordered: only "
                       "processor-shared links and host queues pair"):
        Kernel(graph, two._replace(link_rev=np.array([1, 0], dtype=i8),
                                   link_fifo=np.ones(2, dtype=i8)), None)
    with pytest.raises(ReplayError, match="link windows must be finite and >= 0"):
        Kernel(graph, two._replace(link_win=np.array([1.0, -1.0])), None)
    with pytest.raises(ReplayError, match="link standing limits must be >= 0 bytes"):
        Kernel(graph, two._replace(link_standing=np.array([1.0, np.nan])), None)
    with pytest.raises(ReplayError, match="amounts must be finite"):
        Kernel(graph_arrays([chain([0], [-1.0])]), table(1, [SERIAL], [-1]), None)


def test_a_stalled_replay_is_an_error_not_a_short_run():
    # task 1 waits for two predecessors and has one: nothing is left to happen
    g = chain([0, 0], [1.0, 1.0])
    stuck = g._replace(indeg=[0, 2])
    k = Kernel(graph_arrays([stuck]), table(2, [SERIAL], [-1]), random.Random(0))
    with pytest.raises(ReplayError, match="stalled at 1.0 us: lane 0 ended 0 of 3 steps"):
        k.run(3)
    folded = g._replace(pre=[0.0, 2.0])
    with pytest.raises(ReplayError, match="recorded replay needs a graph without folded"):
        Kernel(graph_arrays([folded]), table(1, [SERIAL], [-1]), None, record=True)


# -- critical paths of replayed steps, on templates whose path is known -----------------------


def replay(t: StepTemplate, workers: int = 1, **cfg) -> Simulator:
    sim = Simulator([t], SimConfig(workers=workers, ps=1, rate_bytes_per_us=10.0, record=True,
                                   **cfg))
    sim.run(3)
    return sim


def test_a_chain_is_its_own_critical_path():
    t = StepTemplate(step=0)
    a = t.add(WORKER, 10.0, "a")
    p = t.add(DOWN, 100.0, "pull", [a])
    t.add(WORKER, 5.0, "b", [p])
    cp = ReplayPaths(replay(t)).step(0, 1)
    assert [(s.name, s.kind, s.duration_us) for s in cp.segments] == [
        ("a", "worker", 10.0), ("pull", "downlink ps:0", 10.0), ("b", "worker", 5.0)]
    assert cp.by_kind_us == {"downlink ps:0": 10.0, "worker": 15.0}
    assert cp.total_us == cp.span_us == 25.0


def test_the_longer_branch_of_a_diamond():
    t = StepTemplate(step=0)
    r = t.add(DELAY, 2.0, "root")
    x = t.add(PS, 30.0, "update", [r])
    y = t.add(WORKER, 5.0, "short", [r])
    u = t.add(UP, 50.0, "push", [r])
    t.add(WORKER, 1.0, "join", [x, y, u])
    cp = ReplayPaths(replay(t)).step(0, 2)
    assert [s.name for s in cp.segments] == ["root", "update", "join"]
    assert cp.by_kind_us == {"delay": 2.0, "compute ps:0": 30.0, "worker": 1.0}


def test_a_queue_wait_goes_through_the_op_that_held_the_resource():
    # a and b are released together on the worker; b waits for a; c follows b
    t = StepTemplate(step=0)
    r = t.add(DELAY, 0.0, "root")
    t.add(WORKER, 10.0, "a", [r])
    b = t.add(WORKER, 8.0, "b", [r])
    t.add(WORKER, 3.0, "c", [b])
    cp = ReplayPaths(replay(t)).step(0, 1)
    assert [s.name for s in cp.segments] == ["a", "b", "c"]
    assert cp.by_kind_us == {"worker": 21.0}


def test_a_core_wait_crosses_to_the_worker_that_held_the_core():
    # two workers, one PS core: worker 1's update waits for worker 0's
    t = StepTemplate(step=0)
    t.add(PS, 10.0, "update")
    sim = replay(t, workers=2, ps_cores=1)
    cp = ReplayPaths(sim).step(1, 0)
    assert [(s.node, s.duration_us) for s in cp.segments] == [
        ("worker:0/update", 10.0), ("worker:1/update", 10.0)]
    assert sim.step_ends[1][0] == 20.0


def test_every_path_covers_its_step_on_shared_links():
    # four workers sharing the links, WIN chunks: each step's path sums to its duration
    t = StepTemplate(step=0)
    s = t.add(DELAY, 3.0, "start")
    pulls = [t.add(DOWN, 400.0 + 100 * j, f"pull{j}", [s], prio=j) for j in range(3)]
    c = t.add(WORKER, 20.0, "compute", pulls)
    t.add(PS, 5.0, "apply", [t.add(UP, 300.0, "push", [c])])
    sim = replay(t, workers=4, win_bytes=128.0, seed=3)
    paths = ReplayPaths(sim)
    for w in range(4):
        for k in range(3):
            cp = paths.step(w, k)
            assert sum(cp.by_kind_us.values()) == pytest.approx(cp.span_us, rel=1e-9)
            assert cp.total_us == pytest.approx(cp.span_us, rel=1e-9)
    with pytest.raises(ReplayError, match="ended 3 steps, not step 5"):
        paths.step(0, 5)
    with pytest.raises(ReplayError, match="recorded replay"):
        ReplayPaths(Simulator([t], SimConfig(workers=1, ps=1, rate_bytes_per_us=1.0)))
