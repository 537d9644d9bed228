"""``--link-windows same``: every connection counted, both directions the larger window, the
standing queue at most the profile's lab queue (or ``--host-queue``), else unbounded."""

from __future__ import annotations

import json
import math

import pytest
from conftest import gradwire
from test_sync_ps import SYNC_BUNDLE

from gradwire.replay.hostqueue import MSS, MSS_WIRE, HostQueueSpec, lab_queue_bytes
from gradwire.replay.options import PredictOptions
from gradwire.replay.predictflow import auto_link_windows, standing_of


@pytest.mark.parametrize("lab, host_queue, want", [
    ({"qdisc": "fifo", "queue": None, "queue_bytes": 625000}, None, "queue"),
    ({"qdisc": "fair", "queue_bytes": 625000}, None, "unbounded"),  # a fair queue: not a FIFO
    ({"queue": "kernel", "queue_bytes": None}, None, "unbounded"),
    ({}, None, "unbounded"),  # no lab: nobody knows the queue
    ({}, 1e6, "queue"),  # unless the user says it
])
def test_the_standing_queue_is_the_lab_fifo_s_or_the_one_given(lab, host_queue, want):
    opts = PredictOptions(bundles=("b",), workers=(1,), link_windows="same",
                          host_queue_bytes=host_queue)
    assert standing_of(opts, lab) == want


def test_the_standing_limit_at_a_rate_is_the_queue_in_payload_bytes():
    assert HostQueueSpec().standing_bytes(1e9) == 0.0  # the one-window rule
    assert HostQueueSpec(standing="unbounded").standing_bytes(1e9) == math.inf
    assert HostQueueSpec(standing="queue").standing_bytes(1e9) == pytest.approx(
        lab_queue_bytes(1e9) * MSS / MSS_WIRE)
    assert HostQueueSpec(1e6, standing="queue").standing_bytes(1e9) == pytest.approx(
        1e6 * MSS / MSS_WIRE)


def test_predict_counts_every_connection_and_says_so():
    """On the small synchronous lab profile replayed on shared links: the windows line says
    what is replayed, and at W = 4 the rule changes the prediction; --host-queue without a
    queue to size is one line, exit 2."""
    rows, said = {}, {}
    for windows in ("auto", "same"):  # auto: the window ratio, for a synchronous profile
        proc = gradwire("-v", "predict", str(SYNC_BUNDLE), "--workers", "4", "--link", "fair",
                        "--link-windows", windows, "--format", "json", timeout=300)
        assert proc.returncode == 0, proc.stderr
        rows[windows] = [r["examples_per_s"] for r in json.loads(proc.stdout)["rows"]
                         if r["model"] == "sim"][0]
        said[windows] = proc.stderr
    assert "every connection counted" in said["same"] and "at most the queue" in said["same"]
    assert "(--link-windows ratio)" in said["auto"]
    assert rows["same"] > 0 and rows["same"] != rows["auto"]
    bad = gradwire("predict", str(SYNC_BUNDLE), "--link", "fair", "--host-queue", "1MB")
    assert bad.returncode == 2 and "--host-queue sizes the queue" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_auto_counts_every_connection_for_the_asynchronous_ps_on_shared_links():
    assert auto_link_windows(("async-ps",), "fair") == "same"
    assert auto_link_windows(("async-ps@whole",), "fair") == "same"
    assert auto_link_windows(("async-ps",), "hostqueue") == "ratio"  # the PS's own queue
    assert auto_link_windows(("sync-ps",), "fair") == "ratio"
    assert auto_link_windows(("async-ps", "sync-ps"), "fair") == "ratio"  # one rule for both
    # a lab that queued each node apart (--qdisc fair) did not couple the workers' directions
    for mechanisms in (("async-ps",), ("sync-ps",)):
        assert auto_link_windows(mechanisms, "fair", {"qdisc": "fair"}) == "off"
        assert auto_link_windows(mechanisms, "fair", {"qdisc": "fifo"}) != "off"
    # the shipped (asynchronous) sample, by default: said, and the same rows as asking for it
    rows = {}
    for extra in ((), ("--link-windows", "same")):
        proc = gradwire("-v", "predict", "--sample", "--workers", "2", "--replications", "2",
                        "--max-replications", "2", "--format", "json", *extra, timeout=300)
        assert proc.returncode == 0, proc.stderr
        rows[extra] = json.loads(proc.stdout)["rows"]
        assert "replayed with every connection counted" in proc.stderr
    assert rows[()] == rows[("--link-windows", "same")]


def test_a_host_queue_given_sizes_the_standing_queue_under_link_auto():
    """--link auto resolving to shared links kept --host-queue (until 2026-12-04 it put the
    link's own size, none, in its place, and the lab's queue stood instead)."""
    from gradwire.replay.predictflow import resolved
    from gradwire.replay.profile import load_profile

    opts = resolved(PredictOptions(bundles=(SYNC_BUNDLE,), workers=(4,), link="auto",
                                   mechanisms=("async-ps",), link_windows="same",
                                   host_queue_bytes=2e6), load_profile([SYNC_BUNDLE]))
    assert opts.link == "fair" and opts.standing_queue == "queue"
    assert opts.host_queue.queue_bytes == 2e6
    assert opts.host_queue.standing_bytes(1e9) == pytest.approx(2e6 * MSS / MSS_WIRE)
