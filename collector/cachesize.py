"""How much last-level cache this process keeps its data in, measured by load latency.

A virtual machine reports its host socket's L3 (``/sys``), shared with other guests; how much
of it a guest's data keeps is a property of the running machine. The measure is the classic
one (lmbench's ``lat_mem_rd``): a dependent walk over a working set in random order, one
pointer per 64-byte line, so each load waits for the one before. While the set fits in a
cache the walk runs at that cache's latency; once it does not, at memory's. The **kept
cache** is the largest set whose latency is below the midpoint of the smallest set's (well
inside the cache) and the largest set's (well beyond it): the midpoint is the definition,
not a fitted constant.

``collector.opbench`` sizes the op database's cache pass from it (``cache_flush_bytes``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gradwire.jit import njit

LINE = 64  # bytes per cache line on every x86-64 and Arm server part
MIN_SET = 1 << 20  # bytes: the walk's smallest working set
MIN_PASS = 16 << 20  # bytes: the smallest cache pass (docs/opdb.md)


@dataclass(frozen=True)
class CacheProbe:
    """A latency curve and the kept cache read from it.

    ``sizes``: working sets (bytes), doubling; ``ns``: ns per dependent load at each;
    ``kept``: the largest set below the midpoint latency (bytes); ``reported``: the largest
    cache ``/sys`` names (bytes, 0 if none)."""

    sizes: tuple[int, ...]
    ns: tuple[float, ...]
    kept: int
    reported: int

    def said(self) -> str:
        """One line: the kept cache, the reported one, and the two latencies."""
        return (f"kept cache {self.kept / 2**20:.0f} MiB of the {self.reported / 2**20:.0f} MiB "
                f"reported ({self.ns[0]:.0f} ns per load in it, {self.ns[-1]:.0f} ns beyond)")


def reported_cache_bytes(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> dict[int, int]:
    """The caches ``/sys`` names for cpu0: level -> bytes (the largest of a level); empty where
    ``/sys`` says nothing."""
    levels: dict[int, int] = {}
    for index in root.glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
            level = int((index / "level").read_text().strip())
        except (OSError, ValueError):
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            levels[level] = max(levels.get(level, 0), int(digits) * unit)
    return levels


def _ring(n_lines: int, rng: np.random.Generator) -> np.ndarray:
    """A buffer of ``n_lines`` 64-byte lines whose first word holds the next line's word
    index, the lines in one random cycle."""
    order = rng.permutation(n_lines)
    words = LINE // 8
    ring = np.zeros(n_lines * words, dtype=np.int64)
    ring[order * words] = np.roll(order, -1) * words
    return ring


@njit(cache=True)
def _walk(ring: np.ndarray, loads: int) -> int:
    at = 0
    for _ in range(loads):
        at = ring[at]
    return at  # returned so the walk is not optimised away


def walk_ns(size_bytes: int, loads: int = 1 << 21, seed: int = 0) -> float:
    """ns per dependent load of a random walk over ``size_bytes`` (after one warm pass)."""
    ring = _ring(max(2, size_bytes // LINE), np.random.default_rng(seed))
    _walk(ring, min(loads, len(ring)))  # compiles, and brings the set into what caches it fits
    t0 = time.perf_counter_ns()
    _walk(ring, loads)
    return (time.perf_counter_ns() - t0) / loads


def kept_from_curve(sizes: list[int], ns: list[float]) -> int:
    """The largest working set whose latency is below the midpoint of the first and the last
    (bytes); the first set when none is."""
    mid = (ns[0] + ns[-1]) / 2
    below = [s for s, t in zip(sizes, ns, strict=True) if t < mid]
    return max(below) if below else sizes[0]


def probe_cache(largest: int | None = None) -> CacheProbe:
    """Walk working sets doubling from twice the L2 (at least 1 MiB) to ``largest`` (default:
    twice the largest reported cache, at least 64 MiB) and read the kept cache. Takes a few
    seconds (about 4 on a 2-core Xeon guest with a 260 MB L3 reported)."""
    levels = reported_cache_bytes()
    reported = max(levels.values(), default=0)
    top = largest or max(2 * reported, 64 << 20)
    size = max(2 * levels.get(2, 0), MIN_SET)
    sizes: list[int] = []
    while size < top:
        sizes.append(size)
        size *= 2
    sizes.append(top)
    ns = [walk_ns(s) for s in sizes]
    return CacheProbe(tuple(sizes), tuple(ns), kept_from_curve(sizes, ns), reported)


def pass_bytes(probe: CacheProbe) -> int:
    """The cache pass for the op database: twice the kept cache, at least 16 MiB, at most
    twice the reported one (where ``/sys`` reports one)."""
    size = max(2 * probe.kept, MIN_PASS)
    return min(size, max(2 * probe.reported, MIN_PASS)) if probe.reported else size
