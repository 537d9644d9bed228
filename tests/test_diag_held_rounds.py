"""scripts/diag_held_rounds.py: a run's slow rounds against its held connections.

It reads ``tests/data/tcpsample-held.ss.txt`` (22 real samples of a synchronous W = 3 run, the
PS's flow to worker .102 held back for 212 ms; ``tests/test_lab_tcpsample.py``) as a run's
PS samples, beside step clocks made for the test around that episode.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import diag_held_rounds  # noqa: E402
from lab import tcpsample  # noqa: E402

HELD_FILE = ROOT / "tests" / "data" / "tcpsample-held.ss.txt"
SCRIPT = ROOT / "scripts" / "diag_held_rounds.py"


def _result(tmp_path: Path, step_ends: list[float]) -> Path:
    path = tmp_path / "run.json"
    path.write_text(json.dumps({
        "throughput_examples_per_s": 500.0,
        "per_worker": {"worker0": {"step_end_times_s": step_ends}},
        "tcp_samples": {"ps0": {"file": str(HELD_FILE)}},
    }))
    return path


def test_the_episode_starts_at_the_flows_last_send_and_ends_at_its_last_held_sample() -> None:
    (ep,) = diag_held_rounds.episodes(HELD_FILE, "ps0")
    samples = tcpsample.parse(HELD_FILE)
    (held,) = tcpsample.held_episodes(samples)
    assert ep.ps == "ps0" and ep.longest_ms == held.longest_ms == 212
    assert ep.end_s == samples[0].t + held.last_s
    # it began before its first held sample by that sample's time since the last send (>= 50 ms)
    assert samples[0].t + held.first_s - ep.start_s >= 0.050
    assert ep.end_s - ep.start_s > 0.15


def test_only_the_slow_round_that_spans_the_hold_is_counted(tmp_path: Path) -> None:
    (ep,) = diag_held_rounds.episodes(HELD_FILE, "ps0")
    mid = (ep.start_s + ep.end_s) / 2
    # four warm-up ends, then: a slow round a second before the hold, fast ones up to it, a
    # slow one around it, and a fast one
    ends = [mid - 1.6 + 0.01 * k for k in range(4)]
    ends += [mid - 1.45, mid - 1.15] + [mid - 1.15 + 0.1 * k for k in range(1, 11)]
    ends += [mid + 0.15, mid + 0.25]
    n, slow = diag_held_rounds.slow_rounds(ends, skip=4, slow_s=0.22)
    assert n == 13 and len(slow) == 2
    assert diag_held_rounds.overlapping(slow, [ep], overlap_s=0.05) == [slow[1]]
    proc = subprocess.run([sys.executable, str(SCRIPT), str(_result(tmp_path, ends))],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    row = proc.stdout.splitlines()[-1]
    assert row.startswith("| run | 500.0 | 13 | 300, 300 | 1 | 1: ps0 212 |"), row


def test_a_file_that_is_not_a_sampled_lab_result_is_one_line_and_no_table(tmp_path: Path) -> None:
    bad = tmp_path / "notes.json"
    bad.write_text("not json")
    unsampled = tmp_path / "unsampled.json"
    unsampled.write_text(json.dumps({"per_worker": {"worker0": {"step_end_times_s": [1, 2]}}}))
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps({"per_worker": {"worker0": {"step_end_times_s": [1, 2]}},
                                 "tcp_samples": {"ps0": {"file": str(tmp_path / "gone.txt")}}}))
    for path, says in ((bad, "not a lab result"), (unsampled, "no socket samples"),
                       (moved, "cannot be read")):
        proc = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode != 0 and proc.stdout == ""
        assert proc.stderr.count("\n") == 1 and says in proc.stderr and str(path) in proc.stderr
