"""`gradwire inspect`: the shipped sample bundle, and the table of bad inputs."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import SAMPLE, assert_one_line_error, gradwire

from gradwire.bundle import open_bundle, read_step
from gradwire.collector.summary import summarize


@pytest.fixture(scope="module")
def sample_reports():
    proc = gradwire("inspect", "--format", "json", str(SAMPLE))
    assert proc.returncode == 0, proc.stderr
    return {r["task"]["type"] + str(r["task"]["index"]): r for r in json.loads(proc.stdout)}


def test_sample_has_a_ps_and_a_worker(sample_reports):
    assert set(sample_reports) == {"ps0", "worker0"}
    worker = sample_reports["worker0"]
    assert worker["nodes"] == ["ps:0", "worker:0"]
    assert worker["problems"] == []
    assert len(worker["steps"]) >= 3
    # the partition graphs' variables, all on the one PS, about what a step pulls
    var = worker["variables"]
    assert list(var["per_task"]) == ["ps:0"] and var["per_task"]["ps:0"]["count"] >= 2
    pulled = worker["steps"][0]["trace_bytes"]["ps:0 -> worker:0"]
    assert abs(var["per_task"]["ps:0"]["bytes"] - pulled) <= 0.01 * pulled  # global_step: 8 B
    assert var["biggest"]["bytes"] == max(
        v.bytes_ for v in read_step(sorted((SAMPLE / "worker0" / "trace").glob("*.ops.json"))[0])
        .variables)
    assert sample_reports["ps0"]["variables"] is None  # a PS records no steps


def test_sample_trace_bytes_match_capture_per_direction(sample_reports):
    for step in sample_reports["worker0"]["steps"]:
        assert set(step["trace_bytes"]) == {"ps:0 -> worker:0", "worker:0 -> ps:0"}
        for direction, tensor_bytes in step["trace_bytes"].items():
            wire = step["capture_bytes"][direction]
            # gRPC + HTTP/2 framing adds a little, never less than the tensors
            assert tensor_bytes <= wire <= tensor_bytes * 1.02 + 4096, (direction, step)


def test_sample_capture_has_no_drops(sample_reports):
    for report in sample_reports.values():
        cap = report["capture"]
        assert cap["tcp_packets"] > 0
        assert cap["drops_kernel"] == cap["drops_capturer"] == 0


def test_table_output_names_directions():
    proc = gradwire("inspect", str(SAMPLE / "worker0"))
    assert proc.returncode == 0, proc.stderr
    assert "ps:0 -> worker:0" in proc.stdout and "problems: none" in proc.stdout


def test_verbose_names_each_capture_before_reading_it():
    """-v (or a terminal): a line per capture with its size, as a 2 GB one takes a while;
    without either, stderr stays quiet."""
    proc = gradwire("inspect", str(SAMPLE), "-v")
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("gradwire inspect: ")]
    assert [ln.split("/")[-2] for ln in lines] == ["ps0", "worker0"], lines
    assert all(ln.endswith(" MB)") and "capture.pcapng (" in ln for ln in lines), lines
    assert "gradwire inspect" not in gradwire("inspect", str(SAMPLE)).stderr


def _copy(tmp_path):
    dst = tmp_path / "b"
    shutil.copytree(SAMPLE / "worker0", dst)
    return dst


def _manifest(b, edit):
    m = json.loads((b / "manifest.json").read_text())
    edit(m)
    (b / "manifest.json").write_text(json.dumps(m))


BAD = {
    "missing folder": (lambda b: shutil.rmtree(b), "no such bundle folder"),
    "a file, not a folder": (
        lambda b: (shutil.rmtree(b), b.write_text("x")), "not a folder"),
    "no manifest": (lambda b: (b / "manifest.json").unlink(), "missing manifest.json"),
    "empty manifest": (lambda b: (b / "manifest.json").write_text(""), "file is empty"),
    "truncated manifest": (
        lambda b: (b / "manifest.json").write_text((b / "manifest.json").read_text()[:80]),
        "corrupt or truncated JSON"),
    "manifest not an object": (
        lambda b: (b / "manifest.json").write_text("[1, 2]"), "not a JSON object"),
    "manifest lacks keys": (
        lambda b: (b / "manifest.json").write_text('{"schema_version": 1}'),
        "field kind is missing (wanted 'gradwire-bundle')"),
    "unknown schema": (
        lambda b: _manifest(b, lambda m: m.update(schema_version=99)),
        "field schema_version is 99, not a schema_version this gradwire reads (1)"),
    "corrupt step table": (
        lambda b: next(b.glob("trace/step-*.ops.json")).write_text('{"step": 1'),
        "corrupt or truncated JSON"),
    "step table with a time as a string": (
        lambda b: _stringify_end(b), "field ops[0].end_us (op '_SOURCE') is '"),
    "capture is a string": (
        lambda b: _manifest(b, lambda m: m.update(capture="x")), "field capture is 'x', not a"),
    "host is a string": (
        lambda b: _manifest(b, lambda m: m.update(host="vm")),
        "field host is 'vm', not a JSON object"),
    "cluster spec is a list": (
        lambda b: _manifest(b, lambda m: m.update(cluster_spec=["a"])),
        "field cluster_spec is a list of 1, not an object of job -> list of 'host:port'"),
    "cluster spec of numbers": (
        lambda b: _manifest(b, lambda m: m.update(cluster_spec={"worker": [5]})),
        "field cluster_spec.worker[0] is 5, not a 'host:port' string"),
    "ports as a string": (
        lambda b: _manifest(b, lambda m: m.update(ports="2222")),
        "field ports is '2222', not a list of port numbers from 1 to 65535"),
    "task without a type": (
        lambda b: _manifest(b, lambda m: m.update(task={"index": 0})),
        "field task.type is missing"),
}


def _stringify_end(b):
    table = next(b.glob("trace/step-*.ops.json"))
    doc = json.loads(table.read_text())
    doc["ops"][0]["end_us"] = str(doc["ops"][0]["end_us"])
    table.write_text(json.dumps(doc))


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line(tmp_path, case):
    b = _copy(tmp_path)
    mutate, fragment = BAD[case]
    mutate(b)
    proc = gradwire("inspect", str(b))
    assert_one_line_error(proc, fragment, "b")


def test_unreadable_pcap_is_reported_and_the_exit_says_so(tmp_path):
    """The report is printed whole (the trace's part of it holds), and the exit is 1 with one
    error line naming the capture: the summary is not complete."""
    b = _copy(tmp_path)
    (b / "capture.pcapng").write_bytes(b"this is not a capture")
    proc = gradwire("inspect", "--format", "json", str(b))
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert any("not a pcap or pcapng file" in p and "capture.pcapng" in p
               for p in report["problems"])
    (line,) = proc.stderr.splitlines()
    assert line.startswith("gradwire inspect: problem: ") and "capture.pcapng" in line


def test_truncated_pcap_is_a_problem(tmp_path):
    b = _copy(tmp_path)
    pcap = b / "capture.pcapng"
    pcap.write_bytes(pcap.read_bytes()[: pcap.stat().st_size // 2 + 3])
    report = summarize(open_bundle(b))
    assert report["capture"]["truncated"]
    assert any("ends mid-packet" in p for p in report["problems"])


def test_step_tables_round_trip():
    bundle = open_bundle(SAMPLE / "worker0")
    for path in bundle.step_files:
        trace = read_step(path)
        assert trace.ops and trace.deps
        assert all(op.step == trace.step for op in trace.ops)


def test_retransmitted_segments_count_once(tmp_path, sample_reports):
    scapy = pytest.importorskip("scapy.all", reason="needs scapy (pip install 'gradwire[capture]')")
    b = _copy(tmp_path)
    packets = scapy.rdpcap(str(b / "capture.pcapng"))
    big = next(i for i, p in enumerate(packets)
               if p.haslayer(scapy.TCP) and len(p[scapy.TCP].payload) > 1000)
    resent = packets[big].copy()
    resent.time = packets[big].time + 0.0001
    scapy.wrpcap(str(b / "capture.pcapng"), [*packets[:big + 1], resent, *packets[big + 1:]])
    report = summarize(open_bundle(b))
    before = sample_reports["worker0"]["capture"]
    assert report["capture"]["tcp_packets"] == before["tcp_packets"] + 1
    assert report["capture"]["payload_bytes"] == before["payload_bytes"]  # counted once
    assert report["capture"]["retransmitted_bytes"] == len(resent[scapy.TCP].payload)


def test_a_node_folder_without_manifest_is_named_not_skipped_silently(tmp_path):
    shutil.copytree(SAMPLE, tmp_path / "b")
    (tmp_path / "b" / "worker0" / "manifest.json").unlink()
    proc = gradwire("inspect", str(tmp_path / "b"))
    assert proc.returncode == 0 and "bundle " in proc.stdout
    assert "worker0: has a trace or capture but no manifest.json; skipped" in proc.stderr


def test_a_capture_without_the_clusters_packets_is_a_problem(tmp_path, realdata):
    """Captured on the wrong ports: the trace moved tensors, the capture holds none of them
    (inspect said 'problems: none')."""
    b = _copy(tmp_path)
    _manifest(b, lambda m: m.update(problems=[]))
    # a real capture of other traffic (gRPC on port 50051), none on the bundle's port 2222
    (b / "capture.pcapng").unlink()
    (b / "capture.pcap").write_bytes((realdata / "vitalybupt_grpc_cpp_chttp2.pcap").read_bytes())
    report = summarize(open_bundle(b))
    assert any("holds no packet of port(s) 2222, though the traced steps moved tensors" in p
               for p in report["problems"]), report["problems"]


def test_no_recorded_steps_says_why(tmp_path):
    b = _copy(tmp_path)
    for f in (b / "trace").glob("step-*"):
        f.unlink()
    session = json.loads((b / "trace" / "session.json").read_text())
    session.update(steps_run=8, steps_recorded=[], record_seconds=[], options={"first_step": 10})
    (b / "trace" / "session.json").write_text(json.dumps(session))
    report = summarize(open_bundle(b))
    assert "no recorded steps: the session ran 8 step(s), and the TraceHook starts at " \
        "first_step 10" in report["problems"]


def test_a_corrupt_or_missing_runmetadata_is_a_problem(tmp_path):
    """Each step's lossless RunMetadata is what opdb ingest and the memory estimate read;
    inspect parsed only the ops tables and said 'problems: none' over a corrupt one."""
    pytest.importorskip("google.protobuf", reason="needs protobuf (pip install "
                        "'gradwire[predict]')")
    b = _copy(tmp_path)
    assert summarize(open_bundle(b))["problems"] == []
    (b / "trace" / "step-00000004.runmeta.pb").write_bytes(b"not a RunMetadata message")
    (b / "trace" / "step-00000005.runmeta.pb").unlink()
    problems = summarize(open_bundle(b))["problems"]
    assert any(p.startswith("step 4: step-00000004.runmeta.pb: cannot read the step's "
                            "RunMetadata") for p in problems), problems
    assert "step 5: step-00000005.runmeta.pb is missing (opdb ingest and the memory estimate " \
        "read it)" in problems
    assert not any("step 3" in p for p in problems)


def test_the_exit_says_the_report_lists_problems(tmp_path):
    """A clean bundle exits 0; one whose report lists problems exits 1 (as a linter), prints
    the report whole and repeats its first problem on one line, with how many more."""
    pytest.importorskip("google.protobuf", reason="needs protobuf (pip install "
                        "'gradwire[predict]')")
    b = _copy(tmp_path)
    assert gradwire("inspect", str(b)).returncode == 0
    (b / "trace" / "step-00000004.runmeta.pb").write_bytes(b"not a RunMetadata message")
    (b / "trace" / "step-00000005.runmeta.pb").unlink()
    proc = gradwire("inspect", str(b), "--format", "json")
    assert proc.returncode == 1, proc.stderr
    problems = json.loads(proc.stdout)["problems"]
    assert len(problems) == 2  # the report, whole
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(
        f"gradwire inspect: problem: {b}: {problems[0]} "), proc.stderr
    assert proc.stderr.endswith("(and 1 more problem(s))\n"), proc.stderr


def test_several_bundles_name_the_first_problem_in_report_order(tmp_path):
    """A folder of two node bundles, one with an unreadable capture and a missing
    RunMetadata: every problem counted once, the first in the report's order, by bundle."""
    pytest.importorskip("google.protobuf", reason="needs protobuf (pip install "
                        "'gradwire[predict]')")
    shutil.copytree(SAMPLE, tmp_path / "nodes")
    worker = tmp_path / "nodes" / "worker0"
    (worker / "capture.pcapng").write_bytes(b"this is not a capture")
    (worker / "trace" / "step-00000005.runmeta.pb").unlink()
    proc = gradwire("inspect", str(tmp_path / "nodes"), "--format", "json")
    assert proc.returncode == 1, proc.stderr
    reports = json.loads(proc.stdout)
    found = [(r["bundle"], p) for r in reports for p in r["problems"]]
    assert len(found) == 2 and all(b == str(worker) for b, _ in found), found
    assert proc.stderr == (f"gradwire inspect: problem: {found[0][0]}: {found[0][1]} "
                           "(and 1 more problem(s))\n")


def test_a_bundle_of_no_task_without_steps_is_a_note(tmp_path):
    """A capture collected without TF_CONFIG (collect --attach on a PS, say) names no task:
    its missing steps are a note, and inspect exits 0."""
    b = tmp_path / "b"
    shutil.copytree(SAMPLE / "ps0", b)
    _manifest(b, lambda m: m.pop("task", None))
    proc = gradwire("inspect", str(b), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["problems"] == [] and any(
        n.startswith("no recorded steps: the bundle names no TensorFlow task")
        for n in report["notes"]), report


def test_a_size_label_that_disagrees_is_a_note(tmp_path):
    """TensorFlow's own size label beside the size from shape and dtype: where they disagree
    the latter is used and nothing is missing, so the report notes it and inspect exits 0."""
    b = _copy(tmp_path)
    table = next(b.glob("trace/step-*.ops.json"))
    doc = json.loads(table.read_text())
    op = next(o for o in doc["ops"] if o.get("bytes_") and o.get("bytes_reported"))
    op["bytes_reported"] = op["bytes_"] * 2 + 1000
    table.write_text(json.dumps(doc))
    proc = gradwire("inspect", str(b), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["problems"] == [], report["problems"]
    assert "1 transfers where TensorFlow's own size label disagrees with the size from shape " \
        "and dtype (the latter is used)" in report["notes"]


def test_partial_files_beside_the_manifest_are_counted(tmp_path):
    """A crash's leftover of the manifest's atomic write (beside it, not in trace/) went
    unreported, and with one in each place inspect said 1."""
    copy = tmp_path / "w"
    shutil.copytree(SAMPLE / "worker0", copy)
    (copy / ".tmp-manifest.json.x1").write_text("{")
    assert "1 partial file(s) from an interrupted write ignored" in summarize(
        open_bundle(copy))["problems"]
    (copy / "trace" / ".tmp-step.json.x2").write_text("{")
    assert "2 partial file(s) from an interrupted write ignored" in summarize(
        open_bundle(copy))["problems"]


@pytest.mark.parametrize("command, done", [("win", "fitted on the transfers before that"),
                                           ("phases", "timed up to there")])
def test_a_capture_cut_short_is_noted_by_every_reader(tmp_path, command, done):
    """frames and streams said a capture ends mid-packet; win and phases read it silently."""
    whole = (SAMPLE / "ps0" / "capture.pcapng").read_bytes()
    cut = tmp_path / "cut.pcapng"
    cut.write_bytes(whole[:len(whole) // 2 + 1])
    proc = gradwire(command, str(cut), "-q", "-o", str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == (f"gradwire {command}: note: {cut} ends mid-packet (the "
                                   f"capture was cut short); {done}")
