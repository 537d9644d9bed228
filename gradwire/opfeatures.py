"""Cost features of one op from its type, shapes and attributes: floating-point operations and
bytes moved, the two axes of a roofline. Pure; shared by the database's writers and its
regression.

FLOPs count a multiply-add as 2. Per op family:

* matrix products (``MatMul``, ``FusedMatMul``, ``BatchMatMul*``): 2 x output elements x the
  inner dimension;
* convolutions (``Conv2D``, ``FusedConv2D`` and both backprops): 2 x (output, or output
  gradient) elements x kernel height x width x input channels; depthwise ones without the
  input channels;
* pooling and its gradients: output (gradient) elements x window size (``ksize``);
* gathers (``*Gather*``, in ``features``): the output's element count;
* everything else (element-wise, reductions, batch norm, optimizer updates): the largest
  tensor's element count, one operation per element.

Bytes are the sum of every input and output tensor's elements times the dtype's size; for a
gather, whose table input is only read where it is looked up, the output counted twice (read
from the table, written out) plus the indices.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

DTYPE_SIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8,
              "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "bool": 1, "uint32": 4,
              "uint64": 8}
_PREFIXES = ("_MklNative", "_Mkl", "_")
Shape = Sequence[int]


def canonical_op(op: str) -> str:
    """The op type without TensorFlow's oneDNN (``_MklNative``, ``_Mkl``) or internal (``_``)
    prefix: ``_MklNativeFusedConv2D`` -> ``FusedConv2D``; transfer ops (``_Recv``, ``_Send``,
    ``_Arg``, ``_Retval``, ``_HostRecv``, ``_HostSend``) keep theirs."""
    if op in ("_Recv", "_Send", "_Arg", "_Retval", "_HostRecv", "_HostSend", "_SOURCE",
              "_SINK"):
        return op
    for prefix in _PREFIXES:
        if op.startswith(prefix) and len(op) > len(prefix):
            return op[len(prefix):]
    return op


def device_type(device: str) -> str:
    """``/job:worker/replica:0/task:0/device:CPU:0`` -> ``CPU``."""
    tail = device.rpartition("device:")[2] if "device:" in device else device
    return tail.split(":")[0].upper() or "CPU"


def elements(shape: Shape | None) -> int:
    """Element count of ``shape`` (0 when unknown or with an unknown dimension)."""
    if shape is None or any(d < 0 for d in shape):
        return 0
    return math.prod(shape)


def _nhwc(attrs: Mapping[str, Any], values: Sequence[int]) -> tuple[int, int]:
    """(height, width) of a 4-vector attribute in the op's data format."""
    if len(values) != 4:
        return 1, 1
    if str(attrs.get("data_format", "NHWC")).startswith("NC"):
        return int(values[2]), int(values[3])
    return int(values[1]), int(values[2])


def flops(op: str, inputs: Sequence[Shape | None], outputs: Sequence[Shape],
          attrs: Mapping[str, Any]) -> float:
    """Floating-point operations of one execution of ``op`` (canonical type) at these
    shapes (see the module's rules)."""
    out = elements(outputs[0]) if outputs else 0
    shapes = [s for s in (*inputs, *outputs) if s is not None]
    largest = max((elements(s) for s in shapes), default=0)
    a = inputs[0] if inputs else None
    if op in ("MatMul", "FusedMatMul") and a is not None and len(a) == 2:
        inner = a[0] if attrs.get("transpose_a") else a[1]
        return 2.0 * out * inner
    if op.startswith("BatchMatMul") and a is not None and len(a) >= 2:
        inner = a[-2] if attrs.get("adj_x") else a[-1]
        return 2.0 * out * inner
    if op in ("Conv2D", "FusedConv2D") and len(inputs) >= 2 and inputs[1] is not None:
        kh, kw, cin = inputs[1][:3]
        return 2.0 * out * kh * kw * cin
    if op == "Conv2DBackpropInput" and len(inputs) >= 3 and inputs[1] is not None:
        kh, kw, cin = inputs[1][:3]
        return 2.0 * elements(inputs[2]) * kh * kw * cin
    if op == "Conv2DBackpropFilter" and len(inputs) >= 3 and outputs:
        kh, kw, cin = outputs[0][:3]
        return 2.0 * elements(inputs[2]) * kh * kw * cin
    if op.startswith("DepthwiseConv2dNative") and len(inputs) >= 2:
        kernel = outputs[0] if op.endswith("BackpropFilter") and outputs else inputs[1]
        grad = inputs[2] if op.endswith(("BackpropInput", "BackpropFilter")) and len(inputs) > 2 \
            else outputs[0] if outputs else None
        if kernel is not None and len(kernel) >= 2:
            return 2.0 * elements(grad) * kernel[0] * kernel[1]
    if "Pool" in op and "ksize" in attrs:
        kh, kw = _nhwc(attrs, attrs["ksize"])
        grad = inputs[-1] if op.endswith("Grad") and inputs else outputs[0] if outputs else None
        return float(elements(grad) * kh * kw)
    return float(largest)


def tensor_bytes(shapes: Sequence[Shape | None], dtype: str) -> float:
    """Bytes of the tensors of ``shapes``, each of element type ``dtype`` (4 bytes when the
    dtype has no fixed size)."""
    size = DTYPE_SIZE.get(dtype, 4)
    return float(sum(elements(s) for s in shapes) * size)


def features(op: str, inputs: Sequence[Shape | None], outputs: Sequence[Shape],
             attrs: Mapping[str, Any], dtype: str) -> tuple[float, float]:
    """(FLOPs, bytes of inputs and outputs) of one execution of ``op``."""
    if "Gather" in op and outputs:
        return float(elements(outputs[0])), tensor_bytes([outputs[0], outputs[0]], dtype) + \
            tensor_bytes(inputs[1:2], "int32")
    return flops(op, inputs, outputs, attrs), tensor_bytes([*inputs, *outputs], dtype)
