"""WIN estimator: the multiplexing model itself, and a fit on a real 1-worker lab capture."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import REPO, assert_one_line_error, gradwire, need_root, need_tf

from gradwire.bundle import open_bundle
from gradwire.collector.h2capture import capture_streams
from gradwire.collector.win import LinkStream, error_stats, fit_capture, simulate_link

sys.path.insert(0, str(REPO / "scripts"))


def test_model_preempts_once_at_win():
    a, b = LinkStream(0, 100, 0, 0), LinkStream(0, 30, 0, 0)
    assert simulate_link([a, b], 50, 1.0) == [130, 80]  # A: 50 then rest after B
    assert simulate_link([a, b], 1000, 1.0) == [100, 130]  # no preemption
    late = LinkStream(200, 10, 0, 200)
    assert simulate_link([a, late], 50, 1.0) == [100, 210]  # idle link waits for arrivals


def test_error_stats_table_one():
    e = error_stats([0.01, 0.02, 0.03, 0.5])
    assert (e.median, e.maximum, e.streams) == (0.025, 0.5, 4)
    assert e.average == pytest.approx(0.14)


def _lab_capture(out: Path) -> Path:
    """The worker bundle of a fresh run of the WIN job (``scripts/bench_win.py``) in ``out``."""
    from bench_win import record_job

    return record_job(out) / "worker0"


@pytest.fixture(scope="module")
def one_worker_capture(tmp_path_factory):
    need_root()
    need_tf()
    return _lab_capture(tmp_path_factory.mktemp("win"))


def _down_fit(worker_bundle: Path):
    bundle = open_bundle(worker_bundle)
    fit, _ = fit_capture(bundle.capture_file, bundle.ports)
    assert fit.links == 1 and fit.steps >= 7  # 10 steps less the warm-up one(s)
    assert fit.advertised_win_bytes >= 4 << 20  # gRPC C-core advertises 4 MiB and more
    assert 50e6 < fit.rate_bytes_per_s < 140e6  # a 1 Gbit/s link
    assert fit.fitted.average <= fit.advertised.average
    assert fit.fitted.median < 0.25  # even a run the model cannot follow stays this close
    return fit


@pytest.mark.slow
@pytest.mark.root
def test_fit_on_a_real_one_worker_capture(one_worker_capture, tmp_path):
    # The paper's Table 1 medians are 0.35%-8%. Of 34 fresh lab runs of this job (14 by hand,
    # 20 with `scripts/bench_win.py --fresh 20`), 29 had a median of 0.3%-4.5% and 5 had
    # 14.0%-19.6%. In the two of those examined stream by stream, the worker requested the two
    # 7.2 MB tensors back to back and the PS sent them interleaved, at times a later request
    # first, which a one-stream-at-a-time model cannot follow (README, `gradwire win`). So the
    # bound is the paper's worst median in at least one of up to three runs (all three off:
    # about 1 in 300), and every run passes the checks in _down_fit.
    fit = _down_fit(one_worker_capture)
    medians = [fit.fitted.median]
    for k in range(2):
        if medians[-1] < 0.08:
            break
        medians.append(_down_fit(_lab_capture(tmp_path / f"run{k + 2}")).fitted.median)
    assert min(medians) < 0.08, medians
    proc = gradwire("win", str(one_worker_capture), "-o", str(tmp_path / "w.json"))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "w.json").read_text())
    assert report["fit"]["fitted_win_bytes"] == fit.fitted_win_bytes
    assert not proc.stdout and "wrote" in proc.stderr  # -o FILE takes the results
    proc = gradwire("win", str(one_worker_capture))  # without -o: the table, nothing written
    assert proc.returncode == 0 and "median" in proc.stdout, proc.stderr


def test_win_without_tensorflow_streams_says_so(tmp_path):
    from conftest import REALDATA, need_realdata

    need_realdata()
    proc = gradwire("win", str(REALDATA / "vitalybupt_grpc_cpp_chttp2.pcap"), "--ports",
                    "50051", "-o", str(tmp_path / "w.json"))
    assert_one_line_error(proc, "no RecvTensor transfers")
    assert not Path(tmp_path / "w.json").exists()  # a failed command writes nothing


def test_win_on_a_capture_cut_short_says_so(tmp_path):
    """Cut to 5%, the sample's capture holds no transfer that can be timed (this was a
    StatisticsError traceback)."""
    import shutil

    from conftest import SAMPLE

    shutil.copytree(SAMPLE / "worker0", tmp_path / "worker0")
    cap = tmp_path / "worker0" / "capture.pcapng"
    data = cap.read_bytes()
    cap.write_bytes(data[:len(data) // 20])
    proc = gradwire("win", str(tmp_path / "worker0"), "-o", str(tmp_path / "w.json"))
    assert_one_line_error(proc, "it ends mid-packet (the capture was cut short) before any "
                          "whole transfer")


@pytest.mark.slow
@pytest.mark.root
def test_phases_from_the_capture_add_up_to_the_measured_step(one_worker_capture):
    """MASCOTS'18 profiling from tcpdump alone: S^D + S^W + S^U + S^S is the step time."""
    import statistics

    from gradwire.collector.phases import step_phases, summarize_phases

    bundle = open_bundle(one_worker_capture)
    rows = [r for r in step_phases(capture_streams(bundle.capture_file, bundle.ports))
            if r.server_s is not None]
    (st,) = summarize_phases(rows).values()
    assert st["down_bytes_median"] == pytest.approx(20e6, rel=0.01)
    result = json.loads((one_worker_capture.parent / "lab_result.json").read_text())
    t = result["per_worker"]["worker0"]["step_end_times_s"]
    # the same steps on both sides (the capture's and the hook's clocks are the same
    # machine's wall clock): the hook's step ends inside the captured cycles after the first,
    # and the cycles that start between the first and last of those ends
    cycles = [(r.start_s, r.downlink_s + r.worker_s + r.uplink_s + r.server_s)
              for r in rows[1:]]
    ends = [x for x in t if cycles[0][0] <= x <= cycles[-1][0] + cycles[-1][1]]
    between = [c for s0, c in cycles if ends[0] <= s0 <= ends[-1]]
    assert len(between) == len(ends) - 1 >= 4, (len(between), len(ends))
    measured = (ends[-1] - ends[0]) / (len(ends) - 1)
    assert statistics.fmean(between) == pytest.approx(measured, rel=0.05)


def test_predicts_win_is_the_one_gradwire_win_fits(tmp_path):
    """predict fits WIN on the streams the alignment already read (no second pass over the
    worker's capture): the same value as ``gradwire win`` on that capture, in the JSON."""
    from conftest import SAMPLE

    from gradwire.replay.profile import load_profile

    fit, _ = fit_capture(SAMPLE / "worker0" / "capture.pcapng",
                         open_bundle(SAMPLE / "worker0").ports)
    assert fit.steps and load_profile([SAMPLE], fit_win=True).fitted_win_bytes == \
        fit.fitted_win_bytes
    assert load_profile([SAMPLE]).fitted_win_bytes is None  # not asked for: not fitted
    out = tmp_path / "p.json"
    proc = gradwire("predict", str(SAMPLE), "--workers", "1", "--replications", "2",
                    "--max-replications", "2", "--quiet", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["profile"]["win_bytes"] == fit.fitted_win_bytes


def test_the_compiled_link_model_gives_the_python_models_errors():
    """fit_win scores its grid with the compiled replay (LinkGroups); it must give exactly
    ``relative_errors`` of simulate_link: random groups with ties, empty and huge streams,
    WINs below and above the sizes."""
    import random

    from gradwire.collector.win import LinkGroups, relative_errors

    rng = random.Random(7)
    for _ in range(200):
        groups = []
        for _g in range(rng.randint(1, 4)):
            group = []
            for _k in range(rng.randint(1, 12)):
                start = rng.choice([0, 5, 10, rng.randint(0, 10**7)])
                group.append(LinkStream(start, rng.choice([0, 1, 65_535, rng.randint(1, 10**7)]),
                                        start + rng.randint(0, 10**8),
                                        start - rng.randint(0, 10**6)))
            groups.append(group)
        table = LinkGroups(groups)
        for win in (1, 65_535, 1 << 22, 2**31 - 1):
            for rate in (0.03125, 0.117, 1.25, rng.uniform(0.01, 2.0)):
                assert table.errors(win, rate).tolist() == relative_errors(groups, win, rate)
