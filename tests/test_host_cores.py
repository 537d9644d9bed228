"""Workers and PSes on one host's cores (``--host-cores``, replay/hostcores.py): processor
sharing against closed forms, the chunk's cores from the trace, and the option's errors."""

from __future__ import annotations

import pytest
from conftest import SAMPLE, gradwire
from test_sync_ps import step_template

from gradwire.errors import PredictError
from gradwire.replay.engine import SimConfig, Simulator
from gradwire.replay.hostcores import HostShare, host_share, traced_chunk_cores
from gradwire.replay.mechanisms import RING, SYNC_PS
from gradwire.replay.template import GAP, PS, WORKER, StepTemplate


def compute_only(us: float) -> StepTemplate:
    t = StepTemplate(step=0)
    t.add(WORKER, us, "compute")
    return t


def step_ends(templates, workers, host, steps=2, mechanism="async-ps", rate=1.0):
    sim = Simulator(templates, SimConfig(workers=workers, ps=1, rate_bytes_per_us=rate,
                                         host=host, mechanism=mechanism))
    sim.run(steps)
    return sim.step_ends


@pytest.mark.parametrize(("cores", "chunk", "workers", "step_us"), [
    (2.0, 1.0, 1, 1000.0),  # one chunk of one core on two: traced speed
    (2.0, 1.0, 2, 1000.0),  # two on two
    (2.0, 1.0, 4, 2000.0),  # four chunks on two cores: each at half speed
    (1.0, 1.0, 3, 3000.0),
    (2.0, 2.0, 2, 2000.0),  # chunks of two cores each: one at a time's worth
    (3.0, 1.0, 4, 4000.0 / 3.0),
])
def test_compute_shares_the_hosts_cores(cores, chunk, workers, step_us):
    ends = step_ends([compute_only(1000.0)], workers, HostShare(cores, chunk))
    for lane in ends:
        assert lane == pytest.approx([step_us, 2 * step_us])


def test_without_a_host_every_worker_keeps_its_traced_speed():
    assert step_ends([compute_only(1000.0)], 4, None) == [[1000.0, 2000.0]] * 4


def test_a_ps_update_shares_the_host_with_the_workers_compute():
    # one worker whose 1 ms of compute and 1 ms update on the PS run at once: on one core
    # both run at half speed and the step ends at 2 ms (each its own machine: 1 ms)
    t = StepTemplate(step=0)
    t.add(WORKER, 1000.0, "compute")
    t.add(PS, 1000.0, "apply")
    assert step_ends([t], 1, None, steps=1) == [[1000.0]]
    assert step_ends([t], 1, HostShare(1.0, 1.0), steps=1) == [[pytest.approx(2000.0)]]
    assert step_ends([t], 1, HostShare(2.0, 1.0), steps=1) == [[1000.0]]


@pytest.mark.parametrize(("mechanism", "workers"),
                         [(SYNC_PS, 2), (SYNC_PS, 3), (RING, 2), (RING, 3)])
def test_a_lockstep_round_on_one_core_computes_every_workers_share_in_turn(mechanism, workers):
    # the closed forms of test_sync_ps (C + 2 W G / B + 2 A + E; A = 0 here) and test_ring
    # (C + 2 (W - 1) G / (W B) + A + E): the W workers' compute C, the ring's update A and
    # the client gaps E (the client's own work on the worker) all run at once on one core,
    # so each lasts W times as long
    g, c, e, b = 6000.0, 700.0, 25.0, 12.5
    a = 40.0 if mechanism == RING else 0.0
    wire = (2 * workers * g / b if mechanism == SYNC_PS
            else 2 * (workers - 1) * g / (workers * b))
    step = workers * (c + a + e) + wire
    got = step_ends([step_template(g, c, g, a, e)], workers, HostShare(1.0, 1.0), steps=3,
                    mechanism=mechanism, rate=b)
    for lane in got:
        assert lane == pytest.approx([step * (n + 1) for n in range(3)], rel=1e-9)


def test_the_chunks_cores_come_from_the_traced_ops_concurrency():
    t = StepTemplate(step=0)
    t.add(WORKER, 100.0, "a..", members=(("a", 100.0), ("b", 50.0)))  # 1.5 cores
    t.add(WORKER, 300.0, "c..", members=(("c", 150.0),))  # gaps: 0.5
    t.add(WORKER, 500.0, GAP)  # the client's gap: no ops, left out
    assert traced_chunk_cores([t]) == pytest.approx(300.0 / 400.0)
    assert host_share("4", [t], {}).chunk_cores == 1.0  # at least a core
    wide = StepTemplate(step=0)
    wide.add(WORKER, 100.0, "a..", members=(("a", 100.0), ("b", 100.0), ("c", 100.0)))
    assert host_share("2", [wide], {}) == HostShare(2.0, 2.0)  # at most the host's
    assert host_share("8", [wide], {}) == HostShare(8.0, 3.0)
    assert host_share("auto", [wide], {"cpu_count": 2}) == HostShare(2.0, 2.0)
    assert host_share("off", [wide], {"cpu_count": 2}) is None


def test_auto_needs_a_lab_profile():
    with pytest.raises(PredictError, match="--host-cores auto needs a profile recorded by"):
        host_share("auto", [compute_only(1.0)], {})


@pytest.mark.parametrize("bad", ["0", "-2", "nan", "inf", "many"])
def test_a_bad_host_cores_is_a_one_line_error(bad):
    r = gradwire("predict", "--sample", "--workers", "2", "--host-cores", bad)
    assert r.returncode == 2
    assert "--host-cores" in r.stderr and "Traceback" not in r.stderr


def test_the_sample_predicts_on_a_shared_host_slower():
    # with the window ratio: counting every connection (the default), the sample's four
    # workers are link-bound, and slower compute spreads them on the link as much as it
    # costs (122.2 against 121.8 ex/s), so the host's share is checked where it shows
    pinned = ("--workers", "4", "--format", "csv", "--link-windows", "ratio")
    base = gradwire("predict", "--sample", *pinned)
    shared = gradwire("predict", "--sample", *pinned, "--host-cores", "1")
    assert base.returncode == 0 and shared.returncode == 0, shared.stderr
    rate = [float(r.split(",")[7]) for r in (base.stdout.splitlines()[1],
                                             shared.stdout.splitlines()[1])]
    assert rate[1] < rate[0]
    assert "note: every worker's compute and every PS's updates share one host of 1 cores" \
        in shared.stderr
    assert SAMPLE.is_dir()


def test_with_ps_cores_only_the_workers_compute_shares_the_host():
    # one worker: 1 ms of compute beside a 1 ms update; with --ps-cores the update runs on the
    # PS's own core, so one host core does not slow either
    t = StepTemplate(step=0)
    t.add(WORKER, 1000.0, "compute")
    t.add(PS, 1000.0, "apply")
    sim = Simulator([t], SimConfig(workers=1, ps=1, rate_bytes_per_us=1.0, ps_cores=1,
                                   host=HostShare(1.0, 1.0)))
    sim.run(1)
    assert sim.step_ends == [[1000.0]]
