"""Today's predictions, frozen before the replay engine's redesign (issue 20): every option
that changes the simulation, one at a time, on the small lab fixture and the shipped sample,
must come out to the bit (tests/golden/variants.py made them and says how to remake them)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))
from variants import PROFILES, VARIANTS, golden_path, predict_rows  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("profile", list(PROFILES))
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_predictions_are_those_frozen(profile: str, variant: str) -> None:
    frozen = json.loads(golden_path(profile).read_text())[variant]
    rows = predict_rows(profile, variant)
    assert len(rows) == len(frozen)
    for got, want in zip(rows, frozen, strict=True):
        assert got == want, (profile, variant, {k: (got[k], want.get(k)) for k in got
                                                if got[k] != want.get(k)})
