"""The replay against the run it was recorded from (replay/selfcheck.py): the profile's
untraced captured steps, the interval of their median, the note, and predict's output."""

from __future__ import annotations

import json

import pytest
from conftest import SAMPLE

from gradwire.replay.predict import Prediction
from gradwire.replay.profile import untraced_steps_us
from gradwire.replay.selfcheck import median_interval, own_run, own_run_note


def test_untraced_steps_run_from_one_first_request_to_the_next():
    """Step k lasts from its first pull request to step k+1's; the warm-up and the traced
    steps are left out, the last step (no next request) too."""
    requests = [(0.0, 10), (100.0, 11), (250.0, 12), (300.0, 13), (420.0, 14), (500.0, 15)]
    assert untraced_steps_us(requests, {12}, warmup=1) == (150.0, 120.0, 80.0)
    assert untraced_steps_us(requests, set(), warmup=0) == (100.0, 150.0, 50.0, 120.0, 80.0)
    assert untraced_steps_us(requests[:1], set()) == ()
    assert untraced_steps_us([(0.0, 1), (0.0, 2), (50.0, 3)], set(), warmup=0) == (50.0,)


def test_the_profile_keeps_its_untraced_steps():
    """The small lab bundle's worker ran 3 traced steps among captured ones: the profile
    keeps the 4 untraced ones after the warm-up, each a few to 50 ms (a 0.2 MB model at
    1 Gbit/s)."""
    from gradwire.replay.profile import load_profile

    prof = load_profile([SAMPLE])
    assert len(prof.untraced_steps_us) == 4
    assert all(5_000 < s < 60_000 for s in prof.untraced_steps_us)


@pytest.mark.parametrize("n, ranks", [(1, (0, 0)), (3, (0, 2)), (15, (3, 11)),
                                      (20, (5, 14)), (100, (40, 59))])
def test_the_median_interval_is_the_binomial_order_statistics(n, ranks):
    """n/2 -+ 1.96 sqrt(n)/2, as ranks: for 100 values the 41st and 60th (0-based 40, 59)."""
    assert median_interval([float(v) for v in range(n)]) == tuple(float(r) for r in ranks)


def _prediction(rate: float) -> Prediction:
    return Prediction(model="sim", workers=1, ps=1, bandwidth_bps=1e8, order="observed",
                      flow_control=True, examples_per_s=rate, steps_per_s=rate / 32,
                      ci=(rate, rate), steps=60, bottleneck="uplink ps:0", utilisation=0.5,
                      events=1000)


def _profile(steps_us: tuple[float, ...]):
    from gradwire.replay.template import Profile

    return Profile(templates=[], batch_size=32, ps_tasks=["/job:ps/task:0"],
                   link_rate_bps=1e8, alpha_us_per_byte=0.0, beta_us=0.0, source="test",
                   untraced_steps_us=steps_us)


def test_a_replay_outside_the_run_gets_a_note_with_its_error():
    """Fifteen steps of 178-181 ms (32 examples: 178.3 ex/s at the median, 179.5 ms); a
    replay at 157 ex/s is 11.9% slow and outside the median's interval, one at 178.5 is
    inside."""
    steps = tuple(1e3 * (178 + 3 * k / 14) for k in range(15))
    slow = own_run(_profile(steps), _prediction(157.0))
    assert slow.measured == pytest.approx(32e6 / steps[7])
    assert slow.low < slow.measured < slow.high
    assert slow.error == pytest.approx(157.0 / slow.measured - 1.0)
    assert not slow.inside
    note = own_run_note(slow)
    assert note is not None and "11.9% slow" in note and "15 untraced steps" in note
    near = own_run(_profile(steps), _prediction(178.5))
    assert near.inside and own_run_note(near) is None
    assert own_run_note(None) is None
    fast = own_run(_profile(steps), _prediction(200.0))
    assert "fast" in (own_run_note(fast) or "")
    assert slow.summary()["replayed_examples_per_s"] == 157.0
    assert not slow.after_capture and "collect --duration" in note


def test_the_steps_after_the_capture_are_the_run_to_compare_with():
    """With 5 or more steps after its captures ended, the self-check compares the replay
    with those (the job unrecorded, 20% faster here) and says so; with 4 it keeps the
    captured untraced steps."""
    import dataclasses

    captured = tuple(1e3 * (178 + 3 * k / 14) for k in range(15))
    after = tuple(0.8 * s for s in captured[:5])
    prof = dataclasses.replace(_profile(captured), recording_cycles_us=(captured, after))
    run = own_run(prof, _prediction(178.0))
    assert run.after_capture and run.steps == 5
    assert run.measured == pytest.approx(32e6 / after[2])
    note = own_run_note(run) or ""
    assert "its 5 steps after its captures ran" in note and "ran unrecorded" in note
    assert run.summary()["after_capture"] is True
    few = dataclasses.replace(prof, recording_cycles_us=(captured, after[:4]))
    assert not own_run(few, _prediction(178.0)).after_capture


def _predict_json(monkeypatch, capsys, *argv: str) -> dict:
    import gradwire.cli as cli
    import gradwire.replay.selfcheck as selfcheck

    monkeypatch.setattr(selfcheck, "MIN_STEPS", 3)  # the small bundle has 4 untraced steps
    monkeypatch.setattr(cli, "_stop_on_signals", lambda: None)  # pytest keeps its handlers
    code = cli.main(["predict", str(SAMPLE), "--jobs", "1", "--replications", "2",
                     "--max-replications", "2", "--format", "json", "-q", *argv])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_predict_checks_its_own_configuration_and_keeps_the_check_off_the_table(
        monkeypatch, capsys):
    """With W = 1 in the sweep the check is that row; without it predict replays W = 1 once
    more for the check and shows only the rows asked for; the same replay either way."""
    with_one = _predict_json(monkeypatch, capsys, "--workers", "1,2")
    check = with_one["self_check"]
    row = next(r for r in with_one["rows"] if r["workers"] == 1)
    assert check["replayed_examples_per_s"] == row["examples_per_s"]
    assert check["untraced_steps"] == 4 and check["workers"] == 1
    lo, hi = check["measured_range_examples_per_s"]
    assert lo <= check["measured_examples_per_s"] <= hi
    assert (check["inside"] == (lo <= check["replayed_examples_per_s"] <= hi))
    without = _predict_json(monkeypatch, capsys, "--workers", "2")
    assert [r["workers"] for r in without["rows"]] == [2]
    assert without["self_check"] == check


def test_a_changed_job_is_not_checked(monkeypatch, capsys):
    """Faster compute is another job: there is no run of it to compare with."""
    doc = _predict_json(monkeypatch, capsys, "--workers", "1", "--compute-scale", "2")
    assert doc["self_check"] is None


def test_the_sweep_has_its_own_configuration_only_at_one_worker_its_ps_and_rate():
    from gradwire.replay.selfcheck import same_rate, swept

    prof = _profile(())
    assert same_rate(1e8, 1e8 * (1 + 1e-12)) and not same_rate(1e8, 1.01e8)
    assert swept((1, 2), [1], [2e8, 1e8], prof, 1e8)
    assert not swept((2, 4), [1], [1e8], prof, 1e8)  # no W = 1
    assert not swept((1,), [2], [1e8], prof, 1e8)  # another PS count
    assert not swept((1,), [1], [1e9], prof, 1e8)  # another rate


def test_the_own_configuration_keeps_the_labs_unshaped_worker_nic():
    """A profile whose lab shaped only its 2 PS links ran with its worker's NIC unlimited:
    the self-check's and the recording cost's replay of it does too, whatever
    --worker-bandwidth caps in the sweep; with one PS (a NIC at the link's rate changes
    nothing) or an unlimited sweep, the sweep's own row serves."""
    import dataclasses

    from gradwire.replay.options import PredictOptions
    from gradwire.replay.predictflow import own_jobs, own_nic_differs, resolved
    from gradwire.replay.profile import load_profile

    prof = load_profile([SAMPLE])
    assert prof.lab.get("shape") == "ps"
    two = dataclasses.replace(prof, ps_tasks=[*prof.ps_tasks, "/job:ps/task:1"])
    opts = resolved(PredictOptions(bundles=(SAMPLE,)), two)
    assert opts.worker_bandwidth == "same" and own_nic_differs(opts, two)
    (job,) = own_jobs(opts, two, None, (0.0, 0.0), (0.0, 0.0))
    assert job.workers == 1 and job.ps == 2 and job.worker_bandwidth_bps is None
    assert not own_nic_differs(dataclasses.replace(opts, worker_bandwidth="unlimited"), two)
    assert not own_nic_differs(opts, prof)
    (job,) = own_jobs(opts, prof, None, (0.0, 0.0), (0.0, 0.0))
    assert job.worker_bandwidth_bps == job.bandwidth_bps
