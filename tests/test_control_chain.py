"""The train op's control chain across PSes (replay/controlchain.py; docs/predict.md, "The
train op's control chain"): TensorFlow adds it only when the updates span PSes, so a 2-PS
profile predicted over 1 PS loses it and a 1-PS profile predicted over 2 PSes gains it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import SAMPLE, need_root, need_tf
from dfgsteps import PS0, PS1, WK, op, op_named, step, transfer

from gradwire.aligner.dfg import DfgStep
from gradwire.replay.controlchain import CONTROL_WIRE_BYTES, with_control_chain
from gradwire.replay.engine import Simulator
from gradwire.replay.predict import assign_ps, placed_templates, sim_config
from gradwire.replay.profile import load_profile
from gradwire.replay.template import DELAY, DOWN, GAP, PS, UP, WORKER, build_template

OVERHEAD = (0.0, 500.0, 0.0, 900.0)  # the size fit's parse: 500 us a pull, 900 us a push


def _transfer(edge: str, src: str, dst: str, producer, request: float, first: float,
              last: float, received: float, nbytes: int):
    """A transfer of ``nbytes`` tensor bytes, ``last - first`` on the wire (26 at least)."""
    return transfer(edge, src, dst, producer, request, first, last, received, nbytes,
                    max(26.0, last - first))


def _data_steps(second: str):
    """The ops and data transfers of both steps below, w1 and g1's PS being ``second``."""
    ops = [op("w0/read", PS0, 0, 5), op("w1/read", second, 0, 5), op("fwd", WK, 1010, 1400),
           op("g0", WK, 1400, 1450), op("g1", WK, 1450, 1500), op("apply0", PS0, 2600, 2700),
           op("apply1", second, 2600, 2650)]
    rec = {o.name: o.record for o in ops}
    transfers = [_transfer("w0", PS0, WK, rec["w0/read"], 0, 10, 1000, 1005, 990),
                 _transfer("w1", second, WK, rec["w1/read"], 0, 10, 1000, 1005, 990),
                 _transfer("g0", WK, PS0, rec["g0"], 0, 1510, 2510, 2600, 1000),
                 _transfer("g1", WK, second, rec["g1"], 0, 1510, 2510, 2600, 1000)]
    deps = [("w0_R", "fwd", WK), ("w1_R", "fwd", WK), ("fwd", "g0", WK), ("fwd", "g1", WK),
            ("g0_R", "apply0", PS0), ("g1_R", "apply1", second)]
    return ops, transfers, deps


def _two_ps_step() -> DfgStep:
    """A worker, 2 PSes (us): pulls w0 (PS 0, 0-1000) and w1 (PS 1, 0-1000), computes
    (1010-1500), pushes g0 (to PS 0, 1510-2510) and g1 (to PS 1, 1510-2510); each PS applies
    its gradient; then TensorFlow's chain: each PS's control tensor to the worker (its Const
    after the apply), the worker's Identity, NoOp and Const, a control tensor to PS 0, whose
    Identity and AssignAdd end the step."""
    ops, transfers, deps = _data_steps(PS1)
    chain = [op("update/NoOp/ctrl_S1", PS0, 2700, 2705, "Const"),
             op("apply1/ctrl_S2", PS1, 2650, 2655, "Const"),
             op("update/NoOp_S3", WK, 3100, 3110, "Identity"),
             op("update", WK, 3110, 3112, "NoOp"), op("update/ctrl_S4", WK, 3112, 3120, "Const"),
             op("update_S5", PS0, 3500, 3510, "Identity"), op("step", PS0, 3510, 3520)]
    rec = {o.name: o.record for o in chain}
    transfers += [_transfer("c0", PS0, WK, rec["update/NoOp/ctrl_S1"], 0, 2800, 2800, 3100, 0),
                  _transfer("c1", PS1, WK, rec["apply1/ctrl_S2"], 0, 2750, 2750, 3000, 0),
                  _transfer("c", WK, PS0, rec["update/ctrl_S4"], 0, 3200, 3200, 3500, 0)]
    deps += [("apply0", "update/NoOp/ctrl_S1", PS0), ("apply1", "apply1/ctrl_S2", PS1),
             ("c0_R", "update/NoOp_S3", WK), ("c1_R", "update/NoOp_S3", WK),
             ("update/NoOp_S3", "update", WK), ("update", "update/ctrl_S4", WK),
             ("c_R", "update_S5", PS0), ("update_S5", "step", PS0)]
    return step(ops + chain, transfers, deps)


def _two_ps_template():
    return build_template(_two_ps_step(), OVERHEAD, {"ps:0": 0, "ps:1": 1}, None, 0.0)


def test_a_2ps_step_marks_its_control_chain_and_parses_it_as_traced():
    tpl = _two_ps_template()
    chain = {tpl.name[i] for i, c in enumerate(tpl.control) if c}
    assert chain == {"request c0", "pull c0", "parse c0", "request c1", "pull c1", "parse c1",
                     "compute update/NoOp_S3..", "push c", "parse c"}
    # a control tensor has no bytes: its receive is as the trace shows it, not the size fit's
    assert tpl.amount[tpl.name.index("parse c0")] == 3100 - 2800
    assert tpl.amount[tpl.name.index("parse c")] == 3500 - 3200
    assert tpl.amount[op_named(tpl, "parse w0")] == 500.0
    assert tpl.amount[op_named(tpl, "parse g0")] == 900.0
    # the quickest receive of each direction, control tensors left out (us)
    assert tpl.quickest_receive_us == (5.0, 90.0)


def test_over_one_ps_the_chain_takes_no_time():
    tpl = _two_ps_template()
    out, where = with_control_chain(tpl, [0] * len(tpl.kind))
    assert where == [0] * len(tpl.kind) and out.succ == tpl.succ
    for i, c in enumerate(tpl.control):
        if c:
            assert out.kind[i] == DELAY and out.amount[i] == 0.0
        else:
            assert (out.kind[i], out.amount[i]) == (tpl.kind[i], tpl.amount[i])
    # what waited for the chain (PS 0's last op) still waits for the updates, through it
    assert out.name.index("apply update_S5..") in out.succ[out.name.index("parse c")]
    # over the two PSes it was traced on, the chain stays
    assert with_control_chain(tpl, tpl.ps)[0] is tpl


def _one_ps_template():
    """The 2-PS step's data and work over one PS: the updates' group and the step's increment
    run on it after both updates, and no control tensor crosses the network."""
    ops, transfers, deps = _data_steps(PS0)
    ops.append(op("step", PS0, 2700, 2710))
    deps += [("apply0", "step", PS0), ("apply1", "step", PS0)]
    return build_template(step(ops, transfers, deps), OVERHEAD, {"ps:0": 0}, None, 0.0)


def test_over_two_ps_a_1ps_step_gains_the_chain():
    tpl = _one_ps_template()
    assert not any(tpl.control)
    where = list(tpl.ps)
    where[op_named(tpl, "apply apply1")] = 1  # PS 1's update there
    out, placed = with_control_chain(tpl, where)
    n = len(tpl.kind)
    assert len(out.kind) == n + 6 and len(placed) == len(out.kind)
    preds = out.predecessors()
    assert all(p < i for i, ps in enumerate(preds) for p in ps)  # the order the engine needs
    new = [i for i, c in enumerate(out.control) if c]
    kinds = sorted((out.kind[i], placed[i]) for i in new)
    assert kinds == sorted([(DOWN, 0), (DOWN, 1), (DELAY, 0), (DELAY, 0), (UP, 0), (DELAY, 0)])
    fetch = {placed[i]: i for i in new if out.kind[i] == DOWN}
    assert all(out.amount[i] == CONTROL_WIRE_BYTES for i in fetch.values())
    # each PS's fetch after its last PS op; the push to PS 0 (its last PS op ended the step)
    # after both fetches' receives, each the step's quickest receive of its direction
    assert [out.name[p] for p in preds[fetch[1]]] == ["apply apply1.."]
    assert [out.name[p] for p in preds[fetch[0]]] == ["apply apply0.."]  # with the increment
    up = next(i for i in new if out.kind[i] == UP)
    assert sorted(out.amount[p] for p in preds[up]) == [5.0, 5.0]
    gap = out.name.index(GAP)
    done = next(p for p in preds[gap] if out.control[p])
    assert preds[done] == [up] and out.amount[done] == 90.0
    # the ops of the profile keep their PSes and amounts
    old = [i for i, c in enumerate(out.control) if not c]
    assert [out.name[i] for i in old] == tpl.name
    assert [placed[i] for i in old] == where
    # over one PS nothing changes
    assert with_control_chain(tpl, tpl.ps)[0] is tpl


def _steps_us(templates, maps, ps: int, steps: int = 40) -> float:
    """When one replayed worker ends ``steps`` steps over ``ps`` PSes at 1 Gbit/s (us; the
    same seed, so the same templates drawn)."""
    cfg = sim_config(1, ps, 1e9, "observed", None, 1, False, "fair", None)
    sim = Simulator(templates, cfg, maps)
    sim.run(steps)
    return sim.step_ends[0][-1]


def test_the_shipped_1ps_lab_profile_gains_the_chain_over_2_ps_and_runs_slower():
    prof = load_profile([SAMPLE])
    plain = assign_ps(prof.templates, 2)
    tpls, maps = placed_templates(prof.templates, 2)
    spread = 0
    for t, m, old in zip(tpls, maps, prof.templates, strict=True):
        if len({m[i] for i, k in enumerate(t.kind) if k == PS}) > 1:
            spread += 1
            assert sum(t.control) == 6 and len(t.kind) == len(old.kind) + 6
        else:
            assert t is old
    assert spread >= 1
    slower = _steps_us(tpls, maps, 2) - _steps_us(prof.templates, plain, 2)
    # each step with the chain pays at least its two receives
    least = min(sum(t.quickest_receive_us) for t in prof.templates)
    assert slower >= 40 * least * spread / len(tpls) * 0.5 and slower > 0


@pytest.mark.slow
@pytest.mark.root
def test_a_real_2ps_profile_holds_the_chain_and_loses_it_over_one_ps(tmp_path: Path) -> None:
    """A 1-worker lab run over 2 PSes (real TensorFlow, gRPC and captures): every traced step
    has a control tensor from each PS and one to a PS, marked as the chain; over 1 PS they
    take no time and the replayed worker is faster for it."""
    need_root()
    need_tf()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    from lab.cluster import LabConfig, run_lab

    cfg = LabConfig(model="mlp", model_mb=2.0, workers=1, ps=2, steps=10, bandwidth="1gbit",
                    collect_dir=str(tmp_path / "b"), trace_first=4, trace_steps=3,
                    work_dir=str(tmp_path / "w"))
    run_lab(cfg)
    prof = load_profile([tmp_path / "b"], batch_size=cfg.batch_size)
    for t in prof.templates:
        chain = [i for i, c in enumerate(t.control) if c]
        assert sorted((t.kind[i], t.ps[i]) for i in chain if t.kind[i] in (DOWN, UP)) == [
            (DOWN, 0), (DOWN, 1), (UP, 0)]
        assert any(t.kind[i] == WORKER for i in chain)
    tpls, maps = placed_templates(prof.templates, 1)
    assert all(not any(t.kind[i] in (DOWN, UP) for i, c in enumerate(t.control) if c)
               for t in tpls)
    # over 2 PSes, as traced: the chain kept
    assert placed_templates(prof.templates, 2)[0] == list(prof.templates)
    assert _steps_us(tpls, maps, 1) < _steps_us(prof.templates, assign_ps(prof.templates, 1), 1)
