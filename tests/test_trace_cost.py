"""FULL_TRACE's excess taken out of the templates (replay/tracecost.py, ``--trace-cost``): the
captured steps' first-request-to-last-push spans, the excess they show, which ops carry it,
the factor that takes it out, and predict's output."""

from __future__ import annotations

import dataclasses
import json
import statistics

import pytest
from conftest import SAMPLE
from test_sync_ps import SYNC_BUNDLE
from timeops import linear_step, template

from gradwire.replay.profile import in_step_us, load_profile
from gradwire.replay.template import DELAY, DOWN, GAP, WORKER, Profile, StepTemplate
from gradwire.replay.tracecost import (
    answer_excess_us,
    requests_out,
    scale_time_ops,
    take_out,
    trace_excess_us,
    with_time_factor,
)


def test_in_step_spans_run_from_the_first_request_to_the_last_push():
    """Each step's span is its last push's end less its first request; traced and untraced
    apart, in capture order, the warm-up skipped, a step without a push's end left out, and
    the last step too: no next request shows the captures saw it end (here the captures cut
    its pushes off after 10 us)."""
    requests = [(0.0, 1), (100.0, 2), (220.0, 3), (350.0, 4), (470.0, 5), (600.0, 6),
                (730.0, 7)]
    ends = {1: 90.0, 2: 190.0, 3: 330.0, 4: 440.0, 6: 680.0, 7: 740.0}
    traced, untraced = in_step_us(requests, ends, {3}, warmup=1)
    assert traced == (110.0,)
    assert untraced == (90.0, 90.0, 80.0)  # steps 2, 4, 6; step 5 has no push's end
    assert in_step_us(requests, ends, set(), warmup=0)[1] == (90.0, 90.0, 110.0, 90.0, 80.0)


def _profile(traced: tuple[float, ...], untraced: tuple[float, ...],
             steps: tuple[float, ...] = ()) -> Profile:
    return Profile(templates=[], batch_size=32, ps_tasks=["/job:ps/task:0"],
                   link_rate_bps=1e8, alpha_us_per_byte=0.0, beta_us=0.0, source="test",
                   untraced_steps_us=steps or tuple(u + 5_000 for u in untraced),
                   in_step_us=(traced, untraced))


def test_the_excess_is_the_medians_difference_only_when_clear():
    """Fifteen untraced spans of 100-114 ms: traced ones at 130 ms are 23 ms over the
    untraced median (107 ms) and above its interval; at 108 ms they are within it (no
    excess), and with two traced steps or four untraced ones there is no median to trust."""
    untraced = tuple(1e3 * (100 + k) for k in range(15))
    assert trace_excess_us(_profile((130e3, 131e3, 129e3), untraced)) == pytest.approx(23e3)
    assert trace_excess_us(_profile((108e3,) * 3, untraced)) == 0.0
    assert trace_excess_us(_profile((130e3, 130e3), untraced)) == 0.0
    assert trace_excess_us(_profile((130e3,) * 3, untraced[:4])) == 0.0
    assert trace_excess_us(_profile((90e3,) * 3, untraced)) == 0.0  # faster: no excess


def test_only_the_time_ops_are_scaled():
    """The request delay, the compute and the PS's work scale; the transfers' bytes and the
    client's gap (timed on the untraced steps already) do not."""
    base = template()
    base.unfloored = {1: (0, 0, 1_000.0)}  # the pull's request delay before any floor
    t = scale_time_ops(base, 0.5)
    assert t.amount == [500.0, 1e6, 2_000.0, 1e6, 250.0, 2_000.0]
    assert t.unfloored == {1: (0, 0, 500.0)}  # floored again at another order: scaled too
    prof = dataclasses.replace(_profile((), ()), templates=[template()])
    assert with_time_factor(prof, 1.0) is prof
    assert with_time_factor(prof, 0.25).templates[0].amount[2] == 1_000.0


def test_the_factor_takes_the_excess_out_never_below_the_untraced_steps():
    """Time ops of 5.5 ms, x8 in the stand-in: a replayed step of 124 ms. A 20 ms excess
    brings it to 104 ms when the untraced steps ran 100 ms; when they ran 110 ms, to 110."""
    untraced = tuple(1e3 * (100 + k) for k in range(15))  # median 107 ms
    base = dataclasses.replace(_profile((127e3,) * 3, untraced), templates=[template()])
    assert linear_step(base) == pytest.approx(124e3)
    fast_run = dataclasses.replace(base, untraced_steps_us=(100e3,) * 15)
    out, cost = take_out(fast_run, linear_step)
    assert cost.excess_us == pytest.approx(20e3)
    assert cost.replayed_us == pytest.approx(124e3)
    assert linear_step(out) == pytest.approx(104e3, rel=0.003)
    assert cost.factor == pytest.approx(24 / 44, rel=0.01)
    slow_run = dataclasses.replace(base, untraced_steps_us=(110e3,) * 15)
    out, cost = take_out(slow_run, linear_step)
    assert linear_step(out) == pytest.approx(110e3, rel=0.003)
    assert cost.summary()["target_step_ms"] == pytest.approx(110, rel=0.003)
    assert "scaled by" in cost.said()


def test_nothing_is_scaled_where_the_time_ops_cannot_hold_the_excess_or_there_is_none():
    """The untraced steps ran 70 ms: even without its time ops the stand-in's step is 80 ms,
    so the excess is somewhere else and the templates stay as traced. With no excess the
    stand-in is not even called."""
    untraced = tuple(1e3 * (100 + k) for k in range(15))
    prof = dataclasses.replace(_profile((160e3,) * 3, untraced, steps=(70e3,) * 15),
                               templates=[template()])
    out, cost = take_out(prof, linear_step)
    assert out is prof and cost.factor == 1.0 and cost.target_us is None
    assert "kept as traced" in cost.said()
    none = dataclasses.replace(prof, in_step_us=((100e3,) * 3, untraced))

    def not_called(_p: Profile) -> float:
        raise AssertionError("replayed without an excess")
    out, cost = take_out(none, not_called)
    assert out is none and cost.excess_us == 0.0 and "as fast" in cost.said()


def test_the_real_replay_meets_its_target_on_the_small_bundle():
    """The small lab bundle with a made-up excess of a fifth of its replayed step: the
    replay of its own configuration (the real kernel) lands within 0.2% of the step less
    that excess, or on the untraced median where that is higher."""
    from gradwire.replay.options import PredictOptions
    from gradwire.replay.predictflow import own_step_replay
    from gradwire.replay.profile import load_profile

    prof = load_profile([SAMPLE])
    step_us = own_step_replay(PredictOptions(bundles=(SAMPLE,)), prof)
    t1 = step_us(prof)
    untraced = tuple(t1 * 0.5 + k for k in range(15))
    made_up = dataclasses.replace(prof, in_step_us=((t1 * 0.7,) * 3, untraced),
                                  untraced_steps_us=(t1 * 0.6,) * 15)
    out, cost = take_out(made_up, step_us)
    assert cost.excess_us == pytest.approx(t1 * 0.7 - statistics.median(untraced))
    target = max(t1 * 0.6, t1 - cost.excess_us)
    assert 0.0 < cost.factor < 1.0
    assert step_us(out) == pytest.approx(target, rel=0.002)


def _predict_with_and_without(monkeypatch, capsys, workers: str, extra: list[str]
                              ) -> list[dict]:
    """``gradwire predict`` of the small bundle as JSON, as is and with ``extra``."""
    import gradwire.cli as cli

    monkeypatch.setattr(cli, "_stop_on_signals", lambda: None)  # pytest keeps its handlers
    docs = []
    for more in ([], extra):
        code = cli.main(["predict", str(SAMPLE), "--jobs", "1", "--workers", workers,
                         "--replications", "2", "--max-replications", "2", "--format",
                         "json", "-q", *more])
        out = capsys.readouterr()
        assert code == 0, out.err
        docs.append(json.loads(out.out))
    return docs


def test_predict_says_what_it_took_out(monkeypatch, capsys):
    """The small bundle has 4 untraced steps, too few for a median to trust (and its traced
    ones ran no slower in-step): with --trace-cost auto its rows are the default's, and the
    JSON says there was no excess."""
    docs = _predict_with_and_without(monkeypatch, capsys, "1,2", ["--trace-cost", "auto"])
    assert docs[0]["profile"]["trace_cost"] is None
    cost = docs[1]["profile"]["trace_cost"]
    assert cost["factor"] == 1.0 and cost["excess_ms"] == 0.0
    assert [r["examples_per_s"] for r in docs[0]["rows"]] == [
        r["examples_per_s"] for r in docs[1]["rows"]]


# -- --trace-cost requests: the PS's answers to the first pulls, traced against untraced


def _answers_profile(traced: tuple[float, ...], untraced: tuple[float, ...],
                     templates: list) -> Profile:
    return dataclasses.replace(_profile((), ()), templates=templates,
                               first_answer_us=(traced, untraced))


def _requests_template() -> StepTemplate:
    t = StepTemplate(step=0)
    start = t.add(DELAY, 0.0, "step start")
    ra = t.add(DELAY, 40e3, "request edge_1_a", [start])
    rb = t.add(DELAY, 5e3, "request edge_2_b", [start])
    da = t.add(DOWN, 1e6, "pull a", [ra])
    db = t.add(DOWN, 1e6, "pull b", [rb])
    pa = t.add(DELAY, 300.0, "parse a", [da, db])
    c = t.add(WORKER, 4e3, "compute", [pa])
    t.add(WORKER, 2e3, GAP, [c])
    t.unfloored = {da: (ra, 0, 40e3), db: (rb, 0, 5e3)}
    return t


def test_the_answers_excess_shortens_every_request_delay_and_nothing_else():
    """Traced first answers at 29-31 ms, fifteen untraced ones at 10-24 ms (median 17 ms):
    every request delay 13 ms shorter, none below 0 (before the write order's floors too);
    the parse, the compute, the transfers and the gap as they were."""
    untraced = tuple(1e3 * (10 + k) for k in range(15))
    prof = _answers_profile((30e3, 31e3, 29e3), untraced, [_requests_template()])
    assert answer_excess_us(prof) == pytest.approx(13e3)
    out, cost = requests_out(prof)
    t = out.templates[0]
    assert t.amount == pytest.approx([0.0, 27e3, 0.0, 1e6, 1e6, 300.0, 4e3, 2e3])
    assert t.unfloored == {3: (1, 0, pytest.approx(27e3)), 4: (2, 0, 0.0)}
    assert cost.kind == "requests" and cost.excess_us == pytest.approx(13e3)
    assert cost.summary()["excess_ms"] == pytest.approx(13.0)
    assert "13.0 ms later" in cost.said()
    assert prof.templates[0].amount[1] == 40e3  # the input is not changed


def test_no_clear_excess_in_the_answers_keeps_the_templates():
    """Answers within the untraced median's interval, or too few traced steps: no change."""
    untraced = tuple(1e3 * (10 + k) for k in range(15))
    for traced in ((17e3,) * 3, (30e3, 30e3)):
        prof = _answers_profile(traced, untraced, [_requests_template()])
        out, cost = requests_out(prof)
        assert out is prof and cost.excess_us == 0.0
        assert "kept as traced" in cost.said()


def test_the_first_answers_are_timed_on_a_real_synchronous_profile():
    """The lab's small synchronous MLP (3 traced steps, 7 untraced after the warm-up): each
    step's first pull DATA after its first request, on the worker's own capture."""
    traced, untraced = load_profile([SYNC_BUNDLE]).first_answer_us
    assert len(traced) == 3 and len(untraced) == 7
    assert all(0.0 < a < 50e3 for a in (*traced, *untraced))


def test_predict_says_it_shortened_the_requests(monkeypatch, capsys):
    """--trace-cost requests on the small bundle, whose traced steps' answers came no later
    than its untraced ones': the rows as the default's, and the JSON says which correction."""
    docs = _predict_with_and_without(monkeypatch, capsys, "1", ["--trace-cost", "requests"])
    cost = docs[1]["profile"]["trace_cost"]
    assert cost["kind"] == "requests" and cost["excess_ms"] == 0.0
    assert docs[0]["rows"][0]["examples_per_s"] == docs[1]["rows"][0]["examples_per_s"]
