"""The throughput estimator's pieces shared by the lab and the replayer
(gradwire/throughput.py), and the run's confidence interval built from them."""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import pytest

from gradwire.replay.mechanisms import SYNC_PS
from gradwire.replay.predict import simulate
from gradwire.replay.profile import load_profile
from gradwire.throughput import batch_rates, steps_done

SYNC_BUNDLE = Path(__file__).resolve().parent / "data" / "small_sync_bundle"


def test_steps_done_counts_the_step_in_progress_by_its_share_past():
    ends = [2.0, 3.0, 7.0]
    assert steps_done(ends, 1.0) == 0.5  # the first step spans from time 0
    assert steps_done(ends, 2.0) == 1.0
    assert steps_done(ends, 5.0) == 2.5
    assert steps_done(ends, 7.0) == 3.0
    assert steps_done(ends, 9.0) == 3.0  # past the last end: every step


def test_lock_step_workers_give_equal_batches_where_counting_ends_would_not():
    # 32 workers ending every step at once (a barrier), steps of 1.0 and 1.1 us in turn: the
    # tenths of the window hold 5 or 6 step ends each, 160 or 192 when counted whole (the
    # interval read 6% that way where the steps differ by 10%)
    ends, t = [], 0.0
    for k in range(60):
        t += 1.0 if k % 2 else 1.1
        ends.append(t)
    t0, t1 = ends[5], ends[-1]
    batches = batch_rates([ends] * 32, t0, t1)
    assert len(batches) == 10
    assert statistics.fmean(batches) == pytest.approx(32 * 54 / (t1 - t0))
    assert statistics.stdev(batches) / statistics.fmean(batches) < 0.01


def test_workers_at_steady_rates_give_every_batch_their_sum():
    """Workers of steps 1.0, 1.5 and 2.5 us started at random phases: whatever a slice's
    share of each worker's steps, it counts 1/1.0 + 1/1.5 + 1/2.5 steps per us."""
    rng = random.Random(4)
    ends = []
    for step in (1.0, 1.5, 2.5):
        phase = rng.uniform(0, step)
        ends.append([phase + k * step for k in range(1, 80)])
    t0, t1 = max(e[3] for e in ends), min(e[-1] for e in ends)
    for rate in batch_rates(ends, t0, t1, batches=7):
        assert rate == pytest.approx(1 / 1.0 + 1 / 1.5 + 1 / 2.5)


def test_an_empty_window_is_refused():
    with pytest.raises(ValueError):
        batch_rates([[1.0, 2.0]], 2.0, 2.0)


def test_a_synchronous_run_stops_once_its_interval_is_the_seeds_spread():
    """The lab's small synchronous profile at W = 4: one run of 60 steps is within the 2%
    target (counting whole step ends it read about 6% and doubled to 240), and other seeds'
    runs land inside a few of its half-widths."""
    prof = load_profile([SYNC_BUNDLE])
    preds = [simulate(prof.templates, prof.batch_size, 4, 1, 1e9, seed=s, steps=60,
                      max_steps=240, mechanism=SYNC_PS)[0] for s in range(6)]
    first = preds[0]
    half = (first.ci[1] - first.ci[0]) / 2
    assert first.steps == 60
    assert 0 < half <= 0.02 * first.examples_per_s
    rates = [p.examples_per_s for p in preds]
    assert max(abs(r - first.examples_per_s) for r in rates[1:]) <= 4 * half
    assert statistics.stdev(rates) * 1.96 <= 3 * half
