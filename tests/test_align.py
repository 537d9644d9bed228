"""The aligner on real recordings: the shipped lab bundle, a fresh 4-node lab run, and real
third-party TF timelines. Lab nodes share one physical clock (true offsets zero), so known
offsets are injected into the loaded bundles and must be recovered."""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from pathlib import Path

import networkx as nx
import pytest
from conftest import (
    SAMPLE,
    assert_one_line_error,
    gradwire,
    need_root,
    need_tf,
    partial_overlaps,
)

from gradwire.aligner.align import align_nodes
from gradwire.aligner.clock import Precedence, precedences, solve_offsets
from gradwire.aligner.dfg import build_dfg
from gradwire.aligner.inject import random_offsets_us, shift_nodes
from gradwire.aligner.nodes import load_nodes, map_domains
from gradwire.errors import AlignmentInfeasible

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


@pytest.fixture(scope="module")
def sample_nodes():
    return load_nodes([SAMPLE])


def _errors_us(nodes, objective: str, seeds: range) -> list[float]:
    """|recovered - injected| offset of every non-reference host, over several seeds."""
    domains = map_domains(nodes)
    errs = []
    for seed in seeds:
        injected = random_offsets_us(sorted({n.domain for n in nodes}), seed)
        got = align_nodes(shift_nodes(nodes, domains, injected), objective=objective).offsets
        ref = got.reference
        errs += [abs(got.offset_us[d] - (injected[d] - injected[ref])) for d in injected
                 if d != ref]
    return errs


def test_sample_bundle_transfers_match_and_graph_is_sound(sample_nodes):
    al = align_nodes(sample_nodes)
    s = al.summary()
    # every RecvTensor call of the 7 steps was seen by both captures; 3 steps were traced
    assert s["transfers"]["seen_by_both_captures"] == s["transfers"]["total"] > 100
    assert s["transfers"]["pull"] > 0 and s["transfers"]["push"] > 0
    traced = [t for t in al.transfers if t.recv is not None]
    assert len({t.step for t in traced}) == 3
    assert all(t.producer is not None and t.at_receiver and t.at_sender for t in traced)
    assert all(t.txn.endswith("|pull") == t.txn.split("|")[2].startswith("ps:")
               for t in al.transfers)
    for h in s["hosts"]:  # same physical clock: zero lies in every feasible interval
        lo, hi = h["interval_us"]
        assert lo <= 0.0 <= hi and hi - lo < 50
        assert h["capture_skew"]["consistent"]
    g, report = build_dfg(al)
    assert report.problems == [] and nx.is_directed_acyclic_graph(g)
    assert report.counts["downlink_nodes"] + report.counts["uplink_nodes"] == len(traced)
    for x, d in g.nodes(data=True):
        if d["kind"] in ("downlink", "uplink"):
            (prod,), (recv,) = g.predecessors(x), g.successors(x)
            assert g.nodes[prod]["task"] == d["src_task"] and g.nodes[recv]["task"] == d["task"]
            assert d["first_data_us"] <= d["last_data_us"] <= g.nodes[recv]["end_us"] + 1
            assert any(True for _ in g.successors(recv)) or d["bytes"] <= 8


def test_injected_offsets_recovered_on_sample(sample_nodes):
    errs = _errors_us(sample_nodes, "centre", range(5))
    assert statistics.median(errs) <= 20 and max(errs) <= 100, errs


def test_capture_clock_skew_is_detected_and_corrected(sample_nodes):
    domains = map_domains(sample_nodes)
    worker = next(n.domain for n in sample_nodes if n.name == "worker0")
    shifted = shift_nodes(sample_nodes, domains, {worker: 5000.0}, capture_only=True)
    al = align_nodes(shifted)
    check = al.skew[worker]
    assert not check.consistent and check.lo_us <= 5000 <= check.hi_us
    assert abs(al.offsets.offset_us[worker]) < 200  # TF clocks agree; the capture was fixed


def test_contradicting_transfers_are_named():
    precs = [Precedence("a", 0.0, "b", 10.0, 0.0, "txn-1 (first DATA)"),
             Precedence("b", 0.0, "a", -20.0, 0.0, "txn-2 (request)")]
    with pytest.raises(AlignmentInfeasible, match=r"txn-1.*txn-2|txn-2.*txn-1"):
        solve_offsets(precs)


def _late_producer(nodes, delay_us: int):
    """The nodes with one traced producer op (of a captured pull) stamped ``delay_us`` late,
    as TF once did in a CI lab run; and that transfer's id."""
    al = align_nodes(nodes)
    t = next(t for t in al.transfers
             if t.producer is not None and t.at_sender is not None and t.direction == "pull")
    out = []
    for n in nodes:
        steps = [dataclasses.replace(tr, ops=tuple(
            dataclasses.replace(op, end_us=op.end_us + delay_us) if op is t.producer else op
            for op in tr.ops)) for tr in n.steps]
        out.append(dataclasses.replace(n, steps=steps))
    return out, t.txn


def test_an_op_stamp_contradicting_the_captures_is_set_aside(sample_nodes):
    before = align_nodes(sample_nodes)
    nodes, txn = _late_producer(sample_nodes, 25_000)
    al = align_nodes(nodes)
    ps = next(n.domain for n in sample_nodes if n.name == "ps0")
    # one stamp is not a skewed capture: no correction, the stamp is counted as outlying
    assert al.skew[ps].consistent and al.skew[ps].outliers == 1
    assert [label.split(" ")[0] for label, _ in al.offsets.ignored] == [txn]
    assert 24_000 < al.offsets.ignored[0][1] < 25_100
    assert al.offsets.offset_us == pytest.approx(before.offsets.offset_us, abs=0.01)
    assert al.summary()["constraints"]["ignored_op_stamps"][0]["transfer"].startswith(txn)
    assert before.offsets.ignored == () and before.skew[ps].outliers == 0
    # without the packets to overrule it, the same stamp is a contradiction, named
    precs = precedences(al.transfers)
    with pytest.raises(AlignmentInfeasible, match="producer->recv op"):
        solve_offsets([p for p in precs if p.from_ops])


def test_a_transfer_cut_by_the_receivers_capture_end_bounds_nothing_by_its_last_data(
        sample_nodes):
    """A capture stopped during a push (lab --capture-steps, CI 2026-11-29) saw its DATA up to
    the stop: that last DATA is no bound, where the complete transfer's is."""
    al = align_nodes(sample_nodes)
    t = next(t for t in al.transfers if t.at_sender is not None and t.at_receiver is not None
             and t.direction == "push" and t.at_receiver.end_ns is not None)
    rcv = t.at_receiver
    cut = dataclasses.replace(t, at_receiver=dataclasses.replace(
        rcv, last_data_ns=rcv.first_data_ns, end_ns=None))
    labels = [p.label for p in precedences([t])]
    assert f"{t.txn} (last DATA)" in labels
    cut_labels = [p.label for p in precedences([cut])]
    assert f"{t.txn} (last DATA)" not in cut_labels
    assert f"{t.txn} (first DATA)" in cut_labels  # what it did see still bounds


def test_min_norm_is_pulled_towards_zero_and_centre_is_not():
    # true offset of b: 1000 us; one-way latency 30 us each way
    precs = [Precedence("a", 0.0, "b", 1030.0, 0.0, "a->b"),
             Precedence("b", 2000.0, "a", 1030.0, 0.0, "b->a")]
    assert solve_offsets(precs, objective="centre").offset_us["b"] == pytest.approx(1000, abs=1e-3)
    assert solve_offsets(precs, objective="min-norm").offset_us["b"] == pytest.approx(970, abs=1e-3)


def test_align_command_writes_documented_outputs(tmp_path):
    out = tmp_path / "aligned"
    proc = gradwire("-v", "align", str(SAMPLE), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    offsets = json.loads((out / "offsets.json").read_text())
    assert {h["bundles"] for h in offsets["hosts"]} == {"ps0", "worker0"}
    dfg = json.loads((out / "dfg.json").read_text())
    assert dfg["graph"]["format"] == "gradwire-dfg" and dfg["graph"]["problems"] == []
    g = nx.node_link_graph(dfg, edges="edges")
    assert g.number_of_nodes() == dfg["graph"]["counts"]["nodes"]
    graphml = nx.read_graphml(out / "dfg.graphml")
    assert graphml.number_of_nodes() == g.number_of_nodes()
    # the same graph-level fields as dfg.json (they were left out)
    assert {k: graphml.graph[k] for k in ("format", "version", "reference", "objective",
                                          "time_unit")} == {
        k: dfg["graph"][k] for k in ("format", "version", "reference", "objective", "time_unit")}
    trace = json.loads((out / "timeline.json").read_text())
    events = trace["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {"ps:0", "worker:0"}
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == g.number_of_nodes() and all(e["dur"] >= 0 for e in slices)
    assert partial_overlaps(trace) == 0  # TF ops that ran concurrently: lanes of their own
    starts = {e["id"] for e in events if e["ph"] == "s"}
    assert starts and starts == {e["id"] for e in events if e["ph"] == "f"}
    assert "reading" in proc.stderr  # progress (shown on a terminal, or with -v)
    assert offsets["captures_set_aside"] == {} and "warning" not in proc.stderr


def test_a_bundle_given_twice_is_read_once(sample_nodes):
    """The same bundle named twice, or as a folder and as the bundle under it, is one node
    (it was refused as "two bundles are both named 'worker0'")."""
    again = load_nodes([SAMPLE / "worker0", f"{SAMPLE / 'worker0'}/", SAMPLE])
    assert sorted(n.name for n in again) == sorted(n.name for n in sample_nodes) == \
        ["ps0", "worker0"]


def test_a_ps_bundle_alone_is_no_graph_and_says_so(tmp_path):
    """`align ps0` wrote an empty graph and said "no problems", exit 0; and one host pair,
    bounded both ways, was counted as two."""
    proc = gradwire("align", str(SAMPLE / "ps0"), "-o", str(tmp_path / "a"))
    assert proc.returncode == 1 and "problem: the graph is empty" in proc.stderr, proc.stderr
    proc = gradwire("align", str(SAMPLE), "-o", str(tmp_path / "b"))
    assert proc.returncode == 0 and "over 1 host pair," in proc.stdout, proc.stdout
    # predict says it in one line, naming what it was given, before solving any clock
    proc = gradwire("predict", str(SAMPLE / "ps0"), "--workers", "1")
    assert_one_line_error(proc, str(SAMPLE / "ps0"), "no bundle has a trace (ps0 hold none)")


def test_a_capture_cut_before_the_traced_steps_is_set_aside(tmp_path):
    """Cut to 40%, worker0's capture holds only the steps before the traced ones; matched to
    them, the clocks came out 51 ms apart. Now the capture is set aside, with a warning."""
    import shutil

    shutil.copytree(SAMPLE, tmp_path / "b")
    cap = tmp_path / "b" / "worker0" / "capture.pcapng"
    data = cap.read_bytes()
    cap.write_bytes(data[:len(data) * 2 // 5])
    proc = gradwire("align", str(tmp_path / "b"), "-o", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    assert "warning: " in proc.stderr and "worker0 from its trace alone" in proc.stderr
    assert "capture clock of" not in proc.stderr  # no skew invented to fit the wrong calls
    offsets = json.loads((tmp_path / "o" / "offsets.json").read_text())
    assert list(offsets["captures_set_aside"]) == ["worker0"]
    assert "its capture ends before" in offsets["captures_set_aside"]["worker0"]


@pytest.mark.parametrize("args, fragments", [
    (["/nonexistent/bundle"], ["/nonexistent/bundle", "no such bundle"]),
    ([str(SAMPLE), "--reference", "nosuch"], ["reference 'nosuch'"]),
    ([str(SAMPLE), "--bandwidth", "fast"], ["bad rate 'fast'"]),
])
def test_align_bad_input_is_one_line(tmp_path, args, fragments):
    assert_one_line_error(gradwire("align", *args, "-o", str(tmp_path / "o")), *fragments)


def test_align_refuses_an_output_folder_that_is_a_file(tmp_path):
    (tmp_path / "afile").write_text("")
    assert_one_line_error(gradwire("align", str(SAMPLE), "-o", str(tmp_path / "afile")),
                          "afile", "existing file, not a folder")
    assert_one_line_error(gradwire("align", str(SAMPLE), "-o", str(tmp_path / "afile" / "o")),
                          "cannot create the output folder")
    assert_one_line_error(gradwire("align", str(SAMPLE), "-o", "/dev/null"),
                          "/dev/null", "a device, FIFO or socket, not a folder")


def test_an_empty_path_is_refused_not_taken_for_the_current_folder(tmp_path):
    """-o "" would be Path("."): every command's path arguments refuse it in one line, and
    nothing is written where the command ran."""
    for args in (["align", str(SAMPLE), "-o", ""], ["predict", "--sample", "-o", ""],
                 ["inspect", ""]):
        assert_one_line_error(gradwire(*args, cwd=tmp_path), "an empty path")
    assert list(tmp_path.iterdir()) == []


def test_third_party_timelines_build_graphs(realdata, tmp_path):
    need_tf()
    al = align_nodes(load_nodes([realdata / "yaroslavvb_dynamic_stitch_gpu_run_metadata.pbtxt"]))
    g, report = build_dfg(al)
    assert report.problems == [] and g.number_of_edges() > 0 and nx.is_directed_acyclic_graph(g)
    chrome = realdata / "tfe_fork_timeline_client_ps_worker.json"
    proc = gradwire("align", str(chrome), "-o", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "o" / "dfg.json").read_text())
    tasks = {n["task"] for n in doc["nodes"]}
    assert tasks == {"ps:0", "worker:0", "worker:1"}
    events = json.loads(chrome.read_text())["traceEvents"]
    assert len(doc["nodes"]) == sum(1 for e in events if e.get("ph") == "X"
                                    and e.get("pid") in {7, 9, 11})  # the Compute processes
    recv = sorted(n["name"] for n in doc["nodes"] if n["name"].startswith("RecvTensor"))
    assert len(recv) == 7 and "RecvTensor#3" in recv  # repeated names kept apart, not merged


def test_align_refuses_a_capture_file_in_place_of_a_bundle(realdata, tmp_path):
    pcap = realdata / "vitalybupt_grpc_cpp_chttp2.pcap"
    assert_one_line_error(gradwire("align", str(pcap), "-o", str(tmp_path / "o")),
                          str(pcap), "not a bundle folder, nor a TF timeline")


@pytest.mark.slow
@pytest.mark.root
def test_four_node_lab_run_offsets_recovered(tmp_path):
    """2 PS + 2 workers in their own namespaces, real TF and gRPC; inject 0.1-50 ms offsets."""
    need_root()
    need_tf()
    sys.path.insert(0, str(SCRIPTS))
    from lab.cluster import LabConfig, run_lab

    run_lab(LabConfig(model="mlp", model_mb=2.0, workers=2, ps=2, steps=12, bandwidth="1gbit",
                      collect_dir=str(tmp_path / "b"), trace_first=4, trace_steps=3,
                      work_dir=str(tmp_path / "w")))
    nodes = load_nodes([tmp_path / "b"])
    assert len({n.domain for n in nodes}) == 4
    errs = _errors_us(nodes, "centre", range(5))
    assert statistics.median(errs) <= 20 and max(errs) <= 100, errs
    al = align_nodes(nodes)
    # op stamps overruled by the captures (see docs/align.md): rare, never more than a few
    op_bounds = sum(1 for p in precedences(al.transfers) if p.from_ops)
    assert len(al.offsets.ignored) <= 0.02 * op_bounds, al.offsets.ignored
    g, report = build_dfg(al)
    assert report.problems == [] and report.counts["transfers_without_producer"] == 0
    assert {d["task"] for _, d in g.nodes(data=True)} == {"ps:0", "ps:1", "worker:0", "worker:1"}
    # the partition graphs list each PS's variables in creation order: running the lab's greedy
    # strategy over the two lists rebuilds an order that places every variable where TF did
    from gradwire.replay.placement import creation_order, place

    worker = next(n for n in nodes if n.steps)
    ps_vars = [v for v in worker.steps[0].variables if v.device.startswith("/job:ps/")]
    ps_of = [int(v.device.split("task:")[1].split("/")[0]) for v in ps_vars]
    nbytes = [v.bytes_ or 0 for v in ps_vars]
    assert set(ps_of) == {0, 1}
    order = creation_order(ps_of, nbytes, "greedy")
    assert order != list(range(len(ps_vars))) and place(nbytes, order, 2, "greedy") == ps_of


def test_traced_steps_get_distinct_tf_step_ids():
    """Every step pulls the same edges, so a traced step whose TF stamps run late once matched
    its neighbour's calls too (a CI run of the 4-node test: two steps, one step id, and clock
    errors of 30-60 ms); the surer step keeps the id, the other takes its own."""
    from gradwire.aligner.transfers import _step_ids
    from gradwire.records import OpRecord, StepTrace

    src, dst = "/job:ps/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:0"

    def step(n: int, start_us: int) -> StepTrace:
        ops = tuple(OpRecord(step=n, name="RecvTensor", op_type="RecvTensor", device=dst,
                             start_us=start_us, end_us=start_us + 100, tensor=f"edge_{i}",
                             src_device=src, dst_device=dst) for i in range(3))
        return StepTrace(step=n, ops=ops, deps=(), devices=(dst,))

    # calls of TF steps 101 (at 1.000 s), 102 (1.050 s) and 103 (1.100 s)
    by_key = {(src, dst, f"edge_{i}"): [(1_000_000_000 + 50_000_000 * k, 101 + k)
                                         for k in range(3)] for i in range(3)}
    late, on_time = step(4, 1_039_000), step(5, 1_051_000)  # step 4's stamps run 39 ms late
    assert _step_ids([late, on_time], by_key) == {4: 101, 5: 102}


@pytest.mark.parametrize("command", [["align", "-o", "OUT"], ["overhead"],
                                     ["predict", "--workers", "1"]])
def test_two_bundles_of_one_task_are_refused(tmp_path, command):
    """A backup copy beside the bundles was counted twice (DFG doubled, overhead n doubled)."""
    import shutil

    shutil.copytree(SAMPLE, tmp_path / "b")
    shutil.copytree(tmp_path / "b" / "worker0", tmp_path / "b" / "worker1")
    args = [a.replace("OUT", str(tmp_path / "o")) for a in command[1:]]
    assert_one_line_error(gradwire(command[0], str(tmp_path / "b"), *args),
                          "bundles worker0 and worker1 both hold task worker:0")


@pytest.mark.parametrize("change, fragment", [
    ("spec", "were recorded in different clusters"),
    ("time", "were recorded 3,5"),
])
def test_bundles_of_two_runs_are_refused(tmp_path, change, fragment):
    """A PS bundle of one run and a worker bundle of another were aligned as one run (the
    review's loopback runs 22 minutes apart, on other ports: "3758 seen by both captures")."""
    import shutil

    shutil.copytree(SAMPLE, tmp_path / "b")
    path = tmp_path / "b" / "worker0" / "manifest.json"
    m = json.loads(path.read_text())
    if change == "spec":
        m["cluster_spec"] = {"ps": ["10.9.9.9:2222"], "worker": ["10.9.9.8:2222"]}
    else:  # collected an hour later
        for k in ("start", "end"):
            m["clock_samples"][k]["realtime_ns"] += 3600 * 10**9
    path.write_text(json.dumps(m))
    for cmd in (["align", "-o", str(tmp_path / "o")], ["predict", "--workers", "1"]):
        assert_one_line_error(gradwire(cmd[0], str(tmp_path / "b"), *cmd[1:]), fragment,
                              "give the bundles of one run")


def test_captures_of_two_workers_on_one_host_are_each_judged_by_their_own_steps():
    """Two workers on one host share its clock; worker1 started 30 s after worker0. Each
    capture holds its own worker's traced steps, and neither is set aside (both were, when
    every traced transfer of the host was held against every capture of it)."""
    import copy

    from gradwire.aligner.nodes import drop_uncovered

    ps, w0 = load_nodes([SAMPLE])
    shift_us = 30_000_000
    w1 = copy.copy(w0)
    w1.name, w1.task = "worker1", "worker:1"

    def moved(o):
        return dataclasses.replace(o, device=o.device.replace("worker/replica:0/task:0",
                                                              "worker/replica:0/task:1"),
                                   start_us=o.start_us + shift_us, end_us=o.end_us + shift_us)

    def later(s):
        return dataclasses.replace(s, **{f: getattr(s, f) + 1000 * shift_us for f in (
            "request_ns", "first_data_ns", "last_data_ns", "end_ns") if getattr(s, f)})

    w1.steps = [dataclasses.replace(s, ops=tuple(moved(o) for o in s.ops)) for s in w0.steps]
    w1.streams = [later(s) for s in w0.streams]
    ps.streams = ps.streams + [later(s) for s in ps.streams]  # the PS captured the whole run
    nodes = [ps, w0, w1]
    drop_uncovered(nodes, map_domains(nodes))
    assert [n.capture_problem for n in nodes] == [None, None, None]
    w0.streams = w0.streams[: len(w0.streams) // 4]  # now cut worker0's: only it is set aside
    drop_uncovered(nodes, map_domains(nodes))
    assert [bool(n.capture_problem) for n in nodes] == [False, True, False]


def test_a_collection_without_an_end_sample_is_open_ended(tmp_path):
    """collect killed with -9 leaves no end sample: its bundle started 90 s before the PS's
    still belongs to the same run (it was 'recorded 90 s apart')."""
    import shutil

    shutil.copytree(SAMPLE, tmp_path / "b")
    path = tmp_path / "b" / "worker0" / "manifest.json"
    m = json.loads(path.read_text())
    m["clock_samples"]["start"]["realtime_ns"] -= 90 * 10**9
    del m["clock_samples"]["end"]
    path.write_text(json.dumps(m))
    proc = gradwire("align", str(tmp_path / "b"), "-o", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr


def test_a_ps_bundle_alone_names_its_task_and_every_count(tmp_path):
    """A PS's bundle has no trace: its host showed no task (its manifest names ps:0), and the
    graph's counts left out the kinds it had none of, so the keys changed run to run."""
    proc = gradwire("align", str(SAMPLE / "ps0"), "--format", "json")
    doc = json.loads(proc.stdout)  # printed whole; the exit says the graph is empty
    assert proc.returncode == 1 and "the graph is empty" in doc["dfg"]["problems"][0]
    assert ["ps:0"] in [h["tasks"] for h in doc["hosts"] if h["bundles"] == "ps0"]
    assert {f"{k}_nodes" for k in ("downlink", "ps", "uplink", "worker")} <= set(
        doc["dfg"]["counts"])
