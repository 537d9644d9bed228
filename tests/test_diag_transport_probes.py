"""scripts/diag_two_way_probe.py and scripts/diag_bare_ps.py: issue 21's transport probes
with no TensorFlow (a lone TCP flow beside two going the other way; the asynchronous PS job's
transfers over plain sockets).

Their arithmetic is checked on hand-made receiver marks, message spans and step ends; the
tools themselves run for real, briefly, through the lab's namespaces and a shaped link (root).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

import diag_bare_ps  # noqa: E402
import diag_two_way_probe as probe  # noqa: E402
from conftest import need_root  # noqa: E402

from gradwire.replay.netns import LabError  # noqa: E402


def test_bytes_at_interpolates_between_marks_and_holds_at_the_ends() -> None:
    marks = [(1.0, 100), (2.0, 300), (4.0, 700)]
    assert probe.bytes_at(marks, 0.5) == 0.0
    assert probe.bytes_at(marks, 1.5) == pytest.approx(200.0)
    assert probe.bytes_at(marks, 3.0) == pytest.approx(500.0)
    assert probe.bytes_at(marks, 9.0) == 700.0
    # 400 B over [2, 4] s is 1600 bit/s: half of a 3200 bit/s payload rate
    assert probe.share(marks, 2.0, 4.0, 3200.0) == pytest.approx(0.5)


def test_stops_are_the_last_bytes_before_a_silence() -> None:
    marks = [(0.0, 0), (0.001, 10), (0.002, 20), (0.05, 30), (0.051, 40), (0.3, 50)]
    assert probe.stops(marks, 0.02) == [0.002, 0.051]  # silences of 48 and 249 ms
    assert probe.stops(marks, 0.2) == [0.051]
    assert probe.stops(marks, 0.3) == []


def test_lone_share_takes_the_median_message_in_the_middle() -> None:
    # messages of 1000 B (8000 bit): the first inside the skipped start, then three in the
    # middle taking 1, 2 and 4 ms, then one in the skipped end
    spans = [(0.0, 0.001), (0.6, 0.601), (0.8, 0.802), (1.0, 1.004), (2.95, 2.951)]
    rate, (t0, t1) = probe.lone_share({"spans": spans}, 3.0, 1000, 8e6)
    assert rate == pytest.approx(0.5)  # 8000 bit in 2 ms over an 8 Mbit/s payload rate
    assert (t0, t1) == (0.6, 1.004)
    with pytest.raises(LabError, match="longer --seconds"):
        probe.lone_share({"spans": [(0.0, 0.001)]}, 3.0, 1000, 8e6)


@pytest.mark.parametrize("script, args, fragment", [
    ("diag_bare_ps.py", ["--bandwidth", "100mbit", "--workers", "one"], "bad --workers"),
    ("diag_bare_ps.py", ["--bandwidth", "100mbit", "--steps", "2"], "--steps must exceed"),
    ("diag_bare_ps.py", ["--bandwidth", "100mbit", "--pause-ms", "-1"], "must not be negative"),
    ("diag_two_way_probe.py", ["--bandwidth", "100mbit", "--repeats", "0"], "--repeats must"),
    ("diag_two_way_probe.py", ["--bandwidth", "100mbit", "--seconds", "0.5"],
     "--seconds must exceed 0.7"),
    ("diag_two_way_probe.py", ["--bandwidth", "100mbit", "--after-sharing", "0.5",
                               "--seconds", "1.5"], "--seconds must exceed 2"),
])
def test_bad_arguments_are_one_line(script: str, args: list[str], fragment: str) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / script), *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert fragment in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.root
def test_the_probe_runs_flows_through_a_shaped_link() -> None:
    need_root()
    res = probe.probe("200mbit", None, None, seconds=1.5, repeats=1, size=0, gap=0.0)
    (alone, _), = res["alone"]
    assert 0.85 < alone < 1.1  # one bulk flow fills the link's TCP payload rate
    for key in ("pull", "push"):
        (lone, back), = res[key]
        # the reverse pair moves, but how much it gets is what the probe measures, not a
        # bound: its acknowledgements queue behind the lone flow's data (CI saw 0.43)
        assert 0.2 < lone < 1.15 and 0.0 < back < 2.3, (key, lone, back)


@pytest.mark.slow
@pytest.mark.root
def test_the_bare_job_cannot_beat_its_link() -> None:
    need_root()
    size, rate_bps = 500_000, 200e6
    # 20 steps each: a worker's early stall (a retransmission timeout, 200 ms or more) must
    # not end the other's run before it is past its first SKIP steps (CI saw one with 8)
    ends = diag_bare_ps.run_job("200mbit", None, None, "fifo", 2, size, 0.005, 20)
    assert [len(e) for e in ends] == [21, 21]
    assert all(b > a for e in ends for a, b in zip(e, e[1:], strict=False))
    _, step_s = diag_bare_ps.throughput(ends, batch=1)
    # a step moves ``size`` bytes each way through the link: at least that long plus the pause
    assert step_s > size * 8 / rate_bps + 0.005
    # the PS's apply holds each push's acknowledgement: a W = 1 step takes it on top
    held = diag_bare_ps.run_job("200mbit", None, None, "fifo", 1, size, 0.005, 8, apply_s=0.05)
    _, held_s = diag_bare_ps.throughput(held, batch=1)
    assert held_s > size * 8 / rate_bps + 0.005 + 0.05


@pytest.mark.slow
@pytest.mark.root
def test_after_sharing_alone_the_pull_takes_the_link_back() -> None:
    need_root()
    from gradwire.replay.netns import Topology
    with Topology(num_ps=1, num_workers=4, bandwidth="200mbit") as topo:
        assert topo.rate_bps is not None
        shared, after = probe.after_sharing(topo, False, 3.5, 0.3,
                                            topo.rate_bps * probe.GOODPUT)
    assert 0.0 < shared < 1.05  # it shares the pull direction with the companion
    assert len(after) == 27 and min(after[2:]) > 0.8  # nothing the other way: the whole link
