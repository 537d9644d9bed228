"""Recording's cost taken out of the templates (replay/recordingcost.py, ``--recording-cost``):
the hook's steps sorted by the captures' end, the excess they show, the factor that takes it
out, and what predict says."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
from conftest import SAMPLE
from timeops import linear_step, template

from gradwire.replay.profile import capture_ends_s
from gradwire.replay.recordingcost import recording_cycles_us, recording_excess_us, take_out
from gradwire.replay.template import Profile

T0 = 1.8e9  # s since the epoch


def test_steps_are_sorted_by_when_every_capture_ended():
    """Steps of 0.1 s (0.3 s for the traced step 3), two captures ending at 0.95 and 1.05 s:
    a step is captured if it ended before the first end, uncaptured if it began after the
    last; the warm-up, the traced step, the steps across the ends and the last (no next
    start) are left out."""
    starts = [T0 + 0.1 * k for k in range(4)] + [T0 + 0.6 + 0.1 * k for k in range(11)]
    session = {"step_starts_unix_s": starts, "steps_recorded": [3]}
    captured, free = recording_cycles_us(session, [T0 + 0.95, T0 + 1.05])
    # steps 2 (0.2-0.3 s) and 4-6 (0.6-0.9 s) captured; 7 and 8 (0.9-1.1 s) across the ends
    assert [round(x) for x in captured] == [100_000] * 4
    # steps 9-13 began at 1.1-1.5 s, after both ends; step 14 has no next start
    assert [round(x) for x in free] == [100_000] * 5
    assert recording_cycles_us(session, []) == ((), ())
    assert recording_cycles_us({"steps_recorded": [3]}, [T0 + 1.0]) == ((), ())


def test_capture_ends_need_every_captured_bundle_to_say():
    """The sample's bundles say when their captures stopped; a bundle that does not leaves
    nothing to sort by."""
    from gradwire.bundle import find_bundles, open_bundle

    bundles = [open_bundle(f) for f in find_bundles(SAMPLE)]
    ends = capture_ends_s(bundles)
    assert len(ends) == len(bundles) and all(e > 1.7e9 for e in ends)
    b = bundles[0]
    blind = dataclasses.replace(b, manifest={**b.manifest, "capture": {}})
    assert capture_ends_s([blind, *bundles[1:]]) == ()


def _profile(captured: tuple[float, ...], free: tuple[float, ...]) -> Profile:
    return Profile(templates=[template()], batch_size=32, ps_tasks=["/job:ps/task:0"],
                   link_rate_bps=1e8, alpha_us_per_byte=0.0, beta_us=0.0, source="test",
                   recording_cycles_us=(captured, free))


def test_the_excess_is_the_medians_difference_only_when_clear():
    """Fifteen uncaptured steps of 100-114 ms (median 107): captured ones at 130 ms are 23 ms
    over and above its interval; at 108 ms within it; with four of either, no median to
    trust; faster captured steps are no excess."""
    free = tuple(1e3 * (100 + k) for k in range(15))
    assert recording_excess_us(_profile((130e3,) * 6, free)) == pytest.approx(23e3)
    assert recording_excess_us(_profile((108e3,) * 6, free)) == 0.0
    assert recording_excess_us(_profile((130e3,) * 4, free)) == 0.0
    assert recording_excess_us(_profile((130e3,) * 6, free[:4])) == 0.0
    assert recording_excess_us(_profile((90e3,) * 6, free)) == 0.0


def test_the_factor_takes_the_excess_out_never_below_the_uncaptured_steps():
    """The stand-in replays 124 ms. Captured steps 20 ms slower than uncaptured ones of
    100 ms bring it to 104 ms; uncaptured ones of 110 ms with a 30 ms excess, to 110 ms (not
    94): the job never runs faster than it ran without the capture."""
    out, cost = take_out(_profile((120e3,) * 6, (100e3,) * 9), linear_step)
    assert cost.excess_us == pytest.approx(20e3) and cost.steps == (6, 9)
    assert linear_step(out) == pytest.approx(104e3, rel=0.003)
    assert cost.factor == pytest.approx(24 / 44, rel=0.01)
    assert "6 captured steps ran 20.0 ms slower than the 9 after the capture" in cost.said()
    out, cost = take_out(_profile((140e3,) * 6, (110e3,) * 9), linear_step)
    assert linear_step(out) == pytest.approx(110e3, rel=0.003)
    assert cost.summary()["target_step_ms"] == pytest.approx(110, rel=0.003)


def test_nothing_is_replayed_without_uncaptured_steps_or_an_excess():
    """A profile captured to its end (every bundle recorded before this) is kept as
    recorded, and the stand-in is not even called."""
    def not_called(_p: Profile) -> float:
        raise AssertionError("replayed without an excess")

    for captured, free, said in (((120e3,) * 6, (), "no step ran after the capture"),
                                 ((100e3,) * 6, (100e3,) * 9, "ran as fast as")):
        prof = _profile(captured, free)
        out, cost = take_out(prof, not_called)
        assert out is prof and cost.factor == 1.0 and said in cost.said()


def test_the_real_replay_meets_its_target_on_the_small_bundle():
    """The small lab bundle with made-up step times, captured steps a fifth of its replayed
    step slower than uncaptured ones: the real kernel's replay of its own configuration lands
    within 0.2% of the step less that excess, or on the uncaptured median if higher."""
    from gradwire.replay.options import PredictOptions
    from gradwire.replay.predictflow import own_step_replay
    from gradwire.replay.profile import load_profile

    prof = load_profile([SAMPLE])
    assert prof.recording_cycles_us[1] == ()  # captured to the end
    step_us = own_step_replay(PredictOptions(bundles=(SAMPLE,)), prof)
    t1 = step_us(prof)
    free = tuple(t1 * 0.6 + k for k in range(9))
    made_up = dataclasses.replace(prof, recording_cycles_us=((t1 * 0.8,) * 6, free))
    out, cost = take_out(made_up, step_us)
    assert cost.excess_us == pytest.approx(t1 * 0.8 - statistics.median(free))
    assert 0.0 < cost.factor < 1.0
    assert step_us(out) == pytest.approx(max(statistics.median(free), t1 - cost.excess_us),
                                         rel=0.002)
