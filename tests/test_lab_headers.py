"""The lab's headers-only capture (``scripts/lab/headers.py``, ``lab --capture-headers``).

The pure tests cut hand-made packet lists and pcaps (``tests/badcaptures.py``' builders) into
bulk transfers and class them; the last ones capture a real shaped link and a real lab run
(root; the run also needs TensorFlow).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from badcaptures import pcap, tcp_frame  # noqa: E402
from conftest import need, need_root  # noqa: E402
from lab import headers  # noqa: E402

from gradwire.replay import netns  # noqa: E402

PS, W0, W1 = "10.0.0.10", "10.0.0.100", "10.0.0.101"
KB = 64 * 1024


def _flow(src: str, dst: str, t0: float, packets: int, every: float = 0.001,
          size: int = KB) -> list[tuple[float, str, str, int]]:
    return [(t0 + k * every, src, dst, size) for k in range(packets)]


def test_a_flow_is_cut_where_it_idles_longer_than_the_gap() -> None:
    pkts = _flow(PS, W0, 0.0, 10) + _flow(PS, W0, 0.030, 10) + [(0.005, W0, PS, 100)]
    found = headers.transfers(pkts, gap_s=0.010)
    assert [(t.first, round(t.last, 3), t.nbytes, t.out) for t in found] == [
        (0.0, 0.009, 10 * KB, True), (0.030, 0.039, 10 * KB, True)]
    # a longer gap joins them; a smaller minimum keeps the worker's 100-byte message
    assert len(headers.transfers(pkts, gap_s=0.05)) == 1
    small = headers.transfers(pkts, gap_s=0.010, min_bytes=1)
    assert [(t.src, t.nbytes, t.out) for t in small if t.src == W0] == [(W0, 100, False)]
    # the first packet's bytes left before the first timestamp: 9 packets in 9 ms
    assert found[0].peer == W0 and found[0].rate_bps == pytest.approx(8 * 9 * KB / 0.009)


def test_the_capturing_host_is_the_address_in_most_pairs() -> None:
    pkts = _flow(W0, PS, 0.0, 5) + _flow(W1, PS, 0.0, 5)
    assert all(not t.out for t in headers.transfers(pkts, gap_s=0.01))
    assert all(t.out for t in headers.transfers(pkts, gap_s=0.01, host=W0) if t.src == W0)
    assert headers.transfers([], gap_s=0.01) == []


def test_transfers_are_classed_by_the_other_peers_transfers() -> None:
    turns = headers.classify(headers.transfers(
        _flow(PS, W0, 0.0, 50) + _flow(W1, PS, 0.0, 50)          # a pull beside a push
        + _flow(PS, W1, 0.100, 50) + _flow(W0, PS, 0.100, 50), gap_s=0.01))
    assert {t.cls for t in turns} == {"reverse"}
    in_step = headers.classify(headers.transfers(
        _flow(PS, W0, 0.0, 50) + _flow(PS, W1, 0.002, 50), gap_s=0.01))
    assert [t.cls for t in in_step] == ["same", "same"]
    # the worker's own transfer the other way does not count, nor an 18% overlap
    own = headers.classify(headers.transfers(
        _flow(PS, W0, 0.0, 50) + _flow(W0, PS, 0.0, 50) + _flow(PS, W1, 0.040, 50),
        gap_s=0.01))
    assert [t.cls for t in own] == ["alone", "alone", "alone"]
    # 39% of the first pull beside the other worker's: mixed
    mixed = headers.classify(headers.transfers(
        _flow(PS, W0, 0.0, 50) + _flow(PS, W1, 0.030, 50), gap_s=0.01))
    assert [(t.dst, t.cls) for t in mixed] == [(W0, "mixed"), (W1, "mixed")]


def test_the_gap_grows_with_a_slow_link() -> None:
    assert headers.gap_for_rate(None) == headers.MIN_GAP_S
    assert headers.gap_for_rate(550e6) == headers.MIN_GAP_S
    assert headers.gap_for_rate(100e6) == pytest.approx(2 * 8 * 65536 / 100e6)  # 10.5 ms


def test_summary_of_a_pcap_cut_to_its_headers(tmp_path: Path) -> None:
    ps, w0, w1 = (PS, 2222), (W0, 40000), (W1, 40001)
    frames = []
    for k in range(20):  # two workers' pulls in step, 1 MB each, then one push alone
        for peer in (w0, w1):
            frames.append((k * 2_000_000, tcp_frame(k * 50_000, b"\0" * 50_000, src=ps,
                                                    dst=peer)))
        frames.append((200_000_000 + k * 1_000_000, tcp_frame(k * 50_000, b"\0" * 50_000,
                                                              src=w0, dst=ps)))
    f = tmp_path / "ps0.headers.pcap"
    f.write_bytes(pcap(frames))
    s = headers.summary(f)
    assert s["transfers"] == 3 and s["peers"] == 2
    assert s["out"]["transfers"] == 2 and s["out"]["same_share"] == 1.0
    assert s["out"]["median_bytes"] == 1_000_000 and s["out"]["bytes"] == 2_000_000
    assert s["in"]["classes"] == {"alone": {"transfers": 1, "median_rate_bps":
                                            pytest.approx(8 * 950_000 / 0.019)}}
    assert headers.main([str(f)]) == 0


def test_a_workers_steps_take_every_link_together() -> None:
    """Two PS links, one worker: each step a pull on both links (the second link's 5 ms
    later), 2 ms of compute, a push on both, the next pull 3 ms after the push ends; the
    other worker's transfers are its own cycles."""
    ps1 = "10.0.0.11"
    pkts = []
    for k in range(4):
        t0 = 0.1 * k
        pkts += _flow(PS, W0, t0, 30) + _flow(ps1, W0, t0 + 0.005, 30)        # 29 / 34 ms
        pkts += _flow(W0, PS, t0 + 0.036, 40) + _flow(W0, ps1, t0 + 0.036, 40)  # 39 ms
        pkts += _flow(PS, W1, t0 + 0.05, 20) + _flow(W1, PS, t0 + 0.075, 20)
    found = (headers.transfers([p for p in pkts if PS in p[1:3]], 0.01, host=PS)
             + headers.transfers([p for p in pkts if ps1 in p[1:3]], 0.01, host=ps1))
    cycles = headers.worker_cycles(found, join_s=0.01)
    assert sorted(cycles) == [W0, W1] and len(cycles[W0]) == 3
    c = cycles[W0][0]
    assert (c.pull, c.gap, c.push) == pytest.approx((0.034, 0.002, 0.039))
    assert c.boundary == pytest.approx(0.1 - 0.075) and c.cycle == pytest.approx(0.1)
    # the second link's pull overlaps the first: one phase whatever the join
    assert headers.worker_cycles(found, join_s=0.0)[W0][0].pull == pytest.approx(0.034)


def test_the_phases_view_reads_one_runs_links(tmp_path: Path, capsys) -> None:
    ps, w0 = (PS, 2222), (W0, 40000)
    frames = []
    for k in range(3):  # a 0.5 MB pull, a 1 ms gap, a 0.5 MB push, the next pull 89 ms on
        base = k * 100_000_000
        frames += [(base + j * 1_000_000, tcp_frame(j * 50_000, b"\0" * 50_000, src=ps,
                                                     dst=w0)) for j in range(10)]
        frames += [(base + 10_000_000 + j * 1_000_000,
                    tcp_frame(j * 50_000, b"\0" * 50_000, src=w0, dst=ps)) for j in range(10)]
    f = tmp_path / "ps0.headers.pcap"
    f.write_bytes(pcap(frames))
    (cycles,) = headers.cycles_report([str(f)], None).values()
    assert cycles["cycles"] == 2
    assert [cycles[k] for k in ("pull", "gap", "push", "boundary", "cycle")] == \
        pytest.approx([9.0, 1.0, 9.0, 81.0, 100.0])
    assert headers.main(["--phases", str(f)]) == 0
    assert "2 steps, median ms: pull 9.0, gap 1.0, push 9.0, to the next pull 81.0, step " \
        "100.0" in capsys.readouterr().out
    assert headers.main(["--phases", str(tmp_path / "missing.pcap")]) == 2
    assert "missing.pcap" in capsys.readouterr().err
    one_way = tmp_path / "ps1.headers.pcap"  # pulls only: no step to show
    one_way.write_bytes(pcap(frames[:10]))
    assert headers.main(["--phases", str(one_way)]) == 1
    assert "no worker's pulls, pushes and next pulls in" in capsys.readouterr().err


def test_the_report_names_a_file_it_cannot_read(tmp_path: Path, capsys) -> None:
    (tmp_path / "x.pcap").write_bytes(b"not a capture at all")
    assert headers.main([str(tmp_path / "x.pcap")]) == 2
    err = capsys.readouterr().err
    assert "x.pcap" in err and "Traceback" not in err
    assert headers.main([str(tmp_path / "missing.pcap")]) == 2
    # in a lab run's result, an unreadable capture is its error, not a lost run
    out = headers.summaries([("ps0", tmp_path / "x.pcap", PS)], None)
    assert out["ps0"]["file"] == str(tmp_path / "x.pcap") and "x.pcap" in out["ps0"]["error"]


def test_a_headers_folder_in_use_is_refused_before_any_cluster(tmp_path: Path) -> None:
    from lab.cluster import LabConfig

    from gradwire.replay.netns import LabError

    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "ps0.headers.pcap").write_bytes(b"")
    with pytest.raises(LabError, match=r"ps0\.headers\.pcap already there"):
        LabConfig(headers_dir=str(tmp_path / "old")).validate()
    (tmp_path / "afile").write_text("")
    with pytest.raises(LabError, match="it is a file, not a folder"):
        LabConfig(headers_dir=str(tmp_path / "afile")).validate()


def test_headers_of_a_real_shaped_link(tmp_path: Path) -> None:
    need_root()
    need(shutil.which("tcpdump") is not None, "tcpdump (apt-get install tcpdump)")
    with netns.Topology(num_ps=1, num_workers=1, bandwidth="100mbit") as topo:
        ps, worker = topo.nodes
        dumps = headers.start(topo, [ps], tmp_path)
        netns.measure_throughput_bps(topo, ps, worker, nbytes=5_000_000, limit_s=3)
        headers.stop(dumps)
        assert all(proc.returncode is not None for proc, _ in dumps)
    s = headers.summary(tmp_path / "ps0.headers.pcap", 100e6)
    # the 5 MB leave alone (one peer), at the shaped rate (the HTB bucket adds a little); a
    # loss's recovery can pause the flow past the gap and cut it in pieces (one CI run: 3)
    assert s["out"]["transfers"] >= 1 and s["out"]["classes"].keys() == {"alone"}
    pieces = [t for t in headers.transfers(headers._read(tmp_path / "ps0.headers.pcap"),
                                           headers.gap_for_rate(100e6)) if t.out]
    assert sum(t.nbytes for t in pieces) > 4.9e6
    largest = max(pieces, key=lambda t: t.nbytes)
    assert largest.nbytes > 1e6 and 80e6 < largest.rate_bps < 110e6
