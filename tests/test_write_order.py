"""A worker's pulls from one PS share one TCP connection, so the PS writes them in the order
the capture shows their first bytes: in a template, no pull is sendable before the one the
same PS wrote ahead of it (replay/template.py, ``build_template``; docs/predict.md, "The PS's
write order")."""

from __future__ import annotations

from collections import defaultdict

import pytest
from conftest import SAMPLE

from gradwire.bundle import SAMPLE_BUNDLE
from gradwire.replay.template import DOWN, _request_delays


def _pulls(tpl) -> dict[int, list[tuple[int, float, float]]]:
    """Per PS, its pulls in write order: (prio, sendable after the step's start, first byte
    after the step's start), us. The request delay is the op added just before its pull."""
    start = tpl.obs_start[tpl.name.index("step start")]
    out: dict[int, list[tuple[int, float, float]]] = defaultdict(list)
    for d, kind in enumerate(tpl.kind):
        if kind != DOWN:
            continue
        req = d - 1
        assert tpl.name[req].startswith("request ") and d in tpl.succ[req]
        out[tpl.ps[d]].append((int(tpl.prio[d]), tpl.amount[req], tpl.obs_start[d] - start))
    return {ps: sorted(v) for ps, v in out.items()}


@pytest.mark.parametrize("bundle", [SAMPLE_BUNDLE, SAMPLE], ids=["shipped-sample", "small-lab"])
def test_no_pull_is_sendable_before_the_one_written_ahead_of_it(bundle):
    from gradwire.replay.profile import load_profile

    templates = load_profile([bundle]).templates
    assert templates
    checked = 0
    for tpl in templates:
        for pulls in _pulls(tpl).values():
            sendable = [s for _, s, _ in pulls]
            assert sendable == sorted(sendable)  # in the write order
            for _, s, first in pulls:
                # after the step's start, and never after the pull's own first byte
                assert 0.0 <= s <= first + 1e-6
            checked += len(pulls)
    assert checked >= 2 * len(templates)


def test_another_order_or_placement_floors_the_pulls_in_that_order():
    """Under another ``--order`` the PS writes in that order, and with another placement each
    PS has its own connection: ``written_in_order`` floors each pull's request delay by the
    pull ahead of it in that order on its own PS, from the delays before the capture's floor.
    Under the capture's order and placement the template is returned as it is."""
    from gradwire.replay.profile import load_profile
    from gradwire.replay.template import written_in_order

    tpl = load_profile([SAMPLE_BUNDLE]).templates[0]
    assert written_in_order(tpl, tpl.ps, tpl.prio) is tpl
    pulls = sorted(tpl.unfloored, key=lambda d: tpl.prio[d])
    assert len(pulls) >= 3
    for d in pulls:  # the template's delay is its unfloored one, floored
        req, group, raw = tpl.unfloored[d]
        assert tpl.amount[req] >= raw and group == 0

    def delays(t, order):
        return [t.amount[t.unfloored[d][0]] for d in order]

    reverse = [-p for p in tpl.prio]
    rev = written_in_order(tpl, tpl.ps, reverse)
    assert rev is not tpl and rev.amount is not tpl.amount
    in_reverse = delays(rev, pulls[::-1])
    assert in_reverse == sorted(in_reverse)  # floored in the reverse order
    assert in_reverse[0] == tpl.unfloored[pulls[-1]][2]  # the first written: its own delay
    # two PSes, pulls alternating between them: each PS's pulls floored apart
    ps_of = list(tpl.ps)
    for k, d in enumerate(pulls):
        ps_of[d] = k % 2
    two = written_in_order(tpl, ps_of, tpl.prio)
    for side in (0, 1):
        mine = [d for d in pulls if ps_of[d] == side]
        got = delays(two, mine)
        assert got == sorted(got)
        assert got[0] == tpl.unfloored[mine[0]][2]
    # the non-pull ops keep their amounts
    changed = {two.unfloored[d][0] for d in pulls} | {rev.unfloored[d][0] for d in pulls}
    assert all(a == b for i, (a, b) in enumerate(zip(two.amount, tpl.amount, strict=True))
               if i not in changed)


def test_pulls_a_mechanism_made_into_other_ops_keep_their_delays():
    """A mechanism that turns a pull into another op (synchronous PS without a barrier makes
    the step's first pulls free delays, multicast makes them NIC transfers) keeps that op's
    request delay as the mechanism left it, whatever the order replayed."""
    import copy

    from gradwire.replay.profile import load_profile
    from gradwire.replay.template import DELAY, written_in_order

    tpl = load_profile([SAMPLE_BUNDLE]).templates[0]
    s = copy.deepcopy(tpl)
    first = min(s.unfloored, key=lambda d: s.prio[d])
    req = s.unfloored[first][0]
    s.kind[first], s.amount[first], s.amount[req] = DELAY, 0.0, 0.0
    out = written_in_order(s, s.ps, [-p for p in s.prio])
    assert out is not s and out.amount[req] == 0.0
    rest = sorted((d for d in s.unfloored if d != first), key=lambda d: -s.prio[d])
    got = [out.amount[s.unfloored[d][0]] for d in rest]
    assert got == sorted(got)


def test_a_push_waits_for_the_producers_of_the_pushes_written_ahead_of_it():
    """A worker's pushes to one PS share one connection too: each push also waits for the
    latest producer among the pushes the capture shows written ahead of it (first DATA), so a
    gradient produced a little earlier but written later (a 1 MB one serialised longer than
    a 98 KB one) does not take the link first (``_pushes_in_write_order``)."""
    from gradwire.replay.template import _pushes_in_write_order

    # producing chunks (-1: the step's start) and first DATA (us) of 3 pushes
    assert _pushes_in_write_order([10, 12, -1], [5.0, 1.0, 3.0]) == [[10, 12], [12], [-1, 12]]
    assert _pushes_in_write_order([3, 5, 7], [1.0, 2.0, 3.0]) == [[3], [5], [7]]  # in order


@pytest.mark.parametrize("bundle", [SAMPLE_BUNDLE, SAMPLE], ids=["shipped-sample", "small-lab"])
def test_no_push_is_sendable_before_the_one_written_ahead_of_it(bundle):
    from gradwire.replay.profile import load_profile
    from gradwire.replay.template import UP

    checked = 0
    for tpl in load_profile([bundle]).templates:
        preds = tpl.predecessors()
        by_ps: dict[int, list[int]] = defaultdict(list)
        for u, kind in enumerate(tpl.kind):
            if kind == UP:
                by_ps[tpl.ps[u]].append(u)
        for ups in by_ps.values():
            ups.sort(key=lambda u: (tpl.obs_start[u], u))
            latest = [max(preds[u]) for u in ups]  # chunks run in index order
            assert latest == sorted(latest)
            checked += len(ups)
    assert checked >= 2


def test_a_pull_is_held_back_only_by_pulls_on_its_own_ps_link():
    """A PS's latency is the wait for its first byte beyond its own link's earlier pulls: over
    2 PSes a pull on PS 1 whose first byte came while PS 0's link was busy still waited that
    long (the 2-PS deep MLP's profile of issue21-fresh-1207: PS 1 began 12.0 ms after the
    request, PS 0 7.9 ms; PS 0's pulls once counted against PS 1's latency, which came out 0)."""
    from types import SimpleNamespace as Ns

    def pull(src, request, first, last):
        return Ns(transfer=Ns(src_device=src), request_us=request, first_data_us=first,
                  last_data_us=last)

    ps0, ps1 = "/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:1/device:CPU:0"
    pulls = [pull(ps0, 0.0, 7_900.0, 14_800.0),   # PS 0 writes first
             pull(ps1, 0.0, 12_000.0, 14_600.0),  # PS 1's first byte while PS 0 sends
             pull(ps0, 0.0, 14_800.0, 19_300.0),  # right behind PS 0's first: no latency
             pull(ps1, 0.0, 15_600.0, 19_000.0),  # 1 ms after PS 1's first ended
             # PS 0 again, its first byte before PS 0's last pull ended: queued behind it
             pull(ps0, 0.0, 19_000.0, 21_000.0)]
    delays = _request_delays(pulls, Ns(ready_us={}), 0.0, 0.0, len(pulls))
    assert [round(d[3]) for d in delays.values()] == [7_900, 12_000, 0, 1_000, 0]
    assert all(d[0] == 0 and d[1] == 0.0 for d in delays.values())  # timed from the start
