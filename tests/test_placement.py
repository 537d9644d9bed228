"""Placing the variables at another PS count: TensorFlow's strategies in creation order, the
order rebuilt from a multi-PS profile, the variable a transfer carries, and ``assign_ps``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SAMPLE, gradwire, need_tf

from gradwire.aligner.dfg import DfgStep
from gradwire.bundle import read_step
from gradwire.records import DataDep
from gradwire.replay.placement import (
    creation_order,
    data_adjacency,
    place,
    transfer_variable,
)
from gradwire.replay.predict import assign_ps
from gradwire.replay.profile import load_profile
from gradwire.replay.template import DELAY, DOWN, PS, UP, WORKER, StepTemplate

HERE = Path(__file__).parent
PS0 = "/job:ps/replica:0/task:0/device:CPU:0"
WK = "/job:worker/replica:0/task:0/device:CPU:0"


def test_greedy_sends_each_variable_to_the_lightest_ps_in_creation_order():
    # small first, the big one last: greedy piles it on a PS that already holds a share
    nbytes = [10, 10, 10, 10, 60]
    assert place(nbytes, range(5), 2, "greedy") == [0, 1, 0, 1, 0]
    assert place(nbytes, range(5), 2, "round-robin") == [0, 1, 0, 1, 0]
    assert place(nbytes, range(5), 2, "balanced") == [1, 1, 1, 1, 0]
    assert place(nbytes, range(5), 3, "greedy") == [0, 1, 2, 0, 1]
    assert place(nbytes, range(5), 3, "round-robin") == [0, 1, 2, 0, 1]
    assert place([5, 1, 1, 1], range(4), 2, "greedy") == [0, 1, 1, 1]
    assert place([5, 1, 1, 1], range(4), 2, "round-robin") == [0, 1, 0, 1]


def test_creation_order_is_rebuilt_from_each_ps_list():
    nbytes_created = [5, 1, 1, 1, 4]
    where = place(nbytes_created, range(5), 2, "greedy")  # [0, 1, 1, 1, 1]
    # the partition graphs list PS 0's variables, then PS 1's
    graph = sorted(range(5), key=lambda i: (where[i], i))
    ps_of = [where[i] for i in graph]
    nbytes = [nbytes_created[i] for i in graph]
    assert [graph[i] for i in creation_order(ps_of, nbytes, "greedy")] == list(range(5))
    rr = place(nbytes_created, range(5), 2, "round-robin")
    graph = sorted(range(5), key=lambda i: (rr[i], i))
    order = creation_order([rr[i] for i in graph], [nbytes_created[i] for i in graph],
                           "round-robin")
    assert [graph[i] for i in order] == list(range(5))
    # where the lists stop matching the strategy, the rest keep their graph order
    assert creation_order([1, 1, 0], [1, 1, 1], "greedy") == [2, 0, 1]
    assert creation_order([0, 0, 0], [3, 2, 1], "greedy") == [0, 1, 2]  # one PS
    assert creation_order([0, 0], [1, 1], "greedy", ps_count=2) == [0, 1]  # PS 1 holds none
    with pytest.raises(ValueError, match="unknown placement 'auto'"):
        place([1], [0], 2, "auto")


def test_an_optimizer_slot_and_a_variable_of_unknown_size():
    """A slot (colocated with its variable) is placed by TensorFlow without the strategy, so
    it is left out; a size unknown counts one byte, as the lab's strategy counts it."""
    from gradwire.records import VariableRecord
    from gradwire.replay.profile import ps_variables

    variables = [VariableRecord(name="global_step", device=PS0, bytes_=8,
                                colocated_with="GradientDescent/Const"),  # not a variable
                 VariableRecord(name="w", device=PS0, bytes_=400),
                 VariableRecord(name="w/Adam", device=PS0, bytes_=400, colocated_with="w"),
                 VariableRecord(name="table", device=PS0, bytes_=None),
                 VariableRecord(name="local", device=WK, bytes_=8)]
    assert ps_variables(variables, {"ps:0": 0}) == [
        ("global_step", 0, 8), ("w", 0, 400), ("table", 0, 1)]


def test_partition_variables_reads_sizes_and_colocation_from_real_node_defs():
    need_tf()
    from tensorflow.core.framework.node_def_pb2 import NodeDef

    from gradwire.collector.stepstats import partition_variables

    def node(name: str, op: str, dims: list[int], loc: str = "") -> NodeDef:
        n = NodeDef(name=name, op=op, device=PS0)
        n.attr["dtype"].type = 1  # DT_FLOAT
        for d in dims:
            n.attr["shape"].shape.dim.add(size=d)
        if loc:
            n.attr["_class"].list.s.append(f"loc:@{loc}".encode())
        return n

    nodes = [node("w", "VarHandleOp", [10, 20]), node("w/read", "ReadVariableOp", [10, 20]),
             node("w/Adam", "VarHandleOp", [10, 20], loc="w"), node("v", "VariableV2", [5])]
    got = partition_variables(nodes)
    assert [(v.name, v.bytes_, v.colocated_with) for v in got] == [
        ("w", 800, ""), ("w/Adam", 800, "w"), ("v", 20, "")]


def test_the_lab_placement_of_mobilenet_on_three_ps_comes_from_its_one_ps_profile():
    """Real partition graphs (tests/data/mobilenet_variables.json: a 1-PS and a 3-PS lab run of
    MobileNetV2): greedy over the 1-PS run's variables puts every one of the 263 where the
    3-PS run had it, and the 3-PS run's lists give back the 1-PS run's creation order."""
    doc = json.loads((HERE / "data" / "mobilenet_variables.json").read_text())
    names = [n for n, _ in doc["one_ps"]]
    nbytes = [b for _, b in doc["one_ps"]]
    where = place(nbytes, range(len(names)), 3, "greedy")
    real = {n: task for n, task, _ in doc["three_ps"]}
    assert len(names) == 263 and {n: where[i] for i, n in enumerate(names)} == real
    loads = [sum(b for b, p in zip(nbytes, where, strict=True) if p == s) / 1e6 for s in range(3)]
    assert [round(x, 2) for x in loads] == [3.78, 3.04, 7.34]  # the captures: 3.79, 3.04, 7.34
    # round-robin, pre-registered and then run in the lab (docs/preregistered/
    # issue21-placement-round-robin.md): its 3-PS capture carried 5.454, 4.753, 3.958 MB
    rr = place(nbytes, range(len(names)), 3, "round-robin")
    rr_mb = [sum(b for b, p in zip(nbytes, rr, strict=True) if p == s) / 1e6 for s in range(3)]
    assert rr_mb == pytest.approx([5.454, 4.753, 3.958], abs=0.005)  # gRPC framing aside
    three = doc["three_ps"]
    order = creation_order([p for _, p, _ in three], [b for _, _, b in three], "greedy")
    assert [three[i][0] for i in order] == names
    # an even split by bytes would have predicted a bottleneck PS of 5.1 MB, not 7.3
    even = place(nbytes, range(len(names)), 3, "balanced")
    assert max(sum(b for b, p in zip(nbytes, even, strict=True) if p == s)
               for s in range(3)) < 5.2e6


def _step(deps: list[tuple[str, str, str]]) -> DfgStep:
    """A step whose deps join ``(src, dst, dst_device)``; a src named ``*/read`` with a worker
    dst sits on the PS (an edge between devices)."""
    return DfgStep(bundle="w", step=1, ops=(), transfers=(),
                   deps=tuple(DataDep(src=a, dst=b, src_device=PS0 if a.endswith("/read") else d,
                                      dst_device=d) for a, b, d in deps))


def test_a_transfer_carries_the_variable_nearest_to_it_on_the_ps():
    adj = data_adjacency(_step([
        ("w1", "w1/read", PS0),  # a pull: ReadVariableOp next to its variable
        ("w1", "GD/update_w1", PS0), ("recv_g1", "GD/update_w1", PS0),  # a push: via apply
        ("lr", "GD/update_w1", PS0),
        ("mm", "mm/read", PS0), ("recv_mean", "mm/sub", PS0), ("mm/read", "mm/sub", PS0),
        ("w1/read", "matmul", WK),  # an edge between devices is not followed
    ]))
    index = {"w1": 0, "mm": 1}
    assert transfer_variable(adj, index, "w1/read") == 0
    assert transfer_variable(adj, index, "recv_g1") == 0
    assert transfer_variable(adj, index, "recv_mean") == 1  # 3 hops: a moving mean's update
    assert transfer_variable(adj, index, "matmul") == -1
    assert transfer_variable(adj, index, "lonely") == -1


def _two_variable_template() -> StepTemplate:
    """Pulls and pushes of two variables (600 and 400 bytes) and of an unknown 50-byte tensor,
    profiled on one PS; the PS applies each push."""
    t = StepTemplate(step=0, var_ps=[0, 0], var_bytes=[600, 400])
    s = t.add(DELAY, 0.0, "start")
    pulls = [t.add(DOWN, b, f"pull{v}", [s], var=v) for v, b in ((0, 600), (1, 400), (-1, 50))]
    c = t.add(WORKER, 10.0, "compute", pulls)
    for v, b in ((1, 400), (0, 600)):
        u = t.add(UP, b, f"push{v}", [c], var=v)
        d = t.add(DELAY, 1.0, f"parse{v}", [u])
        t.add(PS, 5.0, f"apply{v}", [d])
    return t


def test_assign_ps_puts_a_variables_transfers_and_updates_on_its_ps():
    t = _two_variable_template()
    m = assign_ps([t], 2, "greedy")[0]
    ps_of = {t.name[i]: m[i] for i in range(len(t.kind)) if t.kind[i] != DELAY}
    assert ps_of == {"pull0": 0, "pull1": 1, "pull-1": 1, "compute": 0, "push1": 1,
                     "apply1": 1, "push0": 0, "apply0": 0}
    assert assign_ps([t], 1, "greedy")[0] == t.ps  # the profile's own count: as profiled
    # without variable records the transfers are spread by bytes, biggest first
    bare = StepTemplate(step=0)
    s = bare.add(DELAY, 0.0, "start")
    for b in (50, 600, 400):
        bare.add(DOWN, b, f"pull{b}", [s])
    assert assign_ps([bare], 2, "greedy")[0] == [0, 1, 0, 1]  # 600 | 400 + 50


def test_the_shipped_sample_records_its_variables_and_every_transfer_finds_one():
    table = read_step(sorted((SAMPLE / "worker0" / "trace").glob("step-*.ops.json"))[0])
    assert [v.device for v in table.variables] and all(
        v.device.startswith("/job:ps/") and v.bytes_ for v in table.variables)
    prof = load_profile([SAMPLE])
    for t in prof.templates:
        known = [t.var[i] for i, k in enumerate(t.kind) if k in (DOWN, UP)]
        assert known and all(v >= 0 for v in known)
        assert sum(t.var_bytes) == sum(v.bytes_ for v in table.variables)


def test_placement_option_changes_only_other_ps_counts():
    rows = {}
    for placement in ("greedy", "round-robin", "balanced"):
        out = gradwire("predict", "--sample", "--workers", "1", "--ps", "1,2", "--placement",
                       placement, "--format", "json", "--steps", "10", "--replications", "2",
                       "--max-replications", "2")
        assert out.returncode == 0, out.stderr
        rows[placement] = {r["ps"]: r for r in json.loads(out.stdout)["rows"]}
    # at the profile's own count (1 PS) the placement is the profile's, whatever the option
    assert rows["greedy"][1] == rows["round-robin"][1] == rows["balanced"][1]
    # the sample's variables: greedy splits the bytes 17 : 83 over the PSes, round-robin 0 : 100
    assert rows["greedy"][2]["examples_per_s"] != rows["round-robin"][2]["examples_per_s"]
    bad = gradwire("predict", "--sample", "--placement", "bogus")
    assert bad.returncode == 2 and "--placement" in bad.stderr


def test_predict_places_as_the_profiles_lab_did_and_notes_an_uneven_split(tmp_path):
    """--placement auto takes the strategy the lab recorded in lab_result.json (older lab
    runs, with none, were greedy; without a lab record a note says the strategy was assumed);
    a note gives the busiest PS's share when it is well above an even split."""
    import shutil

    from gradwire.bundle import SAMPLE_BUNDLE

    bundle = tmp_path / "sample"
    shutil.copytree(SAMPLE_BUNDLE, bundle)
    result = json.loads((bundle / "lab_result.json").read_text())
    result["config"]["ps_strategy"] = "round-robin"
    (bundle / "lab_result.json").write_text(json.dumps(result))
    args = ["--workers", "1", "--ps", "2", "--format", "json", "--steps", "10",
            "--replications", "2", "--max-replications", "2"]
    rr = gradwire("predict", str(bundle), *args)
    plain = gradwire("predict", "--sample", *args)
    assert rr.returncode == 0 and plain.returncode == 0, rr.stderr + plain.stderr
    assert json.loads(rr.stdout)["profile"]["placement"] == "round-robin"
    doc = json.loads(plain.stdout)
    assert doc["profile"]["placement"] == "greedy"
    share = doc["profile"]["busiest_ps_share"]["2"][0]
    t = load_profile([SAMPLE_BUNDLE]).templates[0]
    where = place(t.var_bytes, range(len(t.var_bytes)), 2, "greedy")
    by_vars = max(sum(b for b, p in zip(t.var_bytes, where, strict=True) if p == s)
                  for s in (0, 1)) / sum(t.var_bytes)
    assert share == pytest.approx(by_vars, abs=0.01)  # gRPC framing aside, the variables'
    assert f"{100 * share:.0f}% of the pulled bytes with 2 PSes (even: 50%)" in plain.stderr
    assert "the profile does not say" not in plain.stderr + rr.stderr  # lab profiles
    (bundle / "lab_result.json").unlink()  # a job outside the lab: the strategy is assumed
    bare = gradwire("predict", str(bundle), *args, "--batch-size", "32")
    assert bare.returncode == 0, bare.stderr
    assert json.loads(bare.stdout)["profile"]["placement"] == "greedy"
    assert "as TensorFlow's greedy strategy would (the profile does not say" in bare.stderr


def test_a_profile_without_variable_records_is_spread_by_bytes_and_says_so():
    import dataclasses

    from gradwire.replay.notes import placement_note, uneven_placement_note

    prof = load_profile([SAMPLE])
    bare = dataclasses.replace(prof, templates=[
        dataclasses.replace(t, var_bytes=[], var_ps=[], var=[-1] * len(t.kind))
        for t in prof.templates])
    assert placement_note(prof, [1, 2]) is None  # it has them
    assert placement_note(bare, [1]) is None  # the profile's own count: nothing is placed
    note = placement_note(bare, [1, 2])
    assert note and "scripts/add_variables.py" in note
    assert uneven_placement_note(bare, [2], "greedy", False) is None  # nothing placed to tell
    m = assign_ps(bare.templates, 2, "round-robin")[0]  # the option has nothing to place
    assert m == assign_ps(bare.templates, 2, "greedy")[0]
    t = bare.templates[0]
    down = [sum(t.amount[i] for i, k in enumerate(t.kind) if k == DOWN and m[i] == s)
            for s in (0, 1)]
    assert min(down) > 0  # biggest first to the least loaded: both PSes get some
