"""Recomputation in the lab (``--recompute K``: the MLPs' layers in ``tf.recompute_grad``
segments of K).

The configuration tests need nothing; the graph test builds a worker's graph as
``lab/node.py`` builds it, against a cluster spec of 1 PS on localhost (no server is started,
nothing runs), so it needs TensorFlow but no root."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import need_tf

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import bench_accuracy as bench  # noqa: E402
from lab import node  # noqa: E402
from lab.cluster import LabConfig, _node_command  # noqa: E402

from gradwire.replay import netns  # noqa: E402
from gradwire.replay.netns import LabError  # noqa: E402

CLUSTER = {"ps": ["localhost:2222"], "worker": ["localhost:2223"]}


def _args(*extra: str) -> Any:
    return node.parse_args(["--role", "worker", "--index", "0", "--cluster", "{}", *extra])


def test_lab_and_node_refuse_a_recomputation_they_cannot_apply() -> None:
    LabConfig(recompute=0).validate()
    LabConfig(model="deepmlp", recompute=4).validate()
    for cfg, why in ((LabConfig(recompute=-1), "bad recompute -1: must be >= 0"),
                     (LabConfig(model="convnet", recompute=2), "model convnet: only the MLPs"),
                     (LabConfig(recompute=2, accumulate=2), "with accumulation or mixed"),
                     (LabConfig(recompute=2, mixed_precision=True), "with accumulation"),
                     (LabConfig(mode="ring", ps=0, shape="all", recompute=2), "mode ring")):
        with pytest.raises(LabError, match=why):
            cfg.validate()
    node.check_job(_args("--recompute", "2"))
    with pytest.raises(SystemExit, match="model mobilenet: only the MLPs"):
        node.check_job(_args("--model", "mobilenet", "--recompute", "1"))
    with pytest.raises(SystemExit) as e:  # main refuses before TensorFlow is imported
        node.main(["--role", "worker", "--index", "0", "--cluster", "{}", "--recompute", "-2"])
    assert "\n" not in str(e.value.code)


def test_worker_commands_and_bench_configs_carry_recompute(tmp_path: Path) -> None:
    cluster = {"ps": ["198.18.0.10:2222"], "worker": ["198.18.0.100:2222"]}
    worker = netns.Node("worker", 0, "gwl000000-w0", "gwl000000n3", "gwl000000b3", "198.18.0.100")
    cmd = _node_command(LabConfig(recompute=2), worker, cluster, tmp_path / "worker0.json")
    assert node.parse_args(cmd[cmd.index("--role"):]).recompute == 2
    rc = bench.BenchConfig(model="mlp", model_mb=20, bandwidth="2gbit", steps=20, recompute=2,
                           group="issue23", profile_of="mlp20-b32-2gbit-ps1-fcon")
    assert rc.name == "mlp20-b32-2gbit-ps1-fcon-rc2" and rc.lab(2).recompute == 2


def _matmuls(recompute: int) -> tuple[int, int]:
    """The MatMuls of the lab's MLP 2 MB worker graph with ``--recompute``, and its
    trainable variables."""
    need_tf()
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    args = _args("--model", "mlp", "--model-mb", "2", "--batch-size", "8",
                 "--recompute", str(recompute))
    g = tf.Graph()
    with g.as_default():
        node.ps_train_op(args, tf, tf.train.ClusterSpec(CLUSTER), [], is_chief=True)
        mm = [o.name for o in g.get_operations() if o.type == "MatMul"]
        variables = len(tf.compat.v1.trainable_variables())
    return len(mm), variables


def test_recomputation_runs_every_layer_forward_again_in_the_backward_pass() -> None:
    """The MLP's 4 layers: 4 forward MatMuls and 8 in the backward pass (two per layer's
    gradient); in segments of 2 the backward pass also runs the 4 forward MatMuls again
    (inside the segments' custom gradients), over the same 8 variables."""
    assert _matmuls(0) == (4 + 8, 8)
    assert _matmuls(2) == (4 + 8 + 4, 8)
