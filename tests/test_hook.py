"""TraceHook: what it records, the session kinds it works with, and SIGKILL mid-recording."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SAMPLE, need_tf

from gradwire.bundle import open_bundle, read_step
from gradwire.collector.stepstats import label_size_bytes, split_input, tensor_bytes
from gradwire.errors import CollectError

HERE = Path(__file__).parent


def test_pure_helpers():
    assert tensor_bytes(1, [784, 1024]) == 784 * 1024 * 4  # DT_FLOAT
    assert tensor_bytes(101, [3]) == 12  # a reference dtype counts as its base
    assert tensor_bytes(7, [3]) is None  # strings have no fixed size
    assert tensor_bytes(1, [-1, 3]) is None
    assert label_size_bytes("[3.0MB] [6.6Gb/s] edge_7_x from a to b") == 3 * 2**20
    assert label_size_bytes("[0B] edge_7_x from a to b") == 0
    assert label_size_bytes("x = MatMul(a, b)") is None
    assert split_input("^a/b") == ("a/b", -1, True)
    assert split_input("a/b:2") == ("a/b", 2, False)
    assert split_input("a/b") == ("a/b", 0, False)


def test_reparsing_stored_runmetadata_gives_the_stored_table():
    need_tf()
    from tensorflow.core.protobuf import config_pb2

    from gradwire.collector.stepstats import parse_run_metadata

    bundle = open_bundle(SAMPLE / "worker0")
    for table in bundle.step_files:
        stored = read_step(table)
        md = config_pb2.RunMetadata()
        md.ParseFromString(table.with_name(table.name.replace("ops.json", "runmeta.pb"))
                           .read_bytes())
        fresh = parse_run_metadata(md, stored.step)
        # static graph shapes are not available offline; step stats shapes give the same sizes
        assert fresh == stored


def test_needs_an_output_folder(monkeypatch):
    need_tf()
    from gradwire import TraceHook

    monkeypatch.delenv("GRADWIRE_BUNDLE", raising=False)
    with pytest.raises(CollectError, match="every=0 must be an integer >= 1"):
        TraceHook("x", every=0)
    with pytest.raises(CollectError, match="first_step='3' must be an integer >= 0"):
        TraceHook("x", first_step="3")
    import numpy as np

    assert TraceHook("x", first_step=np.int64(2)).first_step == 2  # any integer type
    with pytest.raises(CollectError, match="batch_size=0 must be an integer >= 1 or None"):
        TraceHook("x", batch_size=0)
    assert TraceHook("x", batch_size=np.int64(32)).batch_size == 32


def test_refuses_a_folder_it_would_spoil(tmp_path):
    need_tf()
    import shutil

    from gradwire import TraceHook

    (tmp_path / "afile").write_text("")
    with pytest.raises(CollectError, match="out_dir is a file"):
        TraceHook(tmp_path / "afile")
    shutil.copytree(SAMPLE / "worker0", tmp_path / "old")  # 3 recorded steps
    with pytest.raises(CollectError, match="already holds 3 recorded step"):
        TraceHook(tmp_path / "old")
    assert len(list((tmp_path / "old" / "trace").glob("step-*"))) == 6  # untouched
    # steps this very process recorded (a new TraceHook per train() call): record nothing
    session = tmp_path / "old" / "trace" / "session.json"
    session.write_text(json.dumps(json.loads(session.read_text()) | {"pid": os.getpid()}))
    hook = TraceHook(tmp_path / "old")
    hook.begin()
    assert hook.before_run(None) is None
    assert len(list((tmp_path / "old" / "trace").glob("step-*"))) == 6


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["monitored", "singular"])
def test_hook_alone_makes_a_complete_bundle(tmp_path, kind):
    need_tf()
    out = tmp_path / "b"
    proc = subprocess.run([sys.executable, str(HERE / "hook_loop.py"), str(out), kind],
                          env=dict(os.environ, HOOK_LOOP_STEPS="4"), capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    bundle = open_bundle(out)
    assert bundle.manifest["status"] == "complete" and bundle.manifest["created_by"] == "hook"
    assert bundle.steps == [1, 2, 3]  # first_step=1, every step after it
    assert bundle.session["steps_run"] == 4 and bundle.session["tf_version"]
    # the session's ConfigProto (hook_loop.py: one intra-op thread) is part of the machine
    # the op cost database costs the trace's ops on
    assert bundle.session["machine"]["threads"] == 1
    times = bundle.session["step_seconds"]  # every step's run, traced or not
    assert len(times) == 4 and all(t > 0 for t in times)
    starts = bundle.session["step_starts_unix_s"]  # when each began: captured or not
    assert len(starts) == 4 and starts == sorted(starts)
    # each start at least the step before it later: the starts are the wall clock (time.time),
    # the step times perf_counter, which NTP's slewing of the wall clock (up to 500 ppm) and
    # the two clocks' readings 0.1 ms apart can set against each other
    assert all(b - a >= t * (1 - 1e-3) - 1e-4
               for a, b, t in zip(starts, starts[1:], times, strict=False))
    for trace in bundle.load_steps():
        names = {op.name for op in trace.ops}
        assert any(op.op_type in ("MatMul", "_MklMatMul") for op in trace.ops), names
        assert all(op.end_us >= op.start_us > 1e15 for op in trace.ops)  # epoch microseconds
        # the partition graph's variables, with their sizes (replay/placement.py places them)
        assert trace.variables and all(v.bytes_ for v in trace.variables), trace.variables


@pytest.mark.slow
@pytest.mark.parametrize("out, steps, warning", [
    ("", 3, "no output folder"),  # the two lines left in a script run without collect
    ("b", 1, "recorded no step: the session ran 1 step(s) and first_step is 1"),
])
def test_a_hook_with_nothing_to_record_warns_and_training_goes_on(tmp_path, out, steps,
                                                                  warning):
    need_tf()
    env = {k: v for k, v in os.environ.items() if k != "GRADWIRE_BUNDLE"}
    proc = subprocess.run([sys.executable, str(HERE / "hook_loop.py"),
                           str(tmp_path / out) if out else ""],
                          env=env | {"HOOK_LOOP_STEPS": str(steps)}, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0 and f"done {steps}" in proc.stdout, proc.stderr[-2000:]
    assert warning in proc.stderr


@pytest.mark.slow
def test_sigkill_mid_recording_leaves_completed_steps_readable(tmp_path):
    need_tf()
    out = tmp_path / "b"
    proc = subprocess.Popen([sys.executable, str(HERE / "hook_loop.py"), str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(list((out / "trace").glob("step-*.ops.json"))) < 6:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    bundle = open_bundle(out)  # the manifest, written atomically, is intact
    assert bundle.manifest["status"] == "collecting"
    assert len(bundle.steps) >= 6
    from tensorflow.core.protobuf import config_pb2

    for table in bundle.step_files:
        trace = read_step(table)
        assert trace.ops
        raw = table.with_name(table.name.replace("ops.json", "runmeta.pb")).read_bytes()
        md = config_pb2.RunMetadata()
        md.ParseFromString(raw)
        assert len(md.step_stats.dev_stats) >= 1
    # session.json is kept current: it lists every complete step but the one being stored
    recorded = bundle.session["steps_recorded"]
    assert bundle.session["status"] == "running" and recorded == bundle.steps[:len(recorded)]
    assert len(bundle.steps) - len(recorded) <= 1
    # whatever the kill interrupted is a temp file or a lone .runmeta.pb, never a torn table
    for p in (out / "trace").iterdir():
        if p.name.endswith(".ops.json") and not p.name.startswith(".tmp-"):
            json.loads(p.read_text())


def test_the_batch_the_hook_records_is_the_profiles(tmp_path):
    """A user's own bundles hold no lab_result.json: predict asked for --batch-size every
    time; TraceHook(batch_size=N) records it in the session (options.batch_size)."""
    import shutil

    from conftest import assert_one_line_error, gradwire

    copy = tmp_path / "b"
    shutil.copytree(SAMPLE, copy)
    (copy / "lab_result.json").unlink()
    args = ("predict", str(copy), "--workers", "1", "--model", "sim", "--format", "json")
    assert_one_line_error(gradwire(*args), "the batch size is unknown",
                          "TraceHook(batch_size=N)")
    given = json.loads(gradwire(*args, "--batch-size", "24").stdout)["rows"][0]
    session = copy / "worker0" / "trace" / "session.json"
    doc = json.loads(session.read_text())
    doc["options"]["batch_size"] = 24
    session.write_text(json.dumps(doc))
    proc = gradwire(*args)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rows"][0]["examples_per_s"] == given["examples_per_s"]
