"""Model builders for the lab, in tf.compat.v1 graph mode, on synthetic in-graph data.

Each builder is called inside the worker's ``replica_device_setter`` scope, creates its variables
(placed on the parameter servers) and returns ``(loss, examples_per_step)``. Inputs and labels are
drawn with ``tf.random`` on the worker every step, so nothing is downloaded and no input pipeline
competes for the CPU.

Sizes (float32 parameters, i.e. bytes each worker pulls from and pushes to the PSes per step):
``mlp`` ~``size_mb`` MB (default 50), ``convnet`` ~2.2 MB, ``resnet50`` ~102 MB.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

MLP_INPUT = 1024
MLP_CLASSES = 10
MODELS = ("mlp", "convnet", "resnet50")


def mlp_width(size_mb: float) -> int:
    """Hidden width w of the 3-hidden-layer MLP so that its parameters total ~``size_mb`` MB.

    Parameters: 1024*w + 2*w*w + 10*w weights plus 3*w + 10 biases, 4 bytes each.

    >>> mlp_width(50)
    2254
    """
    n = size_mb * 1e6 / 4
    a, b = 2.0, MLP_INPUT + MLP_CLASSES + 3
    return max(8, int((-b + math.sqrt(b * b + 4 * a * n)) / (2 * a)))


def mlp(batch_size: int, size_mb: float = 50.0) -> tuple[Any, int]:
    """A wide MLP, 1024 -> w -> w -> w -> 10 (ReLU), ~``size_mb`` MB of float32 parameters."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    w = mlp_width(size_mb)
    x = tf.random.normal([batch_size, MLP_INPUT])
    labels = tf.random.uniform([batch_size], 0, MLP_CLASSES, dtype=tf.int32)
    dims = [MLP_INPUT, w, w, w, MLP_CLASSES]
    h = x
    for i, (din, dout) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        kernel = tf1.get_variable(
            f"dense{i}/kernel", [din, dout], initializer=tf1.glorot_uniform_initializer()
        )
        bias = tf1.get_variable(f"dense{i}/bias", [dout], initializer=tf1.zeros_initializer())
        h = tf.matmul(h, kernel) + bias
        if i < len(dims) - 2:
            h = tf.nn.relu(h)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, h))
    return loss, batch_size


def convnet(batch_size: int) -> tuple[Any, int]:
    """A small conv net on 32x32x3 synthetic images: conv32-pool-conv64-pool-fc512-fc10."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    images = tf.random.uniform([batch_size, 32, 32, 3])
    labels = tf.random.uniform([batch_size], 0, 10, dtype=tf.int32)

    def conv(x: Any, name: str, cin: int, cout: int) -> Any:
        k = tf1.get_variable(
            f"{name}/kernel", [5, 5, cin, cout], initializer=tf1.glorot_uniform_initializer()
        )
        b = tf1.get_variable(f"{name}/bias", [cout], initializer=tf1.zeros_initializer())
        y = tf.nn.relu(tf.nn.conv2d(x, k, strides=1, padding="SAME") + b)
        return tf.nn.max_pool2d(y, ksize=2, strides=2, padding="SAME")

    h = conv(conv(images, "conv1", 3, 32), "conv2", 32, 64)
    h = tf.reshape(h, [batch_size, 8 * 8 * 64])
    for name, din, dout in (("fc1", 8 * 8 * 64, 512), ("fc2", 512, 10)):
        k = tf1.get_variable(
            f"{name}/kernel", [din, dout], initializer=tf1.glorot_uniform_initializer()
        )
        b = tf1.get_variable(f"{name}/bias", [dout], initializer=tf1.zeros_initializer())
        h = tf.matmul(h, k) + b
        if name == "fc1":
            h = tf.nn.relu(h)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, h))
    return loss, batch_size


def resnet50(batch_size: int) -> tuple[Any, int]:
    """tf_keras ResNet50 (weights=None, 1000 classes) on synthetic 224x224x3 images.

    Batch-norm moving statistics are not updated (their update ops are not run), which leaves
    the trainable variables, and so the gradient traffic, exactly those of ResNet50.
    """
    import tensorflow as tf
    import tf_keras

    images = tf.random.uniform([batch_size, 224, 224, 3])
    labels = tf.random.uniform([batch_size], 0, 1000, dtype=tf.int32)
    model = tf_keras.applications.ResNet50(
        weights=None, input_shape=(224, 224, 3), classes=1000, classifier_activation=None
    )
    logits = model(images, training=True)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    return loss, batch_size


def builder(name: str, size_mb: float = 50.0) -> Callable[[int], tuple[Any, int]]:
    """The builder for model ``name`` taking only the batch size."""
    if name == "mlp":
        return lambda batch_size: mlp(batch_size, size_mb)
    if name == "convnet":
        return convnet
    if name == "resnet50":
        return resnet50
    raise ValueError(f"unknown model {name!r}: expected one of {', '.join(MODELS)}")
