"""Tensor partition in the lab (``--partition K``): TensorFlow's partitioned variables
(``min_max_variable_partitioner``) split the big variables, and the lab's ps_strategy places
each part on its own PS. The configuration tests need nothing; the graph tests build a worker's
graph as ``lab/node.py`` builds it, against a cluster spec of 2 PSes on localhost (no server is
started, nothing runs), so they need TensorFlow but no root."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import need_tf

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import bench_accuracy as bench  # noqa: E402
from lab import models, node  # noqa: E402
from lab.cluster import LabConfig, _node_command  # noqa: E402

from gradwire.replay import netns  # noqa: E402
from gradwire.replay.netns import LabError  # noqa: E402

CLUSTER = {"ps": ["localhost:2222", "localhost:2223"], "worker": ["localhost:2224"]}


def test_lab_config_refuses_a_partition_it_cannot_apply() -> None:
    LabConfig(partition=1).validate()
    LabConfig(model="recsys", partition=4).validate()
    with pytest.raises(LabError, match="bad partition 0: must be >= 1"):
        LabConfig(partition=0).validate()
    with pytest.raises(LabError, match="bad partition -2: must be >= 1"):
        LabConfig(partition=-2).validate()
    with pytest.raises(LabError, match="bad partition 2 for model resnet50: its tf_keras"):
        LabConfig(model="resnet50", partition=2).validate()
    with pytest.raises(LabError, match="bad partition 2 for mode ring"):
        LabConfig(mode="ring", ps=0, shape="all", partition=2).validate()


def test_worker_command_carries_the_partition(tmp_path: Path) -> None:
    cfg = LabConfig(partition=2, ps=2)
    cluster = {"ps": ["198.18.0.10:2222", "198.18.0.11:2222"], "worker": ["198.18.0.100:2222"]}
    worker = netns.Node("worker", 0, "gwl000000-w0", "gwl000000n3", "gwl000000b3", "198.18.0.100")
    cmd = _node_command(cfg, worker, cluster, tmp_path / "worker0.json")
    at = cmd.index("--partition")
    assert cmd[at : at + 2] == ["--partition", "2"]
    args = node.parse_args(cmd[cmd.index("--role"):])  # the node parses what it is given
    assert args.partition == 2 and args.role == "worker"
    ps = netns.Node("ps", 0, "gwl000000-p0", "gwl000000n1", "gwl000000b1", "198.18.0.10")
    assert "--partition" not in _node_command(cfg, ps, cluster, tmp_path / "ps0.json")


def test_bench_config_name_and_lab_carry_the_partition() -> None:
    plain = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="1gbit", steps=20)
    assert plain.name == "mlp20-b32-1gbit-ps1-fcon" and plain.lab(2).partition == 1
    part = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="1gbit", ps=2, steps=20,
                             partition=2)
    assert part.name == "mlp20-b32-1gbit-ps2-fcon-part2"
    assert part.lab(3).partition == 2 and part.lab(3).workers == 3
    what_if = bench.BenchConfig(model="mlp", model_mb=20, batch_size=64, bandwidth="1gbit",
                                steps=20, mode="sync", partition=3, group="issue23",
                                profile_of=plain.name)
    assert what_if.name == "mlp20-b64-1gbit-ps1-fcon-sync-part3-from-b32"


def test_node_refuses_partition_for_keras_models_and_ring() -> None:
    node.check_job(node.parse_args(
        ["--role", "worker", "--index", "0", "--cluster", "{}", "--partition", "2"]))
    with pytest.raises(SystemExit, match="model mobilenet: its tf_keras layers ignore"):
        node.check_job(node.parse_args(["--role", "worker", "--index", "0", "--cluster",
                                              "{}", "--model", "mobilenet", "--partition", "2"]))
    with pytest.raises(SystemExit, match="bad partition 3 for mode ring"):
        node.check_job(node.parse_args(["--role", "worker", "--index", "0", "--cluster",
                                              "{}", "--mode", "ring", "--partition", "3"]))


def _worker_graph(model: str, model_mb: float, partition: int) -> tuple[list[Any], Any]:
    """The trainable variables and the graph of ``lab.node``'s PS train op for worker 0 of
    ``CLUSTER`` (async, greedy placement), built in a graph of its own."""
    need_tf()
    import tensorflow as tf

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    args = node.parse_args(["--role", "worker", "--index", "0", "--cluster", "{}", "--model",
                            model, "--model-mb", str(model_mb), "--batch-size", "8",
                            "--partition", str(partition)])
    g = tf.Graph()
    with g.as_default():
        node.ps_train_op(args, tf, tf.train.ClusterSpec(CLUSTER), [], is_chief=True)
        variables = tf1.trainable_variables()
    return variables, g


def _parts(variables: list[Any]) -> dict[str, list[tuple[list[int], str]]]:
    """Each variable's parts as (shape, device), by its name without ``/part_<i>``."""
    out: dict[str, list[tuple[list[int], str]]] = {}
    for v in variables:
        whole = v.op.name.rsplit("/part_", 1)[0]
        out.setdefault(whole, []).append((v.shape.as_list(), v.device))
    return out


def test_mlp_kernels_split_in_two_over_both_parameter_servers() -> None:
    variables, _ = _worker_graph("mlp", 20.0, 2)
    parts = _parts(variables)
    w = models.mlp_width(20.0)
    for name in ("dense0/kernel", "dense1/kernel", "dense2/kernel"):  # 5.5 and 7.2 MB
        assert len(parts[name]) == 2, parts[name]
        assert sum(shape[0] for shape, _ in parts[name]) == (models.MLP_INPUT if name ==
                                                            "dense0/kernel" else w)
        assert {dev for _, dev in parts[name]} == {"/job:ps/task:0", "/job:ps/task:1"}
    for name in ("dense3/kernel", "dense0/bias", "dense1/bias", "dense2/bias", "dense3/bias"):
        assert len(parts[name]) == 1, parts[name]  # at most 256 KiB: whole
    total = sum(v.shape.num_elements() for v in variables)
    assert total == models.MLP_INPUT * w + 2 * w * w + w * models.MLP_CLASSES + 3 * w + 10
    by_ps = {dev: 0 for dev in ("/job:ps/task:0", "/job:ps/task:1")}
    for v in variables:
        by_ps[v.device] += v.shape.num_elements() * 4
    assert abs(by_ps["/job:ps/task:0"] - by_ps["/job:ps/task:1"]) < 0.1e6  # greedy: even


def test_unpartitioned_mlp_keeps_whole_variables() -> None:
    variables, _ = _worker_graph("mlp", 20.0, 1)
    assert all("/part_" not in v.op.name for v in variables) and len(variables) == 8


def test_recsys_table_parts_are_gathered_and_updated_sparsely_on_their_ps() -> None:
    variables, g = _worker_graph("recsys", 4.0, 2)
    parts = _parts(variables)
    table = parts["embedding/table"]
    assert len(table) == 2 and sum(shape[0] for shape, _ in table) == models.recsys_rows(4.0)
    assert {dev for _, dev in table} == {"/job:ps/task:0", "/job:ps/task:1"}
    assert len(parts["tower1/kernel"]) == 2  # 1 MiB: 2 parts (at most K)
    for v in variables:
        if not v.op.name.startswith("embedding/table/part_"):
            continue
        users = [op for op in g.get_operations() if v.op.name in
                 [i.op.name for i in op.inputs]]
        # a gather of the rows looked up, and a scatter of their gradient (IndexedSlices: only
        # those rows), both on the part's own PS
        kinds = {op.type: op.device for op in users}
        assert kinds.get("ResourceGather") == v.device, kinds
        assert kinds.get("ResourceScatterAdd") == v.device, kinds
        assert "ResourceApplyGradientDescent" not in kinds
