"""``--model emulate`` (replay/emulate.py): the profile's transfers over real TCP.

The arithmetic (bytes per PS, the idle time's size and place, the rows) is checked with a
runner that hands back step times written here, standing in for the namespaces; the root
tests run the real thing: namespaces, tc-shaped links, Python sockets, and the whole
``gradwire predict --model emulate`` command on a lab profile."""

from __future__ import annotations

import json
import statistics

import pytest
from conftest import SAMPLE, gradwire, need_root, stand_in_runner

from gradwire.errors import PredictError
from gradwire.replay import emulate
from gradwire.replay.emulate import (
    PHASES,
    RANDOM,
    TOGETHER,
    Calibration,
    EmulatedLink,
    EmulatedStep,
    before_push_share,
    calibrate,
    can_emulate,
    emulated_rows,
    known_to_target,
    link_for,
    run_once,
    step_bytes,
    throughput,
    with_idle,
)
from gradwire.replay.grid import ps_loads
from gradwire.replay.profile import load_profile
from gradwire.replay.selfcheck import median_interval, own_steps_us


@pytest.fixture(scope="module")
def prof():
    return load_profile([SAMPLE])


def test_step_bytes_are_the_profiles_per_ps_and_placed_on_more_pses(prof) -> None:
    one = step_bytes(prof, 1, "greedy")
    pulled, pushed = ps_loads(prof, 1)
    assert one.pull_bytes == (round(pulled[0]),) and one.push_bytes == (round(pushed[0]),)
    assert one.before_push_s == one.after_push_s == 0.0
    two = step_bytes(prof, 2, "greedy")
    assert len(two.pull_bytes) == 2 and min(two.pull_bytes) > 0
    assert abs(sum(two.pull_bytes) - sum(one.pull_bytes)) <= 2  # the same bytes, placed
    assert abs(sum(two.push_bytes) - sum(one.push_bytes)) <= 2


def test_idle_split_follows_the_captures_phases() -> None:
    assert before_push_share({"worker": 1.0, "server": 3.0}) == pytest.approx(0.25)
    assert before_push_share({}) == 1.0  # no phases: all before the push
    s = with_idle(EmulatedStep((10,), (20,)), 0.008, 0.25)
    assert (s.pull_bytes, s.push_bytes) == ((10,), (20,))
    assert s.before_push_s == pytest.approx(0.002) and s.after_push_s == pytest.approx(0.006)


def test_throughput_counts_steps_in_the_common_steady_span() -> None:
    # two workers, 0.1 s steps, the second starting 0.05 s later
    a = [0.1 * k for k in range(12)]
    b = [0.05 + 0.1 * k for k in range(12)]
    rate, step = throughput([a, b], batch=10)
    assert step == pytest.approx(0.1)
    assert rate == pytest.approx(200.0, rel=0.1)  # 2 workers x 10 examples / 0.1 s
    with pytest.raises(PredictError):
        throughput([a, [t + 5.0 for t in b]], batch=10)


def test_link_takes_the_lab_profiles_shaping(prof) -> None:
    import dataclasses

    link = link_for(prof, 2.5e9)
    assert link.bandwidth == "2500000000bit"
    assert link == EmulatedLink("2500000000bit")  # no lab record: the lab's defaults
    lab = dataclasses.replace(prof, lab={"queue": "512k", "tcp_cc": "reno", "burst": "mtu",
                                         "qdisc": "ackfirst", "delay": "1ms", "batch_size": 8})
    assert link_for(lab, 1e9) == EmulatedLink("1000000000bit", queue="512k", delay="1ms",
                                              tcp_cc="reno", burst="mtu", qdisc="ackfirst")


def test_link_runs_the_congestion_control_the_profiles_ps_hosts_ran(prof) -> None:
    """A profile from no lab whose PS manifests record CUBIC is emulated under CUBIC, not the
    emulating host's default; the lab's record, where there is one, wins."""
    import dataclasses

    cubic = dataclasses.replace(prof, ps_congestion_control="cubic")
    assert link_for(cubic, 1e9) == EmulatedLink("1000000000bit", tcp_cc="cubic")
    lab = dataclasses.replace(cubic, lab={"tcp_cc": "reno"})
    assert link_for(lab, 1e9).tcp_cc == "reno"


def test_a_congestion_control_the_host_does_not_allow_is_a_one_line_error() -> None:
    """The emulator refuses, before it builds a namespace, a congestion control the host's
    net.ipv4.tcp_allowed_congestion_control leaves out, and says which are allowed."""
    link = EmulatedLink("1000000000bit", tcp_cc="no-such-cc")
    with pytest.raises(PredictError, match="tcp_allowed_congestion_control") as err:
        emulate.run_job(link, 1, 1, lambda k, addr: [], "", lambda addrs: {})
    assert "\n" not in str(err.value) and "no-such-cc" in str(err.value)


def test_calibration_is_the_profiles_step_less_the_bare_one() -> None:
    cal = Calibration(own_step_s=0.050, bare_step_s=0.030, share_before=0.4)
    assert cal.idle_s == pytest.approx(0.020)
    assert "20.00 ms idle" in cal.said() and "40% before" in cal.said()
    short = Calibration(own_step_s=0.020, bare_step_s=0.030, share_before=0.4)
    assert short.idle_s == 0.0 and "no idle time" in short.said()


def _fake_runner(step_s: float, calls: list):
    """Every worker's steps take ``step_s`` plus the step's own idle time (seconds)."""
    return stand_in_runner(lambda step: step_s + step.before_push_s + step.after_push_s, calls)


def test_rows_use_the_calibrated_idle_time(prof) -> None:
    calls: list = []
    rows, cal = emulated_rows(prof, [1, 2], [1, 2], [1e9], "greedy",
                              runner=_fake_runner(0.01, calls), step=PHASES)
    own = statistics.median(own_steps_us(prof)[0]) / 1e6
    assert cal.own_step_s == pytest.approx(own) and cal.bare_step_s == pytest.approx(0.01)
    assert all(c[2] == 1 and c[0].before_push_s == 0.0  # the calibration runs
               for c in calls[:emulate.RUNS])
    assert len(calls) == emulate.RUNS + 2 * 2 * emulate.RUNS
    assert [(r.workers, r.ps, r.model) for r in rows] == [
        (1, 1, "emulate"), (2, 1, "emulate"), (1, 2, "emulate"), (2, 2, "emulate")]
    # W = 1 at the profile's own configuration comes back at its own step
    assert rows[0].examples_per_s == pytest.approx(prof.batch_size / own, rel=0.01)
    assert all(r.ci[0] <= r.examples_per_s <= r.ci[1] and r.phase_range is None for r in rows)
    assert rows[0].bottleneck in ("downlink ps:0", "uplink ps:0")
    busiest = max(calls[0][0].pull_bytes + calls[0][0].push_bytes)
    assert rows[0].utilisation == pytest.approx(
        8 * busiest * rows[0].steps_per_s / 1e9)  # its bytes a second over the rate
    assert len(calls[-1][0].pull_bytes) == 2  # the 2-PS rows ran two PSes


def test_random_starts_spread_within_the_configurations_one_worker_step(prof) -> None:
    """``--emulate-start random``: W >= 2 runs wait within the emulated 1-worker step of the
    same configuration; W = 1 runs, and the calibration, start at once; without W = 1 among
    the rows, its runs are made for the spread alone."""
    calls: list = []
    rows, cal = emulated_rows(prof, [2, 3], [1], [1e9, 5e8], "greedy",
                              runner=_fake_runner(0.01, calls), step=PHASES, start=RANDOM)
    assert cal.start == RANDOM and cal.summary()["start"] == RANDOM
    assert [(r.workers, r.bandwidth_bps) for r in rows] == [(2, 1e9), (3, 1e9), (2, 5e8),
                                                             (3, 5e8)]
    cal_runs = emulate.RUNS  # the calibration's, at once
    assert all(c[2] == 1 and c[3] == 0.0 for c in calls[:cal_runs])
    per_rate = 3 * emulate.RUNS  # W = 1 for the spread, then W = 2 and 3
    assert len(calls) == cal_runs + 2 * per_rate
    for first in (cal_runs, cal_runs + per_rate):
        ones = calls[first:first + emulate.RUNS]
        assert all(c[2] == 1 and c[3] == 0.0 for c in ones)
        one_step = cal.idle_s + 0.01  # the stand-in's 1-worker step
        assert all(c[2] > 1 and c[3] == pytest.approx(one_step)
                   for c in calls[first + emulate.RUNS:first + per_rate])
    # with W = 1 asked for, its rows' runs give the spread: no more runs than together
    calls.clear()
    emulated_rows(prof, [1, 2], [1], [1e9], "greedy", runner=_fake_runner(0.01, calls),
                  step=PHASES, start=RANDOM)
    assert len(calls) == cal_runs + 2 * emulate.RUNS and calls[-1][3] > 0.0
    calls.clear()
    emulated_rows(prof, [1, 2], [1], [1e9], "greedy", runner=_fake_runner(0.01, calls),
                  step=PHASES, start=TOGETHER)
    assert all(c[3] == 0.0 for c in calls)  # together: at once
    calls.clear()
    _, cal = emulated_rows(prof, [1, 2], [1], [1e9], "greedy",
                           runner=_fake_runner(0.01, calls), step=PHASES)
    assert cal.start == RANDOM and calls[-1][3] > 0.0  # random, the default


def test_runs_that_disagree_are_run_again_up_to_the_cap(prof) -> None:
    """Runs within CI_TARGET of their median stop at RUNS; runs that disagree go on RUNS at a
    time up to ``max_runs``, and the row's interval is that of their median."""
    apart = (1.0, 1.3, 1.0, 1.3, 1.0, 1.3, 1.0, 1.3, 1.0)  # W = 1's runs' speeds, alternating

    def runner(calls: list):  # the calibration's runs at speed 1, then W = 1's at one rate
        speeds = iter((1.0,) * emulate.RUNS + apart)
        return stand_in_runner(lambda _job: 0.01 / next(speeds), calls)

    calls: list = []
    rows, cal = emulated_rows(prof, [1], [1], [1e9], "greedy", runner=runner(calls),
                              step=PHASES)
    assert len(calls) == emulate.RUNS + emulate.MAX_RUNS and cal.max_runs == emulate.MAX_RUNS
    runs = [prof.batch_size / 0.01 * r for r in apart]
    assert rows[0].examples_per_s == pytest.approx(statistics.median(runs))
    assert rows[0].ci == pytest.approx(median_interval(runs))
    assert rows[0].steps == emulate.STEPS * emulate.MAX_RUNS and rows[0].start == RANDOM
    calls.clear()
    emulated_rows(prof, [1], [1], [1e9], "greedy", runner=runner(calls), step=PHASES,
                  max_runs=emulate.RUNS)
    assert len(calls) == 2 * emulate.RUNS
    assert known_to_target([100.0, 101.0, 99.0]) and not known_to_target([100.0, 103.0, 99.0])


def test_calibration_needs_the_profiles_own_steps(prof) -> None:
    import dataclasses

    bare = dataclasses.replace(prof, untraced_steps_us=(), recording_cycles_us=((), ()))
    with pytest.raises(PredictError, match="own steps"):
        calibrate(bare, "greedy", _fake_runner(0.01, []), PHASES)


def test_without_root_it_says_so(monkeypatch, prof) -> None:
    monkeypatch.setattr(emulate.os, "geteuid", lambda: 1000)
    assert "root" in (can_emulate() or "")
    with pytest.raises(PredictError, match="needs root"):
        emulated_rows(prof, [1], [1], [1e9], "greedy")


def test_cli_refuses_emulate_for_other_mechanisms_job_whatifs_and_too_many_nodes() -> None:
    for extra in (["--mechanism", "sync-ps"], ["--compute-scale", "2"], ["--workers", "1,101"],
                  ["--ps", "51"]):
        r = gradwire("predict", str(SAMPLE), "--workers", "1,2", "--model", "emulate", *extra)
        assert r.returncode != 0, r.stdout
        assert "--model emulate" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("flag, good, bad, said", [
    ("--emulate-start", "random", "staggered", "together"),  # an unknown start
    ("--emulate-runs", "6", "2", "at least 3"),  # fewer than the first batch of runs
])
def test_emulate_options_are_refused_without_emulate_or_out_of_range(flag, good, bad,
                                                                     said) -> None:
    r = gradwire("predict", str(SAMPLE), "--workers", "1", flag, good)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert flag in r.stderr and "--model" in r.stderr
    r = gradwire("predict", str(SAMPLE), "--workers", "1", "--model", "emulate", flag, bad)
    assert r.returncode != 0 and "Traceback" not in r.stderr and said in r.stderr


@pytest.mark.slow
@pytest.mark.root
def test_emulated_job_runs_over_shaped_links() -> None:
    """Real namespaces and sockets: 1 MB each way at 200 Mbit/s takes at least its wire time
    (80 ms a step); split over two PSes, whose links run in parallel, about half; idle time
    adds to the step; two workers get no more than both directions of the link."""
    need_root()
    one = EmulatedStep((1_000_000,), (1_000_000,))
    link = EmulatedLink(bandwidth="200mbit", burst="mtu")  # a plain rate, no free burst
    rate1, step1 = throughput(run_once(one, link, 1, steps=10), batch=1)
    assert 0.080 <= step1 <= 0.160, step1
    two = EmulatedStep((500_000, 500_000), (500_000, 500_000))
    _, step2 = throughput(run_once(two, link, 1, steps=10), batch=1)
    assert 0.040 <= step2 <= 0.75 * step1, (step1, step2)
    idle = with_idle(one, 0.040, 0.5)
    _, step3 = throughput(run_once(idle, link, 1, steps=10), batch=1)
    assert step3 == pytest.approx(step1 + 0.040, abs=0.015)
    # two workers: at most both directions full (one pulling while the other pushes)
    pair, _ = throughput(run_once(one, link, 2, steps=20), batch=1)
    assert rate1 * 0.9 <= pair <= rate1 * 2.05, (rate1, pair)


@pytest.mark.slow
@pytest.mark.root
def test_predict_model_emulate_end_to_end(tmp_path) -> None:
    need_root()
    out = tmp_path / "pred.json"
    r = gradwire("predict", str(SAMPLE), "--workers", "1,2", "--model", "sim,emulate",
                 "--emulate-step", "phases", "--json", str(out), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    rows = {(x["model"], x["workers"]): x["examples_per_s"] for x in doc["rows"]}
    cal = doc["profile"]["emulate"]
    own = doc["profile"]["batch_size"] / cal["own_step_s"]  # the profile's own step
    assert rows[("emulate", 1)] == pytest.approx(own, rel=0.15)  # calibrated to it
    assert rows[("emulate", 2)] > 0.9 * rows[("emulate", 1)]
    assert cal["idle_s"] == pytest.approx(max(0.0, cal["own_step_s"] - cal["bare_step_s"]))
    assert cal["runs"] == emulate.RUNS


@pytest.mark.slow
@pytest.mark.root
def test_workers_start_spread_out_when_asked() -> None:
    """Real namespaces: with a 1 s start spread, six workers' first steps begin more than
    0.1 s apart (all six within 0.1 s of each other by chance: about 6e-5) and none later
    than the spread allows after the first; with none, within the spawns' few tenths."""
    need_root()
    tiny = EmulatedStep((1000,), (1000,))
    link = EmulatedLink(bandwidth="200mbit", burst="mtu")
    starts = [e[0] for e in run_once(tiny, link, 6, steps=3, start_spread_s=1.0)]
    assert 0.1 < max(starts) - min(starts) < 1.0 + 0.5, starts
    starts = [e[0] for e in run_once(tiny, link, 6, steps=3)]
    assert max(starts) - min(starts) < 0.5, starts


@pytest.mark.slow
@pytest.mark.root
def test_a_ps_that_receives_nothing_gets_no_push() -> None:
    """A PS holding no pushed bytes (placement can leave one so) is sent no push and answers
    none: the step waits on the other PS's push alone."""
    need_root()
    step = EmulatedStep((500_000, 500_000), (1_000_000, 0))
    link = EmulatedLink(bandwidth="200mbit", burst="mtu")
    _, step_s = throughput(run_once(step, link, 1, steps=8), batch=1)
    assert 0.060 <= step_s <= 0.160, step_s  # 20 ms of pull, 40 ms of push at least
