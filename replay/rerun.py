"""What compute costs when a what-if runs it again, away from the transfers (issue 23).

Gradient accumulation runs a worker's forward and backward pass K times per update, and all
but one pass's worth of that compute runs after the pulls and before the pushes, with no
transfer of the worker's in flight. The profile's traced steps time their compute while the
step's tensors arrive and leave on the same cores: on the lab's 2-core machine the deep MLP's
matrix products took 73-79 us in the plain job's traced steps and 57 us in an accumulated
job's micro-steps, and its five traced steps' ops summed to 10.6-28.3 ms, falling step to
step, against about 8.5 ms a micro-step (docs/notes/recording-slowdown.md). Interference only
adds time, so each op's least-interfered execution, its minimum over the traced steps, is
the estimate of its cost on a quiet worker; the micro-step runs those ops one after another
(an accumulated job's trace: a micro-step's span within about 10% of its ops' sum).

``rerun_compute_us``: one pass of the compute at those times, after the op passes' ratios.
``add_us``: the accumulators' adds (read two tensors of the gradients' bytes, write one), at
the memory rate the traced element-wise ops reached (``elementwise_rate``).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from gradwire.collector.opshapes import ExecutedOp
from gradwire.opfeatures import tensor_bytes

# the element-wise ops whose bytes (inputs read, output written) set the memory rate
STREAMING = frozenset({"AddV2", "Add", "Sub", "Mul", "ReluGrad", "Relu", "BiasAdd",
                       "Maximum", "Minimum", "SquaredDifference", "RealDiv", "AddN"})


def least_times_us(steps: Sequence[Sequence[ExecutedOp]]) -> dict[str, float]:
    """Each traced op's minimum duration (µs) over the recorded ``steps``."""
    least: dict[str, float] = {}
    for ops in steps:
        for o in ops:
            least[o.name] = min(least.get(o.name, o.duration_us), o.duration_us)
    return least


def rerun_compute_us(steps: Sequence[Sequence[ExecutedOp]],
                     ratios: Mapping[str, float] | None = None) -> float:
    """One pass of the step's compute on a quiet worker (µs): each op at its least traced
    time (times its op passes' ratio, ``ratios``), one after another. 0 without ops."""
    ratios = ratios or {}
    return sum(t * ratios.get(name, 1.0) for name, t in least_times_us(steps).items())


def elementwise_rate(steps: Sequence[Sequence[ExecutedOp]]) -> float | None:
    """Bytes per µs the traced element-wise ops moved (inputs read and output written, each
    op at its least time): the median over those ops; None when the steps have none with
    their shapes recorded."""
    least = least_times_us(steps)
    seen: dict[str, float] = {}
    for ops in steps:
        for o in ops:
            if (o.op in STREAMING and o.name not in seen and least.get(o.name, 0.0) > 0
                    and all(s is not None for s in o.inputs)):
                moved = tensor_bytes([*o.inputs, *o.outputs], o.dtype)  # type: ignore[list-item]
                if moved > 0:
                    seen[o.name] = moved / least[o.name]
    return statistics.median(seen.values()) if seen else None


def add_us(gradient_bytes: float, rate_bytes_per_us: float) -> float:
    """One micro-step's adds into the accumulators (µs): each gradient byte read twice (the
    sum and the new gradient) and written once, at ``rate_bytes_per_us``."""
    return 3.0 * gradient_bytes / rate_bytes_per_us
