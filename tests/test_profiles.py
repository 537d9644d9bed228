"""Parsing-overhead fit and MASCOTS phases, on the lab's sample bundle and a 1-worker run."""

from __future__ import annotations

import json

import pytest
from conftest import SAMPLE, gradwire

from gradwire.collector.overhead import OverheadPoint, edge_of, fit_overhead


def test_line_fit_recovers_alpha_and_beta():
    pts = [OverheadPoint(0, "t", n, 0.002 * n + 50.0) for n in (10, 1_000, 100_000, 2_000_000)]
    fit = fit_overhead("worker:0", pts)
    assert fit.alpha_us_per_byte == pytest.approx(0.002)
    assert fit.beta_us == pytest.approx(50.0)
    assert fit.r2 == pytest.approx(1.0) and fit.residual_p95_abs_us < 1e-6
    assert edge_of("/job:ps/t:0;1f;/job:worker/t:0;edge_7_w/read;0:0") == "edge_7_w/read"
    assert edge_of("garbage") is None


def test_overhead_on_the_sample_matches_every_recvtensor():
    proc = gradwire("overhead", str(SAMPLE), "--json")
    assert proc.returncode == 0, proc.stderr
    fits = {f["node"]: f for f in json.loads(proc.stdout)}
    assert set(fits) == {"ps:0", "worker:0"}
    for f in fits.values():
        assert f["points"] >= 20 and f["unmatched_ops"] == 0 and f["negative"] == 0
        assert f["beta_us"] > 0 and 0 <= f["r2"] <= 1


def test_overhead_finds_a_bundle_s_task_from_its_address_and_reads_a_bundle_once(tmp_path):
    """A manifest without a task (collected without TF_CONFIG) was left out of the fit
    without a word; the same bundle given twice was refused as two runs of one task."""
    import shutil

    shutil.copytree(SAMPLE, tmp_path / "s")
    manifest = tmp_path / "s" / "worker0" / "manifest.json"
    doc = json.loads(manifest.read_text())
    del doc["task"]
    manifest.write_text(json.dumps(doc))
    proc = gradwire("overhead", str(tmp_path / "s"), str(tmp_path / "s" / "worker0"), "--json")
    assert proc.returncode == 0, proc.stderr
    assert {f["node"] for f in json.loads(proc.stdout)} == {"ps:0", "worker:0"}
    doc["host"]["addresses"] = ["10.9.9.9"]  # no cluster task on this host: said, not silent
    manifest.write_text(json.dumps(doc))
    proc = gradwire("overhead", str(tmp_path / "s"), "--json")
    assert proc.returncode == 0, proc.stderr
    assert {f["node"] for f in json.loads(proc.stdout)} == {"ps:0"}
    assert "worker0: its manifest names no task and no cluster task has this host's " \
        "address" in proc.stderr


def test_phases_on_the_sample():
    proc = gradwire("phases", str(SAMPLE / "ps0"), "--json")
    assert proc.returncode == 0, proc.stderr
    (worker, st), = json.loads(proc.stdout).items()
    assert worker.startswith("198.1") and st["steps"] >= 5
    assert st["down_bytes_median"] == pytest.approx(0.198e6, rel=0.01)
    assert st["up_bytes_median"] == pytest.approx(0.198e6, rel=0.01)
    for phase in ("downlink", "worker", "uplink", "server"):
        assert 0 < st[f"{phase}_median"] < 0.05


def test_phases_without_tensorflow_traffic_says_so(realdata):
    proc = gradwire("phases", str(realdata / "vitalybupt_grpc_cpp_chttp2.pcap"))
    assert proc.returncode == 2 and "no worker step" in proc.stderr
    assert "Traceback" not in proc.stderr and not proc.stdout  # an error, and no empty table


def test_a_lab_result_that_is_a_fifo_is_named_and_never_opened(tmp_path, caplog):
    """Reading a FIFO blocks until a writer comes: the profile warns about it, unread, and
    asks for the batch size the lab result would have given."""
    import logging

    from badbundles import L, fifo, make
    from test_bundle_fuzz import deadline

    from gradwire.errors import TraceError
    from gradwire.replay.profile import load_profile

    root = make(tmp_path, fifo(L))
    with deadline(60), caplog.at_level(logging.WARNING), \
            pytest.raises(TraceError, match="the batch size is unknown"):
        load_profile([root])
    assert "lab_result.json is not a readable lab result; ignoring it (is a named pipe" \
        in caplog.text, caplog.text


def test_a_lab_result_with_a_bad_field_names_it_even_with_a_batch_size(tmp_path):
    """A lab result that parses is validated whole: its step end times would set the trace's
    slowdown."""
    from badbundles import NAN, L, make, set_

    from gradwire.errors import BundleError
    from gradwire.replay.profile import load_profile

    root = make(tmp_path, set_(L, "per_worker.worker0.step_end_times_s.2", NAN))
    with pytest.raises(BundleError, match=r"lab_result.json: field "
                       r"per_worker.worker0.step_end_times_s\[2\] is NaN"):
        load_profile([root], batch_size=32)
