"""scripts/diag_ring_hop_link.py's table, without a lab: a loopback hop of nothing (its all-reduce
took no longer than loopback TCP's streaming) shows as "-", not a crash (CI, 2026-12-01)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "diag_ring_hop_link.py"


def _script():
    spec = importlib.util.spec_from_file_location("diag_ring_hop_link", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_ratio_to_a_hop_of_nothing_is_a_dash():
    ratio = _script()._ratio
    assert ratio(5570.0, 2780.0) == "2.00"
    assert ratio(1000.0, 0.0) == "-"
    assert ratio(-40.0, 0.0) == "-"
