"""Gradient accumulation (``--accumulate K``) and XLA auto-clustering (``--xla``) in the lab.

The configuration tests need nothing; the graph tests build a worker's graph as ``lab/node.py``
builds it, against a cluster spec of 1 PS on localhost (no server is started, nothing runs), so
they need TensorFlow but no root."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import graph_ancestors, need_tf

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import bench_accuracy as bench  # noqa: E402
from lab import models, node  # noqa: E402
from lab.cluster import LabConfig, _node_command  # noqa: E402

from gradwire.replay import netns  # noqa: E402
from gradwire.replay.netns import LabError  # noqa: E402

CLUSTER = {"ps": ["localhost:2222"], "worker": ["localhost:2223"]}
PS_DEVICE = "/job:ps/task:0"


def _args(*extra: str) -> Any:
    return node.parse_args(["--role", "worker", "--index", "0", "--cluster", "{}", *extra])


def test_lab_config_refuses_an_accumulation_it_cannot_apply() -> None:
    LabConfig(accumulate=1).validate()
    LabConfig(accumulate=4).validate()
    LabConfig(model="convnet", accumulate=2, partition=2).validate()
    LabConfig(model="resnet50", mode="sync", accumulate=1, xla=True).validate()
    with pytest.raises(LabError, match="bad accumulate 0: must be >= 1"):
        LabConfig(accumulate=0).validate()
    with pytest.raises(LabError, match="bad accumulate -1: must be >= 1"):
        LabConfig(accumulate=-1).validate()
    with pytest.raises(LabError, match="bad accumulate 2 for mode sync: gradient accumulation"):
        LabConfig(mode="sync", accumulate=2).validate()
    with pytest.raises(LabError, match="bad accumulate 3 for mode ring"):
        LabConfig(mode="ring", ps=0, shape="all", accumulate=3).validate()
    with pytest.raises(LabError, match="bad accumulate 2 for model recsys: its embedding"):
        LabConfig(model="recsys", accumulate=2).validate()
    with pytest.raises(LabError, match="bad accumulate 2 for model mobilenet: its tf_keras"):
        LabConfig(model="mobilenet", accumulate=2).validate()


def test_node_refuses_accumulation_it_cannot_apply() -> None:
    node.check_job(_args("--accumulate", "3"))
    node.check_job(_args("--model", "resnet50", "--mode", "sync"))
    with pytest.raises(SystemExit, match="bad accumulate 0: must be >= 1"):
        node.check_job(_args("--accumulate", "0"))
    for mode in ("sync", "ring"):
        with pytest.raises(SystemExit, match=f"bad accumulate 2 for mode {mode}: gradient"):
            node.check_job(_args("--mode", mode, "--accumulate", "2"))
    with pytest.raises(SystemExit, match="model recsys: its embedding gradients are sparse"):
        node.check_job(_args("--model", "recsys", "--accumulate", "2"))
    with pytest.raises(SystemExit, match="model resnet50: its tf_keras layers"):
        node.check_job(_args("--model", "resnet50", "--accumulate", "2"))
    with pytest.raises(SystemExit) as e:  # main refuses before TensorFlow is imported
        node.main(["--role", "worker", "--index", "0", "--cluster", "{}", "--mode", "sync",
                   "--accumulate", "2"])
    assert "\n" not in str(e.value.code)


def test_worker_commands_carry_accumulate_and_xla(tmp_path: Path) -> None:
    cfg = LabConfig(accumulate=3, xla=True)
    cluster = {"ps": ["198.18.0.10:2222"], "worker": ["198.18.0.100:2222"]}
    worker = netns.Node("worker", 0, "gwl000000-w0", "gwl000000n3", "gwl000000b3", "198.18.0.100")
    cmd = _node_command(cfg, worker, cluster, tmp_path / "worker0.json")
    at = cmd.index("--accumulate")
    assert cmd[at : at + 2] == ["--accumulate", "3"] and "--xla" in cmd
    args = node.parse_args(cmd[cmd.index("--role"):])  # the node parses what it is given
    assert args.accumulate == 3 and args.xla and args.role == "worker"
    ps = netns.Node("ps", 0, "gwl000000-p0", "gwl000000n1", "gwl000000b1", "198.18.0.10")
    ps_cmd = _node_command(cfg, ps, cluster, tmp_path / "ps0.json")
    assert "--accumulate" not in ps_cmd and "--xla" not in ps_cmd
    plain = _node_command(LabConfig(), worker, cluster, tmp_path / "worker0.json")
    assert "--xla" not in plain and node.parse_args(plain[plain.index("--role"):]).accumulate == 1


def test_xla_flags_add_the_cpu_flag_once() -> None:
    assert node.xla_flags(None) == node.XLA_CPU_FLAG == "--tf_xla_cpu_global_jit"
    assert node.xla_flags("--tf_xla_cpu_global_jit") == "--tf_xla_cpu_global_jit"
    assert node.xla_flags("--tf_xla_min_cluster_size=2 ") == (
        "--tf_xla_min_cluster_size=2 --tf_xla_cpu_global_jit")


def test_node_main_sets_the_xla_flag_for_a_worker_before_tensorflow(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``main`` puts the CPU flag into TF_XLA_FLAGS before it imports TensorFlow (it then
    fails on the bad cluster spec, before any server starts)."""
    need_tf()
    import json

    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_min_cluster_size=2")
    with pytest.raises(json.JSONDecodeError):
        node.main(["--role", "ps", "--index", "0", "--cluster", "not json", "--xla"])
    assert node.os.environ["TF_XLA_FLAGS"] == "--tf_xla_min_cluster_size=2"  # a PS: untouched
    with pytest.raises(json.JSONDecodeError):
        node.main(["--role", "worker", "--index", "0", "--cluster", "not json", "--xla"])
    assert node.os.environ["TF_XLA_FLAGS"] == (
        "--tf_xla_min_cluster_size=2 --tf_xla_cpu_global_jit")


def test_bench_config_names_and_lab_carry_accumulate_and_xla() -> None:
    plain = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="1gbit", steps=20)
    assert plain.name == "mlp20-b32-1gbit-ps1-fcon"
    assert plain.lab(2).accumulate == 1 and plain.lab(2).xla is False
    acc = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="1gbit", steps=20, accumulate=4)
    assert acc.name == "mlp20-b32-1gbit-ps1-fcon-acc4"
    assert acc.lab(3).accumulate == 4 and acc.lab(3).workers == 3
    xla = bench.BenchConfig(model="convnet", bandwidth="100mbit", steps=20, xla=True)
    assert xla.name == "convnet-b32-100mbit-ps1-fcon-xla" and xla.lab(1).xla is True
    both = bench.BenchConfig(model="mlp", model_mb=20, batch_size=64, bandwidth="1gbit",
                             ps=2, steps=20, partition=2, accumulate=3, xla=True,
                             group="issue23", profile_of=plain.name)
    assert both.name == "mlp20-b64-1gbit-ps2-fcon-part2-acc3-xla-from-b32"
    lab = both.lab(2)
    assert (lab.partition, lab.accumulate, lab.xla) == (2, 3, True)


def _worker_graph(model: str, accumulate: int, model_mb: float = 20.0, partition: int = 1,
                  ) -> tuple[Any, int, Any]:
    """The train op, examples per step and graph of ``lab.node``'s PS train op for worker 0 of
    ``CLUSTER`` (async, greedy placement), built in a graph of its own."""
    need_tf()
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    args = _args("--model", model, "--model-mb", str(model_mb), "--batch-size", "8",
                 "--accumulate", str(accumulate), "--partition", str(partition))
    g = tf.Graph()
    with g.as_default():
        train_op, examples = node.ps_train_op(args, tf, tf.train.ClusterSpec(CLUSTER), [],
                                              is_chief=True)
    return train_op, examples, g


def _counts(model: str, accumulate: int, **kw: Any) -> dict[str, Any]:
    """Per trainable variable, the reads and updates one update runs, and the op counts."""
    need_tf()
    import tensorflow as tf

    train_op, examples, g = _worker_graph(model, accumulate, **kw)
    run = graph_ancestors(train_op)
    with g.as_default():
        variables = tf.compat.v1.trainable_variables()
    reads, applies = {}, {}
    for v in variables:
        users = [op for op in run if v.handle.name in {t.name for t in op.inputs}]
        reads[v.op.name] = [op for op in users if op.type == "ReadVariableOp"]
        applies[v.op.name] = [op for op in users if op.type.startswith("ResourceApply")]
    types = [op.type for op in g.get_operations()]
    return {"examples": examples, "variables": variables, "reads": reads, "applies": applies,
            "matmuls": types.count("MatMul"), "graph": g}


def test_mlp_accumulation_reads_and_applies_once_and_runs_three_forward_passes() -> None:
    one, three = _counts("mlp", 1), _counts("mlp", 3)
    assert one["examples"] == 8 and three["examples"] == 24
    assert len(three["variables"]) == len(one["variables"]) == 8  # built 3 times, made once
    for name, reads in three["reads"].items():
        assert len(reads) == 1, (name, reads)  # one pull per update
        assert reads[0].device == PS_DEVICE
        consumers = [c for out in reads[0].outputs for c in out.consumers()]
        assert [c.type for c in consumers] == ["Identity"], consumers  # then on the worker
        assert consumers[0].device == "/job:worker/task:0"
        assert len(three["applies"][name]) == 1  # one push per update
        assert three["applies"][name][0].device == PS_DEVICE
    assert all(len(r) == 1 for r in one["reads"].values())
    assert one["matmuls"] == 12 and three["matmuls"] == 3 * one["matmuls"]  # 4 forward
    for i in range(3):  # each micro-step its own forward pass
        assert sum(op.type == "MatMul" and op.name.startswith(f"micro{i}/")
                   for op in three["graph"].get_operations()) == 4


def test_micro_steps_run_one_after_another() -> None:
    """Every op of micro-step i + 1 comes after micro-step i's gradient sums (a control
    dependency on ``micro<i>_sum/done``), so no two micro-steps' activations live at once."""
    c = _counts("mlp", 3)
    g = c["graph"]
    for i in (1, 2):
        done = g.get_operation_by_name(f"micro{i - 1}_sum/done")
        forward = [op for op in g.get_operations() if op.name.startswith(f"micro{i}/")]
        assert forward and all(done in graph_ancestors(op) for op in forward)
        grads = [op for op in g.get_operations() if op.name.startswith(f"micro{i - 1}_gradients/")]
        assert grads and all(done not in graph_ancestors(op) for op in grads)


@pytest.mark.parametrize("model", ["convnet", "deepmlp"])
def test_convnet_and_deepmlp_accumulate(model: str) -> None:
    one, two = _counts(model, 1, model_mb=2.0), _counts(model, 2, model_mb=2.0)
    assert two["examples"] == 16 and len(two["variables"]) == len(one["variables"])
    assert all(len(r) == 1 for r in two["reads"].values())
    assert all(len(a) == 1 for a in two["applies"].values())
    for kind in ("MatMul", "Conv2D"):
        n1 = sum(op.type == kind for op in one["graph"].get_operations())
        n2 = sum(op.type == kind for op in two["graph"].get_operations())
        assert n2 == 2 * n1


def test_partitioned_mlp_accumulates_each_part() -> None:
    c = _counts("mlp", 2, partition=2)
    assert any("/part_" in v.op.name for v in c["variables"])
    assert all(len(r) == 1 for r in c["reads"].values())
    assert all(len(a) == 1 for a in c["applies"].values())


def test_worker_session_config_sets_the_jit_level_with_xla() -> None:
    need_tf()
    import tensorflow as tf

    on = node.session_config(tf, "worker", 0, xla=True)
    assert on.graph_options.optimizer_options.global_jit_level == (
        tf.compat.v1.OptimizerOptions.ON_1)
    off = node.session_config(tf, "worker", 0)
    assert off.graph_options.optimizer_options.global_jit_level == (
        tf.compat.v1.OptimizerOptions.DEFAULT)


def test_accumulate_models_are_known() -> None:
    assert set(models.ACCUMULATE_MODELS) <= set(models.MODELS)
    assert "recsys" not in models.ACCUMULATE_MODELS


_XLA_PS_JOB = r"""
import os, socket, sys
os.environ["TF_XLA_FLAGS"] = "--tf_xla_cpu_global_jit"
sys.path.insert(0, sys.argv[1])
import tensorflow as tf, tf_keras
from lab import node
tf1 = tf.compat.v1
tf1.disable_eager_execution()
def port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
cluster = tf1.train.ClusterSpec({"ps": [f"127.0.0.1:{port()}"],
                                 "worker": [f"127.0.0.1:{port()}"]})
ps = tf1.train.Server(cluster, job_name="ps", task_index=0)
config = node.session_config(tf, "worker", 0, xla=True)
worker = tf1.train.Server(cluster, job_name="worker", task_index=0, config=config)
with tf1.device(tf1.train.replica_device_setter(ps_tasks=1, worker_device="/job:worker/task:0",
                                                cluster=cluster)):
    y = tf_keras.layers.Dense(512)(tf.random.uniform([8, 384]))
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(y))
init = tf1.global_variables_initializer()
if sys.argv[2] == "kept-off":
    print("marked", node.keep_xla_off_ps(tf1.get_default_graph()))
with tf1.Session(worker.target, config=config) as s:
    try:
        s.run(init)
        s.run(train)
        print("RAN")
    except tf.errors.OpError as e:
        print("FAILED", str(e).splitlines()[-1])
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["as-is", "kept-off"])
def test_xla_clusters_on_a_ps_fail_unless_kept_off(how: str) -> None:
    """A real PS and worker (two TensorFlow servers on loopback, in a child process, since
    TF_XLA_FLAGS is read once): with XLA's auto-clustering on, a Keras kernel's initializer
    placed on the PS fails to compile ("Multiple CPU devices", as MobileNetV2 did in the lab),
    and runs once ``keep_xla_off_ps`` marks the PS's ops."""
    import subprocess

    need_tf()
    scripts = str(Path(__file__).resolve().parent.parent / "scripts")
    out = subprocess.run([sys.executable, "-c", _XLA_PS_JOB, scripts, how], capture_output=True,
                         text=True, timeout=300).stdout
    if how == "as-is":
        assert "FAILED Multiple CPU devices" in out and "RAN" not in out
    else:
        marked = int(out.split("marked ", 1)[1].split()[0])
        assert marked > 0 and "RAN" in out and "FAILED" not in out
