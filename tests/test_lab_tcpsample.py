"""The lab's socket sampler (``scripts/lab/tcpsample.py``, ``lab --tcp-sample``).

The parser tests read ``tests/data/tcpsample-held.ss.txt``: 22 samples (0.36 s) cut from a
real ``--tcp-sample`` run (deep MLP 10 MB, 500 Mbit/s, W = 3, sync, the PS's FIFO), in which
the PS's flow to worker .102 was held back for 212 ms. The last test samples a real shaped
link (root).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from conftest import need_root  # noqa: E402
from lab import tcpsample  # noqa: E402

from gradwire.replay import netns  # noqa: E402

HELD_FILE = ROOT / "tests" / "data" / "tcpsample-held.ss.txt"
PS = "[::ffff:198.19.191.10]:2222"


def test_parse_reads_every_sample_socket_and_backlog() -> None:
    samples = tcpsample.parse(HELD_FILE)
    assert len(samples) == 22
    assert all(b.t > a.t for a, b in zip(samples, samples[1:], strict=False))
    flows = [k for k in samples[0].sockets if k[0] == PS]
    assert len(flows) == 3  # the PS's server side of its three workers' connections
    first = samples[0].sockets[(PS, "[::ffff:198.19.191.102]:35602")]
    assert first["cwnd"] == 131 and first["bytes_acked"] == 70129150 and first["lastsnd"] == 272
    assert max(b for s in samples for b in s.backlogs) == 613_170  # of the 625 kB bfifo


def test_bbr_state_is_read_and_summed_per_busy_flow() -> None:
    """The file's sockets run BBR: each sample keeps the estimate (bps), minimum RTT (us) and
    pacing and delivery rates as ss printed them; per busy flow, the share of busy samples
    with the estimate over twice a 500 Mbit/s link, the medians of window and in flight, and
    the least minimum RTT."""
    samples = tcpsample.parse(HELD_FILE)
    first = samples[0].sockets[(PS, "[::ffff:198.19.191.102]:35602")]
    assert first["bbr_bw_bps"] > 0 and first["bbr_min_rtt_us"] >= 1
    assert first["pacing_rate_bps"] > 0 and "delivery_rate_bps" in first
    line = "\t bbr cwnd:10 bbr:(bw:1.5Gbps,mrtt:0.012,pacing_gain:1,cwnd_gain:2) pacing_rate 2Mbps"
    assert tcpsample._socket_fields(line) == {
        "cwnd": 10, "bbr_bw_bps": 1_500_000_000, "bbr_min_rtt_us": 12,
        "pacing_rate_bps": 2_000_000}
    est = tcpsample.bbr_estimates(samples, 500e6)
    assert len([k for k in est if k[0] == PS]) == 3  # the three pulls were busy
    for b in est.values():
        assert b["busy_samples"] >= 1 and 0.0 <= b["high_share"] <= 1.0
        assert b["cwnd"] >= b["in_flight"] >= tcpsample.BUSY_SEGMENTS
        assert b["min_rtt_us"] >= 1
    # at 500 Mbit/s some estimate stood over twice the link (the file has samples over 1
    # Gbit/s), for a spell of at least one sampling period
    high = [b for b in est.values() if b["high_share"] > 0]
    assert high and all(b["high_spell_s"] > 0.005 for b in high)
    # a link faster than any estimate: none is over twice it
    assert all(b["high_share"] == 0.0 for b in tcpsample.bbr_estimates(samples, 1e12).values())


def test_the_held_flow_is_found_with_its_length() -> None:
    held = tcpsample.held_episodes(tcpsample.parse(HELD_FILE))
    assert [(h.flow, h.longest_ms) for h in held] == [
        ((PS, "[::ffff:198.19.191.102]:35602"), 212)
    ]
    assert 0.08 < held[0].first_s < held[0].last_s < 0.26
    # a stricter threshold than any pause in the file finds nothing
    assert tcpsample.held_episodes(tcpsample.parse(HELD_FILE), held_ms=300) == []


def test_flow_bytes_and_summary() -> None:
    sent = {k[1]: v[0] for k, v in tcpsample.flow_bytes(tcpsample.parse(HELD_FILE)).items()
            if k[0] == PS}
    # the held flow sent about a tenth of what the other two did in the same 0.36 s
    assert sent["[::ffff:198.19.191.102]:35602"] == 1_042_706
    assert sent["[::ffff:198.19.191.101]:49008"] == 9_939_930
    s = tcpsample.summary(HELD_FILE)
    assert s["samples"] == 22 and s["max_backlog_bytes"] == 613_170
    assert s["held"] == [[f"{PS} -> [::ffff:198.19.191.102]:35602", 0.087, 212]]


def test_backlog_spread_reads_the_fullest_queue_of_each_sample() -> None:
    def sample(*backlogs: int) -> tcpsample.Sample:
        return tcpsample.Sample(0.0, backlogs=list(backlogs))

    # an htb root counts its bfifo's bytes again: the largest of a sample is the link's queue
    spread = tcpsample.backlog_spread([sample(0, 0), sample(0, 0), sample(300, 300, 0),
                                       sample(100, 100), sample(200, 200), sample()])
    assert spread == {"samples": 5, "empty_share": 0.4, "median_bytes": 200.0,
                      "p90_bytes": 300.0, "max_bytes": 300.0}
    assert tcpsample.backlog_spread([sample(0)])["empty_share"] == 1.0
    assert tcpsample.backlog_spread([])["samples"] == 0
    # the held run's PS queue: busy in most samples, up to the 613 kB of its 625 kB bfifo
    held = tcpsample.backlog_spread(tcpsample.parse(HELD_FILE))
    assert held["max_bytes"] == 613_170 and held["samples"] == 22


def test_backlog_by_pushes_reads_the_ps_samples_around_each_queue_sample() -> None:
    def ps(t: float, received: dict[str, int], acked: dict[str, int]) -> tcpsample.Sample:
        return tcpsample.Sample(t, sockets={
            ("ps", w): {"bytes_received": received.get(w, 0), "bytes_acked": acked.get(w, 0)}
            for w in ("a", "b", "c")})

    # a link of 1 MB/s: moving is 0.1 MB/s, 5 kB in the 50 ms between two PS samples
    node = [ps(0.00, {}, {}),
            ps(0.05, {"a": 10_000, "b": 10_000}, {"c": 50_000}),  # two pushing, one pulling
            ps(0.10, {"a": 14_000, "b": 20_000}, {"c": 50_000, "a": 30_000}),  # b; c idle
            ps(0.40, {"a": 90_000}, {})]  # 0.3 s gap: too far apart to tell
    queue = [tcpsample.Sample(t, backlogs=[b, b]) for t, b in
             ((0.02, 4000), (0.03, 0), (0.07, 1000), (0.2, 9000), (0.5, 7000))]
    rows = tcpsample.backlog_by_pushes(node, queue, 1e6)
    assert rows == {2: (2, 0.5, 2000.0, 1.0), 1: (1, 0.0, 1000.0, 1.0)}


def test_the_report_reads_the_switch_beside_its_ps(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    held = tcpsample.parse(HELD_FILE)
    (tmp_path / "ps0.ss.txt").write_bytes(HELD_FILE.read_bytes())
    lines = []
    for a, b in zip(held, held[1:], strict=False):
        lines += [f"T {(a.t + b.t) / 2:.6f}", "qdisc bfifo 10: dev x parent 1:1 limit 625000b",
                  " Sent 10 bytes 1 pkt (dropped 0, overlimits 0 requeues 0)",
                  " backlog 30000b 1p requeues 0"]
    (tmp_path / "switch.ss.txt").write_text("\n".join(lines) + "\n")
    assert tcpsample.main([str(tmp_path / "switch.ss.txt"), "--rate", "500mbit"]) == 0
    out = capsys.readouterr().out
    assert "the queue toward the PS by how many pushes moved (ps0.ss.txt's" in out
    counts = [int(line.split()[2]) for line in out.splitlines() if " pushes: " in line]
    assert sum(counts) == len(held) - 1  # each queue sample read beside the two around it
    assert "mean 30 kB (0.5 ms of the link)" in out  # 30 kB on the wire at 500 Mbit/s
    assert "each direction's rate" not in out  # the switch has no sockets
    (tmp_path / "ps1.ss.txt").write_bytes(HELD_FILE.read_bytes())
    assert tcpsample.main([str(tmp_path / "switch.ss.txt"), "--rate", "500mbit"]) == 0
    assert "needs one PS's samples beside it; 2 found" in capsys.readouterr().out


def test_a_torn_or_foreign_file_parses_to_what_it_holds(tmp_path: Path) -> None:
    torn = tmp_path / "torn.ss.txt"
    torn.write_text("garbage before the first sample\nT 1.5\n0 0 a:1 b:2\n\t cwnd:10 unack")
    samples = tcpsample.parse(torn)
    assert len(samples) == 1 and samples[0].sockets[("a:1", "b:2")] == {"cwnd": 10}
    assert tcpsample.summary(tmp_path / "torn.ss.txt")["held"] == []
    empty = tmp_path / "empty.ss.txt"
    empty.write_text("")
    assert tcpsample.summary(empty) == {"samples": 0, "span_s": 0.0, "max_backlog_bytes": 0,
                                        "dropped_packets": 0, "held": []}


def test_drops_are_the_queues_counters_last_less_first(tmp_path: Path) -> None:
    sent = " Sent {} bytes {} pkt (dropped {}, overlimits 0 requeues 0)\n backlog 0b 0p\n"
    text = "".join(f"T {t}\nqdisc htb 1: dev x root\n" + sent.format(1000 * t, t, d1)
                   + "qdisc bfifo 10: dev x parent 1:1\n" + sent.format(900 * t, t, d2)
                   for t, d1, d2 in ((1, 0, 3), (2, 1, 5), (3, 2, 9)))
    (tmp_path / "d.ss.txt").write_text(text)
    samples = tcpsample.parse(tmp_path / "d.ss.txt")
    assert [s.dropped for s in samples] == [[0, 3], [1, 5], [2, 9]]
    assert tcpsample.summary(tmp_path / "d.ss.txt")["dropped_packets"] == 2 + 6


@pytest.mark.slow
@pytest.mark.root
def test_sampling_a_shaped_link_sees_the_flow_and_its_queue(tmp_path: Path) -> None:
    need_root()
    with netns.Topology(num_ps=1, num_workers=1, bandwidth="100mbit") as topo:
        ps, worker = topo.nodes
        loops = tcpsample.start(topo, [ps], tmp_path)
        loops.append(tcpsample.start_switch(topo, tmp_path))
        netns.measure_throughput_bps(topo, ps, worker, nbytes=5_000_000, limit_s=3)
        netns.measure_throughput_bps(topo, worker, ps, nbytes=5_000_000, limit_s=3)
        tcpsample.stop(loops)
        assert all(proc.returncode is not None for proc, _ in loops)
    # the switch's loop sees its shaper toward the PS fill with the worker's transfer (no
    # sockets there), and the PS's own queue is not what the switch samples
    switch = tcpsample.parse(tmp_path / "switch.ss.txt")
    assert switch and not any(s.sockets for s in switch)
    assert tcpsample.backlog_spread(switch)["max_bytes"] > 100_000
    samples = tcpsample.parse(tmp_path / "ps0.ss.txt")
    # ~15 ms apart (more on a busy machine: ss and tc take their own time) over the ~0.5 s
    # transfer: the flow's socket is seen in several samples, not one
    during = [s for s in samples if any(ps.addr in k[0] for k in s.sockets)]
    assert len(during) >= 4
    sent = max(v[0] for k, v in tcpsample.flow_bytes(samples).items() if ps.addr in k[0])
    # between the flow's first and last sample (the first comes some ms after it starts, the
    # socket leaves 'established' when it closes) its bytes acked grew by most of the 5 MB
    assert sent > 2_500_000
    assert max(b for s in samples for b in s.backlogs) > 100_000  # the 100 Mbit/s link queued


def test_a_sample_folder_in_use_is_refused_before_any_cluster(tmp_path: Path) -> None:
    from lab.cluster import LabConfig

    from gradwire.replay.netns import LabError

    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "ps0.ss.txt").write_text("T 1\n")
    with pytest.raises(LabError, match=r"ps0\.ss\.txt already there"):
        LabConfig(tcp_sample_dir=str(tmp_path / "old")).validate()
    (tmp_path / "afile").write_text("")
    with pytest.raises(LabError, match="it is a file, not a folder"):
        LabConfig(tcp_sample_dir=str(tmp_path / "afile")).validate()
    # ring all-reduce samples the workers: their files are what would be overwritten
    (tmp_path / "old" / "worker1.ss.txt").write_text("")
    with pytest.raises(LabError, match=r"worker1\.ss\.txt"):
        LabConfig(mode="ring", ps=0, shape="all", workers=2,
                  tcp_sample_dir=str(tmp_path / "old")).validate()
    LabConfig(tcp_sample_dir=str(tmp_path / "new")).validate()  # a new folder is fine
    assert (tmp_path / "old" / "ps0.ss.txt").read_text() == "T 1\n"


def test_the_sampler_sleeps_the_pause_asked_for_and_refuses_a_bad_one() -> None:
    from lab.cluster import LabConfig

    from gradwire.replay.netns import LabError

    assert "sleep 0.003; done" in tcpsample.loop_command()[-1]
    assert "sleep 0.100; done" in tcpsample.loop_command(0.1)[-1]
    assert "sleep 0.001; done" in tcpsample.loop_command(0.001)[-1]
    for bad in (0.0, -1.0, 11.0, 0.0004):  # 0.4 ms would be written "sleep 0.000"
        with pytest.raises(ValueError, match="pause between samples"):
            tcpsample.loop_command(bad)
        with pytest.raises(LabError, match="bad tcp-sample pause"):
            LabConfig(tcp_sample_pause_s=bad).validate()


def test_queue_shares_count_each_busy_flows_packets_in_the_queue() -> None:
    shares, common = tcpsample.queue_shares(tcpsample.parse(HELD_FILE))
    # two busy pulls in the PS's queue keep two 64 kB GSO packets each: 90 segments in flight
    n, per = shares[2]
    assert n == 19 and per == pytest.approx(136_300, abs=100)
    assert common[0] == (90, 27)
    # a threshold above every in-flight count leaves no busy flow
    assert tcpsample.queue_shares(tcpsample.parse(HELD_FILE), min_unacked=10_000) == ({}, [])


def _flows(rates: list[tuple[float, float, float, float]], dt: float = 0.01
           ) -> list[tcpsample.Sample]:
    """Samples every ``dt`` s of two sockets whose counters grow at the given rates (bytes/s:
    socket a's sent and received, socket b's sent and received), one tuple per sample."""
    out, cum = [], [0.0, 0.0, 0.0, 0.0]
    for k, r in enumerate(rates):
        s = tcpsample.Sample(t=100.0 + k * dt)
        s.sockets[("ps:1", "a:1")] = {"bytes_acked": int(cum[0]), "bytes_received": int(cum[1])}
        s.sockets[("ps:1", "b:1")] = {"bytes_acked": int(cum[2]), "bytes_received": int(cum[3])}
        out.append(s)
        cum = [c + x * dt for c, x in zip(cum, r, strict=True)]
    return out


def test_direction_rates_by_flows_each_way() -> None:
    link = 1e6  # bytes/s of payload
    # 0.4 s of a's pull alone at the full rate, 0.4 s of it at 0.9 beside b's push at 1.0,
    # then 0.4 s of a's and b's pulls sharing the link
    samples = _flows([(link, 0, 0, 0)] * 40 + [(0.9 * link, 0, 0, link)] * 40
                     + [(link / 2, 0, link / 2, 0)] * 40)
    rates = tcpsample.direction_rates(samples, link, bin_s=0.04)
    assert set(rates) == {("pulls", 1, 0), ("pulls", 1, 1), ("pushes", 1, 1), ("pulls", 2, 0)}
    assert rates[("pulls", 1, 0)] == pytest.approx([1.0] * len(rates[("pulls", 1, 0)]))
    assert sorted(rates[("pulls", 1, 1)]) == pytest.approx([0.9] * 8)  # bins at the edges left out
    assert rates[("pushes", 1, 1)] == pytest.approx([1.0] * 8)
    assert rates[("pulls", 2, 0)] == pytest.approx([1.0] * len(rates[("pulls", 2, 0)]))
    assert tcpsample.direction_rates(samples[:1], link) == {}


def test_the_report_prints_the_rates_given_the_link_and_refuses_a_bad_rate(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert tcpsample.main([str(HELD_FILE), "--rate", "500mbit"]) == 0
    out = capsys.readouterr().out
    assert "each direction's rate over the link's (40 ms bins" in out
    assert tcpsample.main([str(HELD_FILE), "--rate", "fast"]) == 2
    assert "bad rate 'fast'" in capsys.readouterr().err
    assert tcpsample.main([str(HELD_FILE), "--rate"]) == 2
