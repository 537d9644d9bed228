"""The lab's model families (scripts/lab/models.py), built as the lab's workers build them
(tf.compat.v1 graph mode, variables on parameter servers) but without a cluster: their tensor
counts and sizes, and that recsys's embedding gradient is sparse (IndexedSlices), so a worker
pushes only the rows it looked up."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import need_tf

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from lab import models  # noqa: E402


def build(name: str, size_mb: float = 4.0, batch_size: int = 8):
    """``(loss, examples, gradients)`` of model ``name`` in a graph of its own, variables
    placed on a PS as the lab's replica_device_setter places them; ``gradients`` as
    ``compute_gradients`` gives them, ``(gradient, variable)`` pairs."""
    need_tf()
    import tensorflow as tf

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    g = tf.Graph()
    with g.as_default(), tf1.device(tf1.train.replica_device_setter(ps_tasks=1)):
        loss, examples = models.builder(name, size_mb)(batch_size)
        grads = tf1.train.GradientDescentOptimizer(0.1).compute_gradients(loss)
    return loss, examples, grads


def _mb(variables) -> float:
    return sum(v.shape.num_elements() * v.dtype.size for v in variables) / 1e6


def test_deepmlp_is_many_small_tensors():
    _, examples, grads = build("deepmlp", size_mb=4.0)
    kernels = [v for _, v in grads if v.name.endswith("kernel:0")]
    assert len(kernels) == models.deepmlp_layers(4.0) + 1 == 16
    assert _mb(v for _, v in grads) == pytest.approx(4.0, rel=0.05) and examples == 8
    assert max(v.shape.num_elements() * 4 for v in kernels) == 256 * 256 * 4


def test_recsys_pushes_only_the_rows_it_looked_up():
    import tensorflow as tf

    _, _, grads = build("recsys", size_mb=4.0)
    by_name = {v.name: g for g, v in grads}
    table = by_name["embedding/table:0"]
    assert isinstance(table, tf.IndexedSlices)  # sparse: 8 x 16 rows, not the whole table
    assert not any(isinstance(g, tf.IndexedSlices) for n, g in by_name.items()
                   if n != "embedding/table:0")
    rows = models.recsys_rows(4.0)
    assert [v for _, v in grads if v.name == "embedding/table:0"][0].shape.as_list() == [
        rows, models.RECSYS_DIM]


def test_mobilenet_builds_on_small_images():
    _, _, grads = build("mobilenet", batch_size=2)
    assert len(grads) == 158 and 13 < _mb(v for _, v in grads) < 15


def test_every_model_has_a_builder():
    assert set(models.MODELS) >= {"mlp", "convnet", "resnet50", "deepmlp", "recsys", "mobilenet"}
    for name in models.MODELS:
        assert callable(models.builder(name))
    with pytest.raises(ValueError, match="unknown model 'vgg'"):
        models.builder("vgg")


def test_the_papers_models_are_the_keras_applications():
    _, _, grads = build("inception3", batch_size=1)
    assert len(grads) == 190 and 94 < _mb(v for _, v in grads) < 96
