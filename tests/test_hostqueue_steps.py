"""scripts/hostqueue_steps.py: one replay's host-queue connections step by step."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gradwire.replay.hostqueue import BASE_RTT_US

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "hostqueue_steps.py"
SYNC_BUNDLE = ROOT / "tests" / "data" / "small_sync_bundle"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300)


def test_a_row_per_step_with_every_workers_connection():
    """Three workers, four steps of the small synchronous profile: a table row per step,
    time growing, five columns per worker, windows of whole segments at least the initial
    window's 10 (no cut behind its queue at the lab's default size)."""
    proc = run(str(SYNC_BUNDLE), "--workers", "3", "--steps", "4")
    assert proc.returncode == 0, proc.stderr
    rows = [line.strip("|").split("|") for line in proc.stdout.splitlines()[2:]]
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4]
    times = [float(r[1]) for r in rows]
    assert times == sorted(times) and times[0] > 0
    assert all(len(r) == 2 + 5 * 3 for r in rows)
    assert all(float(r[2 + 5 * w]) >= 10 for r in rows for w in range(3))


def test_a_missing_profile_is_one_line():
    proc = run("/nonexistent/profile")
    assert proc.returncode == 2 and "/nonexistent/profile" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bbr_connections_keep_their_window():
    """--tcp bbr: BBR's connections (the window target from the profile, or three GSO packets
    and the BDP where its lab ran Reno) never cut their window on a local drop, so no
    ssthresh is ever set ('-'), and each window stays at least BBR's floor of 4 segments."""
    proc = run(str(SYNC_BUNDLE), "--workers", "3", "--steps", "3", "--tcp", "bbr")
    assert proc.returncode == 0, proc.stderr
    rows = [line.strip("|").split("|") for line in proc.stdout.splitlines()[2:]]
    assert len(rows) == 3
    assert all(r[3 + 5 * w].strip() == "-" for r in rows for w in range(3))
    assert all(float(r[2 + 5 * w]) >= 4 for r in rows for w in range(3))
    bad = run(str(SYNC_BUNDLE), "--tcp", "cubic")
    assert bad.returncode == 2 and "--tcp" in bad.stderr and "Traceback" not in bad.stderr


def test_bbr_whole_shows_each_connections_bbr_state():
    """--tcp bbr-v1: eight columns a worker, the last three BBR's mode (one of its four), its
    bandwidth estimate (Mbit/s: at least a tenth of the profile's 1 Gbit/s link once ACKs
    came back) and its minimum RTT (us: never below the empty round trip the connections
    start from, BASE_RTT_US)."""
    proc = run(str(SYNC_BUNDLE), "--workers", "2", "--steps", "3", "--tcp", "bbr-v1")
    assert proc.returncode == 0, proc.stderr
    head = proc.stdout.splitlines()[0]
    assert "w1 BBR mode" in head and "w1 bw Mbit/s" in head and "w1 min RTT us" in head
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in proc.stdout.splitlines()[2:]]
    assert len(rows) == 3 and all(len(r) == 2 + 8 * 2 for r in rows)
    for r in rows:
        for w in range(2):
            mode, bw, rtt = r[2 + 8 * w + 5: 2 + 8 * w + 8]
            assert mode in ("STARTUP", "DRAIN", "PROBE_BW", "PROBE_RTT")
            assert float(bw.replace(",", "")) > 100 and float(rtt) >= BASE_RTT_US
