"""scripts/diag_same_phase.py: lab runs set beside the replications nearest in spacing.

The spacing and matching are checked on hand-made step clocks; the whole script on the shipped
sample profile, as a bench configuration folder made for the test around it, with one lab run
whose step clocks are made for the test (two workers taking turns).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

import diag_same_phase  # noqa: E402
from conftest import check_missing_prediction, turning_pair_config  # noqa: E402
from diag_same_phase import Point  # noqa: E402

SCRIPT = ROOT / "scripts" / "diag_same_phase.py"


def test_a_pair_taking_turns_is_half_a_step_apart_and_one_in_step_none() -> None:
    w0 = [float(k) for k in range(11)]
    assert diag_same_phase.spacing([w0, [k + 0.5 for k in range(10)]], 0, 10) == 0.5
    assert diag_same_phase.spacing([w0, [k + 0.02 for k in range(10)]], 0, 10) == \
        pytest.approx(0.02)
    # 0.9 of a step after worker 0's end is 0.1 before its next: the gap is on the circle
    assert diag_same_phase.spacing([w0, [k + 0.9 for k in range(10)]], 0, 10) == \
        pytest.approx(0.1)


def test_a_trio_two_in_step_has_a_small_spacing_an_even_one_a_third() -> None:
    w0 = [float(k) for k in range(11)]
    even = [w0, [k + 1 / 3 for k in range(10)], [k + 2 / 3 for k in range(10)]]
    assert diag_same_phase.spacing(even, 0, 10) == pytest.approx(1 / 3)
    pair = [w0, [k + 0.05 for k in range(10)], [k + 0.5 for k in range(10)]]
    assert diag_same_phase.spacing(pair, 0, 10) == pytest.approx(0.05)


def test_only_steps_inside_the_window_count_and_one_worker_has_none() -> None:
    w0 = [float(k) for k in range(11)]
    w1 = [k + 0.5 for k in range(5)] + [k + 0.1 for k in range(5, 10)]
    assert diag_same_phase.spacing([w0, w1], 5, 10) == pytest.approx(0.1)
    assert diag_same_phase.spacing([w0], 0, 10) is None
    assert diag_same_phase.spacing([w0, [20.0]], 0, 10) is None


def test_the_replay_at_a_spacing_is_the_median_of_the_nearest() -> None:
    reps = [Point(0.0, 100.0), Point(0.1, 110.0), Point(0.2, 120.0), Point(0.4, 150.0),
            Point(0.5, 160.0)]
    assert diag_same_phase.at_spacing(reps, 0.45, 2) == 155.0
    assert diag_same_phase.at_spacing(reps, 0.12, 3) == 110.0


def test_the_command_line_is_the_benchs_on_this_profile_for_one_w(tmp_path: Path) -> None:
    cfg = turning_pair_config(tmp_path)
    argv = diag_same_phase.predict_argv(cfg, 2, ["--link-windows", "ratio"])
    assert argv[:2] == ["predict", str(cfg / "profile")]
    assert "/elsewhere/profile" not in argv and "sim,mva-exact" not in argv
    assert argv[argv.index("--workers") + 1] == "2" and argv.count("--workers") == 1
    assert argv[argv.index("--run-steps") + 1] == "12"
    assert argv[-2:] == ["--link-windows", "ratio"]


def test_the_script_sets_the_run_beside_the_replay_on_the_sample(tmp_path: Path) -> None:
    cfg = turning_pair_config(tmp_path)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(cfg), "--workers", "2",
                           "--near", "2"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    row = next(x for x in proc.stdout.splitlines() if x.startswith("| 2 | w2.json"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "0.50" and cells[3] == "120.0"
    replay = float(cells[4])
    # the % is the unrounded replay's against the run: within the two cells' roundings
    assert replay > 0 and abs(float(cells[5]) - 100 * (replay / 120.0 - 1)) < 0.05 + 0.05 / 1.2
    summary = next(x for x in proc.stdout.splitlines() if x.startswith("- W = 2:"))
    assert "runs 0.50" in summary and "median of 1)" in summary


def test_a_folder_without_a_prediction_is_a_one_line_error(tmp_path: Path) -> None:
    check_missing_prediction(SCRIPT, turning_pair_config(tmp_path))


def test_a_what_if_is_replayed_from_the_profile_it_names(tmp_path: Path) -> None:
    cfg = turning_pair_config(tmp_path)
    what_if = tmp_path / "sample-b64-20mbit-from-b32"
    what_if.mkdir()
    (what_if / "config.json").write_text(json.dumps({"batch_size": 64,
                                                     "profile_of": cfg.name}))
    shutil.copy(cfg / "predict.json", what_if / "predict.json")
    assert diag_same_phase.profile_dir(what_if) == cfg / "profile"
    assert diag_same_phase.predict_argv(what_if, 2, [])[1] == str(cfg / "profile")
    assert diag_same_phase.profile_dir(cfg) == cfg / "profile"  # its own where it has one
