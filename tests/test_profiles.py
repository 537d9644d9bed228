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
    assert proc.returncode == 1 and "no worker step" in proc.stderr
