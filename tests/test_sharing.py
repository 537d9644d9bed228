"""Max-min fair sharing of PS and worker NICs (replay/sharing.py): the ICPE'20 section 5 rule
for 2 PSes, equal sharing per PS, hand-computed cases, and the max-min property on random
networks, checked against an exact rational progressive filling."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradwire.replay.sharing import maxmin_rates

INF = math.inf
PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- the paper's model ------------------------------------------------------------------------

# n: workers at PS2 (worker 0 among them, alone at PS1) -> (PS2 share, worker 0's PS1 share),
# in units of the common capacity C, by hand: 1/n and 1 - 1/n.
PAPER_2PS = {
    2: (1 / 2, 1 / 2),
    3: (1 / 3, 2 / 3),
    4: (1 / 4, 3 / 4),
    5: (1 / 5, 4 / 5),
    8: (1 / 8, 7 / 8),
    16: (1 / 16, 15 / 16),
}


@pytest.mark.parametrize("n", sorted(PAPER_2PS))
@pytest.mark.parametrize("c", [1.0, 125.0])  # 125 bytes/us: a 1 Gbit/s NIC
def test_two_ps_rule_of_the_paper(n, c):
    # PS index 0 is the paper's PS1, 1 its PS2; every NIC, PS and worker, has capacity c
    flows = [(0, 0)] + [(w, 1) for w in range(n)]
    rates = maxmin_rates(flows, [c, c], c)
    ps2, ps1 = PAPER_2PS[n]
    assert rates[0] == pytest.approx(ps1 * c)
    assert rates[1:] == pytest.approx([ps2 * c] * n)
    # the same in the other order of the flows and with the worker NICs given one by one
    flows.reverse()
    rates = maxmin_rates(flows, [c, c], [c] * n)
    assert rates[-1] == pytest.approx(ps1 * c)
    assert rates[:-1] == pytest.approx([ps2 * c] * n)


def test_a_worker_nic_that_is_not_the_bottleneck_changes_nothing():
    # PS0: w0, w1; PS1: w0, w2, w3; all capacities 1. Level 1/3 saturates PS1 (w0's NIC is
    # at 1/2); then PS0 has 1 for w0 and w1, w0's NIC 2/3 for its one flow left: level 1/2
    # saturates PS0. Equal sharing per PS, as in the paper when no worker is alone at a PS.
    flows = [(0, 0), (1, 0), (0, 1), (2, 1), (3, 1)]
    assert maxmin_rates(flows, [1.0, 1.0], 1.0) == pytest.approx(
        [1 / 2, 1 / 2, 1 / 3, 1 / 3, 1 / 3]
    )


@pytest.mark.parametrize("w", [1, 2, 3, 7])
def test_all_connections_with_one_ps_share_it_equally(w):
    # every worker talks to both PSes: each PS splits equally, a worker NIC carries 2c/w <= c
    flows = [(k, p) for k in range(w) for p in (0, 1)]
    for wcap in (INF, 1.0):
        want = 1 / (2 * w) if (w == 1 and wcap == 1.0) else 1 / w
        assert maxmin_rates(flows, [1.0, 1.0], wcap) == pytest.approx([want] * len(flows))


@pytest.mark.parametrize("n", [1, 2, 3, 10, 64])
def test_one_ps_n_workers_get_c_over_n(n):
    flows = [(w, 0) for w in range(n)]
    for wcap in (INF, 12.5, [12.5] * n, [INF] * n):
        assert maxmin_rates(flows, [12.5], wcap) == pytest.approx([12.5 / n] * n)


def test_unconstrained_workers_share_each_ps_equally():
    flows = [(0, 0), (1, 0), (0, 1), (1, 1), (2, 1), (3, 2)]
    want = [1 / 2, 1 / 2, 2 / 3, 2 / 3, 2 / 3, 3.0]
    assert maxmin_rates(flows, [1.0, 2.0, 3.0], INF) == pytest.approx(want)
    assert maxmin_rates(flows, [1.0, 2.0, 3.0], [INF] * 4) == pytest.approx(want)


def test_three_ps_by_hand():
    # PS capacities A=3, B=2, C=1; every worker NIC 1.5. Shares (capacity / flows) at the
    # start: A 3/3, B 2/2, C 1/2, w0 1.5/3, w1 1.5/2, w2 1.5, w3 1.5.
    # Level 0.5: C and w0 saturate; w0->A, w0->B, w0->C, w1->C freeze at 0.5.
    # Left: A 2.5 for 2 flows (1.25), B 1.5 for 1, w1 1.0 for 1, w2 1.5, w3 1.5.
    # Level 1.0: w1 saturates; w1->A freezes at 1.0; A has 1.5 left for w2->A.
    # Level 1.5: A, B, w2, w3 saturate; w2->A and w3->B freeze at 1.5.
    a, b, c = 0, 1, 2
    flows = [(0, a), (0, b), (0, c), (1, a), (1, c), (2, a), (3, b)]
    rates = maxmin_rates(flows, [3.0, 2.0, 1.0], 1.5)
    assert rates == [0.5, 0.5, 0.5, 1.0, 0.5, 1.5, 1.5]  # binary fractions: exact
    # every NIC ends saturated: A 0.5+1+1.5, B 0.5+1.5, C 0.5+0.5, each worker 1.5
    assert _loads(flows, rates) == ({a: 3.0, b: 2.0, c: 1.0}, {0: 1.5, 1: 1.5, 2: 1.5, 3: 1.5})


def test_duplicate_pairs_are_flows_of_their_own():
    assert maxmin_rates([(0, 0), (0, 0)], [1.0], INF) == pytest.approx([0.5, 0.5])
    # w0 has 2 flows to PS0 and w1 1: PS0 splits 3 ways until w0's NIC (0.5) saturates
    flows = [(0, 0), (1, 0), (0, 0)]
    assert maxmin_rates(flows, [3.0], [0.5, INF]) == pytest.approx([0.25, 2.5, 0.25])


def test_zero_and_infinite_capacities():
    assert maxmin_rates([], [1.0], 1.0) == []
    assert maxmin_rates([(0, 0), (1, 1)], [0.0, 1.0], INF) == [0.0, 1.0]
    assert maxmin_rates([(0, 0), (1, 0)], [INF], INF) == [INF, INF]
    assert maxmin_rates([(0, 0), (0, 1), (1, 1)], [INF, INF], [2.0, INF]) == [1.0, 1.0, INF]
    assert maxmin_rates([(0, 0), (1, 0)], [INF], [0.0, 3.0]) == [0.0, 3.0]


def test_numpy_capacities():
    np = pytest.importorskip("numpy")
    flows = [(0, 0), (1, 0)]
    assert maxmin_rates(flows, np.array([2.0]), np.float32(0.5)) == [0.5, 0.5]
    assert maxmin_rates(flows, np.array([2.0]), np.float32(INF)) == [1.0, 1.0]
    assert maxmin_rates(flows, [2.0], np.array([0.5, INF])) == [0.5, 1.5]


@pytest.mark.parametrize(
    "flows, ps, workers",
    [
        ([(0, 0)], [-1.0], INF),
        ([(0, 0)], [math.nan], INF),
        ([(0, 0)], [1.0], -1.0),
        ([(0, 0)], [1.0], [math.nan]),
        ([(0, -1)], [1.0, 1.0], INF),
        ([(-1, 0)], [1.0], [1.0, 1.0]),
    ],
)
def test_bad_input_is_refused(flows, ps, workers):
    with pytest.raises(ValueError):
        maxmin_rates(flows, ps, workers)


# -- properties on random networks ------------------------------------------------------------


def _loads(flows, rates):
    ps: dict[int, float] = {}
    wk: dict[int, float] = {}
    for (w, p), r in zip(flows, rates, strict=True):
        ps[p] = ps.get(p, 0.0) + r
        wk[w] = wk.get(w, 0.0) + r
    return ps, wk


def _exact(flows, ps_cap, w_cap):
    """Progressive filling in rationals, written plainly: None is an infinite capacity."""
    nics = {("p", p): Fraction(ps_cap[p]) for _w, p in flows if ps_cap[p] is not None}
    nics.update({("w", w): Fraction(w_cap[w]) for w, _p in flows if w_cap[w] is not None})
    via = [[x for x in (("p", p), ("w", w)) if x in nics] for w, p in flows]
    rates: list[Fraction | None] = [None] * len(flows)
    while None in rates:
        share = {}
        for x, cap in nics.items():
            live = [k for k in range(len(flows)) if rates[k] is None and x in via[k]]
            if live:
                used = sum(r for k, r in enumerate(rates) if r is not None and x in via[k])
                share[x] = (cap - used) / len(live)
        if not share:
            return [r if r is not None else INF for r in rates]
        level = min(share.values())
        for k in range(len(flows)):
            if rates[k] is None and any(share.get(x) == level for x in via[k]):
                rates[k] = level
    return rates


@st.composite
def networks(draw):
    """(flows, PS capacities, worker capacities) with integer capacities, None = infinite."""
    m = draw(st.integers(1, 4))
    w = draw(st.integers(1, 6))
    flows = draw(st.lists(st.tuples(st.integers(0, w - 1), st.integers(0, m - 1)), max_size=24))
    maybe_inf = st.one_of(st.integers(0, 60), st.none())
    ps = draw(st.lists(maybe_inf, min_size=m, max_size=m))
    wk = draw(
        st.one_of(st.lists(maybe_inf, min_size=w, max_size=w), maybe_inf.map(lambda c: [c] * w))
    )
    return flows, ps, wk


def _floats(caps, scale):
    return [INF if c is None else c * scale for c in caps]


@PROPS
@given(networks(), st.sampled_from([1.0, 0.1, 125.0, 1e-3]))
def test_max_min_property_and_exact_reference(net, scale):
    flows, ps, wk = net
    ps_f, wk_f = _floats(ps, scale), _floats(wk, scale)
    scalar = wk_f[0] if len(set(wk)) == 1 else wk_f  # a scalar when all workers are equal
    rates = maxmin_rates(flows, ps_f, scalar)
    assert rates == maxmin_rates(flows, ps_f, wk_f)  # the same arithmetic either way
    assert len(rates) == len(flows) and all(r >= 0.0 for r in rates)
    tol = 1e-9
    want = _exact(flows, ps, wk)
    assert rates == pytest.approx([r * scale if r != INF else INF for r in want], rel=tol)
    # conservation: no NIC above its capacity
    ps_load, wk_load = _loads(flows, rates)
    caps = {("p", p): ps_f[p] for p in ps_load} | {("w", w): wk_f[w] for w in wk_load}
    load = {("p", p): v for p, v in ps_load.items()} | {("w", w): v for w, v in wk_load.items()}
    for x, v in load.items():
        assert v <= caps[x] * (1 + tol)
    # max-min: every finite flow crosses a saturated NIC where no flow is faster than it
    fastest: dict[tuple[str, int], float] = {}
    for (w, p), r in zip(flows, rates, strict=True):
        for x in (("p", p), ("w", w)):
            fastest[x] = max(fastest.get(x, 0.0), r)
    for (w, p), r in zip(flows, rates, strict=True):
        if r == INF:
            assert ps_f[p] == INF and wk_f[w] == INF
            continue
        assert any(
            caps[x] != INF and load[x] >= caps[x] * (1 - tol) and r >= fastest[x] * (1 - tol)
            for x in (("p", p), ("w", w))
        ), (w, p, r)


@PROPS
@given(networks(), st.randoms(use_true_random=False))
def test_reordering_flows_reorders_rates_bit_for_bit(net, rnd):
    flows, ps, wk = net
    ps_f, wk_f = _floats(ps, 0.37), _floats(wk, 0.37)  # inexact in binary
    rates = maxmin_rates(flows, ps_f, wk_f)
    order = list(range(len(flows)))
    rnd.shuffle(order)
    assert maxmin_rates([flows[k] for k in order], ps_f, wk_f) == [rates[k] for k in order]
    assert maxmin_rates(flows, ps_f, wk_f) == rates  # and the same again


@PROPS
@given(
    st.lists(st.tuples(st.integers(0, 9), st.integers(0, 3)), max_size=40),
    st.lists(st.floats(0.0, 1e4, allow_nan=False), min_size=4, max_size=4),
)
def test_unconstrained_workers_get_an_equal_share_of_their_ps(flows, ps):
    rates = maxmin_rates(flows, ps, INF)
    count = {p: sum(1 for _w, q in flows if q == p) for _w, p in flows}
    assert rates == [ps[p] / count[p] for _w, p in flows]  # exact
    assert maxmin_rates(flows, ps, [INF] * 10) == pytest.approx(rates)


@PROPS
@given(st.integers(2, 64), st.floats(1e-3, 1e4), st.integers(0, 3))
def test_two_ps_rule_for_any_n_and_capacity(n, c, idle_ps):
    # the paper's configuration, plus PSes with no flows (they change nothing)
    flows = [(0, 0)] + [(w, 1) for w in range(n)]
    rates = maxmin_rates(flows, [c, c] + [c] * idle_ps, c)
    assert rates[0] == pytest.approx(c * (1 - 1 / n))
    assert rates[1:] == pytest.approx([c / n] * n)
