"""Synthetic models (``--add-layer SCOPE:N``, replay/transforms.py ``add_layer_copies``):
Chang et al. section 8.5's what-if of N more copies of one layer."""

from __future__ import annotations

import json

import pytest
from conftest import gradwire

from gradwire.errors import PredictError
from gradwire.replay.engine import SimConfig, Simulator
from gradwire.replay.template import DELAY, DOWN, PS, UP, WORKER, StepTemplate
from gradwire.replay.transforms import add_layer_copies, layer_phase_factors, parse_layer_copies


def two_layers() -> StepTemplate:
    """Pull l1's and l2's kernels (100 and 300 bytes), compute l1 then l2 (50 and 70 us),
    push their gradients, apply them on the PS (5 and 7 us), the client's gap (11 us)."""
    t = StepTemplate(step=0)
    start = t.add(DELAY, 0.0, "step start")
    p1 = t.add(DOWN, 100.0, "pull l1/kernel", [start])
    p2 = t.add(DOWN, 300.0, "pull l2/kernel", [start])
    c1 = t.add(WORKER, 50.0, "compute l1/MatMul..", [p1])
    c2 = t.add(WORKER, 70.0, "compute l2/MatMul..", [c1, p2])
    u2 = t.add(UP, 300.0, "push gradients/l2/kernel", [c2])
    u1 = t.add(UP, 100.0, "push gradients/l1/kernel", [c2])
    a2 = t.add(PS, 7.0, "apply l2/kernel..", [u2])
    a1 = t.add(PS, 5.0, "apply l1/kernel..", [u1])
    t.add(WORKER, 11.0, "client gap", [c2, a1, a2])
    return t


def test_copies_of_a_layer_scale_its_ops_and_tensors_only():
    t = two_layers()
    s = add_layer_copies(t, "l2/", 3)
    got = dict(zip(s.name, s.amount, strict=True))
    assert got["pull l2/kernel"] == got["push gradients/l2/kernel"] == 1200.0
    assert got["compute l2/MatMul.."] == 280.0 and got["apply l2/kernel.."] == 28.0
    assert got["pull l1/kernel"] == 100.0 and got["compute l1/MatMul.."] == 50.0
    assert got["client gap"] == 11.0 and t.amount[t.name.index("pull l2/kernel")] == 300.0
    # the baselines' phases grow by the same totals: pulled bytes 400 -> 1300, ...
    f = layer_phase_factors([t], "l2/", 3)
    assert f == pytest.approx({"downlink": 1300 / 400, "uplink": 1300 / 400,
                               "worker": (50 + 280) / 120, "server": (5 + 28) / 12})


def test_one_worker_step_grows_by_the_copies():
    # W = 1 at 1 byte/us: l2's pull, compute and push are on the step's critical path, so
    # the step grows by 3 x (300 + 70 + 300) us; its PS work (7 us) overlaps the gap's wait
    rate = 1.0

    def step(t: StepTemplate) -> float:
        sim = Simulator([t], SimConfig(workers=1, ps=1, rate_bytes_per_us=rate))
        sim.run(3)
        return sim.step_ends[0][1] - sim.step_ends[0][0]

    base, more = step(two_layers()), step(add_layer_copies(two_layers(), "l2/", 3))
    # l2's pull (300 -> 1200), compute (70 -> 280) and push (300 -> 1200) are on the path
    assert more - base == pytest.approx(900 + 210 + 900, rel=1e-9)


@pytest.mark.parametrize("bad", ["l2", "l2:0", ":3", "l2:x", "l2:-1"])
def test_a_bad_layer_option_is_refused(bad):
    with pytest.raises(PredictError, match="--add-layer must be SCOPE:N"):
        parse_layer_copies(bad)
    assert parse_layer_copies("block3/conv:12") == ("block3/conv", 12)


def test_predict_add_layer_what_if():
    base = gradwire("predict", "--sample", "--workers", "1", "--format", "json",
                    "--model", "sim,mva-exact")
    more = gradwire("predict", "--sample", "--workers", "1", "--format", "json",
                    "--model", "sim,mva-exact", "--add-layer", "MatMul_2:4")
    assert base.returncode == 0 and more.returncode == 0, more.stderr
    rows = {p: {r["model"]: r["examples_per_s"] for r in json.loads(q.stdout)["rows"]}
            for p, q in (("base", base), ("more", more))}
    assert rows["more"]["sim"] < rows["base"]["sim"]
    assert rows["more"]["mva-exact"] < rows["base"]["mva-exact"]
    assert json.loads(more.stdout)["profile"]["add_layer"] == "MatMul_2:4"
    bad = gradwire("predict", "--sample", "--add-layer", "nosuch:2")
    assert bad.returncode != 0 and "no op or tensor of the profile is named 'nosuch'" in \
        bad.stderr and "Traceback" not in bad.stderr
    # the name is a substring: a note says what it matched ('MatMul' is every layer of the
    # sample's MLP); a second --add-layer is refused, not silently kept instead of the first
    every = gradwire("predict", "--sample", "--workers", "1", "--format", "json",
                     "--add-layer", "MatMul:1")
    note = next(n for n in json.loads(every.stdout)["notes"] if "--add-layer MatMul:1" in n)
    assert "100% of its pulled bytes" in note and "8 tensor(s)" in note
    two = gradwire("predict", "--sample", "--add-layer", "MatMul_2:1", "--add-layer",
                   "MatMul_1:1")
    assert two.returncode == 2 and "--add-layer is given once" in two.stderr
