"""Model builders for the lab, in tf.compat.v1 graph mode, on synthetic in-graph data.

Each builder is called inside the worker's ``replica_device_setter`` scope, creates its variables
(placed on the parameter servers) and returns ``(loss, examples_per_step)``. Inputs and labels are
drawn with ``tf.random`` on the worker every step, so nothing is downloaded and no input pipeline
competes for the CPU.

Sizes (float32 parameters, i.e. bytes each worker pulls from and pushes to the PSes per step):
``mlp`` ~``size_mb`` MB (default 50), ``convnet`` ~2.2 MB, ``resnet50`` ~102 MB;
``deepmlp`` ~``size_mb`` MB in many small tensors (256 x 256 layers, 0.26 MB each);
``recsys`` an embedding table of ~``size_mb`` MB of which each step reads and updates only
the rows its batch looks up (IndexedSlices gradients) plus a 0.3 MB tower; ``mobilenet``
tf_keras MobileNetV2 on 128 x 128 images, ~14 MB in 158 tensors. Chang et al.'s models
(``PAPER_MODELS``), tf_keras applications at their own input sizes: ``vgg16`` ~553 MB
(its first fully connected layer 411 MB), ``inception3`` ~95 MB, ``resnet101`` ~178 MB.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

MLP_INPUT = 1024
MLP_CLASSES = 10
MODELS = ("mlp", "convnet", "resnet50", "deepmlp", "recsys", "mobilenet", "vgg16",
          "inception3", "resnet101")
# Chang et al.'s models, tf_keras applications at their own input sizes (issue 22's study)
PAPER_MODELS = {"vgg16": ("VGG16", 224), "inception3": ("InceptionV3", 299),
                "resnet101": ("ResNet101", 224)}
# replica_device_setter's ps_strategy in lab/node.py: greedy by bytes, or TF's round-robin
PS_STRATEGIES = ("greedy", "round-robin")
# training modes (lab/node.py): asynchronous PS, SyncReplicasOptimizer PS, collective ring
MODES = ("async", "sync", "ring")
# tensor partition (lab/node.py --partition K): TensorFlow's own default min_slice_size of
# min_max_variable_partitioner (256 KiB). TF's rule (tensorflow/python/ops/
# partitioned_variables.py): a variable of N bytes is split along axis 0 into
# max(1, min(K, ceil(N / 256 KiB), dim0)) slices, so one of at most 256 KiB stays whole (a
# ceiling, not a floor: 300 KB already makes 2 slices)
PARTITION_MIN_SLICE_BYTES = 256 << 10
# the models whose variables come from tf1.get_variable, and so follow the variable scope's
# partitioner; tf_keras applications (resnet50, mobilenet, the paper's) ignore it
PARTITIONED_MODELS = ("mlp", "deepmlp", "recsys", "convnet")
# gradient accumulation (lab/node.py --accumulate K): the models built K times over the same
# variables, read once per update through the variable scope's custom getter. Not recsys (its
# embedding gradient is sparse: reading the table once on the worker would pull all of it) nor
# the tf_keras applications (their layers make their variables outside the variable scope, a
# new set on every build)
ACCUMULATE_MODELS = ("mlp", "deepmlp", "convnet")
# mixed precision (lab/node.py --mixed-precision): float32 variables on the PSes, each read once
# per step and cast to HALF on its PS, the worker's forward and backward pass in HALF, the
# gradients cast back to float32 on the PS. The MLPs only: their builders take the dtype of
# their inputs, and every op they run has a bfloat16 CPU kernel
PRECISION_MODELS = ("mlp", "deepmlp")
HALF = "bfloat16"  # TensorFlow's CPU half type (Keras' mixed_bfloat16)
# recomputation (lab/node.py --recompute K): the MLPs' layers in segments of K, each a
# tf.recompute_grad checkpoint (its input kept, its forward run again at the start of its
# backward pass). The MLPs only: their layers are built here, with their variables read
# outside each segment and passed in (a segment creates no variable)
RECOMPUTE_MODELS = ("mlp", "deepmlp")
# tensor fusion (lab/node.py --fuse-tensors SIZE): each worker's dense gradients to one PS, in
# the order the backward pass makes them (the variables' reverse order), flattened and
# concatenated into buckets of at least SIZE bytes on the worker, one tensor pushed per
# bucket, split back on the PS before the updates. Any model with dense gradients (not recsys)
FUSION_REFUSED_MODELS = ("recsys",)
DEEP_WIDTH = 256  # deepmlp: every layer 256 -> 256, so 0.26 MB of weights per tensor
RECSYS_DIM, RECSYS_FIELDS = 64, 16  # recsys: embedding width, ids looked up per example


def partition_refusal(k: int, mode: str, model: str) -> str | None:
    """Why tensor partition into ``k`` cannot apply to ``model`` in ``mode`` (None: it can):
    below 1, ring all-reduce (no PSes), or a tf_keras model (its layers ignore the scope's
    partitioner)."""
    if int(k) < 1:
        return f"bad partition {k}: must be >= 1 (1: off)"
    if k == 1:
        return None
    if mode == "ring":
        return (f"bad partition {k} for mode ring: ring all-reduce has no parameter servers "
                "to split the variables over; use --partition 1")
    if model not in PARTITIONED_MODELS:
        return (f"bad partition {k} for model {model}: its tf_keras layers ignore TensorFlow's "
                f"partitioner; partition one of {', '.join(PARTITIONED_MODELS)}")
    return None


def accumulate_refusal(k: int, mode: str, model: str) -> str | None:
    """Why gradient accumulation over ``k`` micro-steps cannot apply to ``model`` in
    ``mode`` (None: it can): below 1, a mode other than async PS, or a model outside
    ``ACCUMULATE_MODELS``."""
    if int(k) < 1:
        return f"bad accumulate {k}: must be >= 1 (1: off)"
    if k == 1:
        return None
    if mode != "async":
        return (f"bad accumulate {k} for mode {mode}: gradient accumulation is for "
                "asynchronous PS training only; use --accumulate 1 or --mode async")
    if model not in ACCUMULATE_MODELS:
        why = ("its embedding gradients are sparse" if model == "recsys" else
               "its tf_keras layers make new variables on every build")
        return (f"bad accumulate {k} for model {model}: {why}; accumulate one of "
                f"{', '.join(ACCUMULATE_MODELS)}")
    return None


def recompute_refusal(k: int, mode: str, model: str, accumulate: int = 1,
                      mixed_precision: bool = False) -> str | None:
    """Why recomputation in segments of ``k`` layers cannot apply (None: it can, or ``k`` is
    0, off): below 0, a model outside ``RECOMPUTE_MODELS``, ring all-reduce (its train op is
    built apart), or together with accumulation or mixed precision (their builds read the
    variables through a getter of their own: not combined)."""
    if int(k) < 0:
        return f"bad recompute {k}: must be >= 0 (0: off)"
    if k == 0:
        return None
    if model not in RECOMPUTE_MODELS:
        return (f"bad recompute {k} for model {model}: only the MLPs' layers are built in "
                f"segments; recompute one of {', '.join(RECOMPUTE_MODELS)}")
    if mode == "ring":
        return f"bad recompute {k} for mode ring: use a PS mode"
    if int(accumulate) > 1 or mixed_precision:
        return (f"bad recompute {k} with accumulation or mixed precision: not combined; "
                "use --recompute 0")
    return None


def job_refusal(mode: str, model: str, partition: int = 1, accumulate: int = 1,
                mixed_precision: bool = False, recompute: int = 0,
                fuse_bytes: float = 0) -> str | None:
    """Why the changes to the job (tensor partition, gradient accumulation, mixed precision,
    recomputation, tensor fusion) cannot apply to ``model`` in ``mode``: the first refusal
    of ``partition_refusal``, ``accumulate_refusal``, ``precision_refusal``,
    ``recompute_refusal`` and ``fusion_refusal``; None when every one can."""
    return (partition_refusal(partition, mode, model)
            or accumulate_refusal(accumulate, mode, model)
            or precision_refusal(mixed_precision, mode, model, accumulate)
            or recompute_refusal(recompute, mode, model, accumulate, mixed_precision)
            or fusion_refusal(fuse_bytes, mode, model, accumulate, mixed_precision))


def fusion_refusal(fuse_bytes: float, mode: str, model: str, accumulate: int = 1,
                   mixed_precision: bool = False) -> str | None:
    """Why tensor fusion into buckets of ``fuse_bytes`` cannot apply (None: it can, or it is
    0, off): below 0, a mode other than async PS, a model with sparse gradients, or together
    with accumulation or mixed precision (their train ops are built apart: not combined)."""
    if fuse_bytes < 0:
        return f"bad tensor fusion size {fuse_bytes:g}: must be >= 0 bytes (0: off)"
    if fuse_bytes == 0:
        return None
    if mode != "async":
        return (f"bad tensor fusion for mode {mode}: fused pushes are built for asynchronous "
                "PS training only; use --mode async")
    if model in FUSION_REFUSED_MODELS:
        return (f"bad tensor fusion for model {model}: its embedding gradients are sparse "
                "(IndexedSlices), which a bucket of dense values cannot carry")
    if int(accumulate) > 1 or mixed_precision:
        return ("bad tensor fusion with accumulation or mixed precision: not combined; "
                "leave --fuse-tensors off")
    return None


def precision_refusal(on: bool, mode: str, model: str, accumulate: int = 1) -> str | None:
    """Why mixed precision cannot apply to ``model`` in ``mode`` with gradient accumulation
    over ``accumulate`` micro-steps (None: it can, or it is off): a mode other than async PS,
    a model outside ``PRECISION_MODELS``, or accumulation (its running sums would be kept in
    bfloat16, or in float32 and cast again before the push: not built)."""
    if not on:
        return None
    if mode != "async":
        return (f"bad mixed precision for mode {mode}: bfloat16 reads and gradients are built "
                "for asynchronous PS training only; use --mode async")
    if model not in PRECISION_MODELS:
        return (f"bad mixed precision for model {model}: only the builders of "
                f"{', '.join(PRECISION_MODELS)} take bfloat16 inputs")
    if int(accumulate) > 1:
        return (f"bad mixed precision with accumulate {accumulate}: gradient accumulation "
                "in bfloat16 is not built; use --accumulate 1")
    return None


def _dense(x: Any, name: str, din: int, dout: int) -> Any:
    """``x @ kernel + bias`` with variables ``name/kernel`` (Glorot) and ``name/bias`` (zeros).

    Under a partitioner (lab/node.py ``--partition``) each is a PartitionedVariable: its tensor
    conversion concatenates the parts (each read from its own PS) on the worker, and the
    gradient is sliced back into one per part. Under mixed precision (lab/node.py
    ``--mixed-precision``) the variable scope's getter returns bfloat16 reads of the variables
    and ``x`` is bfloat16 too: the matmul and the bias add run in bfloat16."""
    import tensorflow as tf

    kernel, bias = _dense_variables(name, din, dout)
    return tf.matmul(x, kernel) + bias


def _dense_variables(name: str, din: int, dout: int) -> tuple[Any, Any]:
    """``_dense``'s variables ``name/kernel`` (Glorot) and ``name/bias`` (zeros)."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    return (tf1.get_variable(f"{name}/kernel", [din, dout],
                             initializer=tf1.glorot_uniform_initializer()),
            tf1.get_variable(f"{name}/bias", [dout], initializer=tf1.zeros_initializer()))


def _dense_stack(h: Any, layers: list[tuple[str, int, int, bool]], recompute: int = 0) -> Any:
    """The layers ``(name, din, dout, relu)`` one after another from ``h`` (``_dense``, then
    a ReLU where ``relu``). ``recompute`` K > 0: in segments of K layers, each wrapped in
    ``tf.recompute_grad`` over its input and its variables' values, read outside the segment
    (so the segment creates no variable and its gradient reaches them through the reads): the
    backward pass keeps each segment's input and runs its forward again before its
    gradients."""
    import tensorflow as tf

    if recompute <= 0:
        for name, din, dout, relu in layers:
            h = _dense(h, name, din, dout)
            h = tf.nn.relu(h) if relu else h
        return h
    for first in range(0, len(layers), recompute):
        seg = layers[first:first + recompute]
        params = []
        for name, din, dout, _relu in seg:
            params += [tf.convert_to_tensor(v) for v in _dense_variables(name, din, dout)]

        def segment(x: Any, *values: Any, seg: list = seg) -> Any:
            for j, (_name, _din, _dout, relu) in enumerate(seg):
                x = tf.matmul(x, values[2 * j]) + values[2 * j + 1]
                x = tf.nn.relu(x) if relu else x
            return x

        h = tf.recompute_grad(segment)(h, *params)
    return h


def mlp_width(size_mb: float) -> int:
    """Hidden width w of the 3-hidden-layer MLP so that its parameters total ~``size_mb`` MB.

    Parameters: 1024*w + 2*w*w + 10*w weights plus 3*w + 10 biases, 4 bytes each.

    >>> mlp_width(50)
    2254
    """
    n = size_mb * 1e6 / 4
    a, b = 2.0, MLP_INPUT + MLP_CLASSES + 3
    return max(8, int((-b + math.sqrt(b * b + 4 * a * n)) / (2 * a)))


def _logits_loss(labels: Any, logits: Any) -> Any:
    """Mean softmax cross entropy, in float32 (logits of another dtype cast first)."""
    import tensorflow as tf

    if logits.dtype != tf.float32:
        logits = tf.cast(logits, tf.float32)
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))


def mlp(batch_size: int, size_mb: float = 50.0, dtype: str | None = None, recompute: int = 0
        ) -> tuple[Any, int]:
    """A wide MLP, 1024 -> w -> w -> w -> 10 (ReLU), ~``size_mb`` MB of float32 parameters.
    ``dtype``: the inputs cast to it (``HALF`` under mixed precision), the loss in float32;
    None: float32 throughout. ``recompute``: its layers in recomputed segments of that many
    (``_dense_stack``); 0: off."""
    import tensorflow as tf

    w = mlp_width(size_mb)
    x = tf.random.normal([batch_size, MLP_INPUT])
    if dtype is not None:
        x = tf.cast(x, dtype)
    labels = tf.random.uniform([batch_size], 0, MLP_CLASSES, dtype=tf.int32)
    dims = [MLP_INPUT, w, w, w, MLP_CLASSES]
    layers = [(f"dense{i}", din, dout, i < len(dims) - 2)
              for i, (din, dout) in enumerate(zip(dims[:-1], dims[1:], strict=True))]
    return _logits_loss(labels, _dense_stack(x, layers, recompute)), batch_size


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
        h = _dense(h, name, din, dout)
        if name == "fc1":
            h = tf.nn.relu(h)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, h))
    return loss, batch_size


def resnet50(batch_size: int) -> tuple[Any, int]:
    """tf_keras ResNet50 (weights=None, 1000 classes) on synthetic 224x224x3 images.

    Batch-norm moving statistics are not updated (their update ops are not run), which leaves
    the trainable variables, and so the gradient traffic, exactly those of ResNet50.
    """
    return _keras_application("ResNet50", 224, batch_size)


def _keras_application(name: str, side: int, batch_size: int) -> tuple[Any, int]:
    """tf_keras.applications' ``name`` (weights=None, 1000 classes, logits) on synthetic
    ``side`` x ``side`` x 3 images, trained with batch-norm statistics not updated."""
    import tensorflow as tf
    import tf_keras

    images = tf.random.uniform([batch_size, side, side, 3])
    labels = tf.random.uniform([batch_size], 0, 1000, dtype=tf.int32)
    model = getattr(tf_keras.applications, name)(
        weights=None, input_shape=(side, side, 3), classes=1000, classifier_activation=None
    )
    logits = model(images, training=True)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    return loss, batch_size


def deepmlp_layers(size_mb: float) -> int:
    """Layers of ``deepmlp`` so that its parameters total ~``size_mb`` MB (at least 2).

    >>> deepmlp_layers(50)
    190
    """
    per_layer = (DEEP_WIDTH * DEEP_WIDTH + DEEP_WIDTH) * 4
    return max(2, round(size_mb * 1e6 / per_layer))


def deepmlp(batch_size: int, size_mb: float = 50.0, dtype: str | None = None,
            recompute: int = 0) -> tuple[Any, int]:
    """A deep, narrow MLP: ``deepmlp_layers(size_mb)`` ReLU layers of 256 -> 256, then 10
    classes: many small tensors (a kernel and a bias per layer) rather than a few big ones.
    ``dtype``, ``recompute``: as ``mlp``'s."""
    import tensorflow as tf

    x = tf.random.normal([batch_size, DEEP_WIDTH])
    if dtype is not None:
        x = tf.cast(x, dtype)
    labels = tf.random.uniform([batch_size], 0, MLP_CLASSES, dtype=tf.int32)
    n = deepmlp_layers(size_mb)
    layers = [(f"deep{i}", DEEP_WIDTH, MLP_CLASSES if i == n else DEEP_WIDTH, i < n)
              for i in range(n + 1)]
    return _logits_loss(labels, _dense_stack(x, layers, recompute)), batch_size


def recsys_rows(size_mb: float) -> int:
    """Rows of ``recsys``'s embedding table (64 float32 each) for ~``size_mb`` MB.

    >>> recsys_rows(50)
    195312
    """
    return max(RECSYS_FIELDS, int(size_mb * 1e6 / (RECSYS_DIM * 4)))


def recsys(batch_size: int, size_mb: float = 50.0) -> tuple[Any, int]:
    """A recommendation-style model: each example looks up 16 random ids in an embedding table
    of ~``size_mb`` MB (on a PS: the gather runs there, so a worker pulls only the rows it looks
    up and pushes their IndexedSlices gradient), then a 1024 -> 256 -> 1 tower, logistic loss.
    The ids are uniform over the table, so the rows a step touches barely repeat. Under a
    partitioner the table is a PartitionedVariable: ``tf.nn.embedding_lookup`` (TF 2's, whose
    partition strategy is "div") sends each id to the part holding its row of the whole table,
    and gathers each part's ids on that part's PS."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    rows = recsys_rows(size_mb)
    table = tf1.get_variable("embedding/table", [rows, RECSYS_DIM],
                             initializer=tf1.random_normal_initializer(stddev=0.05))
    ids = tf.random.uniform([batch_size, RECSYS_FIELDS], 0, rows, dtype=tf.int64)
    h = tf.reshape(tf.nn.embedding_lookup(table, ids), [batch_size, RECSYS_FIELDS * RECSYS_DIM])
    for name, din, dout in (("tower1", RECSYS_FIELDS * RECSYS_DIM, 256), ("tower2", 256, 1)):
        h = _dense(h, name, din, dout)
        if name == "tower1":
            h = tf.nn.relu(h)
    labels = tf.cast(tf.random.uniform([batch_size, 1], 0, 2, dtype=tf.int32), tf.float32)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=h))
    return loss, batch_size


def mobilenet(batch_size: int) -> tuple[Any, int]:
    """tf_keras MobileNetV2 (weights=None, 1000 classes) on synthetic 128x128x3 images: many
    small tensors (depthwise convolutions, batch norms); batch-norm statistics not updated,
    as ``resnet50``."""
    return _keras_application("MobileNetV2", 128, batch_size)


def builder(name: str, size_mb: float = 50.0, dtype: str | None = None, recompute: int = 0
            ) -> Callable[[int], tuple[Any, int]]:
    """The builder for model ``name`` taking only the batch size (``size_mb``: the size of
    ``mlp``, ``deepmlp`` and ``recsys``'s table; the others have their own). ``dtype``: the
    compute dtype of the inputs (``HALF`` under mixed precision), for ``PRECISION_MODELS``
    only; None: float32. ``recompute``: recomputed segments of that many layers, for
    ``RECOMPUTE_MODELS`` only; 0: off."""
    if dtype is not None and name not in PRECISION_MODELS:
        raise ValueError(f"model {name!r} takes no dtype: only {', '.join(PRECISION_MODELS)}")
    if recompute and name not in RECOMPUTE_MODELS:
        raise ValueError(f"model {name!r} takes no recompute: only "
                         f"{', '.join(RECOMPUTE_MODELS)}")
    if name == "mlp":
        return lambda batch_size: mlp(batch_size, size_mb, dtype, recompute)
    if name == "deepmlp":
        return lambda batch_size: deepmlp(batch_size, size_mb, dtype, recompute)
    if name == "recsys":
        return lambda batch_size: recsys(batch_size, size_mb)
    if name == "convnet":
        return convnet
    if name == "resnet50":
        return resnet50
    if name == "mobilenet":
        return mobilenet
    if name in PAPER_MODELS:
        app, side = PAPER_MODELS[name]
        return lambda batch_size: _keras_application(app, side, batch_size)
    raise ValueError(f"unknown model {name!r}: expected one of {', '.join(MODELS)}")
