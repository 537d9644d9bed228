"""collector.transport: TCP retransmissions and egress queueing delay of real captures,
against tshark's own analysis; and the lossy-link note of ``gradwire predict``."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from conftest import SAMPLE, gradwire, need, need_root, need_tshark  # noqa: E402

from gradwire.collector.transport import (  # noqa: E402
    TransportCounter,
    TransportStats,
    link_burst,
    transport_stats,
)
from gradwire.replay import netns  # noqa: E402
from gradwire.replay.grid import LOSSY_SHARE  # noqa: E402
from gradwire.replay.netns import Topology  # noqa: E402
from gradwire.replay.notes import start_note  # noqa: E402

PORT = 5201  # measure_throughput_bps's


def tshark_counts(path: Path) -> tuple[int, int]:
    """(data segments, data segments that resend bytes) as Wireshark's TCP analysis counts them.

    A segment below the highest sequence number seen is a retransmission to Wireshark unless
    it comes within 3 ms (or the handshake's RTT) of the highest one: that it files as
    ``out_of_order``, a guess about reordering. On the paths measured here (one FIFO queue;
    the real captures below hold none) nothing is reordered, so those are retransmissions
    too, and ``collector/transport.py`` counts them as such. tshark reassembles out-of-order
    segments, as every comparison with tshark here does (its default does not)."""
    def count(expr: str) -> int:
        out = subprocess.run(["tshark", "-o", "tcp.reassemble_out_of_order:TRUE", "-r",
                              str(path), "-Y", expr, "-T", "fields", "-e", "frame.number"],
                             capture_output=True, text=True, check=True)
        return len(out.stdout.split())

    return count("tcp.len > 0"), count(
        "tcp.len > 0 && (tcp.analysis.retransmission || tcp.analysis.fast_retransmission"
        " || tcp.analysis.spurious_retransmission || tcp.analysis.out_of_order)")


def test_counts_match_tshark_on_every_real_capture(realdata: Path) -> None:
    need_tshark()
    caps = sorted(realdata.glob("*.pcap*"))
    assert len(caps) >= 5
    for cap in caps:
        stats = transport_stats(cap)
        assert (stats.data_segments, stats.retransmitted) == tshark_counts(cap), cap.name
        assert stats.data_segments > 0 and stats.queue_delays_ms == ()  # no host given


def _capture_transfer(tmp_path: Path, name: str, to_ps: bool, **topo: str) -> tuple[Path, str]:
    """A 6 s bulk TCP transfer between the PS and a worker (``to_ps``: worker -> PS, through
    the switch's shaped egress; else PS -> worker, through the PS's own), captured (headers
    only) on the PS's interface; returns the capture and the PS's address."""
    need_root()
    need(shutil.which("tcpdump") is not None, "tcpdump (apt-get install tcpdump)")
    path = tmp_path / f"{name}.pcap"
    with Topology(num_ps=1, num_workers=1, **topo) as lab:
        ps, worker = lab.nodes
        dump = lab.spawn(ps, ["tcpdump", "-i", ps.iface, "-s", "128", "-U", "-w", str(path),
                              f"tcp port {PORT}"], stderr=subprocess.PIPE, text=True)
        assert dump.stderr is not None
        deadline = time.monotonic() + 10
        while "listening on" not in dump.stderr.readline():
            assert time.monotonic() < deadline and dump.poll() is None, "tcpdump did not start"
        src, dst = (worker, ps) if to_ps else (ps, worker)
        netns.measure_throughput_bps(lab, src, dst, nbytes=200_000_000, limit_s=6)
        dump.send_signal(signal.SIGINT)
        dump.wait(timeout=10)
        return path, ps.addr


@pytest.mark.slow
def test_an_overflowing_queue_shows_as_retransmissions(tmp_path: Path) -> None:
    """Loss-based Reno from a worker through the switch's 250 Mbit/s queue of 128 KiB
    overflows it (the lab's 250 Mbit/s profiles lose pushes on this hop); the count is
    tshark's. (A queue on the sender's own egress does not drop: TCP small queues hold the
    sender back instead.)"""
    need_tshark()
    cap, ps_addr = _capture_transfer(tmp_path, "lossy", True, bandwidth="250mbit",
                                     queue="128k", tcp_cc="reno")
    stats = transport_stats(cap, [ps_addr], [PORT])
    data, retrans = tshark_counts(cap)
    assert stats.data_segments == data
    assert retrans > 0 and stats.retransmitted == retrans
    assert stats.retransmitted_share > LOSSY_SHARE
    note = start_note("auto", stats=stats)
    assert note and f"{100 * stats.retransmitted_share:.1f}%" in note


@pytest.mark.slow
def test_a_deep_buffer_shows_as_queueing_delay(tmp_path: Path) -> None:
    """20 Mbit/s with a 256 KiB buffer (105 ms) and loss-based Reno, which fills it: the
    sender's segments leave the queue tens of ms after TCP stamped them."""
    cap, ps_addr = _capture_transfer(tmp_path, "deep", False, bandwidth="20mbit",
                                     queue="256k", tcp_cc="reno")
    stats = transport_stats(cap, [ps_addr], [PORT])
    assert len(stats.queue_delays_ms) > 100
    assert stats.queue_delay_ms is not None and 30 < stats.queue_delay_ms < 130, stats
    received = transport_stats(cap, ["198.51.100.1"], [PORT])  # not this host: no delays
    assert received.queue_delays_ms == () and received.data_segments == stats.data_segments
    # Reno keeps the 256 KiB buffer about full: the window (in flight after the capture plus
    # queued before it) is most of the buffer, and a few segments more
    window = stats.window_bytes(20e6 * 1448 / 1514 / 8)
    assert 100_000 < window < 400_000, window


def test_the_window_is_in_flight_plus_queued_bytes() -> None:
    # host A sends to B; B's ACKs give what is in flight at each new segment A sends, and
    # its timestamps how long it queued before the capture (1 ms ticks)
    a, b = "10.0.0.1", "10.0.0.2"
    c = TransportCounter([a])
    c.segment(1_000_000, a, 1000, b, 2000, seq=100, payload=1000, tsval=1)  # nothing acked yet
    c.ack(b, 2000, a, 1000, ack=1100)
    c.ack(a, 1000, b, 2000, ack=5)  # A's own ACKs of B's data do not count
    c.segment(5_000_000, a, 1000, b, 2000, seq=1100, payload=1000, tsval=2)  # 1,000 in flight
    c.segment(6_000_000, a, 1000, b, 2000, seq=2100, payload=1000, tsval=6)  # 2,000
    c.ack(b, 2000, a, 1000, ack=3100)
    c.ack(b, 2000, a, 1000, ack=2100)  # a late, older ACK changes nothing
    c.segment(7_000_000, a, 1000, b, 2000, seq=3100, payload=3000, tsval=7)  # 3,000
    c.segment(7_500_000, b, 2000, a, 1000, seq=7, payload=500, tsval=7)  # B's data: no sample
    stats = c.stats("hand-made")
    (flight, delays, weights), = stats.in_flight
    # delays: capture ms - TSval less the connection's least (0): 3, 0, 0 ms
    assert list(flight) == [1000.0, 2000.0, 3000.0] and list(weights) == [1000, 1000, 3000]
    assert delays == pytest.approx([3.0, 0.0, 0.0])
    # byte-weighted median: the 3,000-byte segment holds 3/5 of the bytes
    assert stats.window_bytes(1e6) == 3000.0
    # at 1 MB/s the first segment's 3 ms of queue are 3,000 bytes more: 4,000, 2,000, 3,000
    assert TransportStats("w", 0, 0, (), in_flight=((flight, delays, [3000, 1000, 1000]),)
                          ).window_bytes(1e6) == 4000.0
    assert TransportStats("none", 0, 0, ()).window_bytes(1e6) == 0.0


def test_transfer_windows_split_at_idle_spells() -> None:
    # the same connection as above: segments at 5, 6, 7 ms, then one more 20 ms later
    a, b = "10.0.0.1", "10.0.0.2"
    c = TransportCounter([a])
    c.segment(1_000_000, a, 1000, b, 2000, seq=100, payload=1000, tsval=1)  # nothing acked yet
    c.ack(b, 2000, a, 1000, ack=1100)
    c.segment(5_000_000, a, 1000, b, 2000, seq=1100, payload=1000, tsval=5)  # 1,000 in flight
    c.segment(6_000_000, a, 1000, b, 2000, seq=2100, payload=1000, tsval=6)  # 2,000
    c.ack(b, 2000, a, 1000, ack=3100)
    c.segment(7_000_000, a, 1000, b, 2000, seq=3100, payload=3000, tsval=7)  # 3,000
    c.ack(b, 2000, a, 1000, ack=6100)
    c.segment(27_000_000, a, 1000, b, 2000, seq=6100, payload=2000, tsval=27)  # 2,000
    stats = c.stats("hand-made")
    assert list(stats.sent_ns[0]) == [5_000_000, 6_000_000, 7_000_000, 27_000_000]
    # a 10 ms spell ends a transfer: (1,000 x 1,000 + 2,000 x 1,000 + 3,000 x 3,000) / 5,000
    assert stats.transfer_windows(1e6, 0.010) == [(2400.0, 5000), (2000.0, 2000)]
    assert stats.transfer_windows(1e6, 0.030) == [(16_000.0 / 7, 7000)]  # one transfer
    merged = TransportStats.merge([stats, stats])
    assert merged.transfer_windows(1e6, 0.010) == [(2400.0, 5000), (2000.0, 2000)] * 2
    assert TransportStats("none", 0, 0, ()).transfer_windows(1e6, 0.010) == []


def test_transfer_windows_keep_each_connection_apart() -> None:
    # host A pushes to two PSes at once (a worker of a 2-PS job): segments of the two
    # connections interleave 1 ms apart, and each transfer keeps its own connection's window
    a, b, d = "10.0.0.1", "10.0.0.2", "10.0.0.3"
    c = TransportCounter([a])
    for peer in (b, d):
        c.segment(1_000_000, a, 1000, peer, 2000, seq=0, payload=1000, tsval=1)
        c.ack(peer, 2000, a, 1000, ack=1000)
    for k in range(4):  # B's connection keeps 1,000 bytes in flight, D's 5,000, none queued
        c.segment(2_000_000 + 2 * k * 1_000_000, a, 1000, b, 2000, seq=1000 * (k + 1),
                  payload=1000, tsval=2 + 2 * k)
        c.ack(b, 2000, a, 1000, ack=1000 * (k + 2))
        c.segment(3_000_000 + 2 * k * 1_000_000, a, 1000, d, 2000, seq=1000 + 5000 * k,
                  payload=5000, tsval=3 + 2 * k)
        c.ack(d, 2000, a, 1000, ack=1000 + 5000 * (k + 1))
    stats = c.stats("two connections")
    assert list(stats.sent_conn[0]) == [0, 1] * 4
    assert stats.transfer_windows(1e6, 0.010) == [(1000.0, 4000), (5000.0, 20000)]
    # asked again (a sweep asks once per mechanism group): the same, from the instance's keep
    assert stats.transfer_windows(1e6, 0.010) == [(1000.0, 4000), (5000.0, 20000)]
    # one PS's: the connection to D alone; the capturing host's own address keeps them all
    assert stats.transfer_windows(1e6, 0.010, frozenset({d})) == [(5000.0, 20000)]
    assert stats.transfer_windows(1e6, 0.010, frozenset({a})) == [(1000.0, 4000),
                                                                  (5000.0, 20000)]
    assert stats.conn_peers == ((b, d),) and stats.hosts == ((a,),)
    # a capture without connections kept (one connection) merged beside it stays one
    one = TransportStats("one", 0, 0, (), in_flight=(([2000.0], [float("nan")], [100]),),
                         sent_ns=([0],))
    assert TransportStats.merge([stats, one]).transfer_windows(1e6, 0.010) == [
        (1000.0, 4000), (5000.0, 20000), (2000.0, 100)]


def shaped(bucket: float, rate_per_ns: float, transfers: list[tuple[int, int]],
           mss: int = 1448) -> tuple[list[int], list[int]]:
    """Departures (ns, bytes) of a token-bucket shaper (``bucket`` bytes, full at first,
    refilled at ``rate_per_ns``) fed ``transfers`` of (start ns, bytes), each offered whole
    at its start in segments of ``mss`` bytes: a segment leaves once the bucket holds it."""
    ts, nb = [], []
    tokens, at = bucket, 0.0
    for start, size in transfers:
        for k in range(0, size, mss):
            seg = min(mss, size - k)
            now = max(float(start), at)
            tokens = min(bucket, tokens + (now - at) * rate_per_ns)
            if tokens < seg:  # wait for the bucket to hold the segment
                now += (seg - tokens) / rate_per_ns
                tokens = float(seg)
            tokens -= seg
            at = now
            ts.append(round(now))
            nb.append(seg)
    return ts, nb


def test_a_token_bucket_shows_as_its_depth_ahead_of_the_rate() -> None:
    # 1 MB transfers every 200 ms at 100 Mbit/s (84 ms busy, then idle): a shaper's 128 KiB
    # bucket shows as 128 KiB (within a segment); a plain rate (a 1-segment bucket) as none
    rate = 100e6 / 8 / 1e9
    transfers = [(k * 200_000_000, 1_000_000) for k in range(8)]
    for bucket in (131_072.0, 40_000.0):
        ts, nb = shaped(bucket, rate, transfers)
        assert link_burst(ts, nb, rate * 1e9) == pytest.approx(bucket, abs=1448)
    ts, nb = shaped(1448.0, rate, transfers)
    assert link_burst(ts, nb, rate * 1e9) == 0.0
    # small messages between the transfers (a request, a header) end an idle spell but do
    # not hide the bucket
    chatty = sorted(transfers + [(k * 200_000_000 - 1_000_000, 300) for k in range(1, 8)])
    assert link_burst(*shaped(131_072.0, rate, chatty), rate * 1e9) == pytest.approx(
        131_072.0, abs=1448)
    # an episode counts only if it moved at least twice its burst (a smaller transfer may
    # have ended before the bucket did): 100 KB transfers cannot show a 128 KiB bucket, and
    # with fewer than MIN_EPISODES episodes that count the estimate is 0
    small = [(k * 200_000_000, 100_000) for k in range(8)]
    assert link_burst(*shaped(131_072.0, rate, small), rate * 1e9) == 0.0


def test_a_ps_whose_transfers_cannot_show_the_bucket_does_not_halve_it() -> None:
    """Two PS links shaped alike: one sends 1 MB transfers (they show the 128 KiB bucket),
    the other only 100 KB ones (too short to show it: no evidence, not a bucket of 0). The
    profile's bucket is the pooled episodes' median, the first link's; a median of each
    link's estimate would have been half of it."""
    rate = 100e6 / 8 / 1e9
    big = shaped(131_072.0, rate, [(k * 200_000_000, 1_000_000) for k in range(8)])
    small = shaped(131_072.0, rate, [(k * 200_000_000, 100_000) for k in range(8)])
    stats = TransportStats("two", 0, 0, (), arrivals=((big, ([], [])), (small, ([], []))))
    depth, up = stats.burst_bytes(rate * 1e9)
    assert depth == up == pytest.approx(131_072.0, abs=1448)
    assert link_burst(*small, rate * 1e9) == 0.0  # the short link alone shows none
    # neither link with enough episodes: none
    few = shaped(131_072.0, rate, [(0, 1_000_000)])
    assert TransportStats("few", 0, 0, (), arrivals=((few, ([], [])), (small, ([], []))),
                          ).burst_bytes(rate * 1e9) == (0.0, 0.0)


def test_the_bucket_is_the_lead_a_transfer_ends_with_not_its_peak() -> None:
    """A transfer whose last bytes leave later than the bucket would let them (a sender's
    slow tail) ends with less lead than it had: the estimate is what it ends with, since that
    is how much sooner than the rate it finished."""
    rate = 100e6 / 8 / 1e9  # bytes per ns
    mss, bucket, tail_ns = 1448, 131_072.0, 4_000_000  # the last segment 4 ms late: 50 KB
    ts, nb = [], []
    for k in range(8):
        t0 = k * 200_000_000
        ev, ns = shaped(bucket, rate, [(t0, 1_000_000)], mss)
        ev[-1] += tail_ns
        ts += ev
        nb += ns
    assert link_burst(ts, nb, rate * 1e9) == pytest.approx(bucket - tail_ns * rate, abs=2 * mss)


def test_the_shipped_samples_windows() -> None:
    """The shipped sample (20 Mbit/s, 1 worker): the PS's pulls and the worker's pushes each
    keep a window of tens of KB on their way (the lab's 10 ms buffer is 25 KB; BBR keeps about
    a BDP and its queue)."""
    from gradwire.bundle import SAMPLE_BUNDLE, find_bundles, open_bundle

    rate = 20e6 * 1448 / 1514 / 8
    for b in find_bundles(SAMPLE_BUNDLE):
        node = open_bundle(b)
        window = transport_stats(node.capture_file,
                                 node.manifest["host"]["addresses"]).window_bytes(rate)
        assert 5_000 < window < 200_000, (b.name, window)


def test_the_shipped_samples_plain_link_shows_no_bucket() -> None:
    """The shipped sample was recorded in the lab with ``--burst mtu`` (GSO off, a burst of
    4 frames or 1 ms of its 20 Mbit/s: a plain rate; docs/lab.md, "Burst"): its PS's sent
    data show a few KB at most. Its received pushes arrive in ~40 KB clumps, which raise a
    backlog's peak but not the lead a transfer ends with (only sent data are measured
    all the same: the receive path's clumps are not the link's)."""
    from gradwire.bundle import SAMPLE_BUNDLE, find_bundles, open_bundle

    ps = next(open_bundle(b) for b in find_bundles(SAMPLE_BUNDLE) if b.name.startswith("ps"))
    stats = transport_stats(ps.capture_file, ps.manifest["host"]["addresses"])
    rate = 20e6 * 1448 / 1514 / 8
    down, up = stats.burst_bytes(rate)
    assert down == up and down < 16_000, down
    received = link_burst(*stats.arrivals[0][1], rate)
    assert received < 16_000, received


def test_merge_and_note_thresholds() -> None:
    a = TransportStats("a", 1000, 2, (1.0, 3.0))
    b = TransportStats("b", 1000, 1, (2.0,))
    both = TransportStats.merge([a, b])
    assert (both.data_segments, both.retransmitted, both.queue_delay_ms) == (2000, 3, 2.0)
    assert both.path == "a, b"
    assert "retransmitted" not in start_note("auto", stats=both)  # 0.15%: below the threshold
    assert "retransmitted 1.0%" in start_note("auto", stats=TransportStats("c", 1000, 10, ()))
    assert TransportStats("d", 0, 0, ()).summary() == {
        "data_segments": 0, "retransmitted": 0, "retransmitted_share": 0.0,
        "queue_delay_ms": None}


def test_predict_reports_the_sample_profiles_transport(tmp_path: Path) -> None:
    """The sample bundle (1 Gbit/s lab run): its PS capture has no retransmission, so the JSON
    carries the counts and no note is printed."""
    out = tmp_path / "p.json"
    proc = gradwire("predict", str(SAMPLE), "--workers", "1,2", "--replications", "2",
                    "--max-replications", "2", "--quiet", "--json", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    tr = doc["profile"]["transport"]
    assert tr["data_segments"] > 100 and tr["retransmitted"] == 0
    assert 0 <= tr["queue_delay_ms"] < 10
    # the windows of its pulls (PS capture) and pushes (worker capture), measured and said
    pull, push = doc["profile"]["link_window_measured_bytes"]
    assert pull > 1_000 and push > 1_000
    # the only note is that 2 replications missed the CI target
    assert not [n for n in doc["notes"] if "retransmi" in n]
    assert "retransmissions" not in proc.stderr


