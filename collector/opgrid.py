"""The shape grid ``gradwire opdb build`` times: which ops, at which shapes and dtypes.

Pure data. Each family names the op type the step stats will show (oneDNN prefixes removed),
how to build it (``collector.opbench``'s builders, by name) and its axes; a point is one value
per axis. A family's points are its axes' full product, thinned to at most ``per_family`` by a
seeded choice that always keeps the smallest and largest corner, so a build is the same on
every machine and a second build with a larger budget adds points rather than moving them.

The op types are those the lab models' traces spend their compute in (MLPs, the convnet,
MobileNetV2, ResNet-50, the recommendation model's embedding): matrix products, 2-D and
depthwise convolutions and their gradients, batch norm, bias, activations, pooling, element-wise
adds and products, reductions, embedding gathers, the softmax loss and the gradient-descent
update. One family, ``CollectiveRingHop``, is not a graph op: a hop of the collective ring
all-reduce at chunks of 250 kB to 16 MB, which ``gradwire opdb build`` times apart, all its
points at once (collector/ringhop.py).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

FLOAT = ("float32",)
RING_HOP = "CollectiveRingHop"  # collector/ringhop.py: timed apart, all its points at once
# the attribute of a hop timed across a shaped link (scripts/diag_ring_hop_link.py): its TCP
# payload rate, bit/s
LINK_ATTR = "link_payload_bps"
FLOAT_AND_HALF = ("float32", "bfloat16")


@dataclass(frozen=True, kw_only=True)
class Family:
    """One op type's grid: ``op`` as step stats show it, the ``builder`` that makes it, its
    ``axes`` (name -> values) and ``dtypes``."""

    op: str
    builder: str
    axes: tuple[tuple[str, tuple[Any, ...]], ...]
    dtypes: tuple[str, ...] = FLOAT


def _family(op: str, builder: str, dtypes: tuple[str, ...] = FLOAT, **axes: tuple[Any, ...]
            ) -> Family:
    return Family(op=op, builder=builder, axes=tuple(axes.items()), dtypes=dtypes)


_MATMUL = {"m": (2, 8, 32, 128, 512, 2048), "k": (16, 64, 256, 1024, 4096),
           "n": (16, 64, 256, 1024, 4096)}
_CONV = {"batch": (1, 2, 8, 32), "hw": (7, 14, 28, 56, 112, 224),
         "cin": (3, 16, 32, 64, 128, 256, 512), "cout": (16, 32, 64, 128, 256, 512),
         "kernel": (1, 3, 5, 7), "stride": (1, 2)}
_DEPTHWISE = {"batch": (1, 2, 8, 32), "hw": (7, 14, 28, 56, 112),
              "cin": (16, 32, 64, 144, 384, 960),
              "kernel": (3, 5), "stride": (1, 2)}
_POOL = {"batch": (1, 2, 8, 32), "hw": (7, 14, 28, 56, 112), "c": (16, 64, 256, 1024),
         "window": (2, 3)}
_ELEMENTS = {"rows": (1, 8, 32, 128, 512, 2048), "cols": (16, 64, 256, 1024, 4096, 16384)}
_IMAGE = {"batch": (1, 2, 8, 32), "hw": (7, 14, 28, 56, 112), "c": (16, 32, 64, 256, 1024)}

FAMILIES: tuple[Family, ...] = (
    _family("MatMul", "matmul", FLOAT_AND_HALF, transpose=("", "a", "b"), **_MATMUL),
    _family("FusedMatMul", "fused_matmul", **_MATMUL),
    _family("Conv2D", "conv2d", FLOAT_AND_HALF, **_CONV),
    _family("FusedConv2D", "fused_conv2d", **_CONV),
    _family("Conv2DBackpropInput", "conv2d_backprop_input", **_CONV),
    _family("Conv2DBackpropFilter", "conv2d_backprop_filter", **_CONV),
    _family("DepthwiseConv2dNative", "depthwise", **_DEPTHWISE),
    _family("DepthwiseConv2dNativeBackpropInput", "depthwise_backprop_input", **_DEPTHWISE),
    _family("DepthwiseConv2dNativeBackpropFilter", "depthwise_backprop_filter", **_DEPTHWISE),
    _family("FusedBatchNormV3", "batch_norm", **_IMAGE),
    _family("FusedBatchNormGradV3", "batch_norm_grad", **_IMAGE),
    _family("MaxPool", "max_pool", **_POOL),
    _family("MaxPoolGrad", "max_pool_grad", **_POOL),
    _family("AvgPool", "avg_pool", **_POOL),
    _family("AvgPoolGrad", "avg_pool_grad", **_POOL),
    _family("BiasAdd", "bias_add", FLOAT_AND_HALF, **_ELEMENTS),
    _family("BiasAddGrad", "bias_add_grad", **_ELEMENTS),
    _family("Relu", "relu", FLOAT_AND_HALF, **_ELEMENTS),
    _family("ReluGrad", "relu_grad", **_ELEMENTS),
    _family("Relu6", "relu6", **_ELEMENTS),
    _family("Relu6Grad", "relu6_grad", **_ELEMENTS),
    _family("AddV2", "add", FLOAT_AND_HALF, **_ELEMENTS),
    _family("Mul", "mul", **_ELEMENTS),
    _family("AddN", "add_n", terms=(2, 4), **_ELEMENTS),
    _family("Sum", "reduce_sum", **_ELEMENTS),
    _family("ResourceApplyGradientDescent", "apply_gradient_descent", **_ELEMENTS),
    _family("ResourceGather", "gather", rows=(10_000, 100_000, 1_000_000),
            dim=(8, 16, 32, 64, 128), lookups=(32, 128, 512, 2048, 8192, 32768)),
    _family("UnsortedSegmentSum", "segment_sum", segments=(32, 256, 2048, 16384),
            dim=(8, 16, 32, 64, 128), lookups=(32, 128, 512, 2048, 8192, 32768)),
    _family("SparseSoftmaxCrossEntropyWithLogits", "softmax_xent",
            batch=(1, 2, 8, 32, 128, 512), classes=(2, 10, 100, 1000, 10000, 100000)),
    # not a graph op: one hop of the collective ring all-reduce, timed by two TensorFlow
    # processes on loopback (collector/ringhop.py); the chunk's float32 elements
    _family(RING_HOP, "ring_hop", elements=(62_500, 125_000, 250_000, 500_000, 1_000_000,
                                            2_000_000, 4_000_000)),
)


@dataclass(frozen=True, kw_only=True)
class Point:
    """One build job: a family's op at one point of its axes, in one dtype."""

    family: Family
    values: tuple[tuple[str, Any], ...]
    dtype: str

    def label(self) -> str:
        axes = ", ".join(f"{k}={v}" for k, v in self.values if v != "")
        return f"{self.family.op}[{axes}] {self.dtype}"


def points(families: tuple[Family, ...] = FAMILIES, per_family: int = 64, seed: int = 0
           ) -> Iterator[Point]:
    """Every family's points (at most ``per_family`` per family and dtype), in a fixed order."""
    for fam in families:
        names = [name for name, _ in fam.axes]
        full = list(itertools.product(*(values for _, values in fam.axes)))
        keep = full
        if len(full) > per_family:
            rng = random.Random(f"{seed}:{fam.op}")
            middle = full[1:-1]
            rng.shuffle(middle)
            keep = [full[0], full[-1], *middle[: max(0, per_family - 2)]][:per_family]
        for dtype in fam.dtypes:
            for combo in keep:
                yield Point(family=fam, values=tuple(zip(names, combo, strict=True)),
                            dtype=dtype)


def families_named(names: str | None) -> tuple[Family, ...]:
    """The families whose op is in the comma list ``names`` (all when None); raises
    ValueError naming the unknown ones."""
    if not names:
        return FAMILIES
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {f.op: f for f in FAMILIES}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise ValueError(f"unknown op type(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(known))}")
    return tuple(known[n] for n in wanted)


def grid_ops_of(ran: set[str]) -> tuple[list[str], list[str]]:
    """The grid's op types (in the grid's order) among ``ran``, the op types a job's steps
    ran, with the ring all-reduce's hop where it ran collectives (``Collective*``: the hop
    is what costs them); and the others of ``ran``, which the grid does not time."""
    ring = any(op.startswith("Collective") for op in ran)
    grid = [f.op for f in FAMILIES if f.op in ran or (ring and f.op == RING_HOP)]
    return grid, sorted(op for op in ran if op not in grid and not op.startswith("Collective"))
