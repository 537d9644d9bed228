"""A real 1-PS/1-worker TensorFlow cluster on loopback, the TraceHook and `gradwire collect`
on both tasks: the bundle must hold what the predictor needs."""

from __future__ import annotations

import json
import subprocess
from collections import Counter

import pytest
from conftest import need_root, need_tf, need_tshark
from loopback import run_cluster

from gradwire.bundle import open_bundle
from gradwire.collector.summary import summarize

WIDTH = 512
PARAM_BYTES = Counter({784 * WIDTH * 4: 1, WIDTH * 4: 1, WIDTH * 10 * 4: 1, 10 * 4: 1})

pytestmark = [pytest.mark.slow, pytest.mark.root]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    need_root()
    need_tf()
    out = tmp_path_factory.mktemp("cluster")
    procs = run_cluster(out, steps=8, width=WIDTH, first_step=2, record=3)
    assert procs["worker"].returncode == 0, procs["worker"].stderr[-3000:]
    return out


def _transfers(trace, src_job, dst_job):
    return [op for op in trace.ops if op.is_transfer and f"/job:{src_job}/" in op.src_device
            and f"/job:{dst_job}/" in op.dst_device]


def test_recv_tensor_on_worker_and_ps_with_exact_sizes(cluster):
    worker = open_bundle(cluster / "worker0")
    assert worker.steps == [2, 3, 4]
    for trace in worker.load_steps():
        pulls = _transfers(trace, "ps", "worker")
        pushes = _transfers(trace, "worker", "ps")
        assert all(op.name == "RecvTensor" and "/job:worker/" in op.device for op in pulls)
        assert all(op.name == "RecvTensor" and "/job:ps/" in op.device for op in pushes)
        # parameter pulls: exactly the four variables; gradient pushes: the same four shapes
        assert Counter(op.bytes_ for op in pulls if op.bytes_ > 8) == PARAM_BYTES
        assert Counter(op.bytes_ for op in pushes if op.bytes_ > 8) == PARAM_BYTES
        assert all(op.graph_node and op.producer for op in pulls + pushes)
        assert any(d.tensor for d in trace.deps)  # _Send -> _Recv edges across devices


def test_capture_holds_recvtensor_rpcs(cluster):
    need_tshark()
    for node in ("worker0", "ps0"):
        bundle = open_bundle(cluster / node)
        decode = [a for p in bundle.ports for a in ("-d", f"tcp.port=={p},http2")]
        paths = subprocess.run(
            ["tshark", "-o", "tcp.reassemble_out_of_order:TRUE", "-r",
             str(bundle.capture_file), *decode, "-Y", "http2.headers.path",
             "-T", "fields", "-e", "http2.headers.path"],
            capture_output=True, text=True, check=True).stdout.split()
        rpcs = Counter(p for line in paths for p in line.split(","))
        # 3 recorded + 5 other steps, 4 params pulled + 4 grads pushed (+ small tensors) each
        assert rpcs["/tensorflow.WorkerService/RecvTensor"] >= 8 * 8, rpcs


def test_inspect_agrees_with_the_capture(cluster):
    report = summarize(open_bundle(cluster / "worker0"))
    assert report["problems"] == [] and report["nodes"] == ["ps:0", "worker:0"]
    for step in report["steps"]:
        for direction, tensor_bytes in step["trace_bytes"].items():
            assert tensor_bytes <= step["capture_bytes"][direction] <= 1.02 * tensor_bytes + 4096
    manifest = open_bundle(cluster / "worker0").manifest
    assert manifest["tf_version"].startswith("2.")
    assert manifest["cluster_spec"]["ps"] and manifest["task"] == {"type": "worker", "index": 0}
    roles = {p["role"] for p in manifest["processes"]}
    assert {"collect", "capture", "command", "training"} <= roles
    ps = open_bundle(cluster / "ps0").manifest
    assert ps["status"] == "stopped" and ps["capture"]["drops_kernel"] == 0


def test_a_loopback_cluster_aligns_and_predicts(cluster, tmp_path):
    """Both tasks on 127.0.0.1: the captures on lo hold both ends of every call, and the tasks
    belong to the one host's clock (they used to be left unmatched: nothing to predict from)."""
    from gradwire.aligner.align import align
    from gradwire.replay.profile import load_profile

    al = align([cluster / "ps0", cluster / "worker0"])
    traced = [t for t in al.transfers if t.recv is not None]
    assert traced and all(t.at_receiver is not None and t.at_sender is not None for t in traced)
    assert {d["tasks"] and tuple(d["tasks"]) for d in al.summary()["hosts"]} == {
        ("ps:0", "worker:0")}
    prof = load_profile([cluster / "ps0", cluster / "worker0"])  # the hook's batch_size
    assert prof.batch_size == 32
    assert len(prof.templates) == 3 and prof.link_rate_bps > 0 and prof.loopback
    # loopback's "link rate" is a memory copy: predict says so unless given --bandwidth
    from conftest import gradwire

    proc = gradwire("predict", str(cluster / "ps0"), str(cluster / "worker0"), "--batch-size",
                    "32", "--workers", "1", "--quiet")
    assert proc.returncode == 0 and "the profile ran on loopback" in proc.stderr, proc.stderr
    proc = gradwire("predict", str(cluster / "ps0"), str(cluster / "worker0"), "--batch-size",
                    "32", "--workers", "1", "--bandwidth", "1Gbit", "--quiet")
    assert proc.returncode == 0 and "loopback" not in proc.stderr, proc.stderr


def test_a_hook_only_worker_on_loopback_is_timed_from_the_ps_capture(cluster, tmp_path):
    """On loopback the PS's capture on lo holds both ends of every call, so a worker bundle
    without a capture of its own (the TraceHook alone) still makes a profile."""
    import json
    import shutil

    from gradwire.replay.profile import load_profile

    shutil.copytree(cluster / "ps0", tmp_path / "ps0")
    shutil.copytree(cluster / "worker0", tmp_path / "worker0", ignore=shutil.ignore_patterns(
        "capture.*"))
    manifest = tmp_path / "worker0" / "manifest.json"
    manifest.write_text(json.dumps(json.loads(manifest.read_text()) | {"capture": None}))
    prof = load_profile([tmp_path], batch_size=32)
    assert len(prof.templates) == 3


def test_the_worker_step_runs_whole_from_the_graph_the_hook_kept(cluster, tmp_path):
    """The TraceHook keeps the session's graph; `opdb step --xla` runs the worker's compute
    from it on this machine (one row per graph, machine and device), and `predict --op-fusion`
    with that database runs the job's one XLA cluster for the time it measured."""
    from conftest import gradwire

    from gradwire.opdb import OpDatabase

    assert (cluster / "worker0" / "trace" / "graph.meta.pb").is_file()
    db = tmp_path / "ops.sqlite"
    for _ in range(2):  # timed again: the row is replaced, not added to
        proc = gradwire("opdb", "step", str(cluster), "--xla", "--runs", "3", "--warmup", "1",
                        "--db", str(db))
        assert proc.returncode == 0 and "the step's compute:" in proc.stderr, proc.stderr
    with OpDatabase(db) as d:
        rows = d.conn.execute("SELECT device, reps, median_us, label FROM steps").fetchall()
    assert len(rows) == 1 and rows[0][:2] == ("XLA_CPU", 3) and rows[0][2] > 0
    assert rows[0][3].endswith("worker0")
    proc = gradwire("predict", str(cluster / "ps0"), str(cluster / "worker0"), "--batch-size",
                    "32", "--workers", "1", "--bandwidth", "1Gbit", "--op-fusion", "--opdb",
                    str(db), "-v")
    assert proc.returncode == 0, proc.stderr
    assert f"the cluster takes {rows[0][2] / 1e3:.2f} ms" in proc.stderr
    # without --xla: each rerun micro-step of gradient accumulation, its adds still at the
    # traced element-wise ops' memory rate (the database holds no op rows to cost them)
    proc = gradwire("opdb", "step", str(cluster), "--runs", "3", "--warmup", "1", "--db",
                    str(db))
    assert proc.returncode == 0, proc.stderr
    with OpDatabase(db) as d:
        plain = d.conn.execute("SELECT median_us FROM steps WHERE device = 'CPU'").fetchone()[0]
    proc = gradwire("predict", str(cluster / "ps0"), str(cluster / "worker0"), "--batch-size",
                    "32", "--workers", "1", "--bandwidth", "1Gbit", "--accumulate", "2",
                    "--opdb", str(db), "-v")
    assert proc.returncode == 0, proc.stderr
    assert (f"each rerun micro-step {plain / 1e3:.2f} ms of compute (the job's step run whole"
            in proc.stderr)
    assert "ms per MB of gradients" in proc.stderr
    # tensor fusion: the compute its buckets move away from the pushes at that step's rate
    proc = gradwire("predict", str(cluster / "ps0"), str(cluster / "worker0"), "--batch-size",
                    "32", "--workers", "1", "--bandwidth", "1Gbit", "--fuse-tensors", "64MB",
                    "--opdb", str(db), "-v")
    assert proc.returncode == 0, proc.stderr
    assert f"so that the step's compute comes to {plain / 1e3:.2f} ms" in proc.stderr
    # a ring from this PS profile computes with its links idle: --executor-gaps alone times
    # its compute so (the hop's rows made by hand: timing them is tests/test_opdb.py's)
    from gradwire.collector.ringhop import hop_timing

    with OpDatabase(db) as d:
        (machine,) = d.machines()
        d.put([hop_timing(n, [1000.0 + 0.002 * 4 * n] * 3, machine) for n in (1000, 100_000)])
    proc = gradwire("predict", str(cluster / "ps0"), str(cluster / "worker0"), "--batch-size",
                    "32", "--workers", "2", "--bandwidth", "1Gbit", "--mechanism",
                    "ring-allreduce", "--model", "sim", "--opdb", str(db), "--format", "json",
                    "--executor-gaps", "alone", "-v")
    assert proc.returncode == 0, proc.stderr
    assert f"took {plain / 1e3:.2f} ms of compute; every compute chunk scaled" in proc.stderr
    gaps = json.loads(proc.stdout)["profile"]["executor_gaps"]
    assert gaps["chunks"] == "alone" and gaps["compute_alone_ms"] == pytest.approx(plain / 1e3)
    shown = gradwire("opdb", "show", "--db", str(db), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    assert sorted(st["device"] for st in json.loads(shown.stdout)["steps"]) == ["CPU", "XLA_CPU"]
