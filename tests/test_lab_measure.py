"""The lab's pure parts: bottleneck buffer sizes, the cluster-throughput window and the
checks of a configuration's training mode."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from lab.cluster import cluster_throughput  # noqa: E402

from gradwire.replay.netns import (  # noqa: E402
    LabError,
    allowed_tcp_cc,
    check_qdisc,
    check_tcp_cc,
    queue_bytes,
)


def test_queue_default_is_ten_ms_of_the_rate_and_at_least_256k():
    assert queue_bytes(None, 1e9) == 1_250_000  # 10 ms at 1 Gbit/s
    assert queue_bytes("", 100e6) == 256 * 1024  # 10 ms would be 125 kB: the floor wins
    assert queue_bytes("kernel", 1e9) is None
    assert queue_bytes("512k", 1e9) == 512 * 1024
    assert queue_bytes("2m", None) == 2 * 1024 * 1024
    assert queue_bytes("300000", None) == 300_000


@pytest.mark.parametrize("bad", ["fast", "64k", "1.5x"])
def test_bad_queue_is_a_lab_error(bad):
    with pytest.raises(LabError, match="bad queue"):
        queue_bytes(bad, 1e9)


def test_fair_and_ackfirst_qdiscs_need_a_byte_queue_and_no_delay():
    check_qdisc("fifo", None, 0.001)
    check_qdisc("fair", 625_000, 0.0)
    with pytest.raises(LabError, match="bad qdisc 'fq'"):
        check_qdisc("fq", 625_000, 0.0)
    check_qdisc("ackfirst", 625_000, 0.0)
    for qdisc in ("fair", "ackfirst"):
        for queue, delay in ((None, 0.0), (625_000, 0.001)):
            with pytest.raises(LabError, match=f"qdisc '{qdisc}' needs a byte queue"):
                check_qdisc(qdisc, queue, delay)


def test_a_burst_is_gso_mtu_or_a_bucket_at_least_gso_s():
    from lab.cluster import LabConfig

    from gradwire.replay.netns import burst_bytes

    assert burst_bytes("gso", 1e9) == 131072 and burst_bytes("gso", 2e9) == 250000
    assert burst_bytes("mtu", 1e9) == 125000 and burst_bytes("mtu", 20e6) == 4 * 1514
    assert burst_bytes("512k", 1e9) == 524288 and burst_bytes("1m", 1e9) == 1048576
    with pytest.raises(LabError, match="caps the rate with GSO on"):
        burst_bytes("64k", 1e9)
    for bad in ("big", "-5k", "0"):
        with pytest.raises(LabError, match="bad burst"):
            burst_bytes(bad, 1e9)
    with pytest.raises(LabError, match="bad burst '64k'"):
        LabConfig(bandwidth="1gbit", burst="64k").validate()
    LabConfig(bandwidth="1gbit", burst="512k").validate()


def test_common_window_counts_only_steps_while_every_worker_runs():
    # worker a starts early and runs alone (fast) before b joins; both then step every 2 s
    a = [1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    b = [5.0, 7.0, 9.0, 11.0, 13.0, 15.0, 17.0, 19.0]
    rate, window = cluster_throughput([a, b], [10, 10])
    # warm-up: first quarter (2 steps) each -> window opens at max(2.0, 7.0), closes at 12.0
    assert window == [7.0, 12.0]
    assert rate == pytest.approx(10 * 2 / 4.0 + 10 * 2 / 4.0)  # a: 8, 10, 12; b: 7, 9, 11
    # the paper's sum of per-worker second halves counts a's solo steps as if concurrent
    assert rate < 10 * 4 / (12.0 - 6.0) + 10 * 4 / (19.0 - 11.0)


def test_lock_step_workers_are_measured_without_losing_a_step():
    # synchronous training: both step every 1.0 s, b ends each step 1 ms after a; counting all
    # ends inside [t0, t1] over its length would lose b's last step (t1 is a's last end)
    a = [float(k) for k in range(1, 13)]
    b = [x + 0.001 for x in a]
    rate, window = cluster_throughput([a, b], [32, 32])
    assert window == [3.001, 12.0]
    assert rate == pytest.approx(2 * 32 / 1.0)


def test_common_window_needs_overlap():
    assert cluster_throughput([[1.0, 2.0, 3.0], [10.0, 11.0, 12.0]], [1, 1]) == (None, None)
    assert cluster_throughput([[1.0, 2.0]], [1]) == (None, None)


def test_tcp_cc_must_be_one_a_namespace_may_use():
    check_tcp_cc(None)  # keep the host's
    for cc in allowed_tcp_cc():
        check_tcp_cc(cc)
    with pytest.raises(LabError, match=r"bad tcp-cc 'no-such-cc': .*allowed"):
        check_tcp_cc("no-such-cc")


def test_ring_mode_has_no_ps_and_shapes_every_link():
    from lab.cluster import LabConfig

    LabConfig(mode="ring", ps=0, shape="all", bandwidth="250mbit").validate()
    with pytest.raises(LabError, match="bad ps 1 for mode ring"):
        LabConfig(mode="ring", ps=1, shape="all").validate()
    with pytest.raises(LabError, match="ring all-reduce has no PS link; shape 'all'"):
        LabConfig(mode="ring", ps=0, shape="ps", bandwidth="250mbit").validate()
    with pytest.raises(LabError, match="bad ps 0: must be >= 1 in mode sync"):
        LabConfig(mode="sync", ps=0).validate()
    with pytest.raises(LabError, match="bad mode 'allreduce'"):
        LabConfig(mode="allreduce").validate()
