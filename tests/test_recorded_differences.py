"""The recorded steps' differences: ``--template-draw run`` and ``--executor-gaps drop``
(``replay/predict.py``' ``one_template``, ``replay/executorgaps.py``), on hand-made templates
with closed forms; ``--executor-gaps auto`` on the sample."""

from __future__ import annotations

import json

import pytest
from conftest import gradwire

from gradwire.replay.executorgaps import (
    auto_executor_gaps,
    with_compute_alone,
    without_executor_gaps,
)
from gradwire.replay.predict import simulate, simulate_phases
from gradwire.replay.template import DELAY, GAP, PS, UP, WORKER, Profile, StepTemplate


def _compute_step(us: float) -> StepTemplate:
    """A step of ``us`` microseconds of compute alone (no PS traffic to share)."""
    t = StepTemplate(step=0)
    start = t.add(DELAY, 0.0, "start")
    t.add(WORKER, us, "compute", [start])
    return t


def test_a_run_replays_one_template_at_every_step() -> None:
    fast, slow = _compute_step(10_000.0), _compute_step(20_000.0)  # 100 and 50 steps/s
    each_step = simulate_phases([fast, slow], 1, 1, 1, 1e9, steps=400, replications=8,
                                max_replications=8)
    per_run = simulate_phases([fast, slow], 1, 1, 1, 1e9, steps=400, replications=8,
                              max_replications=8, draw="run")
    # each step drawn: a mix of both, about 1 / 15 ms; one a run: replications alternate
    # between 100 and 50 steps/s, mean 75, and the phase range spans them
    assert each_step.examples_per_s == pytest.approx(1e6 / 15_000, rel=0.05)
    assert per_run.examples_per_s == pytest.approx(75.0, rel=1e-3)
    assert per_run.phase_range[0] < 55 and per_run.phase_range[1] > 95
    # a single run takes template seed mod their number
    assert simulate([fast, slow], 1, 1, 1, 1e9, seed=1, steps=50, max_steps=50,
                    draw="run")[0].examples_per_s == pytest.approx(50.0, rel=1e-3)


def test_dropping_executor_gaps_keeps_each_chunk_at_its_ops_own_time() -> None:
    t = StepTemplate(step=0)
    start = t.add(DELAY, 1_000.0, "request")
    a = t.add(WORKER, 5_000.0, "compute a..", [start], members=(("a", 1_000.0), ("b", 500.0)))
    b = t.add(WORKER, 800.0, "compute c..", [a], members=(("c", 900.0),))  # never lengthened
    u = t.add(UP, 1e6, "push", [b])
    s = t.add(PS, 700.0, "apply", [u])
    t.add(WORKER, 2_000.0, GAP, [s])
    prof = Profile(templates=[t], batch_size=32, ps_tasks=["ps0"], link_rate_bps=1e9,
                   alpha_us_per_byte=0.0, beta_us=0.0, source="hand-made")
    out, cut = without_executor_gaps(prof)
    # 5,000 -> 1,500 us; 800 stays; the delay, push, PS work and client gap as they were
    assert out.templates[0].amount == [1_000.0, 1_500.0, 800.0, 1e6, 700.0, 2_000.0]
    assert cut == pytest.approx(1 - 2_300 / 5_800)
    assert prof.templates[0].amount[1] == 5_000.0  # the profile given is not changed


@pytest.mark.parametrize(("mechanisms", "recorded", "chunks"), [
    (["ring-allreduce"], "async-ps", "drop"),
    (["ring-allreduce+multicast", "butterfly"], "sync-ps", "drop"),
    (["ring-allreduce", "sync-ps"], "async-ps", "keep"),  # sync-ps computes beside its pulls
    (["ring-allreduce@overlap"], "async-ps", "keep"),  # exchanges during backpropagation
    (["async-ps"], "async-ps", "keep"),
    (["ring-allreduce"], "ring-allreduce", "keep"),  # its chunks waited on no PS
])
def test_auto_drops_the_waits_only_where_every_mechanism_computes_with_its_links_idle(
        mechanisms, recorded, chunks) -> None:
    assert auto_executor_gaps(mechanisms, recorded) == chunks


def test_predict_drops_a_ps_profiles_waits_for_a_ring_alone_and_says_so() -> None:
    # the sample (an asynchronous PS profile) at 10 Gbit/s, where the ring's compute matters:
    # auto is drop for the ring (faster than keep), alone or beside sync-ps, whose rows keep
    # the waits (it computes beside its pulls): each group of the sweep as it is alone
    base = ["predict", "--sample", "--workers", "2", "--model", "sim", "--bandwidth", "10Gbit",
            "--format", "json"]
    docs, errs = {}, {}
    for name, extra in (("auto", []), ("keep", ["--executor-gaps", "keep"]),
                        ("mixed", ["--mechanism", "ring-allreduce,sync-ps"])):
        mechanism = [] if name == "mixed" else ["--mechanism", "ring-allreduce"]
        proc = gradwire(*base, *mechanism, *extra, "-v")
        assert proc.returncode == 0, proc.stderr
        docs[name], errs[name] = json.loads(proc.stdout), proc.stderr
    assert docs["auto"]["profile"]["executor_gaps"]["chunks"] == "drop"
    assert 0 < docs["auto"]["profile"]["executor_gaps"]["cut"] < 1
    assert "--executor-gaps auto: the compute chunks at their ops' own time" in errs["auto"]
    assert docs["keep"]["profile"]["executor_gaps"] == {"chunks": "keep", "cut": None,
                                                        "compute_alone_ms": None}
    ring = {n: next(r["examples_per_s"] for r in d["rows"] if r["mechanism"] == "ring-allreduce")
            for n, d in docs.items()}
    assert ring["auto"] > 1.05 * ring["keep"]
    assert ring["mixed"] == pytest.approx(ring["auto"], rel=1e-9)
    assert [(g["mechanisms"], g["executor_gaps"]) for g in docs["mixed"]["mechanism_groups"]] \
        == [(["ring-allreduce"], "drop"), (["sync-ps"], "keep")]
    assert docs["mixed"]["profile"]["executor_gaps"] == docs["auto"]["profile"]["executor_gaps"]
    assert "ring-allreduce rows: --executor-gaps auto: the compute chunks" in errs["mixed"]


def test_the_compute_alone_scales_every_chunk_by_one_factor() -> None:
    # two templates of 4 and 6 ms of compute (median 5): a step alone of 4 ms scales both by
    # 0.8; the client's gap, the push and the PS's work stay
    def step(compute_us: float) -> StepTemplate:
        t = StepTemplate(step=0)
        a = t.add(WORKER, compute_us / 2, "compute a..", [t.add(DELAY, 100.0, "request")])
        b = t.add(WORKER, compute_us / 2, "compute b..", [a])
        s = t.add(PS, 700.0, "apply", [t.add(UP, 1e6, "push", [b])])
        t.add(WORKER, 2_000.0, GAP, [s])
        return t

    prof = Profile(templates=[step(4_000.0), step(6_000.0)], batch_size=32, ps_tasks=["ps0"],
                   link_rate_bps=1e9, alpha_us_per_byte=0.0, beta_us=0.0, source="hand-made")
    out, f = with_compute_alone(prof, 4_000.0)
    assert f == pytest.approx(0.8)
    assert out.templates[0].amount == pytest.approx([100.0, 1_600.0, 1_600.0, 1e6, 700.0,
                                                     2_000.0])
    assert out.templates[1].amount[1:3] == pytest.approx([2_400.0, 2_400.0])
    assert with_compute_alone(prof, 0.0) == (prof, 1.0)


class _Timed:
    """The step timed whole, as ``predictflow.TracedOps`` gives it (µs, or None)."""

    def __init__(self, us: float | None) -> None:
        self.us = us

    def timed_step_us(self, device: str) -> float | None:
        return self.us if device == "CPU" else None


@pytest.mark.parametrize(("mechanisms", "opdb", "timed", "error"), [
    (("ring-allreduce",), "ops.sqlite", 38_000.0, None),
    (("ring-allreduce", "butterfly"), "ops.sqlite", 38_000.0, None),
    (("ring-allreduce", "sync-ps"), "ops.sqlite", 38_000.0, "sync-ps computes beside"),
    (("ring-allreduce@overlap",), "ops.sqlite", 38_000.0, "computes beside its transfers"),
    (("ring-allreduce",), None, 38_000.0, "give --opdb FILE"),
    (("ring-allreduce",), "ops.sqlite", None, "run `gradwire opdb step PROFILE --db"),
])
def test_the_compute_alone_is_for_mechanisms_with_links_idle_and_a_timed_step(
        mechanisms, opdb, timed, error) -> None:
    from pathlib import Path

    from gradwire.errors import PredictError
    from gradwire.replay.options import PredictOptions
    from gradwire.replay.predictflow import compute_alone

    opts = PredictOptions(bundles=(Path("b"),), mechanisms=mechanisms, executor_gaps="alone",
                          opdb=None if opdb is None else Path(opdb))
    if error is None:
        assert compute_alone(opts, _Timed(timed)) == timed
    else:
        with pytest.raises(PredictError, match=error.replace("(", r"\(")):
            compute_alone(opts, _Timed(timed))


def test_alone_without_a_ring_or_a_database_is_a_one_line_error() -> None:
    from conftest import assert_one_line_error

    base = ["predict", "--sample", "--workers", "2", "--executor-gaps", "alone"]
    assert_one_line_error(gradwire(*base), "async-ps computes beside its transfers")
    assert_one_line_error(gradwire(*base, "--mechanism", "ring-allreduce"), "give --opdb FILE")
