"""The kept-cache probe (collector/cachesize.py): the knee read from a latency curve, the pass
sized from it, /sys read, and a real walk on this machine."""

from __future__ import annotations

from pathlib import Path

from gradwire.collector.cachesize import (
    MIN_PASS,
    CacheProbe,
    kept_from_curve,
    pass_bytes,
    probe_cache,
    reported_cache_bytes,
    walk_ns,
)

MiB = 1 << 20


def test_the_kept_cache_is_the_largest_set_below_the_midpoint_latency() -> None:
    sizes = [4 * MiB, 8 * MiB, 16 * MiB, 32 * MiB, 64 * MiB]
    ns = [40.0, 42.0, 60.0, 110.0, 120.0]  # midpoint 80: 16 MiB is the last below it
    assert kept_from_curve(sizes, ns) == 16 * MiB
    assert kept_from_curve(sizes, [40.0] * 5) == 4 * MiB  # flat: nothing below the midpoint


def test_the_pass_is_twice_the_kept_cache_within_its_bounds() -> None:
    def probe(kept: int, reported: int) -> CacheProbe:
        return CacheProbe((kept,), (1.0,), kept, reported)

    assert pass_bytes(probe(32 * MiB, 260 * MiB)) == 64 * MiB
    assert pass_bytes(probe(2 * MiB, 260 * MiB)) == MIN_PASS  # never below 16 MiB
    assert pass_bytes(probe(300 * MiB, 260 * MiB)) == 520 * MiB  # never above twice /sys's
    assert pass_bytes(probe(100 * MiB, 0)) == 200 * MiB  # /sys said nothing


def test_sys_cache_sizes_are_read_per_level(tmp_path: Path) -> None:
    for i, (level, size) in enumerate([(1, "48K"), (1, "32K"), (2, "2048K"), (3, "260M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "size").write_text(f"{size}\n")
    (tmp_path / "index9").mkdir()  # no files: skipped
    assert reported_cache_bytes(tmp_path) == {1: 48 << 10, 2: 2 * MiB, 3: 260 * MiB}
    assert reported_cache_bytes(tmp_path / "none") == {}


def test_a_real_walk_is_slower_in_memory_than_in_the_l1() -> None:
    # 16 KiB fits any L1; 256 MiB fits no cache this project runs on but the largest servers'
    in_l1, in_memory = walk_ns(16 << 10), walk_ns(256 * MiB)
    assert 0 < in_l1 < in_memory


def test_a_real_probe_reads_a_curve_of_doubling_sets() -> None:
    probe = probe_cache(largest=16 * MiB)
    assert probe.sizes[-1] == 16 * MiB
    assert all(b == 2 * a for a, b in zip(probe.sizes[:-2], probe.sizes[1:-1], strict=True))
    assert all(t > 0 for t in probe.ns)
    assert probe.kept in probe.sizes
    assert "kept cache" in probe.said()
