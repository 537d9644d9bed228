"""Mixed precision in the lab (``--mixed-precision``): float32 variables on the PSes, each read
once per step and cast to bfloat16 on its PS, the worker's forward and backward pass in
bfloat16, the bfloat16 gradients cast to float32 on the PS before the update.

The configuration tests need nothing; the graph tests build a worker's graph as ``lab/node.py``
builds it, against a cluster spec of PSes on localhost (no server is started, nothing runs), so
they need TensorFlow but no root. One test runs two local steps in a session of its own (no
cluster); the slow one starts a PS and a worker server in this process (localhost gRPC) and
reads the tensors the worker receives from the PS off the step's partition graphs."""

from __future__ import annotations

import math
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
CLUSTER2 = {"ps": ["localhost:2222", "localhost:2223"], "worker": ["localhost:2224"]}
PS_DEVICE = "/job:ps/task:0"
WORKER_DEVICE = "/job:worker/task:0"


def _args(*extra: str) -> Any:
    return node.parse_args(["--role", "worker", "--index", "0", "--cluster", "{}", *extra])


# -- refusals, command lines, names -----------------------------------------------------------


def test_lab_config_refuses_mixed_precision_it_cannot_apply() -> None:
    LabConfig(mixed_precision=True).validate()
    LabConfig(model="deepmlp", mixed_precision=True, partition=2).validate()
    LabConfig(model="resnet50", mode="sync").validate()  # off: anything goes
    with pytest.raises(LabError, match="bad mixed precision for mode sync: bfloat16"):
        LabConfig(mode="sync", mixed_precision=True).validate()
    with pytest.raises(LabError, match="bad mixed precision for mode ring"):
        LabConfig(mode="ring", ps=0, shape="all", mixed_precision=True).validate()
    for model in ("convnet", "recsys", "resnet50", "mobilenet"):
        with pytest.raises(LabError, match=f"bad mixed precision for model {model}: only"):
            LabConfig(model=model, mixed_precision=True).validate()
    with pytest.raises(LabError, match="bad mixed precision with accumulate 2"):
        LabConfig(mixed_precision=True, accumulate=2).validate()


def test_node_refuses_mixed_precision_it_cannot_apply() -> None:
    node.check_job(_args("--mixed-precision"))
    node.check_job(_args("--model", "resnet50", "--mode", "sync"))
    node.check_job(_args("--model", "deepmlp", "--mixed-precision", "--partition", "2"))
    for mode in ("sync", "ring"):
        with pytest.raises(SystemExit, match=f"bad mixed precision for mode {mode}"):
            node.check_job(_args("--mode", mode, "--mixed-precision"))
    with pytest.raises(SystemExit, match="bad mixed precision for model convnet"):
        node.check_job(_args("--model", "convnet", "--mixed-precision"))
    with pytest.raises(SystemExit, match="bad mixed precision with accumulate 3"):
        node.check_job(_args("--mixed-precision", "--accumulate", "3"))
    with pytest.raises(SystemExit) as e:  # main refuses before TensorFlow is imported
        node.main(["--role", "worker", "--index", "0", "--cluster", "{}", "--mode", "sync",
                   "--mixed-precision"])
    assert str(e.value.code).startswith("lab.node: bad mixed precision")
    assert "\n" not in str(e.value.code)


def test_refusals_are_one_line() -> None:
    cases = [("sync", "mlp", 1), ("ring", "mlp", 1), ("async", "recsys", 1),
             ("async", "vgg16", 1), ("async", "mlp", 4)]
    for mode, model, k in cases:
        why = models.precision_refusal(True, mode, model, k)
        assert why and "\n" not in why
        assert models.precision_refusal(False, mode, model, k) is None
    assert models.precision_refusal(True, "async", "deepmlp") is None
    assert set(models.PRECISION_MODELS) <= set(models.ACCUMULATE_MODELS) <= set(models.MODELS)


def test_worker_commands_carry_mixed_precision(tmp_path: Path) -> None:
    cfg = LabConfig(mixed_precision=True)
    cluster = {"ps": ["198.18.0.10:2222"], "worker": ["198.18.0.100:2222"]}
    worker = netns.Node("worker", 0, "gwl000000-w0", "gwl000000n3", "gwl000000b3", "198.18.0.100")
    cmd = _node_command(cfg, worker, cluster, tmp_path / "worker0.json")
    assert cmd.count("--mixed-precision") == 1
    args = node.parse_args(cmd[cmd.index("--role"):])  # the node parses what it is given
    assert args.mixed_precision and args.role == "worker"
    ps = netns.Node("ps", 0, "gwl000000-p0", "gwl000000n1", "gwl000000b1", "198.18.0.10")
    assert "--mixed-precision" not in _node_command(cfg, ps, cluster, tmp_path / "ps0.json")
    plain = _node_command(LabConfig(), worker, cluster, tmp_path / "worker0.json")
    assert "--mixed-precision" not in plain
    assert node.parse_args(plain[plain.index("--role"):]).mixed_precision is False


def test_lab_cli_parses_mixed_precision() -> None:
    from lab import cli

    assert cli.build_parser().parse_args(["--mixed-precision"]).mixed_precision is True
    assert cli.build_parser().parse_args([]).mixed_precision is False


def test_bench_config_name_and_lab_carry_mixed_precision() -> None:
    plain = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="1gbit", steps=20)
    assert plain.name == "mlp20-b32-1gbit-ps1-fcon" and plain.lab(2).mixed_precision is False
    half = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="1gbit", steps=20,
                             mixed_precision=True)
    assert half.name == "mlp20-b32-1gbit-ps1-fcon-bf16"
    assert half.lab(3).mixed_precision is True and half.lab(3).workers == 3
    half.lab(3).validate()
    both = bench.BenchConfig(model="deepmlp", model_mb=10, batch_size=64, bandwidth="1gbit",
                             ps=2, steps=20, partition=2, xla=True, mixed_precision=True,
                             group="issue23", profile_of=plain.name)
    assert both.name == "deepmlp10-b64-1gbit-ps2-fcon-part2-xla-bf16-from-b32"
    assert {c.model for c in bench.CONFIGS if c.mixed_precision} <= set(models.PRECISION_MODELS)


def test_predict_adds_mixed_precision_and_the_opdb(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``predict`` runs gradwire predict with ``--mixed-precision --opdb OPDB`` for a
    mixed-precision configuration (the command is caught before it runs)."""
    import json

    cfg = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="1gbit", steps=20,
                            mixed_precision=True)
    profile = tmp_path / cfg.name / "profile"
    profile.mkdir(parents=True)
    (profile / bench.LAB_RESULT).write_text("{}")
    (tmp_path / cfg.name / "config.json").write_text(json.dumps({"batch_size": 32}))
    seen: list[list[str]] = []

    class _Caught(Exception):
        pass

    def fake_predict(cmd: list[str], name: str) -> Any:
        seen.append([str(c) for c in cmd])
        raise _Caught

    monkeypatch.setattr(bench, "_predict_json", fake_predict)
    with pytest.raises(_Caught):
        bench.predict([cfg], tmp_path)
    cmd = seen[0]
    at = cmd.index("--mixed-precision")
    assert cmd[at + 1 : at + 3] == ["--opdb", str(bench.OPDB)]
    assert "--op-fusion" not in cmd and "--accumulate" not in cmd


# -- the worker's graph -----------------------------------------------------------------------


def _worker_graph(model: str = "mlp", model_mb: float = 20.0, partition: int = 1,
                  mixed_precision: bool = True) -> tuple[Any, int, Any]:
    """The train op, examples per step and graph of ``lab.node``'s PS train op for worker 0
    (async, greedy placement; ``CLUSTER``, or ``CLUSTER2`` when partitioned), built in a graph
    of its own."""
    need_tf()
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    args = _args("--model", model, "--model-mb", str(model_mb), "--batch-size", "8",
                 "--partition", str(partition),
                 *(["--mixed-precision"] if mixed_precision else []))
    g = tf.Graph()
    with g.as_default():
        train_op, examples = node.ps_train_op(
            args, tf, tf.train.ClusterSpec(CLUSTER2 if partition > 1 else CLUSTER), [],
            is_chief=True)
    return train_op, examples, g


def _casts(ops: Any, src: str, dst: str) -> list[Any]:
    return [op for op in ops if op.type == "Cast" and op.get_attr("SrcT").name == src
            and op.get_attr("DstT").name == dst]


def _check_precision_graph(train_op: Any, g: Any) -> dict[str, Any]:
    """The checks every mixed-precision PS graph passes; returns what they counted."""
    import tensorflow as tf

    run = graph_ancestors(train_op)
    with g.as_default():
        variables = tf.compat.v1.trainable_variables()
    assert variables and all(v.dtype.base_dtype == tf.float32 for v in variables)  # master
    assert all(v.device.startswith("/job:ps/") for v in variables)
    for v in variables:
        users = [op for op in run if v.handle.name in {t.name for t in op.inputs}]
        reads = [op for op in users if op.type == "ReadVariableOp"]
        assert len(reads) == 1, (v.op.name, reads)  # one pull per step
        assert reads[0].device == v.device
        consumers = [c for out in reads[0].outputs for c in out.consumers()]
        assert [c.type for c in consumers] == ["Cast"], consumers  # cast on the PS
        assert consumers[0].device == v.device
        assert consumers[0].get_attr("DstT") == tf.bfloat16
        applies = [op for op in users if op.type == "ResourceApplyGradientDescent"]
        assert len(applies) == 1 and applies[0].device == v.device
        grad = applies[0].inputs[2].op  # (var, alpha, delta)
        assert grad.type == "Cast" and grad.device == v.device  # bfloat16 -> float32 on the PS
        assert grad.get_attr("SrcT") == tf.bfloat16 and grad.get_attr("DstT") == tf.float32
        assert grad.inputs[0].op.device.startswith(WORKER_DEVICE)  # the gradient: the worker's
    down = [op for op in _casts(run, "float32", "bfloat16") if op.device.startswith("/job:ps")]
    up = [op for op in _casts(run, "bfloat16", "float32") if op.device.startswith("/job:ps")]
    assert len(down) == len(up) == len(variables)
    applies = [op for op in run if op.type == "ResourceApplyGradientDescent"]
    assert len(applies) == len(variables)
    matmuls = [op for op in run if op.type == "MatMul"]
    assert matmuls and all(op.get_attr("T") == tf.bfloat16 for op in matmuls)
    assert all(op.device.startswith(WORKER_DEVICE) for op in matmuls)
    relus = [op for op in run if op.type in ("Relu", "ReluGrad")]
    assert relus and all(op.get_attr("T") == tf.bfloat16 for op in relus)
    return {"variables": variables, "matmuls": matmuls, "run": run}


def test_mlp_reads_and_casts_each_variable_on_its_ps_and_computes_in_bfloat16() -> None:
    train_op, examples, g = _worker_graph("mlp", 20.0)
    assert examples == 8
    c = _check_precision_graph(train_op, g)
    # 4 forward, 7 backward (no gradient for the inputs)
    assert len(c["variables"]) == 8 and len(c["matmuls"]) == 11
    # the worker casts the inputs (and the logits' gradient) to bfloat16, the logits to float32
    on_worker = [op for op in c["run"] if op.type == "Cast" and op.device.startswith(
        WORKER_DEVICE)]
    assert len(_casts(on_worker, "float32", "bfloat16")) == 2
    assert len(_casts(on_worker, "bfloat16", "float32")) == 1


def test_deepmlp_mixed_precision() -> None:
    train_op, _, g = _worker_graph("deepmlp", 2.0)
    c = _check_precision_graph(train_op, g)
    assert len(c["variables"]) == 2 * (models.deepmlp_layers(2.0) + 1)


def test_partitioned_mlp_reads_and_casts_each_part_on_its_own_ps() -> None:
    train_op, _, g = _worker_graph("mlp", 20.0, partition=2)
    c = _check_precision_graph(train_op, g)
    assert any("/part_" in v.op.name for v in c["variables"])
    assert {v.device for v in c["variables"]} == {"/job:ps/task:0", "/job:ps/task:1"}
    concats = [op for op in c["run"] if op.type == "ConcatV2" and "precision_concat" in op.name]
    assert len(concats) == 3  # the three big kernels, put together on the worker in bfloat16
    import tensorflow as tf

    assert all(op.get_attr("T") == tf.bfloat16 and op.device.startswith(WORKER_DEVICE)
               for op in concats)


def test_float32_graph_is_unchanged() -> None:
    import tensorflow as tf

    train_op, _, g = _worker_graph("mlp", 20.0, mixed_precision=False)
    run = graph_ancestors(train_op)
    assert not any(op.type == "Cast" and tf.bfloat16 in (op.get_attr("SrcT"),
                                                         op.get_attr("DstT")) for op in run)
    assert all(op.get_attr("T") == tf.float32 for op in run if op.type == "MatMul")


def test_builder_takes_a_dtype_for_the_mlps_only() -> None:
    with pytest.raises(ValueError, match="model 'convnet' takes no dtype"):
        models.builder("convnet", dtype=models.HALF)
    models.builder("deepmlp", 2.0, dtype=models.HALF)  # nothing built until called


# -- running it -------------------------------------------------------------------------------


def test_two_local_steps_run_in_bfloat16_with_a_finite_loss() -> None:
    """``precision_train_op`` on this machine's CPU, in a local session (one device)."""
    need_tf()
    import tensorflow as tf

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    args = _args("--model", "mlp", "--model-mb", "2", "--batch-size", "8", "--mixed-precision")
    g = tf.Graph()
    with g.as_default(), tf1.device("/device:CPU:0"):
        global_step = tf1.train.get_or_create_global_step()
        opt = tf1.train.GradientDescentOptimizer(args.lr)
        train_op, _ = node.precision_train_op(args, tf, opt, global_step, "/device:CPU:0")
        loss = next(op for op in g.get_operations() if op.type == "Mean").outputs[0]
        kernel = next(v for v in tf1.trainable_variables() if v.op.name == "dense3/kernel")
        with tf1.Session(config=tf1.ConfigProto(intra_op_parallelism_threads=1,
                                                inter_op_parallelism_threads=1)) as sess:
            sess.run(tf1.global_variables_initializer())
            before = sess.run(kernel)
            losses = [float(sess.run([train_op, loss])[1]) for _ in range(2)]
            after, step = sess.run([kernel, global_step])
    assert all(math.isfinite(x) for x in losses), losses
    assert step == 2 and after.dtype.name == "float32" and (after != before).any()


@pytest.mark.slow
def test_in_process_cluster_pulls_and_pushes_bfloat16() -> None:
    """A PS and a worker server in this process (localhost gRPC): with FULL_TRACE and the
    partition graphs, every tensor the worker receives from the PS, and every one the PS
    receives but the learning rate, is bfloat16, and a step runs with a finite loss."""
    need_tf()
    import tensorflow as tf

    from gradwire.collector.ringhop import free_ports

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    ports = free_ports(2)
    cluster = tf.train.ClusterSpec({"ps": [f"localhost:{ports[0]}"],
                                    "worker": [f"localhost:{ports[1]}"]})
    tf1.train.Server(cluster, job_name="ps", task_index=0,
                     config=node.session_config(tf, "ps", 0))
    config = node.session_config(tf, "worker", 0)
    worker = tf1.train.Server(cluster, job_name="worker", task_index=0, config=config)
    args = _args("--model", "mlp", "--model-mb", "2", "--batch-size", "8", "--mixed-precision")
    g = tf.Graph()
    with g.as_default():
        train_op, _ = node.ps_train_op(args, tf, cluster, [], is_chief=True)
        loss = next(op for op in g.get_operations() if op.type == "Mean").outputs[0]
        with tf1.Session(worker.target, config=config) as sess:
            sess.run(tf1.global_variables_initializer())
            meta = tf1.RunMetadata()
            _, value = sess.run([train_op, loss], run_metadata=meta, options=tf1.RunOptions(
                trace_level=tf1.RunOptions.FULL_TRACE, output_partition_graphs=True))
    assert math.isfinite(float(value))
    pulled, pushed = [], []
    for graph in meta.partition_graphs:
        for n in graph.node:
            if n.op != "_Recv":
                continue
            kind = tf.as_dtype(n.attr["tensor_type"].type).name
            send = n.attr["send_device"].s.decode()
            if "/job:worker/" in n.device and "/job:ps/" in send:
                pulled.append(kind)
            elif "/job:ps/" in n.device and "/job:worker/" in send:
                pushed.append((n.name, kind))
    assert pulled == ["bfloat16"] * 8
    assert sorted(k for _, k in pushed) == ["bfloat16"] * 8 + ["float32"]  # + learning rate
