"""scripts/diag_phase_response.py: which way a pair's phase moves, the replay's and the lab's.

The phases and their changes are checked on hand-made step clocks; the whole script on the
shipped sample profile, as a bench configuration folder made for the test around it, with one
lab run whose step clocks are made for the test (two workers taking turns, half a step apart).
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

import diag_phase_response as dpr  # noqa: E402
from conftest import turning_pair_config  # noqa: E402

SCRIPT = ROOT / "scripts" / "diag_phase_response.py"


def test_a_pair_drifting_into_step_has_its_phase_fall_step_by_step() -> None:
    w0 = [float(k) for k in range(12)]
    w1 = [k + 0.4 - 0.05 * k for k in range(10)]  # 0.05 of a step nearer worker 0 each step
    phase = dpr.phases([w0, w1])
    assert phase[:8] == pytest.approx([0.4 - 0.05 * k for k in range(8)])
    pairs = dpr.changes(phase[:8], skip=2)
    assert [x for x, _ in pairs] == pytest.approx([0.3, 0.25, 0.2, 0.15, 0.1])
    assert all(d == pytest.approx(-0.05) for _, d in pairs)
    rows = dpr.response(pairs, bins=2)
    assert rows[0] == (pytest.approx(-0.05), 5) and math.isnan(rows[1][0]) and rows[1][1] == 0


def test_a_change_across_the_step_end_is_wrapped() -> None:
    # from 0.95 to 0.05 is a tenth of a step forward, not 0.9 back
    assert dpr.changes([0.95, 0.05], skip=0) == [(0.95, pytest.approx(0.1))]
    assert dpr.phases([[0.0, 1.0]]) == []  # one worker: no pair


def test_the_script_sets_the_replay_beside_the_lab_on_the_sample(tmp_path: Path) -> None:
    cfg = turning_pair_config(tmp_path)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(cfg), "--bins", "4"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    rows = {x.split("|")[1].strip(): [c.strip() for c in x.strip().strip("|").split("|")[1:]]
            for x in proc.stdout.splitlines() if x.startswith("| replay") or x.startswith("| lab")}
    # the made run: worker 1's 10 ends inside the window [2, 7] s half a step after worker
    # 0's; after the first 2, 7 changes of 0 at 0.5
    assert rows["lab (1 runs)"] == ["-", "-", "+0.0 (7)", "-"]
    assert len(rows["replay"]) == 4
    filled = [cell for cell in rows["replay"] if cell != "-"]  # each "+m.m (n)"
    assert filled
    for cell in filled:
        mean, count = cell.rstrip(")").split(" (")
        assert -50.0 <= float(mean) <= 50.0 and int(count) > 0


def test_a_folder_without_a_w2_run_says_so_and_bad_bins_are_refused(tmp_path: Path) -> None:
    cfg = turning_pair_config(tmp_path)
    (cfg / "w2.json").unlink()
    proc = subprocess.run([sys.executable, str(SCRIPT), str(cfg), "--bins", "2"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "(no W = 2 lab run in the folder)" in proc.stdout and "| replay |" in proc.stdout
    bad = subprocess.run([sys.executable, str(SCRIPT), str(cfg), "--bins", "0"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("diag_phase_response: --bins")


def test_a_folder_without_a_prediction_is_a_one_line_error(tmp_path: Path) -> None:
    cfg = turning_pair_config(tmp_path)
    (cfg / "predict.json").unlink()
    proc = subprocess.run([sys.executable, str(SCRIPT), str(cfg)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.startswith("diag_phase_response: ") and "predict.json" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
