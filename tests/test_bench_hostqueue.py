"""scripts/bench_hostqueue.py: the host queue's kernel against an older commit's, side by side."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "bench_hostqueue.py"
SYNC_BUNDLE = ROOT / "tests" / "data" / "small_sync_bundle"
OLD = "39b235e"


def _has_commit(rev: str) -> bool:
    return subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{rev}^{{commit}}"],
                          capture_output=True).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _has_commit(OLD), reason=f"commit {OLD} (the old kernel) is not in "
                    "this git repository (a shallow clone)")
def test_old_and_new_kernels_agree_and_are_timed():
    """Two workers, 20 steps of the small synchronous profile: the script exits 0 only if
    the old and new kernels gave the same step ends to the bit; its row has every side's
    milliseconds and both ratios."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--profile", str(SYNC_BUNDLE),
                           "--workers", "2", "--steps", "20", "--repeat", "1"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    rows = [line.strip("|").split("|") for line in proc.stdout.splitlines()[2:]]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0]]
    assert cells[1] == "sync-ps" and cells[2] == "2"
    assert all(float(c) > 0 for c in cells[3:6])
    assert cells[6].endswith("x") and cells[7].endswith("x")


def test_a_missing_profile_is_one_line():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--profile", "/nonexistent/profile"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 2 and "/nonexistent/profile" in proc.stderr
    assert "Traceback" not in proc.stderr
