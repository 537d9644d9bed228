"""A worker's whole step run from its recorded graph (`gradwire opdb step`, collector/
graphstep.py): which tensors are the step's, the errors, and a real run with TensorFlow."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import SAMPLE, assert_one_line_error, gradwire, need_tf

from gradwire.collector.graphstep import _said, job_of, sent_to_ps


def _node(name: str, device: str, *inputs: str) -> SimpleNamespace:
    return SimpleNamespace(name=name, device=device, input=list(inputs))


PS, WORKER = "/job:ps/task:0", "/job:worker/task:0"


def test_the_steps_targets_are_the_worker_tensors_the_traced_steps_ps_ops_took():
    """The PS's update takes the gradient (and its variable's handle, the PS's own); the
    variable's initializer takes a worker-side random tensor too, but did not run in the
    traced step, so it is not the step's; control inputs are not tensors."""
    nodes = [
        _node("w", PS), _node("w/read", PS, "w"),
        _node("init/random", WORKER), _node("w/Assign", PS, "w", "init/random"),
        _node("x", WORKER), _node("y", WORKER, "x", "w/read"),
        _node("grad_w", WORKER, "y:0", "x"),
        _node("apply_w", PS, "w", "grad_w:0", "^y"),
        _node("global_step/add", PS, "^grad_w"),
    ]
    targets, on_ps = sent_to_ps(nodes, ran={"w", "w/read", "y", "grad_w", "apply_w",
                                             "global_step/add"})
    assert targets == ["grad_w"]
    assert on_ps == ["apply_w", "global_step/add", "w", "w/Assign", "w/read"]
    assert sent_to_ps(nodes, ran=set()) == ([], on_ps)


def test_jobs_and_tensorflow_messages_are_read_plainly():
    assert job_of("/job:ps/replica:0/task:1/device:CPU:0") == "ps"
    assert job_of("/device:CPU:0") is None and job_of("") is None
    assert _said("Graph execution error:\n\nCannot assign a device for x\n\t[[x]]") == (
        "Cannot assign a device for x")
    assert _said("") == "(no message)"


def test_a_bundle_recorded_before_the_graph_was_kept_is_refused_in_one_line(tmp_path):
    bundle = tmp_path / "worker0"
    shutil.copytree(SAMPLE / "worker0", bundle)
    assert not (bundle / "trace" / "graph.meta.pb").exists()
    proc = gradwire("opdb", "step", str(bundle), "--db", str(tmp_path / "ops.sqlite"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "no recorded graph" in proc.stderr and "record the profile again" in proc.stderr
    assert str(bundle) in proc.stderr


_MAKE_GRAPH = r"""
import sys
from pathlib import Path
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2
tf1 = tf.compat.v1
tf1.disable_eager_execution()
with tf1.device("/job:worker/task:0"):
    x = tf1.random.normal([64, 256])
with tf1.device("/job:ps/task:0"):
    w = tf1.get_variable("w", [256, 256], use_resource=True)
with tf1.device("/job:worker/task:0"):
    loss = tf1.reduce_sum(tf1.nn.relu(tf1.matmul(x, w)))
    grad, = tf1.gradients(loss, [w])
with tf1.device("/job:ps/task:0"):
    step = tf1.train.GradientDescentOptimizer(0.1).apply_gradients([(grad, w)])
out = Path(sys.argv[1])
(out / "graph.meta.pb").write_bytes(tf1.train.export_meta_graph().SerializeToString())
meta = config_pb2.RunMetadata()  # the traced step's partition: what the update needs
todo, ran = [step], {}
while todo:
    op = todo.pop()
    if op.name not in ran:
        ran[op.name] = op
        todo += [t.op for t in op.inputs] + list(op.control_inputs)
ps = meta.partition_graphs.add()
for op in ran.values():
    ps.node.add(name=op.name, op=op.type)
(out / "step.runmeta.pb").write_bytes(meta.SerializeToString())
"""


def test_a_step_that_does_not_run_leaves_no_database_it_made(tmp_path):
    """An empty recorded graph is refused before TensorFlow starts; a damaged one fails in the
    child, and the database (and its folder) made for the row go again."""
    bundle = tmp_path / "worker0"
    shutil.copytree(SAMPLE / "worker0", bundle)
    graph = bundle / "trace" / "graph.meta.pb"
    graph.write_bytes(b"")
    db = tmp_path / "new" / "ops.sqlite"
    proc = gradwire("opdb", "step", str(bundle), "--db", str(db))
    assert_one_line_error(proc, "graph.meta.pb: the recorded graph is an empty file")
    need_tf()
    graph.write_bytes(b"\x0a\xff\xff not a MetaGraphDef")
    proc = gradwire("opdb", "step", str(bundle), "--db", str(db), timeout=300)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "the step did not run" in proc.stderr
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("xla", [False, True])
def test_a_graph_with_a_ps_runs_its_worker_step_here(tmp_path, xla):
    """A real graph placed over a PS and a worker (no servers: the graph alone), run by the
    child as `opdb step` runs it: its one target is the gradient, and the runs take time."""
    need_tf()
    subprocess.run([sys.executable, "-c", _MAKE_GRAPH, str(tmp_path)], check=True,
                   capture_output=True, timeout=300)
    argv = [sys.executable, "-m", "gradwire.collector.graphstep", str(tmp_path / "graph.meta.pb"),
            str(tmp_path / "step.runmeta.pb"), "--threads", "1", "--runs", "3", "--warmup", "1",
            *(["--xla"] if xla else [])]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["targets"] == 1 and out["xla"] is xla and out["threads"] == 1
    assert len(out["times_us"]) == 3 and all(t > 0 for t in out["times_us"])
    # one thread: never two cores' worth; how much of one it gets depends on what else runs
    assert 0 < out["cores_busy"] < 1.5


def test_a_graph_without_a_ps_says_what_the_command_times(tmp_path):
    need_tf()
    script = _MAKE_GRAPH.replace('"/job:ps/task:0"', '"/job:worker/task:0"')
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True,
                   capture_output=True, timeout=300)
    proc = subprocess.run([sys.executable, "-m", "gradwire.collector.graphstep",
                           str(tmp_path / "graph.meta.pb"), str(tmp_path / "step.runmeta.pb")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "times a parameter-server job's worker step" in json.loads(
        proc.stdout.strip().splitlines()[-1])["error"]


def test_graph_digest_is_of_the_files_bytes(tmp_path: Path):
    from gradwire.collector.graphstep import graph_digest

    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"graph one")
    b.write_bytes(b"graph two")
    assert graph_digest(a) != graph_digest(b) and len(graph_digest(a)) == 16
    assert graph_digest(a) == graph_digest(a)
