"""The op database's cache pass (collector/cachepass.py): /sys read, the ladder of passes, and
the pass read from the probes' times (the calibration itself runs for real in test_opdb)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gradwire.collector.cachepass import (
    MIN_PASS,
    choose_pass,
    pass_ladder,
    reported_cache_bytes,
    reported_pass_bytes,
)

MiB = 1 << 20


def test_sys_cache_sizes_are_read_per_level_and_the_reported_pass_is_twice_the_largest(
        tmp_path: Path) -> None:
    for i, (level, size) in enumerate([(1, "48K"), (1, "32K"), (2, "2048K"), (3, "260M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "size").write_text(f"{size}\n")
    (tmp_path / "index9").mkdir()  # no files: skipped
    levels = reported_cache_bytes(tmp_path)
    assert levels == {1: 48 << 10, 2: 2 * MiB, 3: 260 * MiB}
    assert reported_pass_bytes(levels) == 520 * MiB
    assert reported_pass_bytes({}) == MIN_PASS == reported_pass_bytes({2: 1 * MiB})
    assert reported_cache_bytes(tmp_path / "none") == {}


def test_the_ladder_doubles_from_16_mib_to_the_reference() -> None:
    assert pass_ladder(520 * MiB) == [16 * MiB, 32 * MiB, 64 * MiB, 128 * MiB, 256 * MiB,
                                      520 * MiB]
    assert pass_ladder(64 * MiB) == [16 * MiB, 32 * MiB, 64 * MiB]
    assert pass_ladder(MIN_PASS) == [MIN_PASS]


def _times(curve: dict[int, float], noise: float = 0.02) -> dict[int, list[list[float]]]:
    """Three probes whose time after each pass is ``curve[size]`` times their own scale; the
    reference's two rounds differ by ``noise`` (relative)."""
    ref = max(curve)
    out = {}
    for size, f in curve.items():
        rounds = [1 + noise, 1.0] if size == ref else [1.0, 1.0]
        out[size] = [[scale * f * r for r in rounds] for scale in (10.0, 40.0, 300.0)]
    return out


def test_the_pass_is_the_smallest_size_from_which_no_larger_slows_the_probes() -> None:
    curve = {16 * MiB: 0.67, 32 * MiB: 0.80, 64 * MiB: 0.92, 128 * MiB: 1.0, 256 * MiB: 0.995,
             520 * MiB: 1.0}
    cal = choose_pass(_times(curve))
    assert cal.chosen == 128 * MiB
    assert cal.noise == pytest.approx(math.log(1.02), rel=1e-6)  # round 1 over round 2
    assert cal.ratios[0] == pytest.approx(0.67 / (1 + 0.01), rel=1e-3)
    assert "cache pass 128 MiB" in cal.said() and "520 MiB" in cal.said()


def test_a_dip_above_a_good_size_keeps_the_pass_above_the_dip() -> None:
    # 64 MiB looks as slow as the reference, but 128 MiB does not: a pass of 64 MiB is not
    # shown to be enough, so the pass is 256 MiB
    curve = {16 * MiB: 0.6, 64 * MiB: 1.0, 128 * MiB: 0.8, 256 * MiB: 1.0, 520 * MiB: 1.0}
    assert choose_pass(_times(curve)).chosen == 256 * MiB


def test_a_noisier_reference_tolerates_a_larger_dip_and_a_flat_curve_takes_the_smallest(
        ) -> None:
    curve = {16 * MiB: 0.6, 32 * MiB: 0.9, 64 * MiB: 1.0}
    assert choose_pass(_times(curve, noise=0.02)).chosen == 64 * MiB
    assert choose_pass(_times(curve, noise=0.30)).chosen == 32 * MiB  # 0.9 is within its noise
    assert choose_pass(_times({16 * MiB: 1.0, 32 * MiB: 1.0})).chosen == 16 * MiB
