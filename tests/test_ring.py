"""The peer mechanisms (replay/mechanisms.py): ring all-reduce, ring all-reduce with
multicast and butterfly mixing, each replay against its closed form; the transforms; the
timeline."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import assert_one_line_error, gradwire
from test_sync_ps import step_template

from gradwire.collector.ringhop import hop_timing
from gradwire.errors import ReplayError
from gradwire.opdb import OpDatabase, machine_of
from gradwire.replay.engine import SimConfig, Simulator
from gradwire.replay.grid import bucket_of, bucket_rows, replays_bucket, sim_jobs
from gradwire.replay.mechanisms import (
    BUTTERFLY,
    OVERLAP,
    RING,
    RING_MULTICAST,
    WHOLE,
    butterfly,
    butterfly_by_gradient,
    check_mechanism,
    hop_line_at,
    ring_allreduce,
)
from gradwire.replay.options import PredictOptions
from gradwire.replay.template import BARRIER, DELAY, NIC_IN, NIC_OUT, UP, WORKER, StepTemplate


@pytest.mark.parametrize("workers", [1, 2, 3, 8, 32])
def test_a_ring_step_is_compute_then_2_w_minus_1_chunks_then_the_update(workers):
    # G bytes all-reduced: 2 (W - 1) ring steps of G / W bytes, each on every worker's own link
    # at B at once; then the update A and the gap E: a step lasts
    # C + 2 (W - 1) G / (W B) + A + E for every worker (the PS template's pulls are gone)
    g, c, a, e, b = 6000.0, 700.0, 40.0, 25.0, 12.5
    step = c + 2 * (workers - 1) * g / (workers * b) + a + e
    sim = Simulator([step_template(g, c, g, a, e)],
                    SimConfig(workers=workers, ps=1, rate_bytes_per_us=b, mechanism=RING))
    sim.run(5)
    for ends in sim.step_ends:
        assert ends == pytest.approx([step * (n + 1) for n in range(5)], rel=1e-12)


@pytest.mark.parametrize("workers", [1, 2, 3, 8])
def test_each_ring_step_adds_the_hops_software_time(workers):
    # with an op cost database's hop line (h0 us per hop + h1 us per byte), each of the
    # 2 (W - 1) ring steps also lasts h0 + h1 G / W before the next can start:
    # C + 2 (W - 1) (G / (W B) + h0 + h1 G / W) + A + E
    g, c, a, e, b, h0, h1 = 6000.0, 700.0, 40.0, 25.0, 12.5, 30.0, 0.02
    step = c + 2 * (workers - 1) * (g / (workers * b) + h0 + h1 * g / workers) + a + e
    t = replace(step_template(g, c, g, a, e), relay_us=(h0, h1))
    sim = Simulator([t], SimConfig(workers=workers, ps=1, rate_bytes_per_us=b, mechanism=RING))
    sim.run(4)
    for ends in sim.step_ends:
        assert ends == pytest.approx([step * (n + 1) for n in range(4)], rel=1e-12)
    s = ring_allreduce(t, workers)
    relays = [x for n, k, x in zip(s.name, s.kind, s.amount, strict=True)
              if k == DELAY and n.endswith("copies and reduction")]
    assert relays == pytest.approx([h0 + h1 * g / workers] * 2 * (workers - 1))
    plain = ring_allreduce(step_template(g, c, g, a, e), workers)  # no database: no delays
    assert len(s.kind) == len(plain.kind) + len(relays)


@pytest.mark.parametrize("rate", [5.0, 12.5, 20.0, 50.0, 1e6])
def test_a_hop_timed_across_links_is_taken_at_the_replays_own_rate(rate):
    # hop lines timed across links of 5 and 20 bytes/us, and on loopback (no time per byte):
    # at rate r the line is linear in 1 / r between the two that bracket it, the slowest's
    # below the slowest; a ring step then lasts as with that line given outright
    g, c, a, e = 6000.0, 700.0, 40.0, 25.0
    links = ((5.0, 10.0, 0.001), (20.0, 40.0, 0.004))
    loopback = (60.0, 0.008)
    x, x_slow, x_fast = 1 / rate, 1 / 5.0, 1 / 20.0
    if x >= x_slow:
        want = (10.0, 0.001)
    elif x >= x_fast:
        f = (x - x_fast) / (x_slow - x_fast)
        want = (40.0 + f * (10.0 - 40.0), 0.004 + f * (0.001 - 0.004))
    else:
        f = x / x_fast
        want = (60.0 + f * (40.0 - 60.0), 0.008 + f * (0.004 - 0.008))
    assert hop_line_at(links, loopback, rate) == pytest.approx(want, rel=1e-12)
    t = replace(step_template(g, c, g, a, e), relay_us=loopback, relay_links=links)
    given = replace(step_template(g, c, g, a, e), relay_us=want)
    ends = []
    for tpl in (t, given):
        sim = Simulator([tpl], SimConfig(workers=3, ps=1, rate_bytes_per_us=rate,
                                         mechanism=RING))
        sim.run(3)
        ends.append(sim.step_ends)
    for mine, theirs in zip(*ends, strict=True):
        assert mine == pytest.approx(theirs, rel=1e-12)


@pytest.mark.parametrize("workers", [2, 3, 8])
def test_each_ring_hop_after_an_idle_spell_sends_the_shapers_bucket_at_once(workers):
    # a worker NIC shaped with a token bucket of K bytes (the profile's PS captures measure
    # it): each hop's send follows an idle spell (the compute, or the previous hop's software
    # time, h0 + h1 G / W, long enough to refill K at B), so K of its G / W bytes go at once:
    # C + 2 (W - 1) ((G / W - K) / B + h0 + h1 G / W) + A + E
    g, c, a, e, b, h0, h1, k = 6000.0, 700.0, 40.0, 25.0, 12.5, 30.0, 0.02, 400.0
    assert h0 + h1 * g / workers >= k / b  # the bucket refills between hops
    step = c + 2 * (workers - 1) * ((g / workers - k) / b + h0 + h1 * g / workers) + a + e
    t = replace(step_template(g, c, g, a, e), relay_us=(h0, h1))
    sim = Simulator([t], SimConfig(workers=workers, ps=1, rate_bytes_per_us=b, mechanism=RING,
                                   burst_bytes=(k, k)))
    sim.run(4)
    for ends in sim.step_ends:
        assert ends == pytest.approx([step * (n + 1) for n in range(4)], rel=1e-12)


@pytest.mark.parametrize(("given", "link", "ps_rows", "ring_rows"), [
    (None, "fair", False, False),  # the default: plain rates (issue22-ring-bucket-report.md)
    (None, "hostqueue", True, False),  # the PS's own queue has its shaper; the ring's not
    ("auto", "fair", True, True),  # asked for: every link of every row
    ("off", "hostqueue", False, False),
])
def test_link_burst_applies_to_the_ps_links_and_the_workers_own(given, link, ps_rows,
                                                                  ring_rows):
    opts = PredictOptions(bundles=("profile",), workers=(2,), link=link, link_burst=given,
                          mechanisms=("sync-ps", RING))
    bucket = (150e3, 150e3)
    assert replays_bucket(opts, "sync-ps") is ps_rows
    assert replays_bucket(opts, RING) is ring_rows
    assert bucket_of(opts, RING, bucket) == (bucket if ring_rows else (0.0, 0.0))
    assert opts.link_burst == given  # read per mechanism, never rewritten


@pytest.mark.parametrize(("given", "link", "alone", "shared", "ring_rows"), [
    (None, "fair", True, False, False),  # one worker: no other on its links; never the ring's
    (None, "fifo", True, False, False),
    (None, "hostqueue", True, True, False),
    ("off", "fair", False, False, False),  # asked for: none
    ("auto", "fair", True, True, True),
])
def test_the_ps_rows_of_one_worker_replay_the_bucket_by_default(given, link, alone, shared,
                                                                  ring_rows):
    opts = PredictOptions(bundles=("profile",), workers=(1, 2), link=link, link_burst=given,
                          mechanisms=("async-ps", RING))
    bucket = (150e3, 150e3)
    assert replays_bucket(opts, "async-ps", 1) is alone
    assert replays_bucket(opts, "async-ps", 2) is shared
    assert replays_bucket(opts, RING, 1) is ring_rows
    jobs = sim_jobs(opts, [1], [250e6], None, bucket)
    got = {(j.mechanism, j.workers): j.burst_bytes for j in jobs}
    assert got[("async-ps", 1)] == (bucket if alone else (0.0, 0.0))
    assert got[("async-ps", 2)] == (bucket if shared else (0.0, 0.0))
    assert got[(RING, 2)] == (bucket if ring_rows else (0.0, 0.0))
    assert bucket_rows(opts) == {
        "all": [m for m, on in (("async-ps", shared), (RING, ring_rows)) if on],
        "one_worker": ["async-ps"] if alone and not shared else []}


def test_a_butterfly_round_and_a_ring_per_gradient_add_the_hop_too():
    # butterfly: each of log2 W rounds of G bytes adds h0 + h1 G; @overlap: every hop of
    # every gradient (bytes / W) adds its own, in the chain of that gradient's ring
    g, c, a, e, b, h0, h1 = 6000.0, 700.0, 40.0, 25.0, 12.5, 30.0, 0.02
    t = replace(step_template(g, c, g, a, e), relay_us=(h0, h1))
    sim = Simulator([t], SimConfig(workers=4, ps=1, rate_bytes_per_us=b, mechanism=BUTTERFLY))
    sim.run(3)
    assert sim.step_ends[0][0] == pytest.approx(c + 2 * (g / b + h0 + h1 * g) + a + e)
    sim = Simulator([t], SimConfig(workers=2, ps=1, rate_bytes_per_us=b,
                                   mechanism=RING + OVERLAP))
    sim.run(3)
    # one gradient of G after the compute: 2 hops of G / 2, each with its software time
    assert sim.step_ends[0][0] == pytest.approx(c + 2 * (g / 2 / b + h0 + h1 * g / 2) + a + e)


def test_the_ring_time_tends_to_twice_the_gradients_over_the_link():
    # Chang et al.'s VGG-16 at 32 workers, 25 Gbit/s: 6.58 Gbit of gradients, no compute: the
    # ring takes 2 x 31/32 x 6.58 / 25 s = 0.510 s (their Table 8 ring-reduce, 0.683 s,
    # adds 0.19 s of VGG's compute)
    gbit = 6.58e9 / 8  # bytes
    rate = 25e9 / 8 / 1e6  # bytes per us
    sim = Simulator([step_template(gbit, 0.0, gbit, 0.0)],
                    SimConfig(workers=32, ps=1, rate_bytes_per_us=rate, mechanism=RING))
    sim.run(3)
    assert sim.step_ends[0][0] / 1e6 == pytest.approx(2 * 31 / 32 * 6.58 / 25, rel=1e-9)


def test_the_transform_keeps_the_compute_and_rings_the_pushed_bytes():
    t = step_template(100.0, 5.0, 80.0, 7.0, 3.0)
    s = ring_allreduce(t, 4)
    assert [s.amount[i] for i, k in enumerate(s.kind) if k == NIC_OUT] == [20.0] * 6
    assert UP not in s.kind
    assert s.kind.count(BARRIER) == 6 and "pull w" not in s.name
    assert [(s.name[i], s.amount[i]) for i, k in enumerate(s.kind) if k == WORKER] == [
        ("compute", 5.0), ("update (the averaged gradients)", 7.0), ("client gap", 3.0)]
    assert NIC_OUT not in ring_allreduce(t, 1).kind  # one worker: nothing to all-reduce


def test_the_timeline_shows_barrier_waits_and_ring_sends(tmp_path):
    from gradwire.replay.timeline import synthetic_trace

    t = step_template(6000.0, 700.0, 6000.0, 40.0, 25.0)
    sim = Simulator([t], SimConfig(workers=3, ps=1, rate_bytes_per_us=12.5, mechanism=RING,
                                   record=True, start_offsets_us=(0.0, 100.0, 50.0)))
    sim.run(3)
    doc = synthetic_trace(sim, 100e6)
    assert doc["otherData"] | {"producer": ""} == {"producer": "", "workers": 3, "ps": 0,
                                                   "mechanism": RING, "bandwidth_bps": 100e6}
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert {"barrier wait", "worker NIC out"} <= names
    sends = [e for e in doc["traceEvents"] if e.get("cat") == "nic-out"]
    assert len(sends) == 3 * 3 * 4  # workers x steps x 2 (W - 1)
    assert all(e["dur"] == pytest.approx(2000.0 / 12.5, abs=1e-3) for e in sends)
    waits = [e for e in doc["traceEvents"] if e.get("cat") == "barrier"]
    # worker 0 starts first: it waits 100 us at the first barrier for worker 1
    assert max(e["dur"] for e in waits if e["pid"] == 1) == pytest.approx(100.0, abs=1e-3)


@pytest.mark.parametrize("workers", [1, 2, 3, 8, 32])
def test_ring_with_multicast_costs_what_the_ring_does(workers):
    # Chang et al. 8.4: the all-gather by multicast is one step in which each worker sends its
    # chunk once (G / W out) and takes in the others' ((W - 1) G / W in): receiver-bound, as
    # long as the ring's W - 1 all-gather steps. A step lasts C + 2 (W - 1) G / (W B) + A + E
    g, c, a, e, b = 6000.0, 700.0, 40.0, 25.0, 12.5
    step = c + 2 * (workers - 1) * g / (workers * b) + a + e
    sim = Simulator([step_template(g, c, g, a, e)],
                    SimConfig(workers=workers, ps=1, rate_bytes_per_us=b,
                              mechanism=RING_MULTICAST))
    sim.run(4)
    for ends in sim.step_ends:
        assert ends == pytest.approx([step * (n + 1) for n in range(4)], rel=1e-12)
    s = ring_allreduce(step_template(g, c, g, a, e), workers, multicast=True)
    assert s.kind.count(NIC_OUT) == (workers - 1) + (workers > 1)
    assert s.kind.count(NIC_IN) == (workers > 1)


@pytest.mark.parametrize("workers,rounds", [(1, 0), (2, 1), (3, 2), (4, 2), (8, 3), (32, 5)])
def test_a_butterfly_step_is_compute_then_log2_w_whole_exchanges(workers, rounds):
    # Chang et al. 3.3.2: ceil(log2 W) rounds, each worker sending all G bytes to its partner
    # on its own link at B while receiving the partner's: C + ceil(log2 W) G / B + A + E
    g, c, a, e, b = 6000.0, 700.0, 40.0, 25.0, 12.5
    step = c + rounds * g / b + a + e
    sim = Simulator([step_template(g, c, g, a, e)],
                    SimConfig(workers=workers, ps=1, rate_bytes_per_us=b, mechanism=BUTTERFLY))
    sim.run(4)
    for ends in sim.step_ends:
        assert ends == pytest.approx([step * (n + 1) for n in range(4)], rel=1e-12)
    s = butterfly(step_template(g, c, g, a, e), workers)
    assert [s.amount[i] for i, k in enumerate(s.kind) if k == NIC_OUT] == [g] * rounds


def test_butterfly_beats_the_ring_only_where_its_fewer_rounds_outweigh_their_size():
    # the ring moves 2 (W - 1) / W G per worker, butterfly log2(W) G: at W = 2 they tie (G),
    # at W = 4 butterfly moves 2 G against the ring's 1.5 G
    g, b = 6000.0, 12.5
    ends = {}
    for mech in (RING, BUTTERFLY):
        for w in (2, 4):
            sim = Simulator([step_template(g, 0.0, g, 0.0)],
                            SimConfig(workers=w, ps=1, rate_bytes_per_us=b, mechanism=mech))
            sim.run(2)
            ends[mech, w] = sim.step_ends[0][0]
    assert ends[RING, 2] == pytest.approx(ends[BUTTERFLY, 2]) == pytest.approx(g / b)
    assert ends[BUTTERFLY, 4] / ends[RING, 4] == pytest.approx(2.0 / 1.5)


def several_parameters(sizes: list[float], compute_us: float) -> StepTemplate:
    """A step that computes, then pushes one gradient of each of ``sizes`` bytes."""
    t = StepTemplate(step=0)
    start = t.add(DELAY, 0.0, "step start")
    c = t.add(WORKER, compute_us, "compute", [start])
    pushes = [t.add(UP, n, f"push {k}", [c]) for k, n in enumerate(sizes)]
    t.add(WORKER, 0.0, "client gap", [c, *pushes])
    return t


@pytest.mark.parametrize("workers,biggest_owner", [(2, 800.0), (3, 600.0), (4, 600.0)])
def test_a_ring_of_whole_parameters_is_bound_by_the_biggest_owner(workers, biggest_owner):
    # messaging off (ring-allreduce@whole, Chang et al. 8.2.1): push k is owned by worker
    # k mod W and goes whole around the ring; each of the 2 (W - 1) steps lasts the biggest
    # owner's bytes over the link. Pushes 600, 200, 200: W = 2 owns 800 | 200; W = 3 and 4
    # own 600 | 200 | 200 (| 0). With messaging every step carries 1000 / W
    sizes, c, b = [600.0, 200.0, 200.0], 50.0, 10.0
    t = several_parameters(sizes, c)
    for mech, per_step in ((RING + WHOLE, biggest_owner), (RING, sum(sizes) / workers)):
        sim = Simulator([t], SimConfig(workers=workers, ps=1, rate_bytes_per_us=b,
                                       mechanism=mech))
        sim.run(3)
        step = c + 2 * (workers - 1) * per_step / b
        assert sim.step_ends[0] == pytest.approx([step, 2 * step, 3 * step], rel=1e-12)


def two_gradients() -> StepTemplate:
    """Gradient a (400 bytes) ready after compute 1 (100 us), b after compute 2 (100 us
    more), then the client's gap (0 us)."""
    t = StepTemplate(step=0)
    start = t.add(DELAY, 0.0, "step start")
    c1 = t.add(WORKER, 100.0, "compute 1", [start])
    a = t.add(UP, 400.0, "push a", [c1])
    c2 = t.add(WORKER, 100.0, "compute 2", [c1])
    b = t.add(UP, 400.0, "push b", [c2])
    t.add(WORKER, 0.0, "client gap", [c2, a, b])
    return t


def test_a_ring_per_gradient_overlaps_the_rest_of_backpropagation():
    # @overlap: gradient a (400 bytes) is ready after compute 1 (100 us), b after compute 2
    # (100 us more); W = 4 at 10 bytes/us: each ring is 6 steps of 100 bytes, 60 us. a's
    # ring runs during compute 2, b's after it: a step is 100 + 100 + 60 = 260 us, against
    # 200 + 6 x 800 / 4 / 10 = 320 us for one pack after the last gradient
    t = two_gradients()
    for mech, step in ((RING + OVERLAP, 260.0), (RING, 320.0)):
        sim = Simulator([t], SimConfig(workers=4, ps=1, rate_bytes_per_us=10.0, mechanism=mech))
        sim.run(3)
        assert sim.step_ends[0] == pytest.approx([step, 2 * step, 3 * step], rel=1e-12)


def test_a_butterfly_per_gradient_overlaps_the_rest_of_backpropagation():
    # butterfly@overlap (Chang et al. 8.2.2): gradient a (400 bytes) is ready after compute 1
    # (100 us), b after compute 2 (100 us more); W = 4 at 10 bytes/us: each is exchanged in
    # 2 rounds of its whole 400 bytes, 80 us. a's rounds run during compute 2 (80 < 100), b's
    # after it: a step is 100 + 100 + 80 = 280 us, against 200 + 2 x 800 / 10 = 360 us for the
    # whole model after the last gradient; W = 5 rounds up to 3 rounds: a's 120 us end at
    # 220, b's queue behind them, 340 us (and 200 + 3 x 80 = 440 us for the whole model)
    t = two_gradients()
    for workers, mech, step in ((4, BUTTERFLY + OVERLAP, 280.0), (4, BUTTERFLY, 360.0),
                                (5, BUTTERFLY + OVERLAP, 340.0), (5, BUTTERFLY, 440.0),
                                (1, BUTTERFLY + OVERLAP, 200.0)):
        sim = Simulator([t], SimConfig(workers=workers, ps=1, rate_bytes_per_us=10.0,
                                       mechanism=mech))
        sim.run(3)
        assert sim.step_ends[0] == pytest.approx([step, 2 * step, 3 * step], rel=1e-12)
    s = butterfly_by_gradient(t, 8)  # 3 rounds per gradient, each of its whole bytes
    sends = [x for k, x in zip(s.kind, s.amount, strict=True) if k == NIC_OUT]
    assert sends == [400.0] * 6


def test_overlap_applies_to_the_peer_exchanges_only():
    with pytest.raises(ReplayError, match="has no per-gradient form"):
        check_mechanism("sync-ps@overlap")
    check_mechanism(BUTTERFLY + OVERLAP)


def test_predict_takes_the_hop_timed_across_links_with_ring_hop_link(tmp_path):
    # a database with the hop timed on loopback (2 ms + 2 ms per MB) and across a 250 Mbit/s
    # link (nothing beyond the wire): --ring-hop link replays a 200 Mbit/s ring with the
    # link's line (no hop time), which runs faster than the loopback line; without link rows,
    # or without --opdb, --ring-hop link is a one-line error
    db = tmp_path / "hops.sqlite"
    m = machine_of("cpu x", 2, "2.21.0", threads=1)
    with OpDatabase(db, create=True) as d:
        d.add_machine(m)
        d.put([hop_timing(n, [2000 + 0.002 * 4 * n] * 3, m) for n in (250_000, 500_000)])
    base = ["predict", "--sample", "--workers", "3", "--mechanism", "ring-allreduce",
            "--bandwidth", "200Mbit", "--model", "sim", "--opdb", str(db), "--format", "json"]
    assert_one_line_error(gradwire(*base, "--ring-hop", "link"),
                          "has no ring hop timed across a link")
    assert_one_line_error(gradwire(*base[:-4], "--ring-hop", "link"), "--ring-hop link reads")
    with OpDatabase(db) as d:
        d.put([hop_timing(n, [0.0] * 3, m, 250e6) for n in (250_000, 500_000)])
    rates = {}
    for hop in ("loopback", "link"):
        proc = gradwire(*base, "--ring-hop", hop, "-v")
        assert proc.returncode == 0, proc.stderr
        rates[hop] = json.loads(proc.stdout)["rows"][0]["examples_per_s"]
        assert ("across a 250 Mbit/s link: 0.00 ms + 0.00 ms per MB" in proc.stderr) == \
            (hop == "link"), proc.stderr
    assert rates["link"] > rates["loopback"]
