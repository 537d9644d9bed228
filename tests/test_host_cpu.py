"""The host's CPU as a bound on a one-host cluster (``replay/hostcpu.py``, ``--host-cpu``):
closed forms on hand-made lab measures and predictions."""

from __future__ import annotations

import pytest

from gradwire.replay.hostcpu import (
    HOST_CPU,
    cpu_seconds_per_step,
    host_steps_per_s,
    under_host_cpu,
)
from gradwire.replay.predict import Prediction


def _lab(**after: float) -> dict:
    return {"batch_size": 32, "cpu_count": 2, "cpu_share_window_total": 1.4,
            "throughput_examples_per_s": 240.0, "uncaptured": after}


def test_the_cpu_a_step_costs_comes_from_the_steps_after_the_captures() -> None:
    # 1.0 core busy at 4 steps a second: 0.25 s a step; 2 cores run at most 8 steps a second
    lab = _lab(steps_per_s=4.0, host_cpu=1.0, cpu_share_total=0.8)
    assert cpu_seconds_per_step(lab) == pytest.approx(0.25)
    assert host_steps_per_s(lab) == pytest.approx(8.0)
    # the machine's busy cores where measured, else the nodes'
    assert cpu_seconds_per_step(_lab(steps_per_s=4.0, cpu_share_total=0.8)) == pytest.approx(0.2)
    # a run captured to its end (no measures after), or no cores known: no bound
    assert host_steps_per_s({**lab, "uncaptured": None}) is None
    assert host_steps_per_s({k: v for k, v in lab.items() if k != "cpu_count"}) is None
    assert host_steps_per_s(_lab(steps_per_s=0.0, host_cpu=1.0)) is None


def _pred(workers: int, rate: float, phase: tuple[float, float] | None) -> Prediction:
    return Prediction(model="sim", workers=workers, ps=1, bandwidth_bps=1e9, order="observed",
                      flow_control=True, examples_per_s=rate, steps_per_s=rate / 32,
                      ci=(rate * 0.98, rate * 1.02), steps=60, bottleneck="downlink ps:0",
                      utilisation=0.8, events=1, phase_range=phase)


def test_rows_above_the_host_are_brought_down_to_it() -> None:
    preds = [_pred(1, 100.0, None), _pred(2, 250.0, (190.0, 270.0)), _pred(4, 400.0, (250, 500))]
    out, lowered = under_host_cpu(preds, steps_per_s=8.0, batch=32)  # 256 examples/s
    assert lowered == 1
    assert out[0] == preds[0]  # wholly below the bound: as it was
    # a mean below it keeps its bottleneck, its interval and phase range end at the bound
    assert (out[1].examples_per_s, out[1].bottleneck) == (250.0, "downlink ps:0")
    assert out[1].ci == (245.0, 255.0) and out[1].phase_range == (190.0, 256.0)
    top = out[2]
    assert (top.examples_per_s, top.steps_per_s, top.bottleneck) == (256.0, 8.0, HOST_CPU)
    assert top.ci == (256.0, 256.0) and top.phase_range == (250.0, 256.0)
