"""``--emulate-step tensors`` (replay/emulate_tensors.py): the profile's step template run op by
op, each transfer a message over real TCP.

The conversion (kinds, PS placement, the gap's calibration) is checked on hand-made templates
and on the shipped sample's; the root tests run real namespaces, tc-shaped links and sockets."""

from __future__ import annotations

import json
import statistics
from collections import Counter

import pytest
from conftest import SAMPLE, gradwire, need_root, stand_in_runner

from gradwire.replay.controlchain import CONTROL_WIRE_BYTES
from gradwire.replay.emulate import TENSORS, EmulatedLink, emulated_rows, throughput
from gradwire.replay.emulate_tensors import run_tensors, step_loads, tensor_steps, with_gap
from gradwire.replay.profile import load_profile
from gradwire.replay.selfcheck import own_steps_us
from gradwire.replay.template import DELAY, DOWN, GAP, UP, WORKER, StepTemplate

MB = 1_000_000


def overlapping_step() -> StepTemplate:
    """A step whose first gradient (1 MB) is pushed while the second half of the backward
    pass (40 ms) still computes: a pull of 0.5 MB, 10 ms of compute, then the push beside
    40 ms more compute and a small second push, and a 5 ms gap."""
    t = StepTemplate(step=0)
    start = t.add(DELAY, 0.0, "step start")
    pull = t.add(DOWN, MB // 2, "pull w", [start])
    first = t.add(WORKER, 10_000.0, "compute first", [pull])
    push1 = t.add(UP, MB, "push g1", [first])
    second = t.add(WORKER, 40_000.0, "compute second", [first])
    push2 = t.add(UP, 1_000, "push g2", [second])
    t.add(WORKER, 5_000.0, GAP, [push1, push2])
    return t


def test_kinds_amounts_and_dependencies_carry_over() -> None:
    t = overlapping_step()
    (s,) = tensor_steps([t], 1, "greedy")
    assert s.kind == ("t", "p", "t", "u", "t", "u", "t")
    assert s.amount == tuple(t.amount) and s.servers == 1
    assert s.succ == tuple(tuple(x) for x in t.succ)
    assert s.biggest_pull(0) == MB // 2 and s.gaps == (6,)


def test_the_gap_takes_the_calibration_and_never_goes_below_zero() -> None:
    t = overlapping_step()
    (s,) = tensor_steps([t], 1, "greedy")
    (longer,) = with_gap([s], 2_000.0)
    assert longer.amount[-1] == pytest.approx(7_000.0)
    assert longer.amount[:-1] == s.amount[:-1]  # only the gap moves
    (shorter,) = with_gap([s], -9_000.0)
    assert shorter.amount[-1] == 0.0


def test_the_samples_steps_keep_their_bytes_on_two_pses() -> None:
    prof = load_profile([SAMPLE])
    one = tensor_steps(prof.templates, 1, "greedy")
    two = tensor_steps(prof.templates, 2, "greedy")
    assert len(one) == len(prof.templates) and {s.servers for s in two} == {2}
    for a, b in zip(one, two, strict=True):
        ops_a = Counter(zip(a.kind, a.amount, strict=True))
        ops_b = Counter(zip(b.kind, b.amount, strict=True))
        assert not ops_a - ops_b  # every op kept
        extra = ops_b - ops_a  # where the updates span both PSes: the train op's control chain
        if extra:
            assert Counter(k for k, _ in extra.elements()) == {"p": 2, "u": 1, "t": 3}
            assert {x for k, x in extra.elements() if k != "t"} == {CONTROL_WIRE_BYTES}
        assert {p for k, p in zip(b.kind, b.ps, strict=True) if k != "t"} == {0, 1}
        moved = sum(x for k, x in zip(a.kind, a.amount, strict=True) if k in "pu")
        assert moved > 0


def test_emulate_step_without_emulate_is_refused() -> None:
    r = gradwire("predict", str(SAMPLE), "--workers", "1", "--emulate-step", "tensors")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "--emulate-step" in r.stderr and "--model" in r.stderr


@pytest.mark.slow
@pytest.mark.root
def test_a_push_leaves_while_the_backward_pass_still_computes() -> None:
    """Real namespaces at 200 Mbit/s: the 1 MB push (40 ms on the wire) overlaps the last
    40 ms of compute, so a step takes about 20 + 10 + 40 + 5 ms, not the 115 ms of doing
    them one after another; two workers' steps are no faster than one's."""
    need_root()
    (s,) = tensor_steps([overlapping_step()], 1, "greedy")
    link = EmulatedLink(bandwidth="200mbit", burst="mtu")  # a plain rate, no free burst
    rate1, step1 = throughput(run_tensors([s], link, 1, nsteps=10), batch=1)
    assert 0.070 <= step1 <= 0.105, step1
    pair, step2 = throughput(run_tensors([s], link, 2, nsteps=20), batch=1)
    assert step2 >= 0.95 * step1 and rate1 * 0.9 <= pair <= rate1 * 2.05, (rate1, pair)


def _mean_gap_us(steps) -> float:
    """The steps' gaps before the next step, their mean (us)."""
    return statistics.fmean(s.amount[i] for s in steps for i in s.gaps)


def _fake_runner(step_s: float, calls: list):
    """Each step takes ``step_s`` plus its templates' mean gap (s)."""
    return stand_in_runner(lambda steps: step_s + 1e-6 * _mean_gap_us(steps), calls)


def test_rows_put_the_profiles_step_into_the_gap() -> None:
    prof = load_profile([SAMPLE])
    calls: list = []
    rows, cal = emulated_rows(prof, [1, 2], [1, 2], [1e9], "greedy",
                              runner=_fake_runner(0.01, calls), step=TENSORS)
    own = statistics.median(own_steps_us(prof)[0]) / 1e6
    assert cal.step == TENSORS and cal.own_step_s == pytest.approx(own)
    assert "op by op" in cal.said() and cal.summary()["step"] == TENSORS
    first = calls[0][0]  # the calibration run: the templates as they are
    assert [s.amount for s in first] == [s.amount for s in
                                         tensor_steps(prof.templates, 1, "greedy")]
    # W = 1 at the profile's own configuration comes back at its own step
    assert rows[0].examples_per_s == pytest.approx(prof.batch_size / own, rel=0.01)
    assert [(r.workers, r.ps) for r in rows] == [(1, 1), (2, 1), (1, 2), (2, 2)]
    pulled, pushed = step_loads(calls[-1][0])  # the 2-PS rows ran two PSes
    assert len(pulled) == len(pushed) == 2 and min(pulled) > 0
    busiest = max(pulled + pushed)
    assert rows[-1].utilisation == pytest.approx(8 * busiest * rows[-1].steps_per_s / 1e9)


def _mean_time_ops_us(steps) -> float:
    """The steps' time ops (timed, not their gaps) summed, the steps' mean (us)."""
    return statistics.fmean(sum(a for i, (k, a) in enumerate(zip(s.kind, s.amount, strict=True))
                                if k == "t" and i not in s.gaps) for s in steps)


def _timed_runner(scale: float, floor_s: float, calls: list):
    """Each step is its templates' time ops (their mean sum) times ``scale`` plus their mean
    gap, never under ``floor_s`` (s; the wire)."""
    return stand_in_runner(lambda steps: max(floor_s, 1e-6 * (scale * _mean_time_ops_us(steps)
                                                      + _mean_gap_us(steps))), calls)


def _sample_own_ops_and_gap() -> tuple[object, float, float, float]:
    """The sample's profile, its own step (s), its templates' mean time ops and largest
    gap (s)."""
    prof = load_profile([SAMPLE])
    own = statistics.median(own_steps_us(prof)[0]) / 1e6
    steps = tensor_steps(prof.templates, prof.ps_count, "greedy")
    ops = _mean_time_ops_us(steps) / 1e6
    return prof, own, ops, max(s.amount[i] for s in steps for i in s.gaps) / 1e6


def test_time_ops_longer_than_the_profiles_step_are_scaled_down_to_it() -> None:
    """Where the traced ops alone run longer than the profile's own step (the gap cannot
    take the difference), the gaps go and the time ops are scaled until W = 1 meets it."""
    prof, own, ops, gap = _sample_own_ops_and_gap()
    scale = (own + 2 * gap) / ops  # with no gap the ops alone run 2 gaps over the own step
    calls: list = []
    rows, cal = emulated_rows(prof, [1, 2], [prof.ps_count], [1e9], "greedy",
                              runner=_timed_runner(scale, 1e-4, calls), step=TENSORS)
    assert cal.gap_short and cal.scaled_step_s == pytest.approx(own, rel=0.01)
    assert cal.time_factor == pytest.approx(own / (own + 2 * gap), rel=0.01)
    assert "scaled by" in cal.said() and cal.summary()["time_factor"] == cal.time_factor
    assert rows[0].examples_per_s == pytest.approx(prof.batch_size / own, rel=0.01)
    ran = calls[-1][0]  # the rows' job: no gap, every time op scaled
    assert all(s.amount[i] == 0.0 for s in ran for i in s.gaps)
    as_traced = tensor_steps(prof.templates, prof.ps_count, "greedy")
    for a, b in zip(as_traced, ran, strict=True):
        for i, (k, x, y) in enumerate(zip(a.kind, a.amount, b.amount, strict=True)):
            if k != "t":
                assert y == x  # the bytes stay
            elif i not in a.gaps:
                assert y == pytest.approx(x * cal.time_factor)


def test_a_wire_slower_than_the_profiles_step_keeps_the_times_without_gaps() -> None:
    """Where even without time ops the emulated step stays above the profile's (the wire
    alone is slower), the times are kept as traced, the gaps emptied, and it says so."""
    prof, own, _ops, _gap = _sample_own_ops_and_gap()
    calls: list = []
    _rows, cal = emulated_rows(prof, [1], [prof.ps_count], [1e9], "greedy",
                               runner=_timed_runner(1.0, 2 * own, calls), step=TENSORS)
    assert cal.gap_short and cal.time_factor == 1.0 and cal.scaled_step_s is None
    assert "could not" in cal.said()
    assert all(s.amount[i] == 0.0 for s in calls[-1][0] for i in s.gaps)


@pytest.mark.slow
@pytest.mark.root
def test_predict_emulate_step_tensors_end_to_end(tmp_path) -> None:
    """The whole command on the sample, tensors being the default step: its W = 1 row comes
    back at the profile's own step, and the JSON says which step the emulator ran."""
    need_root()
    out = tmp_path / "pred.json"
    r = gradwire("predict", str(SAMPLE), "--workers", "1", "--model", "emulate",
                 "--json", str(out), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    cal = doc["profile"]["emulate"]
    assert cal["step"] == TENSORS
    (row,) = doc["rows"]
    assert row["examples_per_s"] == pytest.approx(
        doc["profile"]["batch_size"] / cal["own_step_s"], rel=0.05)
