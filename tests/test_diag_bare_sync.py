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

from gradwire.replay.netns import LabError  # noqa: E402
from gradwire.replay.predict import GOODPUT  # noqa: E402


def test_a_transfer_ends_with_the_packet_carrying_its_last_byte() -> None:
    writes = [(0, 0.0), (1, 0.001), (0, 0.3), (1, 0.301)]
    sent = [[(0.01, 600), (0.02, 400), (0.31, 1000)],  # worker 0: both writes whole
            [(0.02, 1000), (0.35, 500)]]  # worker 1: its second write half sent
    ends = bare.transfer_ends(writes, sent, 1000)
    assert ends[:3] == [0.02, 0.02, 0.31]
    assert math.isnan(ends[3])


def test_rounds_run_from_the_first_write_to_the_last_end_and_a_probe_wait_is_held() -> None:
    writes = [(0, 0.0), (1, 0.002), (1, 0.3), (0, 0.3005), (0, 0.6), (1, 0.6)]
    ends = [0.030, 0.064, 0.362, 0.58, 0.66, math.nan]
    r = bare.summarize(writes, ends, workers=2, wire_s=0.064, drops=7, skip=0)
    # rounds of 64 and 280 ms (a probe timer's wait) and one never ended
    assert (r.held, r.rounds, r.drops) == (2, 3, 7)
    assert r.median_ms == pytest.approx(172.0)  # the median of the two that ended
    with pytest.raises(LabError, match="more --rounds"):
        bare.summarize(writes, ends, workers=2, wire_s=0.064, drops=0, skip=3)


def synthetic_writes(stagger_s: float, rounds: int = 8, period_s: float = 0.3
                     ) -> list[tuple[int, float]]:
    """Two workers' writes, ``stagger_s`` apart, every ``period_s`` (s)."""
    return [(k, 1000.0 + r * period_s + k * stagger_s) for r in range(rounds) for k in (0, 1)]


def test_bbr_whole_holds_a_pull_written_into_the_other_s_burst_and_reno_does_not() -> None:
    """What the lab's Linux did with these rounds (docs/notes/issue22-sync-bbr-v1.md, "Bare
    pulls"): under BBR a second write 0.5-15 ms after the first was held in 17-20 of 20
    rounds; the model's BBR whole holds it too, its Reno queue never (a Reno flow that finds
    the queue full has its window cut but keeps a packet in flight)."""
    size, rate = 1_200_000, 300e6
    wire_s = 2 * size * 8 / (rate * GOODPUT)
    writes = synthetic_writes(0.005)
    whole = bare.model_rounds(writes, 2, rate, size, 0, "bbr-v1", wire_s)
    reno = bare.model_rounds(writes, 2, rate, size, 0, "reno", wire_s)
    assert whole.held == whole.rounds == 6 and whole.drops > 0
    assert whole.median_ms > 200.0  # a probe timer's 200 ms on top
    assert reno.held == 0 and wire_s * 1e3 * 0.9 < reno.median_ms < wire_s * 1e3 * 1.1
    # written once the first transfer is all in the queue, the second is not held
    late = bare.model_rounds(synthetic_writes(0.04), 2, rate, size, 0, "bbr-v1", wire_s)
    assert late.held == 0


def test_first_bytes_are_a_transfer_of_their_own() -> None:
    size, rate = 1_200_000, 300e6
    wire_s = 2 * size * 8 / (rate * GOODPUT)
    one = bare.model_rounds(synthetic_writes(0.03), 2, rate, size, 0, "reno", wire_s)
    two = bare.model_rounds(synthetic_writes(0.03), 2, rate, size, 1162, "reno", wire_s)
    assert one.rounds == two.rounds == 6 and one.held == two.held == 0
    assert two.median_ms == pytest.approx(one.median_ms, abs=1.0)  # the same bytes in all


def test_qdisc_drops_come_from_tc_s_statistics() -> None:
    text = ("qdisc htb 1: root refcnt 3 r2q 10 default 0x1 direct_packets_stat 0\n"
            " Sent 100378714 bytes 66335 pkt (dropped 110, overlimits 1619 requeues 0)\n")
    assert bare.qdisc_drops(text) == 110
    with pytest.raises(LabError, match="no drop count"):
        bare.qdisc_drops("qdisc noqueue 0: root refcnt 2")


@pytest.mark.parametrize("args, fragment", [
    (["--bandwidth", "300mbit", "--first-bytes", "1200000"], "--first-bytes 1200000"),
    (["--bandwidth", "300mbit", "--rounds", "2"], "--rounds 2"),
    (["--bandwidth", "300mbit", "--stagger-ms", "1,-2"], "--stagger-ms"),
    (["--bandwidth", "300mbit", "--period-ms", "0"], "--period-ms"),
    (["--bandwidth", "300mbit", "--write-chunk", "16384", "--first-bytes", "1162"],
     "--write-chunk 16384"),
])
def test_bad_arguments_are_one_line(args: list[str], fragment: str) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "diag_bare_sync.py"), *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert fragment in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.root
def test_the_pulls_run_through_a_shaped_link(tmp_path: Path) -> None:
    need_root()
    size, rate = 600_000, 300e6
    args = SimpleNamespace(workers=2, bandwidth="300mbit", queue=None, tcp_cc=None, size=size,
                           first_bytes=0, period_ms=150.0, rounds=5, write_chunk=0)
    writes, sent, drops = bare.run_linux(args, 0.03, tmp_path)
    assert [k for k, _ in writes[:2]] in ([0, 1], [1, 0]) and len(writes) == 10
    assert drops >= 0
    ends = bare.transfer_ends(writes, sent, size)
    assert all(e > t for (_, t), e in zip(writes, ends, strict=True))
    # a lone 600 kB transfer (the second write is 30 ms after the first, which is done by
    # then) cannot beat the link's rate by more than the shaper lets it: its bucket and one
    # GSO packet more (HTB sends while its tokens are not negative)
    burst_s = (131072 + 65226) * 8 / rate
    assert all(e - t > size * 8 / rate - burst_s for (_, t), e in zip(writes, ends, strict=True))
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "diag_bare_sync.py"),
                           "--bandwidth", "300mbit", "--stagger-ms", "30", "--rounds", "4",
                           "--size", str(size), "--period-ms", "150", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    row, = json.loads(out.read_text())["rows"]
    assert set(row) >= {"linux", "reno", "bbr", "bbr-v1", "writes", "linux_ends"}
    assert row["linux"]["rounds"] == 2 and len(row["writes"]) == 8
    # the same, each transfer written 16 KiB at a time by one select loop: every byte arrives
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "diag_bare_sync.py"),
                           "--bandwidth", "300mbit", "--stagger-ms", "0", "--rounds", "3",
                           "--size", str(size), "--period-ms", "150", "--write-chunk", "16384",
                           "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    row, = json.loads(out.read_text())["rows"]
    assert row["linux"]["rounds"] == 1 and None not in row["linux_ends"]
