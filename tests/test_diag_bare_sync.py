"""scripts/diag_bare_sync.py: synchronous pulls over plain sockets through the lab's shaped PS
link, beside the host-queue model on the same write times (issue 22).

Its arithmetic is checked on hand-made writes and packets; the model's side on synthetic
rounds (no root needed); the tool itself runs for real, briefly, through the lab's namespaces
(root).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

import diag_bare_sync as bare  # noqa: E402
from conftest import need_root  # noqa: E402
from lab import tcpsample  # noqa: E402

from gradwire.replay.hostqueue import MSS, MSS_WIRE  # noqa: E402
from gradwire.replay.netns import LabError  # noqa: E402

SIZE, RATE = 1_200_000, 300e6
WIRE_S = bare.wire_time_s(2, SIZE, RATE)


def run_script(*args: str, timeout: int = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "diag_bare_sync.py"), *args],
                          capture_output=True, text=True, timeout=timeout)


def test_a_transfer_ends_with_the_packet_carrying_its_last_byte() -> None:
    writes = [(0, 0.0), (1, 0.001), (0, 0.3), (1, 0.301)]
    sent = [[(0.01, 5000, 600), (0.02, 5600, 400), (0.31, 6000, 1000)],  # both writes whole
            [(0.02, 2**32 - 200, 1000), (0.35, 800, 500)]]  # across the wrap; half the second
    ends = bare.transfer_ends(writes, sent, 1000)
    assert ends[:3] == [0.02, 0.02, 0.31]
    assert math.isnan(ends[3])


def test_a_segment_sent_again_is_not_counted_twice() -> None:
    # the second packet is the first one again (a tail loss probe): the write ends at the third
    sent = [[(0.01, 0, 600), (0.02, 0, 600), (0.03, 600, 400)]]
    assert bare.transfer_ends([(0, 0.0)], sent, 1000) == [0.03]


def test_rounds_run_from_the_first_write_to_the_last_end_and_a_probe_wait_is_held() -> None:
    writes = [(0, 0.0), (1, 0.002), (1, 0.3), (0, 0.3005), (0, 0.6), (1, 0.6)]
    ends = [0.030, 0.064, 0.362, 0.58, 0.66, math.nan]
    r = bare.summarize(writes, ends, workers=2, wire_s=0.064, drops=7, skip=0)
    # rounds of 64 and 280 ms (a probe timer's wait), and one that never ended: held, and
    # left out of the median
    assert (r.held, r.rounds, r.drops) == (2, 3, 7)
    assert r.median_ms == pytest.approx(172.0)
    with pytest.raises(LabError, match="more --rounds"):
        bare.summarize(writes, ends, workers=2, wire_s=0.064, drops=0, skip=3)
    none = bare.summarize(writes[:2], [math.nan, 0.1], workers=2, wire_s=0.064, drops=0, skip=0)
    assert (none.median_ms, none.held, none.rounds) == (None, 1, 1)


def test_held_is_over_the_writes_span_and_wire_time_by_half_an_rto() -> None:
    """A round is held once it takes more than the gap between its writes, plus its bytes at
    the rate, plus 100 ms; a long stagger alone does not make it held."""
    wire = 0.064
    for span, extra, held in ((0.0, 0.099, 0), (0.0, 0.101, 1), (0.150, 0.099, 0),
                              (0.150, 0.101, 1)):
        writes = [(0, 0.0), (1, span)]
        r = bare.summarize(writes, [0.01, span + wire + extra], 2, wire, 0, skip=0)
        assert r.held == held, (span, extra)


def synthetic_writes(stagger_s: float, rounds: int = 8, period_s: float = 0.3
                     ) -> list[tuple[int, float]]:
    """Two workers' writes, ``stagger_s`` apart, every ``period_s`` (s)."""
    return [(k, 1000.0 + r * period_s + k * stagger_s) for r in range(rounds) for k in (0, 1)]


def test_bbr_whole_holds_a_pull_written_into_the_other_s_burst_and_reno_does_not() -> None:
    """What the lab's Linux did with these rounds (docs/notes/issue22-sync-bbr-v1.md, "Bare
    pulls"): under BBR a second write 0.5-15 ms after the first was held in 17-20 of 20
    rounds; the model's BBR whole holds it too, its Reno queue never (a Reno flow that finds
    the queue full has its window cut but keeps a packet in flight)."""
    writes = synthetic_writes(0.005)
    whole = bare.model_rounds(writes, 2, RATE, SIZE, 0, "bbr-v1", WIRE_S)
    reno = bare.model_rounds(writes, 2, RATE, SIZE, 0, "reno", WIRE_S)
    assert whole.held == whole.rounds == 6 and whole.drops > 0
    assert whole.median_ms > 200.0  # a probe timer's 200 ms on top
    assert reno.held == 0 and WIRE_S * 1e3 * 0.9 < reno.median_ms < WIRE_S * 1e3 * 1.1
    # written once the first transfer is all in the queue, the second is not held
    late = bare.model_rounds(synthetic_writes(0.04), 2, RATE, SIZE, 0, "bbr-v1", WIRE_S)
    assert late.held == 0
    with pytest.raises(LabError, match="queue of a size"):
        bare.model_rounds(writes, 2, RATE, SIZE, 0, "reno", WIRE_S, queue="kernel")


def test_first_bytes_are_a_transfer_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    handed = []

    def spy(q, transfers, n):  # noqa: ANN001, ANN202 - the oracle's own signature
        handed.append(list(transfers))
        return real(q, transfers, n)

    real = bare.simulate
    monkeypatch.setattr(bare, "simulate", spy)
    writes = synthetic_writes(0.03)
    r = bare.model_rounds(writes, 2, RATE, SIZE, 1162, "reno", WIRE_S)
    (transfers,) = handed
    assert len(transfers) == 2 * len(writes) and r.rounds == 6 and r.held == 0
    first, rest = transfers[0], transfers[1]
    assert first.size == math.ceil(1162 / MSS) * MSS_WIRE
    assert rest.size == math.ceil((SIZE - 1162) / MSS) * MSS_WIRE
    assert rest.start - first.start == pytest.approx(bare.FIRST_GAP_S * 1e6)


def test_qdisc_drops_come_from_tc_s_statistics() -> None:
    text = ("qdisc htb 1: root refcnt 3 r2q 10 default 0x1 direct_packets_stat 0\n"
            " Sent 100378714 bytes 66335 pkt (dropped 110, overlimits 1619 requeues 0)\n"
            " backlog 0b 0p requeues 0\n"
            "qdisc bfifo 10: parent 1:1 limit 375000b\n"
            " Sent 100378714 bytes 66335 pkt (dropped 109, overlimits 0 requeues 0)\n")
    assert tcpsample.qdisc_drops(text) == [110, 109]
    assert tcpsample.qdisc_drops("qdisc noqueue 0: root refcnt 2") == []


@pytest.mark.parametrize("args, fragment", [
    (["--bandwidth", "300mbit", "--first-bytes", "1200000"], "--first-bytes 1200000"),
    (["--bandwidth", "300mbit", "--rounds", "2"], "--rounds 2"),
    (["--bandwidth", "300mbit", "--stagger-ms", "1,-2"], "--stagger-ms"),
    (["--bandwidth", "300mbit", "--period-ms", "0"], "--period-ms"),
    (["--bandwidth", "300mbit", "--write-chunk", "16384", "--first-bytes", "1162"],
     "--write-chunk 16384"),
    (["--bandwidth", "300mbit", "--write-chunk", "-1"], "--write-chunk -1"),
    (["--bandwidth", "300mbit", "--queue", "kernel"], "--queue kernel"),
    (["--bandwidth", "300mbit", "--ping-answer", "shout"], "--ping-answer"),
])
def test_bad_arguments_are_one_line(args: list[str], fragment: str) -> None:
    proc = run_script(*args)
    assert proc.returncode == 2
    assert fragment in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, fragment", [
    (["--bandwidth", "fast"], "bad rate 'fast'"),
    (["--bandwidth", "300mbit", "--queue", "10k"], "bad queue '10k'"),
])
def test_bad_values_are_one_line_before_any_namespace(args: list[str], fragment: str) -> None:
    proc = run_script(*args)
    assert proc.returncode == 1
    assert fragment in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.root
def test_the_pulls_run_through_a_shaped_link(tmp_path: Path) -> None:
    need_root()
    size = 600_000
    args = SimpleNamespace(workers=2, bandwidth="300mbit", queue=None, tcp_cc=None, size=size,
                           first_bytes=0, period_ms=150.0, rounds=5, write_chunk=0,
                           receiver_ping_ms=0.0, ping_answer="answer")
    writes, sent, _ = bare.run_linux(args, 0.03, tmp_path)
    assert [k for k, _ in writes[:2]] in ([0, 1], [1, 0]) and len(writes) == 10
    ends = bare.transfer_ends(writes, sent, size)
    assert all(e > t for (_, t), e in zip(writes, ends, strict=True))
    # a lone 600 kB transfer (the second write is 30 ms after the first, which is done by
    # then) cannot beat the link's rate by more than the shaper lets it: its bucket and one
    # GSO packet more (HTB sends while its tokens are not negative)
    burst_s = (131072 + 65226) * 8 / RATE
    assert all(e - t > size * 8 / RATE - burst_s for (_, t), e in zip(writes, ends, strict=True))
    out = tmp_path / "rows.json"
    proc = run_script("--bandwidth", "300mbit", "--stagger-ms", "30", "--rounds", "4",
                      "--size", str(size), "--period-ms", "150", "--json", str(out),
                      timeout=300)
    assert proc.returncode == 0, proc.stderr
    row, = json.loads(out.read_text())["rows"]
    assert set(row) >= {"linux", "reno", "bbr", "bbr-v1", "writes", "linux_ends"}
    assert row["linux"]["rounds"] == 2 and len(row["writes"]) == 8
    assert 30.0 < row["start_gap_ms"] < 45.0  # the stagger from the first write's return
    # the same, each transfer written 16 KiB at a time by one select loop: every byte arrives
    proc = run_script("--bandwidth", "300mbit", "--stagger-ms", "0", "--rounds", "3",
                      "--size", str(size), "--period-ms", "150", "--write-chunk", "16384",
                      "--json", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    row, = json.loads(out.read_text())["rows"]
    assert row["linux"]["rounds"] == 1 and None not in row["linux_ends"]
    # the workers ping every 20 ms and the PS answers each: every transfer still ends
    proc = run_script("--bandwidth", "300mbit", "--stagger-ms", "0.5", "--rounds", "3",
                      "--size", str(size), "--period-ms", "150", "--receiver-ping-ms", "20",
                      "--json", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    row, = json.loads(out.read_text())["rows"]
    assert row["linux"]["rounds"] == 1 and None not in row["linux_ends"]
