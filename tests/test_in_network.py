"""Multicast and in-network aggregation (replay/mechanisms.py, ``in_network``): mechanisms the
lab cannot run (they need a programmable switch), checked against closed forms and against
Chang et al.'s 3-op example (section 8.1.1, Figure 2)."""

from __future__ import annotations

import pytest
from test_sync_ps import step_template

from gradwire.errors import ReplayError
from gradwire.replay.engine import SimConfig, Simulator
from gradwire.replay.mechanisms import (
    NO_BARRIER,
    RING,
    SYNC_INA,
    SYNC_MULTICAST,
    SYNC_MULTICAST_INA,
    SYNC_PS,
    WHOLE,
    canonical_mechanism,
    check_mechanism,
)
from gradwire.replay.template import DELAY, UP, WORKER, StepTemplate

S = 1e6  # us per second


def three_op_backprop(op_s: float = 3.0) -> StepTemplate:
    """Chang et al.'s toy model: backpropagation of 3 ops, each computed in ``op_s`` s and
    then sent (a gradient that takes ``op_s`` s on a link at rate 1 byte/us)."""
    t = StepTemplate(step=0)
    prev = t.add(DELAY, 0.0, "step start")
    pushes = []
    for k in (1, 2, 3):
        prev = t.add(WORKER, op_s * S, f"backprop op{k}", [prev])
        pushes.append(t.add(UP, op_s * S, f"push op{k}", [prev]))
    t.add(WORKER, 0.0, "client gap", [prev, *pushes])
    return t


def aggregation_s(mechanism: str, stagger_s: float) -> float:
    """When the PS has every aggregated gradient of the first step, seconds after the first
    worker started (2 workers, the second ``stagger_s`` later)."""
    sim = Simulator([three_op_backprop()],
                    SimConfig(workers=2, ps=1, rate_bytes_per_us=1.0, mechanism=mechanism,
                              start_offsets_us=(0.0, stagger_s * S)))
    sim.run(1)
    ends = {e[0] for e in sim.step_ends}
    assert len(ends) == 1  # the barrier: both workers' step ends together
    return ends.pop() / S


def test_chang_3_op_example_in_network_aggregation():
    # "aggregating the new model takes 21 seconds. When using in-network aggregation,
    # aggregation takes 12 seconds (a 43% improvement) [...] when backpropagation start-time is
    # staggered [...] performance without in-network aggregation stays constant (21 seconds),
    # in-network aggregation only improves performance by 28%" (W = 2, a 3 s stagger)
    assert aggregation_s(SYNC_PS, 0.0) == pytest.approx(21.0)
    assert aggregation_s(SYNC_INA, 0.0) == pytest.approx(12.0)
    assert aggregation_s(SYNC_PS, 3.0) == pytest.approx(21.0)
    staggered = aggregation_s(SYNC_INA, 3.0)
    assert staggered == pytest.approx(15.0)
    assert int(100 * (21.0 - staggered) / 21.0) == 28


@pytest.mark.parametrize("workers", [2, 4, 16])
def test_multicast_and_aggregation_each_take_one_copy_off_the_ps_link(workers):
    # W workers pull and push G bytes: the PS link carries W copies each way (sync-ps),
    # one pulled copy with multicast, one pushed copy with in-network aggregation, one each
    # way with both; each worker's own NIC carries its G at the same rate B
    g, c, b = 4000.0, 300.0, 10.0
    expect = {SYNC_PS: c + 2 * workers * g / b,
              SYNC_MULTICAST: c + g / b + workers * g / b,
              SYNC_INA: c + workers * g / b + g / b,
              SYNC_MULTICAST_INA: c + 2 * g / b}
    for mechanism, step in expect.items():
        sim = Simulator([step_template(g, c, g, 0.0)],
                        SimConfig(workers=workers, ps=1, rate_bytes_per_us=b,
                                  mechanism=mechanism))
        sim.run(4)
        for ends in sim.step_ends:
            assert ends == pytest.approx([step * (n + 1) for n in range(4)], rel=1e-9), mechanism


@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("mechanism", [SYNC_PS, SYNC_MULTICAST, SYNC_INA, SYNC_MULTICAST_INA,
                                       SYNC_INA + WHOLE, SYNC_MULTICAST_INA + WHOLE])
def test_with_aggregation_the_ps_only_applies_the_update(mechanism, workers):
    # the PS work a push unlocks is SyncReplicasOptimizer's accumulation of that gradient (A)
    # and the update after the barrier applies the average (A): sync-ps and multicast pay
    # both; with in-network aggregation the switch has summed the gradients, and the PS pays
    # the update alone (Chang et al. section 3.4: the PS receives one aggregated gradient)
    g, c, a, e, b = 4000.0, 300.0, 50.0, 20.0, 10.0

    def first_end(apply_us: float) -> float:
        sim = Simulator([step_template(g, c, g, apply_us, e)],
                        SimConfig(workers=workers, ps=1, rate_bytes_per_us=b,
                                  mechanism=mechanism))
        sim.run(2)
        return sim.step_ends[0][0]

    paid = a if "ina" in mechanism else 2 * a
    assert first_end(a) - first_end(0.0) == pytest.approx(paid, rel=1e-9)


def test_a_slow_worker_nic_bounds_multicast():
    # each worker's NIC at a quarter of the PS link: the multicast copy reaches a worker at its
    # NIC's rate, whatever the PS link could do
    g, b = 4000.0, 10.0
    sim = Simulator([step_template(g, 0.0, g, 0.0)],
                    SimConfig(workers=4, ps=1, rate_bytes_per_us=b, mechanism=SYNC_MULTICAST_INA,
                              worker_rate_bytes_per_us=b / 4))
    sim.run(2)
    assert sim.step_ends[0][0] == pytest.approx(2 * g / (b / 4))


@pytest.mark.parametrize("workers", [2, 4])
@pytest.mark.parametrize("mechanism", [SYNC_MULTICAST, SYNC_INA])
def test_without_messaging_the_switch_adds_one_whole_copy(mechanism, workers):
    # @whole (Chang et al. 9.2, messaging off): the switch stores a whole parameter before it
    # forwards it, so the PS link's copy (G / B: the W parts, shared) and the workers' own
    # links (G / B each, in parallel) follow one another instead of overlapping: one step
    # grows by exactly G / B
    g, c, a, e, b = 3000.0, 700.0, 40.0, 25.0, 12.5

    def first_end(mech: str) -> float:
        sim = Simulator([step_template(g, c, g, a, e)],
                        SimConfig(workers=workers, ps=1, rate_bytes_per_us=b, mechanism=mech))
        sim.run(3)
        return sim.step_ends[0][0]

    assert first_end(mechanism + WHOLE) - first_end(mechanism) == pytest.approx(g / b,
                                                                                 rel=1e-9)


def test_messaging_applies_only_where_a_relay_forwards_parameters():
    with pytest.raises(ReplayError, match="relays no parameter"):
        check_mechanism(SYNC_PS + WHOLE)
    with pytest.raises(ReplayError, match="unknown modifier '@half'"):
        check_mechanism("ring-allreduce@half")
    with pytest.raises(ReplayError, match="unknown mechanism 'ring@whole'"):
        check_mechanism("ring@whole")
    with pytest.raises(ReplayError, match="given twice"):
        check_mechanism("ring-allreduce@whole@whole")
    with pytest.raises(ReplayError, match="no global barrier to remove"):
        check_mechanism(RING + NO_BARRIER)
    with pytest.raises(ReplayError, match="do not combine"):  # the replay ignored @whole
        check_mechanism("ring-allreduce@overlap@whole")
    check_mechanism(SYNC_MULTICAST_INA + WHOLE)
    assert canonical_mechanism("sync-ps+ina@nobarrier@whole") == canonical_mechanism(
        "sync-ps+ina@whole@nobarrier") == "sync-ps+ina@whole@nobarrier"
