"""The client gap of the untraced steps: FULL_TRACE's metadata collection left out of the
templates (replay/profile.py ``untraced_client_gap_us``, template.py ``build_template``)."""

from __future__ import annotations

import pytest
from conftest import SAMPLE

from gradwire.replay.template import GAP


@pytest.fixture(scope="module")
def sample_alignment():
    from gradwire.aligner.align import align

    return align([SAMPLE])


def _traced_sids(al) -> set[int]:
    return {t.step_id for t in al.transfers if t.recv is not None and t.step_id is not None}


def test_the_untraced_gap_comes_from_the_captured_steps_without_a_trace(sample_alignment):
    """The sample's worker ran 3 traced steps and captured more: its three untraced steps
    after the warm-up waited 2.8-3.5 ms (median 2.9) from their last push's DATA at the PS to
    the next request, where the traced steps waited 12-13 ms (the hook's storing and
    FULL_TRACE's collection)."""
    from gradwire.collector.summary import task_of
    from gradwire.replay.profile import untraced_client_gap_us

    al = sample_alignment
    worker = next(task_of(t.dst_device) for t in al.transfers if t.direction == "pull")
    traced = _traced_sids(al)
    gap = untraced_client_gap_us(al, worker, traced)
    assert gap is not None and 2_700 < gap < 3_600
    # the traced steps, measured the same way, wait far longer
    assert untraced_client_gap_us(al, worker, set(), min_steps=1) > gap
    # too few untraced steps: None, and the profile keeps the traced gap
    assert untraced_client_gap_us(al, worker, traced, min_steps=4) is None


def test_the_template_gap_is_the_untraced_gap_less_the_steps_own_tail(sample_alignment,
                                                                      monkeypatch):
    """Given an untraced gap U, each template's client gap is U less what the traced step did
    after its last push's DATA, so it moves with U one for one, and the step's observed
    duration with it; without one (None) it is the traced gap less the hook's storing."""
    import gradwire.replay.profile as profile

    def templates(untraced: float | None):
        monkeypatch.setattr(profile, "untraced_client_gap_us", lambda *a, **k: untraced)
        return profile.profile_from_alignment(sample_alignment, 32).templates

    def gap(t) -> float:
        return t.amount[t.name.index(GAP)]

    traced, one, two = templates(None), templates(1e6), templates(2e6)
    for a, b, c in zip(traced, one, two, strict=True):
        assert gap(c) - gap(b) == pytest.approx(1e6)
        assert c.observed_us - b.observed_us == pytest.approx(1e6)
        assert 0.0 <= 1e6 - gap(b) < 50_000  # less the step's own tail: its last updates
        assert gap(a) > 0.0
    assert [gap(t) for t in templates(0.0)] == [0.0] * len(traced)  # never below zero
