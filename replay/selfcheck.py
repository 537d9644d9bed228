"""The replay checked against the run it was recorded from.

A 1-worker profile is a measurement of one configuration: one worker, the profile's PS count
and link rate. Its captures time every step the worker ran, the TraceHook's traced steps and
the untraced ones (``Profile.untraced_steps_us``), so the examples/s the job made there is
known without any model. ``gradwire predict`` replays that same configuration (a row of the
sweep, or one run more when the sweep leaves it out) and sets the two side by side: where the
replay falls outside the 95% interval of the job's median step, either something of the
run is missing from the model (the link shaper's burst, loss...), and the other rows are
likely to carry an error of the same kind, or the recorded run was not typical of the job
(recording's cost on a small machine, or a slower mode the run fell into). No number of the
model is changed by it; it is what a user needs to know before trusting the rest.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gradwire.replay.predict import Prediction

if TYPE_CHECKING:
    from gradwire.replay.options import PredictOptions
    from gradwire.replay.template import Profile

MIN_STEPS = 5  # untraced steps needed for an interval of their median


@dataclass(frozen=True)
class OwnRun:
    """The profile's own run beside its replay: ``steps`` untraced steps whose median gives
    ``measured`` examples/s, ``low``-``high`` the 95% interval of that median
    (``median_interval``); ``replayed``: the sim at the same configuration (``workers`` = 1,
    ``ps``, ``bandwidth_bps``, ``mechanism``). ``after_capture``: the steps are those the job
    ran after its captures ended (the job unrecorded), else the captured ones."""

    steps: int
    measured: float
    low: float
    high: float
    replayed: float
    ps: int
    bandwidth_bps: float
    mechanism: str
    after_capture: bool = False

    @property
    def error(self) -> float:
        """The replay's signed relative error against the measured median (0.05: 5% high)."""
        return self.replayed / self.measured - 1.0

    @property
    def inside(self) -> bool:
        """Whether the replay falls within the 95% interval of the job's median step."""
        return self.low <= self.replayed <= self.high

    def summary(self) -> dict[str, Any]:
        """The JSON output's ``self_check``."""
        return {"workers": 1, "ps": self.ps, "bandwidth_bps": self.bandwidth_bps,
                "mechanism": self.mechanism, "untraced_steps": self.steps,
                "measured_examples_per_s": self.measured,
                "measured_range_examples_per_s": [self.low, self.high],
                "replayed_examples_per_s": self.replayed, "error": self.error,
                "inside": self.inside, "after_capture": self.after_capture}


def checkable(opts: PredictOptions, prof: Profile, recorded_batch: int) -> bool:
    """Whether the sweep replays the profile's own job: its mechanism among those asked for,
    no change to the job itself (``opts.changes_job``; ``recorded_batch``: the batch the
    profile was recorded at, ``prof`` may be at ``--to-batch-size``'s), and enough untraced
    steps to compare with."""
    return (max(len(prof.untraced_steps_us), len(prof.recording_cycles_us[1])) >= MIN_STEPS
            and prof.mechanism in opts.mechanisms and not opts.changes_job(recorded_batch))


def median_interval(values: list[float]) -> tuple[float, float]:
    """About 95% confidence interval of the median of ``values`` (at least 1), free of any
    assumed distribution: the order statistics n/2 -+ 1.96 sqrt(n)/2 (the binomial's normal
    approximation; the whole range for a handful)."""
    v = sorted(values)
    n = len(v)
    half = 1.96 * math.sqrt(n) / 2
    return v[max(0, math.floor(n / 2 - half))], v[min(n - 1, math.ceil(n / 2 + half) - 1)]


def own_steps_us(prof: Profile) -> tuple[list[float], bool]:
    """The profile's own 1-worker steps as its captures time them (us), and whether they are
    those the job ran after its captures ended (the job unrecorded, where at least MIN_STEPS
    were timed) rather than the captured untraced ones."""
    after = len(prof.recording_cycles_us[1]) >= MIN_STEPS
    return list(prof.recording_cycles_us[1] if after else prof.untraced_steps_us), after


def own_run(prof: Profile, pred: Prediction) -> OwnRun:
    """The profile's untraced steps beside ``pred``, the sim's row at its own configuration:
    those the job ran after its captures ended where there are enough (the job as it runs
    unrecorded, which ``--recording-cost`` brings the replay to), else the captured ones."""
    steps, after = own_steps_us(prof)
    short, long = median_interval(steps)
    rate = 1e6 * prof.batch_size
    return OwnRun(steps=len(steps), measured=rate / statistics.median(steps),
                  low=rate / long, high=rate / short, replayed=pred.examples_per_s,
                  ps=pred.ps, bandwidth_bps=pred.bandwidth_bps, mechanism=pred.mechanism,
                  after_capture=after)


def same_rate(a_bps: float, b_bps: float) -> bool:
    """Whether two link rates are the same one (up to float rounding)."""
    return abs(a_bps / b_bps - 1.0) < 1e-9


def swept(workers: tuple[int, ...], ps_list: list[int], bandwidths: list[float],
          prof: Profile, own_bps: float) -> bool:
    """Whether the sweep has the profile's own configuration: 1 worker, its PS count, its
    rate ``own_bps`` (its mechanism is asked for: ``checkable``)."""
    return (1 in workers and prof.ps_count in ps_list
            and any(same_rate(b, own_bps) for b in bandwidths))


def own_prediction(preds: list[Prediction], prof: Profile, bandwidth_bps: float
                   ) -> Prediction | None:
    """The sim's row at the profile's own configuration (1 worker, its PS count, rate and
    mechanism), if the sweep has it."""
    return next((p for p in preds if p.model == "sim" and p.workers == 1
                 and p.ps == prof.ps_count and p.mechanism == prof.mechanism
                 and same_rate(p.bandwidth_bps, bandwidth_bps)), None)


def own_run_note(run: OwnRun | None) -> str | None:
    """A note when the replay of the profile's own configuration falls outside the 95%
    interval of the job's own median step."""
    if run is None or run.inside:
        return None
    return (f"note: replayed at its own configuration (1 worker, {run.ps} "
            f"PS{'es' if run.ps > 1 else ''}, "
            f"{run.bandwidth_bps / 1e6:g} Mbit/s) the profile gives {run.replayed:.1f} "
            f"examples/s, where its {run.steps} "
            f"{'steps after its captures' if run.after_capture else 'untraced steps'} ran "
            f"{run.measured:.1f} "
            f"(95% interval of the median: {run.low:.1f}-{run.high:.1f}): the replay is "
            f"{100 * abs(run.error):.1f}% {'slow' if run.error < 0 else 'fast'} on the very run it "
            "was recorded from. " + (
                "Those steps ran unrecorded, so the model likely leaves out something that "
                "job did, and its other rows carry an error of that kind" if run.after_capture
                else "Either the model leaves out something that run did, and its other rows "
                "likely carry an error of that kind, or that run was not typical of the job "
                "(recording's cost on a small machine, a slower mode the run fell into): a run "
                "without recording tells which (gradwire collect --duration ends the capture "
                "and lets the job run on)")
            + " (docs/predict.md, 'The replay against its own run')")
