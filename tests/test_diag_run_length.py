"""scripts/diag_run_length.py: the bench's prediction beside longer replications, against the lab.

The command-line swap is checked by hand; the whole script on the shipped sample profile, as a
bench configuration folder made for the test around it, with one lab run whose step clocks
are made for the test (two workers taking turns).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

import diag_run_length  # noqa: E402
from conftest import check_missing_prediction, turning_pair_config  # noqa: E402

SCRIPT = ROOT / "scripts" / "diag_run_length.py"


def test_the_lab_run_length_is_swapped_for_plain_replications() -> None:
    argv = ["predict", "P", "--run-steps", "16", "--workers", "2", "--steps", "40", "-q"]
    assert diag_run_length.with_steps(argv, 200) == ["predict", "P", "--workers", "2", "-q",
                                                     "--steps", "200"]


def test_the_script_prints_a_row_per_length_on_the_sample(tmp_path: Path) -> None:
    cfg = turning_pair_config(tmp_path)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(cfg), "--workers", "2",
                           "--lengths", "30"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    rows = [[c.strip() for c in x.strip("|").split("|")] for x in proc.stdout.splitlines()
            if x.startswith("| 2 |")]
    assert [r[4] for r in rows] == ["the bench's (--run-steps 12)", "--steps 30"]
    for r in rows:
        assert r[1:4] == ["1", "120.0", "0.50"]  # one lab run, its rate and its spacing
        pred = float(r[5])
        assert pred > 0 and abs(float(r[6]) - 100 * (pred / 120.0 - 1)) < 0.05 + 0.05 / 1.2
        assert 0.0 <= float(r[7]) <= 0.5


def test_bad_lengths_and_a_folder_without_a_prediction_are_one_line_errors(
        tmp_path: Path) -> None:
    cfg = turning_pair_config(tmp_path)
    bad = subprocess.run([sys.executable, str(SCRIPT), str(cfg), "--lengths", "5"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("diag_run_length: --lengths")
    check_missing_prediction(SCRIPT, cfg)
