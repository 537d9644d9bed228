"""How large the op database's cache pass must be on this machine (pure; no TensorFlow).

Before each timed run, ``gradwire opdb build`` passes over a buffer (``collector.opbench``) so
the op finds the machine as a training step leaves it: its inputs, code and address
translations pushed out by other work. The pass used to be twice the largest cache ``/sys``
reports (``reported_pass_bytes``). A virtual machine reports its host's cache: 260 MB on this
project's 2-core Xeon guest, where the 520 MiB pass made a point cost 1.9 s, while the ops
stopped slowing past a pass of 128 MiB (docs/preregistered/issue23-flush-size-report.md).

So the pass is calibrated on the machine (``choose_pass``): a few small probe ops are timed
after passes doubling from 16 MiB to the reported rule's size, twice, the second time in the
reverse order; the pass is the smallest size from which no larger one slows the probes by more
than the reference pass disagrees with itself between its two rounds. The tolerance is the
machine's own repeat noise, not a chosen constant.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

MIN_PASS = 16 << 20  # bytes: the smallest pass (every L2 and most guests' L3 share)


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


def reported_pass_bytes(levels: dict[int, int] | None = None) -> int:
    """Twice the largest cache ``/sys`` reports, at least 16 MiB (the rule before
    calibration, and the calibration's reference)."""
    levels = reported_cache_bytes() if levels is None else levels
    return max(2 * max(levels.values(), default=0), MIN_PASS)


def pass_ladder(reference: int) -> list[int]:
    """Pass sizes doubling from 16 MiB while under half of ``reference``, then ``reference``
    (bytes)."""
    sizes, size = [], MIN_PASS
    while 2 * size <= reference:
        sizes.append(size)
        size *= 2
    return [*sizes, reference]


@dataclass(frozen=True)
class PassCalibration:
    """The probes' slowing against the pass size: ``sizes`` (bytes, ascending, the last the
    reference), ``ratios`` (geometric mean over the probes of their time after each pass over
    their time after the reference), ``noise`` (|log| of the reference's round-1 over
    round-2 times) and the ``chosen`` pass (bytes)."""

    sizes: tuple[int, ...]
    ratios: tuple[float, ...]
    noise: float
    chosen: int

    def said(self) -> str:
        """One line: the chosen pass and the curve it was read from."""
        curve = ", ".join(f"{s / 2**20:.0f} MiB {r:.2f}"
                          for s, r in zip(self.sizes, self.ratios, strict=True))
        return (f"cache pass {self.chosen / 2**20:.0f} MiB: probe ops' time against the "
                f"{self.sizes[-1] / 2**20:.0f} MiB pass {curve} (its own repeat "
                f"{100 * (math.exp(self.noise) - 1):.1f}%)")


def choose_pass(times: dict[int, list[list[float]]]) -> PassCalibration:
    """Read the pass from ``times``: size (bytes) -> per probe, its times (µs) in the two
    rounds. The largest size is the reference; a probe missing at a size is left out of that
    size's ratio."""
    sizes = sorted(times)
    ref = times[sizes[-1]]
    ref_mean = [sum(t) / len(t) for t in ref]
    repeats = [t[0] / t[-1] for t in ref if len(t) > 1] or [1.0]
    noise = abs(math.log(statistics.geometric_mean(repeats)))
    ratios = []
    for size in sizes:
        pairs = [(sum(t) / len(t), r) for t, r in zip(times[size], ref_mean, strict=True)
                 if t and r > 0]
        ratios.append(statistics.geometric_mean([m / r for m, r in pairs]) if pairs else 1.0)
    chosen = sizes[-1]
    for i in range(len(sizes) - 1, -1, -1):  # the smallest size from which all larger hold
        if math.log(ratios[i]) < -noise:
            break
        chosen = sizes[i]
    return PassCalibration(tuple(sizes), tuple(ratios), noise, chosen)
