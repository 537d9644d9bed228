"""Recording's cost inside the templates, taken out where the profile timed its job without a
capture (``gradwire predict --recording-cost``).

A profile's templates and its untraced steps are timed while every node's packet capture runs.
On a node whose cores are busy (the lab runs every node on one 2-core machine) the capture
tools take CPU the job would have had, and every step, traced or not, runs slower than the same
job without them: the lab's 3-PS deep MLP made 213-251 ex/s under its captures against
242-311 without (docs/preregistered/issue21-trace-cost-report.md). The trace cannot show that.

``gradwire collect --duration S`` (or SIGUSR1 to collect) ends the capture while training runs
on, and the TraceHook times every step (``session.json``'s ``step_starts_unix_s``), so the steps
after the capture are the job as it runs unrecorded. Their median step (start to next start)
against the captured untraced steps' is the recording's excess; the worker's compute, the PS's
work and the delays are scaled (``tracecost.scale_to``) until the replay of the profile's own
configuration loses that excess, never below the uncaptured steps' median.

No constant: the excess is the hook's own difference, taken only where the captured steps'
median lies above the 95% interval of the uncaptured steps' median (order statistics, as the
self-check's and ``--trace-cost``'s); the factor is what the replay needs to meet it.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from gradwire.replay.selfcheck import MIN_STEPS
from gradwire.replay.template import Profile
from gradwire.replay.tracecost import clear_excess_us, scale_to, scaled_line

WARMUP = 2  # first steps left out, as the captures' untraced steps leave them out


def recording_cycles_us(session: dict[str, Any], capture_ends_s: Sequence[float],
                        warmup: int = WARMUP) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The worker's untraced steps, each from its ``session.run``'s start to the next one's,
    us, (those that ended before every node's capture ended, those that began after all had
    ended), in step order; the first ``warmup`` steps, the traced ones and any of no duration
    left out. ``session``: the TraceHook's session.json; ``capture_ends_s``: when each node's
    capture stopped (s since the epoch). Empty without the hook's step starts or the ends."""
    starts = [float(x) for x in session.get("step_starts_unix_s") or []]
    if len(starts) < 2 or not capture_ends_s:
        return (), ()
    traced = set(session.get("steps_recorded") or [])
    first_end, last_end = min(capture_ends_s), max(capture_ends_s)
    captured: list[float] = []
    free: list[float] = []
    for k in range(warmup, len(starts) - 1):
        begin, end = starts[k], starts[k + 1]
        if k in traced or end <= begin:
            continue
        if end <= first_end:
            captured.append(1e6 * (end - begin))
        elif begin >= last_end:
            free.append(1e6 * (end - begin))
    return tuple(captured), tuple(free)


def recording_excess_us(prof: Profile) -> float:
    """How much longer the captured untraced steps ran than the uncaptured ones, us
    (medians); 0 with fewer than ``MIN_STEPS`` of either, or where the captured median is
    within the 95% interval of the uncaptured one (no clear excess)."""
    captured, free = prof.recording_cycles_us
    return clear_excess_us(captured, free, MIN_STEPS)


@dataclasses.dataclass(frozen=True)
class RecordingCost:
    """What ``--recording-cost auto`` took out: ``steps`` the captured and uncaptured untraced
    steps it compared, ``excess_us`` the captured steps' excess (0: none clear), ``factor``
    the time ops' scale, ``replayed_us`` and ``target_us`` the own configuration's replayed
    step before and the step it was brought to (us; None where nothing was replayed, and
    ``target_us`` None where the time ops, taken to nothing, would still leave the step above
    its target)."""

    steps: tuple[int, int]
    excess_us: float
    factor: float = 1.0
    replayed_us: float | None = None
    target_us: float | None = None

    def summary(self) -> dict[str, Any]:
        """The JSON output's ``profile.recording_cost``."""
        return {"captured_steps": self.steps[0], "uncaptured_steps": self.steps[1],
                "excess_ms": self.excess_us / 1e3, "factor": self.factor,
                "replayed_step_ms": None if self.replayed_us is None else self.replayed_us / 1e3,
                "target_step_ms": None if self.target_us is None else self.target_us / 1e3}

    def said(self) -> str:
        """One line for the progress output (and -v) on what was done."""
        if self.steps[1] == 0:
            return ("--recording-cost auto: no step ran after the capture (gradwire collect "
                    "--duration ends it early): the templates are kept as recorded")
        captured, free = self.steps
        if self.excess_us <= 0.0:
            return (f"--recording-cost auto: the {captured} captured steps ran as fast as the "
                    f"{free} after the capture; the templates are kept as recorded")
        head = (f"--recording-cost auto: the {captured} captured steps ran "
                f"{self.excess_us / 1e3:.1f} ms slower than the {free} after the capture")
        return scaled_line(head, self.factor, self.replayed_us, self.target_us,
                           "the uncaptured steps' median", "recorded")


def take_out(prof: Profile, step_us: Callable[[Profile], float]
             ) -> tuple[Profile, RecordingCost]:
    """``prof`` with the recording's excess taken out of its time ops, and what was done.
    ``step_us(p)``: the replayed step (us) of ``p``'s own configuration."""
    captured, free = prof.recording_cycles_us
    steps = (len(captured), len(free))
    excess = recording_excess_us(prof)
    if excess <= 0.0:
        return prof, RecordingCost(steps, 0.0)
    t1 = step_us(prof)
    target = max(statistics.median(free), t1 - excess)
    scaled, f, t_f = scale_to(prof, step_us, t1, target)
    return scaled, RecordingCost(steps, excess, f, t1, t_f)
