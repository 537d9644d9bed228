"""The host's CPU as a bound on a one-host cluster (``--host-cpu auto``).

The project's lab runs every worker and PS as a process on one machine. Each worker step
costs that machine CPU time far beyond the traced ops: gRPC's serialising and parsing of every
tensor on both ends, the runtime, the kernel's packet work. The lab measures it: with
``--capture-steps`` its result (``lab_result.json`` beside a profile) has ``uncaptured``, the
steps per second after every capture ended and the machine's busy cores then (softirq
included; since 2026-11-29). Their ratio is the CPU seconds a step costs the host, ``c``. It
does not fall with more workers (the deep MLP over 3 PSes at 550 Mbit/s: 91-98 ms of host CPU
a step at W = 1-4), as each step moves the same bytes and runs the same ops whoever runs it.
So no configuration on that host can make more than ``cores / c`` steps a second, whatever
its links allow.

The bound comes from the profile's own run and the machine's cores, with no constant. It is
measured on the steps after the profile's captures ended: the captured steps carry the
captures' own CPU. It applies to the sim's rows of the profile's own mechanism when the
profile's lab says one host (every lab run is) and has those measures; a profile from a real
cluster (no ``lab_result.json``) or captured to its end has no bound. MobileNetV2 b32 over
1 PS at 450 Mbit/s (docs/preregistered/issue21-recorded-differences-report.md): the lab ran
W = 2-4 at 62-68 ex/s on 1.6-1.9 cores; the replay said 78-114.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from gradwire.replay.predict import Prediction

__all__ = ["HOST_CPU", "cpu_seconds_per_step", "host_steps_per_s", "under_host_cpu"]

HOST_CPU = "host CPU"  # the bottleneck a capped row names


def cpu_seconds_per_step(lab: Mapping[str, Any]) -> float | None:
    """``c``: CPU seconds the profile's host spent per worker step once its captures had ended
    (the lab's ``uncaptured`` measures: the whole machine's busy cores, else its nodes', over
    the steps per second then); None without them. A run's captured steps hold the captures'
    CPU too (the deep MLP over 3 PSes at 550 Mbit/s: 182 ms a step under every node's capture
    against 91-98 ms without), which would bound the rows below what the host allows.
    ``lab``: ``Profile.lab``, the lab's configuration with its ``uncaptured`` measures."""
    after = lab.get("uncaptured")
    if not isinstance(after, Mapping):
        return None
    busy = after.get("host_cpu")
    if not isinstance(busy, int | float) or busy <= 0:
        busy = after.get("cpu_share_total")
    steps = after.get("steps_per_s")
    if not all(isinstance(x, int | float) and x > 0 for x in (busy, steps)):
        return None
    return busy / steps


def host_steps_per_s(lab: Mapping[str, Any]) -> float | None:
    """The most steps a second the profile's host can run: its cores over ``c``; None for a
    profile that does not say its host's cores and CPU per step."""
    cores = lab.get("cpu_count")
    c = cpu_seconds_per_step(lab)
    if not isinstance(cores, int) or cores < 1 or c is None:
        return None
    return cores / c


def under_host_cpu(preds: Sequence[Prediction], steps_per_s: float, batch: int
                   ) -> tuple[list[Prediction], int]:
    """``preds`` with every throughput (mean, interval, phase range) at most ``steps_per_s``
    steps a second of ``batch`` examples; a row whose mean it lowers names ``HOST_CPU`` its
    bottleneck. Returns the rows and how many means were lowered."""
    cap = steps_per_s * batch
    out, lowered = [], 0
    for p in preds:
        low, high = p.ci
        changes: dict[str, Any] = {"ci": (min(low, cap), min(high, cap))}
        if p.phase_range is not None:
            changes["phase_range"] = (min(p.phase_range[0], cap), min(p.phase_range[1], cap))
        if p.examples_per_s > cap:
            lowered += 1
            changes |= {"examples_per_s": cap, "steps_per_s": steps_per_s,
                        "bottleneck": HOST_CPU, "utilisation": 1.0}
        out.append(dataclasses.replace(p, **changes))
    return out, lowered
