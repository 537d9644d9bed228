"""scripts/diag_ring_hop_form.py: a ring hop timed with the database's input and a step's, by
real TensorFlow servers on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import need_tf

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "diag_ring_hop_form.py"

pytestmark = pytest.mark.slow


def test_every_form_is_timed_and_the_two_hops_are_printed(tmp_path):
    need_tf()
    out = tmp_path / "forms.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--chunks", "62500", "--reps", "2",
                           "--pairs", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| 0.25 |"))
    assert len(row.strip("|").split("|")) == 7
    runs = json.loads(out.read_text())
    assert set(runs["62500"]) == {"variable", "fresh", "control"}
    assert all(len(t) == 2 and min(t) > 0 for t in runs["62500"].values())
    again = subprocess.run([sys.executable, str(SCRIPT), "--json", str(out)],
                           capture_output=True, text=True)
    assert again.returncode == 2 and "exists" in again.stderr
