"""Tensor fusion (``--fuse-tensors SIZE``) in the lab.

The configuration tests need nothing; the graph tests build a worker's graph as ``lab/node.py``
builds it, against a cluster spec of 2 PSes on localhost (no server is started, nothing runs),
so they need TensorFlow but no root."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import graph_ancestors, need_tf

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import bench_accuracy as bench  # noqa: E402
from lab import node  # noqa: E402
from lab.cli import build_parser  # noqa: E402
from lab.cluster import LabConfig, _node_command  # noqa: E402

from gradwire.replay import netns  # noqa: E402
from gradwire.replay.netns import LabError  # noqa: E402
from gradwire.replay.tensorpasses import fusion_buckets  # noqa: E402

CLUSTER = {"ps": ["localhost:2222", "localhost:2224"], "worker": ["localhost:2223"]}


def _args(*extra: str) -> Any:
    return node.parse_args(["--role", "worker", "--index", "0", "--cluster", "{}", *extra])


def test_lab_config_and_node_refuse_a_fusion_they_cannot_build() -> None:
    LabConfig(fuse_bytes=0).validate()
    LabConfig(model="mobilenet", fuse_bytes=16e6).validate()
    LabConfig(model="convnet", fuse_bytes=4e6, partition=2, recompute=0).validate()
    cases = [({"fuse_bytes": -1}, "bad tensor fusion size -1: must be >= 0"),
             ({"fuse_bytes": 4e6, "mode": "sync"}, "bad tensor fusion for mode sync"),
             ({"fuse_bytes": 4e6, "model": "recsys"}, "model recsys: its embedding gradients"),
             ({"fuse_bytes": 4e6, "accumulate": 2}, "with accumulation or mixed precision"),
             ({"fuse_bytes": 4e6, "mixed_precision": True}, "with accumulation or mixed")]
    for kw, message in cases:
        with pytest.raises(LabError, match=message):
            LabConfig(**kw).validate()
    node.check_job(_args("--fuse-tensors", "4e6"))
    with pytest.raises(SystemExit, match="bad tensor fusion for mode sync"):
        node.check_job(_args("--fuse-tensors", "4e6", "--mode", "sync"))


def test_the_lab_takes_a_size_and_the_worker_command_carries_it(tmp_path: Path) -> None:
    args = build_parser().parse_args(["--fuse-tensors", "16MB"])
    assert args.fuse_tensors == 16e6
    cfg = LabConfig(fuse_bytes=args.fuse_tensors)
    cluster = {"ps": ["198.18.0.10:2222"], "worker": ["198.18.0.100:2222"]}
    worker = netns.Node("worker", 0, "gwl000000-w0", "gwl000000n3", "gwl000000b3", "198.18.0.100")
    cmd = _node_command(cfg, worker, cluster, tmp_path / "worker0.json")
    assert node.parse_args(cmd[cmd.index("--role"):]).fuse_tensors == 16e6
    plain = _node_command(LabConfig(), worker, cluster, tmp_path / "worker0.json")
    assert node.parse_args(plain[plain.index("--role"):]).fuse_tensors == 0


def test_bench_config_names_and_lab_carry_the_fusion() -> None:
    cfg = bench.BenchConfig(model="mobilenet", batch_size=16, bandwidth="500mbit", steps=12,
                            fuse_bytes=16e6, group="issue23",
                            profile_of="mobilenet-b16-500mbit-ps1-fcon")
    assert cfg.name == "mobilenet-b16-500mbit-ps1-fcon-fuse16MB"
    assert cfg.lab(2).fuse_bytes == 16e6
    assert bench.BenchConfig(model="mlp", bandwidth="1gbit", steps=20).lab(1).fuse_bytes == 0


def _fused_graph(model: str, fuse_bytes: float, model_mb: float = 2.0) -> tuple[Any, Any]:
    """The train op and graph of ``lab.node``'s PS train op for worker 0 of ``CLUSTER``
    (async, greedy placement over 2 PSes) with ``--fuse-tensors fuse_bytes``."""
    need_tf()
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    args = _args("--model", model, "--model-mb", str(model_mb), "--batch-size", "8",
                 "--fuse-tensors", f"{fuse_bytes:g}")
    g = tf.Graph()
    with g.as_default():
        train_op, _ = node.ps_train_op(args, tf, tf.train.ClusterSpec(CLUSTER), [],
                                       is_chief=True)
    return train_op, g


def test_each_ps_gets_one_concatenated_bucket_split_and_applied_there() -> None:
    """A bucket larger than the model: each PS's gradients in one tensor made on the worker
    (``fusion_buckets``' rule), split on that PS, every variable updated once from its part
    with its own shape."""
    train_op, g = _fused_graph("deepmlp", 1e9)
    import tensorflow as tf

    with g.as_default():
        variables = tf.compat.v1.trainable_variables()
    ps_of = {v.op.name: v.device for v in variables}
    assert len(set(ps_of.values())) == 2
    concats = [op for op in g.get_operations() if op.type == "ConcatV2"
               and op.name.startswith("fusion/")]
    splits = [op for op in g.get_operations() if op.type == "SplitV"
              and op.name.startswith("fusion/")]
    assert len(concats) == len(splits) == 2
    assert all(op.device == "/job:worker/task:0" for op in concats)
    assert sorted(op.device for op in splits) == sorted(set(ps_of.values()))
    run = graph_ancestors(train_op)
    applies = [op for op in run if op.type == "ResourceApplyGradientDescent"]
    assert len(applies) == len(variables)
    for op in applies:
        split = [a for a in graph_ancestors(op) if a in splits]
        assert len(split) == 1 and split[0].device == op.device  # its own PS's bucket
    sizes = sorted(int(op.outputs[0].shape.num_elements()) for op in concats)
    per_ps: dict[str, int] = {}
    for v in variables:
        per_ps[v.device] = per_ps.get(v.device, 0) + int(v.shape.num_elements())
    assert sizes == sorted(per_ps.values())


def test_buckets_follow_the_predictors_rule() -> None:
    """Small buckets: the concatenations are the buckets ``fusion_buckets`` makes of the
    gradients in the backward pass's order (the variables' reverse order), per PS; a bucket
    of one gradient is pushed as it is (no concatenation)."""
    _, g = _fused_graph("deepmlp", 600e3)
    import tensorflow as tf

    with g.as_default():
        variables = tf.compat.v1.trainable_variables()[::-1]
    expected = fusion_buckets([(v.device, int(v.shape.num_elements()) * 4) for v in variables],
                              600e3)
    concats = sorted((op for op in g.get_operations() if op.type == "ConcatV2"
                      and op.name.startswith("fusion/")), key=lambda op: op.name)
    assert len(concats) == sum(len(b) > 1 for b in expected) > 1
    multi = [b for b in expected if len(b) > 1]
    for b in multi:  # each bucket's values: its members' elements
        n = sum(int(variables[i].shape.num_elements()) for i in b)
        assert any(int(op.outputs[0].shape.num_elements()) == n for op in concats)


def test_only_takes_a_name_ending_with_a_dollar() -> None:
    """``--only NAME$`` picks the configurations whose name ends with NAME: a plain job
    without its what-ifs, which a substring would match too."""
    ends = [c.name for c in bench.selected("convnet-b32-1gbit-ps1-fcon$")]
    assert ends == ["convnet-b32-1gbit-ps1-fcon"]
    within = [c.name for c in bench.selected("convnet-b32-1gbit-ps1-fcon")]
    assert {"convnet-b32-1gbit-ps1-fcon-fuse16MB", "convnet-b32-1gbit-ps1-fcon-xla"} <= set(
        within)


def test_only_takes_a_name_starting_with_a_caret() -> None:
    """``--only ^NAME$`` is that one name: the MLP's ring and not the deep MLP's, whose name
    ends with the MLP's."""
    assert [c.name for c in bench.selected("mlp10-b32-1500mbit-ps0-fcon-ring$")] == [
        "deepmlp10-b32-1500mbit-ps0-fcon-ring", "mlp10-b32-1500mbit-ps0-fcon-ring"]
    assert [c.name for c in bench.selected("^mlp10-b32-1500mbit-ps0-fcon-ring$")] == [
        "mlp10-b32-1500mbit-ps0-fcon-ring"]
    assert [c.name for c in bench.selected("^mlp10-b32-1500mbit")] == [
        "mlp10-b32-1500mbit-ps0-fcon-ring"]
