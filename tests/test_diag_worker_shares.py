"""scripts/diag_worker_shares.py: how unequally the workers of a run share the link.

The spread is checked on hand-made step clocks; the whole script on the shipped sample
profile, as a bench configuration folder made for the test around it, with one lab run whose
step clocks are made for the test (one worker stepping twice as fast as the other).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

import diag_worker_shares  # noqa: E402
from conftest import assert_one_line_error, sample_bench_config  # noqa: E402

from gradwire.throughput import summed_worker_rates, worker_rates  # noqa: E402

SCRIPT = ROOT / "scripts" / "diag_worker_shares.py"


def test_each_workers_rate_is_its_own_steps_between_its_ends_in_the_window() -> None:
    fast = [0.5 * k for k in range(1, 21)]  # 2 steps/s
    slow = [1.0 * k for k in range(1, 11)]  # 1 step/s
    assert worker_rates([fast, slow], 2.0, 8.0) == pytest.approx([2.0, 1.0])
    # the cluster's rate is their sum, weighted by what a step counts
    assert summed_worker_rates([fast, slow], [32, 32], 2.0, 8.0) == pytest.approx(96.0)
    assert worker_rates([fast, [20.0]], 2.0, 8.0) is None  # no end of the second inside
    assert worker_rates([fast], 8.0, 2.0) is None  # an empty window


def test_the_spread_is_the_fastest_over_the_slowest() -> None:
    fast = [0.5 * k for k in range(1, 21)]
    slow = [1.0 * k for k in range(1, 11)]
    even = [1.0 * k + 0.5 for k in range(10)]
    assert diag_worker_shares.spread([fast, slow, even], 2.0, 8.0) == pytest.approx(2.0)
    assert diag_worker_shares.spread([slow, even], 2.0, 8.0) == pytest.approx(1.0)
    assert diag_worker_shares.spread([slow], 2.0, 8.0) is None  # one worker: no spread


def _config(tmp_path: Path) -> Path:
    return sample_bench_config(tmp_path, {
        "throughput_examples_per_s": 96.0, "throughput_window_s": [2.0, 8.0],
        "queue_bytes": 262_144,
        "per_worker": {"worker0": {"step_end_times_s": [0.5 * k for k in range(1, 21)]},
                       "worker1": {"step_end_times_s": [1.0 * k for k in range(1, 11)]}}},
        profile={"link_window_bytes": [100_000.0, 150_000.0]})


def test_the_script_sets_the_runs_spread_beside_the_replays_on_the_sample(tmp_path: Path
                                                                          ) -> None:
    cfg = _config(tmp_path)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(cfg), "--workers", "2"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    row = next(x for x in proc.stdout.splitlines() if x.startswith("| 2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # two connections of 150 kB each against a 256 KiB queue
    assert cells[1] == "1.1" and cells[2] == "2.00 (96.0)"
    median, low_high = cells[3].split(" ")
    low, high = (float(x) for x in low_high.strip("()").split("-"))
    # the replay's workers share equally: each its own rate, none below one
    assert 1.0 <= low <= float(median) <= high
    pred, lab = float(cells[4]), float(cells[5])
    assert pred > 0 and lab == 96.0
    assert abs(float(cells[6]) - 100 * (pred / lab - 1)) < 0.1


def test_a_run_without_step_clocks_is_a_one_line_error(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    (cfg / "w2.json").write_text(json.dumps({"throughput_examples_per_s": 96.0,
                                             "queue_bytes": 262_144}))
    proc = subprocess.run([sys.executable, str(SCRIPT), str(cfg), "--workers", "2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert_one_line_error(proc, "diag_worker_shares: ", "w2.json", "step clocks")


def test_lab_only_leaves_the_replay_out(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(cfg), "--workers", "2,4",
                           "--lab-only"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [x for x in proc.stdout.splitlines() if x.startswith("| 2 |") or
            x.startswith("| 4 |")]
    assert len(rows) == 1  # no run at W = 4: no row
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells == ["2", "1.1", "2.00 (96.0)", "", "", "96.0", ""]
