"""Analytical baselines (Lin et al. MVA, Cynthia): properties, hand calculations, bad inputs."""

from __future__ import annotations

import doctest
import itertools
import math

import pytest

from gradwire.errors import GradwireError
from gradwire.replay import baselines
from gradwire.replay.baselines import (
    ASYNC_BASELINES,
    BASELINES,
    SYNC_BASELINES,
    PhaseTimes,
    baseline,
    g_load,
)

PS_BASELINES = ASYNC_BASELINES + SYNC_BASELINES  # ring-ab has no PS and no W = 1 transfer

MVA = ("mva-exact", "mva-approx", "mva-hybrid")
# Lin et al.'s 8 MB profile (mascots18 III-B): S^W = 29 ms, S^S = 18 ms, S^D = S^U = 72 ms.
LIN = PhaseTimes(downlink_s=0.072, worker_s=0.029, uplink_s=0.072, server_s=0.018, batch_size=50)
SHAPES = [
    LIN,
    PhaseTimes(downlink_s=1.0, worker_s=2.0, uplink_s=1.0, server_s=1.0, batch_size=8),
    PhaseTimes(downlink_s=0.3, worker_s=5.0, uplink_s=0.1, server_s=0.7, batch_size=32),
    PhaseTimes(downlink_s=0.0, worker_s=0.2, uplink_s=2.0, server_s=0.05, batch_size=1),
]


def phases(d: float, w: float, u: float, s: float, k: int = 16) -> PhaseTimes:
    return PhaseTimes(downlink_s=d, worker_s=w, uplink_s=u, server_s=s, batch_size=k)


def steps(model: str, p: PhaseTimes, workers: int, **kw) -> float:
    return baseline(model, p, workers, **kw).steps_per_s


def queue_bound(p: PhaseTimes) -> float:
    """Capacity of the busiest shared station, steps/s."""
    return 1.0 / max(p.downlink_s, p.uplink_s, p.server_s)


def product_form_throughput(p: PhaseTimes, n: int) -> float:
    """Exact throughput G(n-1)/G(n) of the closed product-form network, by enumerating states.

    Independent of MVA: P(n_D, n_U, n_S, n_W) ~ S_D^n_D S_U^n_U S_S^n_S Z^n_W / n_W!
    (three single-server queueing stations, one delay station with Z = S^W).
    """

    def g(total: int) -> float:
        acc = 0.0
        for nd, nu, ns in itertools.product(range(total + 1), repeat=3):
            nw = total - nd - nu - ns
            if nw >= 0:
                acc += (
                    p.downlink_s**nd
                    * p.uplink_s**nu
                    * p.server_s**ns
                    * p.worker_s**nw
                    / math.factorial(nw)
                )
        return acc

    return g(n - 1) / g(n)


@pytest.mark.parametrize("model", PS_BASELINES)
@pytest.mark.parametrize("p", SHAPES)
def test_one_worker_reproduces_the_profiled_step(model, p):
    step = p.downlink_s + p.worker_s + p.uplink_s + p.server_s
    r = baseline(model, p, 1)
    assert (r.model, r.workers, r.ps) == (model, 1, 1)
    assert r.steps_per_s == pytest.approx(1 / step)
    assert r.examples_per_s == pytest.approx(p.batch_size / step)


def test_exact_mva_two_workers_by_hand():
    # S^D = S^U = S^S = 1 s, S^W = 2 s.  n = 1: R_D = R_U = R_S = 1, cycle 1+1+1+2 = 5,
    # X(1) = 1/5, N_l(1) = 1/5 each.  n = 2: R_l = 1 * (1 + 1/5) = 1.2 for D, U, S,
    # cycle 3*1.2 + 2 = 5.6, X(2) = 2/5.6 = 5/14 steps/s.
    p = phases(1.0, 2.0, 1.0, 1.0, k=10)
    r = baseline("mva-exact", p, 2)
    assert r.steps_per_s == pytest.approx(5 / 14)
    assert r.examples_per_s == pytest.approx(50 / 14)
    assert (r.bottleneck, r.utilisation) == ("downlink", pytest.approx(5 / 14))


@pytest.mark.parametrize("p", SHAPES[1:] + [phases(0.2, 0.5, 0.3, 0.1)])
def test_exact_mva_equals_product_form_solution(p):
    for n in range(1, 7):
        assert steps("mva-exact", p, n) == pytest.approx(product_form_throughput(p, n), rel=1e-9)


@pytest.mark.parametrize("p", SHAPES)
def test_exact_mva_non_decreasing_and_within_asymptotic_bounds(p):
    step = p.downlink_s + p.worker_s + p.uplink_s + p.server_s
    xs = [steps("mva-exact", p, w) for w in range(1, 65)]
    assert all(b >= a * (1 - 1e-12) for a, b in itertools.pairwise(xs))
    for w, x in enumerate(xs, start=1):
        assert x <= min(w / step, queue_bound(p)) * (1 + 1e-12)


@pytest.mark.parametrize("model", MVA)
@pytest.mark.parametrize("p", SHAPES)
def test_many_workers_saturate_the_busiest_station(model, p):
    r = baseline(model, p, 500)
    assert r.steps_per_s == pytest.approx(queue_bound(p), rel=0.01)
    busiest = max(
        ("downlink", "uplink", "ps"),
        key=lambda n: {"downlink": p.downlink_s, "uplink": p.uplink_s, "ps": p.server_s}[n],
    )
    assert r.bottleneck == busiest
    assert 0.99 <= r.utilisation <= 1.0


def test_approx_mva_two_workers_by_hand():
    # Same network as the exact case; Eq. (2) on D and U at n = 2 with N(1) = rho(1) = 1/5:
    # R_D = R_U = 1 + 1 * (1/5 - 1/10) = 1.1, R_S = 1.2 (Eq. (1)), cycle 1.1+1.1+1.2+2 = 5.4,
    # X(2) = 2/5.4 = 10/27 steps/s: above the exact 5/14 (less queueing behind deterministic
    # service). Link utilisation 1/5 < 0.8, so g = 0 and the hybrid is the same.
    p = phases(1.0, 2.0, 1.0, 1.0)
    assert steps("mva-approx", p, 2) == pytest.approx(10 / 27)
    assert steps("mva-hybrid", p, 2) == pytest.approx(10 / 27)
    assert steps("mva-approx", p, 2) > steps("mva-exact", p, 2)


def test_approx_mva_overshoot_of_eq2_is_kept():
    # One deterministic 1 s link, nothing else. n = 1: X = 1, N = rho = 1.
    # n = 2: R = 1 + 1 * (1 - 1/2) = 1.5, X = 2/1.5 = 4/3 > capacity 1 (the paper's known
    # approximation error, not clamped). Exact MVA gives 1.
    p = phases(1.0, 0.0, 0.0, 0.0)
    assert steps("mva-approx", p, 2) == pytest.approx(4 / 3)
    assert steps("mva-exact", p, 2) == pytest.approx(1.0)
    assert baseline("mva-approx", p, 2).utilisation == 1.0  # reported utilisation is capped


def test_mva_variants_agree_when_links_take_no_time():
    # Eq. (2) and (3) differ from Eq. (1) only on D and U; with S^D = S^U = 0 all coincide.
    p = phases(0.0, 0.4, 0.0, 0.1)
    for w in range(1, 30):
        exact = steps("mva-exact", p, w)
        assert steps("mva-approx", p, w) == pytest.approx(exact, rel=1e-12)
        assert steps("mva-hybrid", p, w) == pytest.approx(exact, rel=1e-12)


def test_hybrid_is_fcfs_under_light_load():
    # Long worker compute: link utilisation stays below 0.8, so g = 0 and Eq. (3) = Eq. (2).
    p = phases(0.1, 10.0, 0.2, 0.05)
    for w in range(1, 8):
        assert steps("mva-approx", p, w) * max(p.downlink_s, p.uplink_s) < 0.8  # links light
        assert steps("mva-hybrid", p, w) == pytest.approx(steps("mva-approx", p, w), rel=1e-12)


def test_hybrid_by_hand_on_a_busy_downlink():
    # S^D = 9, S^U = 0.5, S^S = 0.25, S^W = 0.25 s. n = 1: cycle 10, X = 0.1,
    # rho_D(1) = 0.9 -> g = (0.9-0.8)/0.2 = 0.5; rho_U(1) = 0.05 -> g = 0.
    # n = 2: D: PS 9*(1+0.9) = 17.1, FCFS 9 + 9*(0.9-0.45) = 13.05, hybrid 15.075;
    # U: FCFS 0.5 + 0.5*(0.05-0.025) = 0.5125; S: 0.25*(1+0.025) = 0.25625; W: 0.25.
    # cycle 16.09375, X(2) = 2/16.09375.
    p = phases(9.0, 0.25, 0.5, 0.25)
    assert steps("mva-hybrid", p, 2) == pytest.approx(2 / 16.09375)
    assert steps("mva-exact", p, 2) < steps("mva-hybrid", p, 2) < steps("mva-approx", p, 2)


def test_g_load_is_eq4():
    assert [g_load(r) for r in (0.0, 0.5, 0.8, 0.9, 1.0, 1.2)] == pytest.approx(
        [0.0, 0.0, 0.0, 0.5, 1.0, 1.0]
    )


def test_cynthia_by_hand():
    # S^D = 1, S^U = 3, S^W = 5, S^S = 1 s, K = 32. T_P = 5+1 = 6, T_C = (1+3)/2 = 2,
    # U_1 = 4/(6+4) = 0.4. W = 2: W U_1 = 0.8 -> 2*32/(6*1 + 4) = 6.4 examples/s.
    # W = 5: W U_1 = 2 -> 5*32/(6*2 + 4) = 10 examples/s = 10/32 steps/s.
    p = phases(1.0, 5.0, 3.0, 1.0, k=32)
    assert baseline("cynthia", p, 2).examples_per_s == pytest.approx(6.4)
    r = baseline("cynthia", p, 5)
    assert r.examples_per_s == pytest.approx(10.0)
    assert (r.bottleneck, r.utilisation) == ("uplink", pytest.approx(3 * 10 / 32))


@pytest.mark.parametrize("model", BASELINES)
@pytest.mark.parametrize("scale", [0.5, 2.0, 10.0])
def test_bandwidth_scale_shortens_network_phases(model, scale):
    p = phases(0.3, 0.2, 0.4, 0.05)
    q = phases(0.3 / scale, 0.2, 0.4 / scale, 0.05)
    for w in (1, 3, 9):
        assert steps(model, p, w, bandwidth_scale=scale) == pytest.approx(steps(model, q, w))


@pytest.mark.parametrize("model", PS_BASELINES)
def test_parameter_servers_split_network_and_server_work(model):
    p = phases(0.3, 0.2, 0.4, 0.06)
    q = phases(0.1, 0.2, 0.4 / 3, 0.02)
    for w in (1, 4, 12):
        r = baseline(model, p, w, ps=3)
        assert r.ps == 3
        assert r.steps_per_s == pytest.approx(steps(model, q, w))
    assert steps(model, p, 12, ps=3) > steps(model, p, 12)


def test_bottleneck_is_the_worker_when_compute_dominates():
    p = phases(0.1, 3.0, 0.1, 0.1)
    r = baseline("mva-exact", p, 1)
    assert (r.bottleneck, r.utilisation) == ("worker", pytest.approx(3.0 / 3.3))
    assert baseline("mva-exact", phases(0.1, 0.1, 0.1, 2.0), 50).bottleneck == "ps"


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: baseline("mva", LIN, 2), "unknown baseline model 'mva'"),
        (lambda: baseline("mva-exact", LIN, 0), "workers must be an integer >= 1, got 0"),
        (lambda: baseline("mva-exact", LIN, -3), "workers must be an integer >= 1, got -3"),
        (lambda: baseline("mva-exact", LIN, 2.5), "workers must be an integer >= 1, got 2.5"),
        (lambda: baseline("mva-exact", LIN, True), "workers must be an integer"),
        (lambda: baseline("cynthia", LIN, 2, ps=0), "ps must be an integer >= 1, got 0"),
        (lambda: baseline("cynthia", LIN, 2, bandwidth_scale=0), "bandwidth_scale must be"),
        (lambda: baseline("cynthia", LIN, 2, bandwidth_scale=-1.0), "bandwidth_scale must be"),
        (lambda: baseline("cynthia", LIN, 2, bandwidth_scale=math.inf), "bandwidth_scale"),
        (lambda: phases(-0.1, 1, 1, 1), "downlink_s must be a finite time >= 0 s, got -0.1"),
        (lambda: phases(0.1, math.nan, 1, 1), "worker_s must be a finite time >= 0 s, got nan"),
        (lambda: phases(0, 0, 0, 0), "phase times are all zero"),
        (lambda: phases(1, 1, 1, 1, k=0), "batch_size must be an integer >= 1, got 0"),
        (lambda: phases(1, 1, 1, 1, k=2.5), "batch_size must be an integer >= 1, got 2.5"),
    ],
)
def test_invalid_inputs_raise_gradwire_error(call, needle):
    with pytest.raises(GradwireError) as err:
        call()
    assert needle in str(err.value)


def test_docstring_examples_run():
    assert doctest.testmod(baselines).failed == 0


def test_the_hooks_storing_time_is_out_of_the_baselines_server_phase():
    """The sample's 7 captured steps in time order are the hook's steps 0-6; steps 3-5 were
    traced and stored for 7.7, 7.2 and 6.9 ms between their last push and the next request,
    which `gradwire phases` counts as server time (12.9-14.7 ms against 3.7-4.8 untraced). The
    profile's phases, which the baselines use, leave it out, as the sim's templates do."""
    import json

    from conftest import SAMPLE

    from gradwire.collector.h2capture import capture_streams
    from gradwire.collector.phases import step_phases
    from gradwire.replay.profile import load_profile

    rows = step_phases(capture_streams(SAMPLE / "worker0" / "capture.pcapng"))
    stored = json.loads((SAMPLE / "worker0/trace/session.json").read_text())["record_seconds"]
    server = [r.server_s for r in rows]
    assert len(server) == 7 and server[6] is None
    assert min(server[3:6]) > 2.5 * max(server[1:3])
    expected = server[1:3] + [s - st for s, st in zip(server[3:6], stored, strict=True)]
    prof = load_profile([SAMPLE])
    assert prof.phases["server"] == pytest.approx(sum(expected) / 5, rel=1e-9)
    assert prof.phases["server"] < 0.6 * sum(server[1:6]) / 5


@pytest.mark.parametrize("model", PS_BASELINES)
def test_the_busiest_ps_share_replaces_the_even_split(model):
    p = phases(0.4, 0.2, 0.4, 0.1)
    # an even split is a share of 1/M; one PS holding everything is one PS
    assert steps(model, p, 3, ps=2, share=(0.5, 0.5)) == steps(model, p, 3, ps=2)
    assert steps(model, p, 3, ps=2, share=(1.0, 1.0)) == steps(model, p, 3, ps=1)
    # a PS holding two thirds of the bytes makes the step slower than an even split
    assert steps(model, p, 1, ps=2, share=(2 / 3, 2 / 3)) < steps(model, p, 1, ps=2)
    assert steps("mva-exact", p, 1, ps=2, share=(2 / 3, 2 / 3)) == pytest.approx(
        1 / (0.4 * 2 / 3 + 0.2 + 0.4 * 2 / 3 + 0.1 * 2 / 3))


def test_synchronous_closed_forms_by_hand():
    # S^D = S^U = 0.3 s, S^W = 0.2 s, S^S = 0.1 s; W = 4 workers make a round:
    # sync-sum: 4 (0.3 + 0.3) + 0.2 + 0.1 = 2.7 s; sync-max: max(4 x 0.3, 0.9) = 1.2 s;
    # ring-ab: 0.2 + 0.1 + 2 x 3/4 x 0.3 = 0.75 s, and 0.3 s for one worker (no ring);
    # ring-max: max(0.2 + 0.1, 2 x 3/4 x 0.3) = 0.45 s, 0.3 s for one worker
    p = phases(0.3, 0.2, 0.3, 0.1)
    assert steps("sync-sum", p, 4) == pytest.approx(4 / 2.7)
    assert steps("sync-max", p, 4) == pytest.approx(4 / 1.2)
    assert steps("ring-ab", p, 4) == pytest.approx(4 / 0.75)
    assert steps("ring-ab", p, 1) == pytest.approx(1 / 0.3)
    assert steps("ring-max", p, 4) == pytest.approx(4 / 0.45)
    assert steps("ring-max", p, 1) == pytest.approx(1 / 0.3)
    # a ring's busiest resource is each worker's own, never a PS: ring-ab's step of 0.75 s
    # spends 0.3 computing (0.4) and 0.45 on the link out (0.6); ring-max's 0.45 s fills the
    # link; one worker only computes
    r = baseline("ring-ab", p, 4)
    assert (r.bottleneck, r.utilisation) == ("worker NIC out", pytest.approx(0.6))
    r = baseline("ring-max", p, 4)
    assert (r.bottleneck, r.utilisation) == ("worker NIC out", pytest.approx(1.0))
    assert baseline("ring-ab", p, 1).bottleneck == "worker"


def test_a_step_whose_pushes_began_before_its_last_pull_has_no_worker_phase(monkeypatch):
    """The deep MLP at 400 Mbit/s: a step's first push left 4 ms before its last pull ended.
    The baselines' worker phase counts it as 0 (their service times refuse a negative one),
    and the steps with a gap keep theirs: the mean of 0 and 0.010 s after the warm-up step."""
    from gradwire.collector import phases
    from gradwire.replay.profile import _phases

    def row(step: int, worker_s: float) -> phases.StepPhases:
        return phases.StepPhases("w", step, float(step), 0.1, worker_s, 0.1, 0.01, 10, 10)

    monkeypatch.setattr(phases, "step_phases",
                        lambda streams: [row(0, 0.5), row(1, -0.004), row(2, 0.010)])
    got = _phases([])
    assert got["worker"] == pytest.approx(0.005)
    assert got["downlink"] == pytest.approx(0.1) and got["server"] == pytest.approx(0.01)


def test_the_pushes_take_at_least_their_bytes_on_the_wire_the_rest_was_not_the_ps():
    """The worker capture sees a push end as its last byte leaves the worker; past the
    capture point it waits in the bottleneck's queue, which MASCOTS'18's phases count as
    server time. On the shipped sample (495 kB pushed at 20 Mbit/s, 207 ms on the wire) the
    capture gave 93 ms of uplink and 120 ms of server: the baselines take 207 ms and 6 ms,
    the sum kept; a push the capture saw longer than the wire keeps its time."""
    from gradwire.bundle import SAMPLE_BUNDLE
    from gradwire.replay.grid import wire_bound_uplink
    from gradwire.replay.predict import GOODPUT
    from gradwire.replay.profile import load_profile

    prof = load_profile([SAMPLE_BUNDLE])
    wire = 495_109 * 8 / (20e6 * GOODPUT)
    up, server = wire_bound_uplink(prof, 0.093, 0.120, 20e6)
    assert up == pytest.approx(wire) and server == pytest.approx(0.213 - wire)
    assert wire_bound_uplink(prof, 0.300, 0.010, 20e6) == (0.300, 0.010)
    assert wire_bound_uplink(prof, 0.100, 0.050, 20e6) == pytest.approx((0.150, 0.0))


def test_the_baselines_name_their_bottleneck_as_the_sim_does():
    """A PS baseline's busiest station is named as the sim's rows name a resource, with the PS
    it models (the one with the most bytes): ``uplink ps:1``, not ``uplink``; a ring's are the
    worker's own."""
    from gradwire.bundle import SAMPLE_BUNDLE
    from gradwire.replay.grid import baseline_rows, ps_loads
    from gradwire.replay.profile import load_profile

    prof = load_profile([SAMPLE_BUNDLE])
    rows = baseline_rows(prof, ["mva-exact", "sync-sum", "ring-ab"], [1, 4], [1, 2], [20e6])
    pulled, pushed = (max(range(2), key=load.__getitem__) for load in ps_loads(prof, 2))
    assert pushed == 1  # the sample's two-PS placement puts the most pushed bytes on PS 1
    for r in rows:
        if r.model == "ring-ab":
            assert r.bottleneck in ("worker", "worker NIC out")
        else:
            busiest = pushed if r.ps == 2 else 0
            assert r.bottleneck in (f"downlink ps:{pulled if r.ps == 2 else 0}",
                                    f"uplink ps:{busiest}", f"compute ps:{busiest}", "worker")
    assert {r.bottleneck for r in rows if r.model == "mva-exact" and r.ps == 2} == {"uplink ps:1"}


def test_a_rate_read_off_the_capture_is_said_so():
    """Without the lab's record of the link's rate (a user's own collect), the sweep's rate
    is the pulls' goodput in the capture, which a shaper's burst puts far above the link (20
    Gbit/s on a 1 Gbit/s lab link): a note says where it comes from and what to give."""
    import dataclasses

    from gradwire.bundle import SAMPLE_BUNDLE
    from gradwire.replay.notes import measured_rate_note
    from gradwire.replay.profile import load_profile

    prof = load_profile([SAMPLE_BUNDLE])
    assert prof.profile_bandwidth_bps == 20e6  # the lab's record
    assert measured_rate_note(prof, None) is None
    read = dataclasses.replace(prof, profile_bandwidth_bps=None)
    note = measured_rate_note(read, None)
    assert note is not None and "is read off its capture" in note and "--profile-bandwidth" in note
    assert measured_rate_note(read, [1e9]) is None  # --bandwidth given: the sweep's own rate
    assert "memory-copy speed" in measured_rate_note(
        dataclasses.replace(read, loopback=True), None)
