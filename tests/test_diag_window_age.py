"""scripts/diag_window_age.py: the windows a profile's transfers keep, by their age.

The binning is checked on hand-made segments (one capture, two connections, a transfer that
starts again after an idle spell); the whole script on the shipped sample profile.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from gradwire.collector.transport import TransportStats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import diag_window_age as dwa  # noqa: E402

SCRIPT = ROOT / "scripts" / "diag_window_age.py"
SAMPLE = ROOT / "tests" / "data" / "small_bundle"
MS = 1_000_000  # ns


def stats(segments: list[tuple[float, float, float, int]]) -> TransportStats:
    """One capture of ``segments``: (sent at, ms; connection; in-flight bytes; payload)."""
    nan = math.nan
    return TransportStats(
        "made.pcap", len(segments), 0, (),
        in_flight=(([s[2] for s in segments], [nan] * len(segments),
                    [s[3] for s in segments]),),
        sent_ns=([int(s[0] * MS) for s in segments],),
        sent_conn=([int(s[1]) for s in segments],))


def test_a_transfer_s_segments_fall_in_the_bins_of_their_age() -> None:
    # connection 0: 100 KB in flight at 0-4 ms, 300 KB at 5-9 ms; connection 1 starts at
    # 7 ms, so its first segments are young again
    segs = [(t, 0, 100e3 if t < 5 else 300e3, 1000) for t in range(10)]
    segs += [(7.0 + t, 1, 50e3, 2000) for t in range(3)]
    segs.sort()
    rows = dwa.window_by_age(stats(segs), 1e8, 0.010, 0.005, 3)
    # bin 0: five of connection 0's at 100 KB (5000 bytes), three of connection 1's at 50 KB
    # (6000 bytes); bin 1: five at 300 KB; bin 2: none
    assert rows[0] == (pytest.approx((100e3 * 5000 + 50e3 * 6000) / 11000), 11000)
    assert rows[1] == (pytest.approx(300e3), 5000)
    assert rows[2] == (0.0, 0)


def test_an_idle_spell_longer_than_the_gap_starts_a_new_transfer_and_the_last_bin_is_open(
        ) -> None:
    segs = [(0.0, 0, 10e3, 100), (4.0, 0, 20e3, 100), (30.0, 0, 30e3, 100),
            (31.0, 0, 40e3, 100), (50.0, 0, 50e3, 100)]
    # a 10 ms gap: 0 and 4 ms one transfer (ages 0, 4); 30 ms, after 26 idle, a new one
    # (ages 0, 1); 50 ms, after 19 idle, a third (age 0): every segment in the first bin
    fresh = dwa.window_by_age(stats(segs), 1e8, 0.010, 0.005, 2)
    assert fresh[0] == (pytest.approx((10e3 + 20e3 + 30e3 + 40e3 + 50e3) / 5), 500)
    assert fresh[1] == (0.0, 0)
    # a 30 ms gap: one transfer; ages 30, 31 and 50 ms all in the open last bin
    long_gap = dwa.window_by_age(stats(segs), 1e8, 0.030, 0.005, 2)
    assert long_gap[0] == (pytest.approx(15e3), 200)
    assert long_gap[1] == (pytest.approx(40e3), 300)


def test_the_table_gives_each_window_as_its_share_of_the_largest() -> None:
    text = dwa.table([("pulls", [(100e3, 10), (200e3, 10), (0.0, 0)])], 5.0)
    lines = text.splitlines()
    assert lines[0] == "| side | 0-5 | 5-10 | >= 10 |"
    assert lines[2] == "| pulls | 100 (0.50) | 200 (1.00) | - |"


def test_the_script_on_the_sample_profile() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), str(SAMPLE), "--bins", "4"],
                         capture_output=True, text=True, check=False, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("# Window by age of transfer")
    assert lines[2] == "| side | 0-5 | 5-10 | 10-15 | >= 15 |"
    assert lines[4].startswith("| pulls (PS captures) | ")
    assert lines[5].startswith("| pushes (worker capture) | ")
    assert "(1.00)" in lines[4] and "(1.00)" in lines[5]


@pytest.mark.parametrize("args, says", [
    (["/nonexistent-profile"], "/nonexistent-profile"),
    ([str(SAMPLE), "--bin-ms", "0"], "--bin-ms must be > 0"),
    ([str(SAMPLE), "--bandwidth", "fast"], "bad rate 'fast'"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                         check=False, timeout=120)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and says in out.stderr
    assert "Traceback" not in out.stderr
