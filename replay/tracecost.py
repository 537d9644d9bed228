"""FULL_TRACE's cost inside the templates, taken out where the profile's own captures show it
(``gradwire predict --trace-cost``).

The templates are built from the TraceHook's traced steps. The client's gap after a step
already comes from the untraced ones (``profile.untraced_client_gap_us``); the rest of a step,
from its first pull request to its last push's last DATA byte at the PS, is timed by the
captures in every step, traced or not (``Profile.in_step_us``). Where the traced steps ran
that part clearly slower than the untraced ones, FULL_TRACE (collecting every op's timing, on
every device, on a small machine) slowed the very ops the templates time, and each replayed
step carries the excess.

Where it sits: the transfers are replayed at the link's rate, not at their traced speed, so an
excess the trace put into a transfer is not replayed anyway; what carries it is the step's
time ops: the worker's compute, the PS's work and the delays (requests, parsing). So they are
scaled by one factor ``f`` (0 < f <= 1), found by replaying the profile's own configuration
(one worker, its PS count and rate, its mechanism) until its step is the larger of

- the untraced steps' median (the job as it ran: no correction goes below it), and
- the replayed step less the measured excess (median traced minus median untraced part).

No constant: the excess is the captures' difference, taken only when the traced steps'
median lies above the 95% interval of the untraced steps' median (order statistics, as the
self-check's); the factor is what the replay needs to meet it.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence

from gradwire.replay.selfcheck import MIN_STEPS, median_interval
from gradwire.replay.template import DELAY, GAP, PS, WORKER, Profile, StepTemplate

MIN_TRACED = 3  # traced steps needed for their median
ITERATIONS = 6  # replays of the profile's own job at most, beyond f = 1 and f = 0
TOLERANCE = 0.002  # a replayed step within this share of its target is on it


def clear_excess_us(slow: Sequence[float], base: Sequence[float], min_slow: int) -> float:
    """How much longer the ``slow`` durations ran than the ``base`` ones (medians, us); 0
    with fewer than ``min_slow`` of the first or ``MIN_STEPS`` of the second, or where the
    slow median is within the 95% interval of the base one (no clear excess)."""
    if len(slow) < min_slow or len(base) < MIN_STEPS:
        return 0.0
    median = statistics.median(slow)
    _low, high = median_interval(list(base))
    return median - statistics.median(base) if median > high else 0.0


def trace_excess_us(prof: Profile) -> float:
    """How much longer the traced steps ran from first request to last push than the
    untraced ones, us (medians); 0 with too few steps of either kind, or where the traced
    median is within the 95% interval of the untraced one (no clear excess)."""
    traced, untraced = prof.in_step_us
    return clear_excess_us(traced, untraced, MIN_TRACED)


def is_time_op(kind: str, name: str) -> bool:
    """Whether a template op is one of the step's time ops FULL_TRACE can slow: the worker's
    compute, the PS's work, a delay (not the client's gap, which the untraced steps give, nor
    a transfer or a barrier)."""
    return kind in (WORKER, PS, DELAY) and name != GAP


def scale_time_ops(t: StepTemplate, factor: float) -> StepTemplate:
    """``t`` with every time op (``is_time_op``) lasting ``factor`` times as long, the
    pulls' request delays before the PS's write order floored them too (``unfloored``: what
    another order or placement floors again)."""
    amount = [a * factor if is_time_op(k, n) else a
              for k, n, a in zip(t.kind, t.name, t.amount, strict=True)]
    unfloored = {d: (req, group, raw * factor) for d, (req, group, raw) in t.unfloored.items()}
    return dataclasses.replace(t, amount=amount, unfloored=unfloored)


def with_time_factor(prof: Profile, factor: float) -> Profile:
    """``prof`` with every template's time ops scaled by ``factor``."""
    if factor == 1.0:
        return prof
    return dataclasses.replace(prof, templates=[scale_time_ops(t, factor)
                                                for t in prof.templates])


@dataclasses.dataclass(frozen=True)
class TraceCost:
    """What ``--trace-cost auto`` took out: ``excess_us`` the captures' excess per traced
    step (0: none clear), ``factor`` the time ops' scale, ``replayed_us`` and ``target_us``
    the own configuration's replayed step before and the step it was brought to (us; None
    where nothing was replayed, and ``target_us`` None where the time ops, taken to nothing,
    would still leave the step above its target: then the replay misses something else and
    nothing is scaled)."""

    excess_us: float
    factor: float = 1.0
    replayed_us: float | None = None
    target_us: float | None = None
    kind: str = "auto"  # --trace-cost auto, or requests (the request delays only)

    def summary(self) -> dict[str, float | str | None]:
        """The JSON output's ``profile.trace_cost``."""
        return {"kind": self.kind, "excess_ms": self.excess_us / 1e3, "factor": self.factor,
                "replayed_step_ms": None if self.replayed_us is None else self.replayed_us / 1e3,
                "target_step_ms": None if self.target_us is None else self.target_us / 1e3}


    def said(self) -> str:
        """One line for the progress output (and -v) on what was done."""
        if self.kind == "requests":
            if self.excess_us <= 0.0:
                return ("--trace-cost requests: the PS answered the traced steps' first pulls "
                        "as soon as the untraced steps'; the templates are kept as traced")
            return (f"--trace-cost requests: the PS answered the traced steps' first pulls "
                    f"{self.excess_us / 1e3:.1f} ms later than the untraced steps' (medians); "
                    "every pull's request delay taken that much shorter")
        if self.excess_us <= 0.0:
            return ("--trace-cost auto: the traced steps ran as fast as the untraced ones "
                    "from first request to last push; the templates are kept as traced")
        head = f"--trace-cost auto: the traced steps ran {self.excess_us / 1e3:.1f} ms slower"
        return scaled_line(head, self.factor, self.replayed_us, self.target_us,
                           "the untraced steps' median", "traced")


def scaled_line(head: str, factor: float, replayed_us: float | None, target_us: float | None,
                floor: str, kept: str) -> str:
    """The line a time-ops correction says after ``head`` (its excess): the factor and the
    own configuration's step before and after (us), or that the templates are ``kept`` as
    they were where the time ops could not hold the excess (the step stays above ``floor``)."""
    if replayed_us is None or target_us is None:
        return (f"{head}, but even without its time ops the replay's step stays above "
                f"{floor}: the templates are kept as {kept}")
    return (f"{head}; the step's compute, PS work and delays scaled by {factor:.3f}: "
            f"the profile's own configuration replays at {target_us / 1e3:.1f} ms a "
            f"step (was {replayed_us / 1e3:.1f})")


def take_out(prof: Profile, step_us: Callable[[Profile], float]) -> tuple[Profile, TraceCost]:
    """``prof`` with FULL_TRACE's excess taken out of its time ops, and what was done.
    ``step_us(p)``: the replayed step (us) of ``p``'s own configuration."""
    excess = trace_excess_us(prof)
    if excess <= 0.0:
        return prof, TraceCost(0.0)
    t1 = step_us(prof)
    target = max(statistics.median(prof.untraced_steps_us), t1 - excess)
    scaled, f, t_f = scale_to(prof, step_us, t1, target)
    return scaled, TraceCost(excess, f, t1, t_f)


def scale_to(prof: Profile, step_us: Callable[[Profile], float], t1: float, target: float
             ) -> tuple[Profile, float, float | None]:
    """``prof`` with its time ops scaled by the factor ``f`` (0 < f <= 1) that brings its
    own configuration's replayed step from ``t1`` down to ``target`` (us), the factor and
    the step reached; ``prof`` unchanged, 1.0 and ``t1`` where it is on or below the target
    already, and 1.0 and None where the time ops, taken to nothing, would still leave the
    step above it (the replay misses something else)."""
    if t1 <= target * (1 + TOLERANCE):
        return prof, 1.0, t1
    # regula falsi on f in [0, 1]: the step grows with f, close to linearly
    lo, t_lo = 0.0, step_us(with_time_factor(prof, 0.0))
    hi, t_hi = 1.0, t1
    if t_lo >= target:
        return prof, 1.0, None
    f, t_f = hi, t_hi
    for _ in range(ITERATIONS):
        f = lo + (hi - lo) * (target - t_lo) / (t_hi - t_lo)
        t_f = step_us(with_time_factor(prof, f))
        if abs(t_f - target) <= TOLERANCE * target:
            break
        if t_f > target:
            hi, t_hi = f, t_f
        else:
            lo, t_lo = f, t_f
    return with_time_factor(prof, f), f, t_f


def answer_excess_us(prof: Profile) -> float:
    """How much later the PS answered the traced steps' first pull requests than the
    untraced steps' (medians, us; ``Profile.first_answer_us``); 0 as ``clear_excess_us``
    says."""
    traced, untraced = prof.first_answer_us
    return clear_excess_us(traced, untraced, MIN_TRACED)


def shorter_requests(t: StepTemplate, excess_us: float) -> StepTemplate:
    """``t`` with every pull's request delay (the ops ``unfloored`` names) ``excess_us``
    shorter (not below 0), before the PS's write order floored it too, so the floors keep
    their order."""
    requests = {req for req, _, _ in t.unfloored.values()}
    amount = [max(0.0, a - excess_us) if i in requests else a for i, a in enumerate(t.amount)]
    unfloored = {d: (req, group, max(0.0, raw - excess_us))
                 for d, (req, group, raw) in t.unfloored.items()}
    return dataclasses.replace(t, amount=amount, unfloored=unfloored)


def requests_out(prof: Profile) -> tuple[Profile, TraceCost]:
    """``prof`` with FULL_TRACE's excess taken out of its pulls' request delays only
    (``--trace-cost requests``): the PS's answer to a traced step's first pull came later
    than to an untraced one's by ``answer_excess_us``, and every request delay of the
    templates is that much shorter. No replay is needed, and no other op changes."""
    excess = answer_excess_us(prof)
    if excess <= 0.0:
        return prof, TraceCost(0.0, kind="requests")
    return (dataclasses.replace(prof, templates=[shorter_requests(t, excess)
                                                 for t in prof.templates]),
            TraceCost(excess, kind="requests"))
