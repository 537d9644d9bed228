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
(an accumulated job's trace: a micro-step's span within about 10% of its ops' sum). Where
every traced step ran beside transfers, even the least instance is interfered with (the
convnet at 700 Mbit/s: its ops' least times sum to 31.5 ms, its lab micro-step took 23.5 ms).
With the op cost database (``--opdb``), timed on this machine with nothing else running, each
op costs the smaller of its least traced time and the database's time at its traced shapes:
both over-estimate the quiet op (the one by interference, the other by a lone call's
overheads, which put the deep MLP's small ops at 15.6 ms in all against 6.9 ms traced), so
the smaller is the nearer. No constant is involved.

The same holds for compute a what-if moves away from the transfers without running it again:
tensor fusion holds every push until the bucket's last gradient is ready, so the backward
pass that ran beside the earlier pushes in the profile runs with none of the worker's
transfers in flight (``quiet_compute_ops``), and ``run_quiet`` costs it at the same quiet
times. Where the job's step was run whole on the machine (``gradwire opdb step``), that
timing is the quiet rate, measured: the moved ops' least times are scaled so that the step's
compute comes to it (``step_scale``; the convnet b40 at 900 Mbit/s: its backward ops' least
times summed 32.2 ms in the plain job's trace and 23.4 ms in the fused job's own).

``rerun_compute_us``: one pass of the compute at those times, after the op passes' ratios.
``add_us``: the accumulators' adds (read two tensors of the gradients' bytes, write one), at
the memory rate the traced element-wise ops reached (``elementwise_rate``).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gradwire.collector.opshapes import ExecutedOp
from gradwire.opfeatures import tensor_bytes
from gradwire.replay.template import DOWN, UP, StepTemplate

if TYPE_CHECKING:
    from gradwire.replay.opcost import CostModel

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


def quiet_times_us(steps: Sequence[Sequence[ExecutedOp]],
                   model: CostModel | None = None) -> dict[str, float]:
    """Each traced op's cost on a quiet worker (µs): its least traced time, or with ``model``
    (the op cost database) the database's time at the op's traced shapes where that is less."""
    least = least_times_us(steps)
    if model is None:
        return least
    from gradwire.replay.opcost import shaped_row

    seen: set[str] = set()
    for ops in steps:
        for o in ops:
            if o.name in seen or any(s is None for s in (*o.inputs, *o.outputs)):
                continue
            seen.add(o.name)
            row = shaped_row(o.op, o.inputs, o.outputs, o.attrs, o.dtype)  # type: ignore[arg-type]
            db = model.predict_us(o.op, row, o.dtype, o.device)
            if db is not None and db < least[o.name]:
                least[o.name] = db
    return least


def rerun_compute_us(steps: Sequence[Sequence[ExecutedOp]],
                     ratios: Mapping[str, float] | None = None,
                     model: CostModel | None = None) -> float:
    """One pass of the step's compute on a quiet worker (µs): each op at its quiet time
    (``quiet_times_us``; times its op passes' ratio, ``ratios``), one after another. 0
    without ops."""
    ratios = ratios or {}
    return sum(t * ratios.get(name, 1.0) for name, t in quiet_times_us(steps, model).items())


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


def copy_us(nbytes: float, rate_bytes_per_us: float) -> float:
    """A copy of ``nbytes`` (µs): each byte read once and written once, at
    ``rate_bytes_per_us`` (tensor fusion's bucket, replay/tensorpasses.py)."""
    return 2.0 * nbytes / rate_bytes_per_us


def add_us(gradient_bytes: float, rate_bytes_per_us: float) -> float:
    """One micro-step's adds into the accumulators (µs): each gradient byte read twice (the
    sum and the new gradient) and written once, at ``rate_bytes_per_us``."""
    return 3.0 * gradient_bytes / rate_bytes_per_us


Members = tuple[tuple[str, float], ...]  # a compute op's traced ops: (name, own time us)


def quiet_compute_ops(t: StepTemplate) -> list[int]:
    """The compute ops of ``t`` (coarsened chunks of traced ops) that run with none of the
    worker's own transfers in flight: each waits for every pull of the step, and every push
    waits for it."""
    from gradwire.replay.transforms import is_compute

    preds = t.predecessors()
    before: list[set[int]] = []  # each op's transitive predecessors (index order: topological)
    for i in range(len(t.kind)):
        acc: set[int] = set()
        for p in preds[i]:
            acc.add(p)
            acc |= before[p]
        before.append(acc)
    downs = [i for i, k in enumerate(t.kind) if k == DOWN]
    ups = [i for i, k in enumerate(t.kind) if k == UP]
    members = t.members if len(t.members) == len(t.kind) else [()] * len(t.kind)
    return [i for i, (k, n) in enumerate(zip(t.kind, t.name, strict=True))
            if is_compute(k, n) and members[i]
            and all(d in before[i] for d in downs) and all(i in before[u] for u in ups)]


def quiet_members(t: StepTemplate) -> set[Members]:
    """The traced ops (``Members``) of each of ``t``'s quiet compute ops: what already ran
    with none of the worker's transfers in flight in the profile."""
    return {t.members[i] for i in quiet_compute_ops(t)}


def moved_names(templates: Sequence[StepTemplate], was_quiet: Sequence[set[Members]]
                ) -> set[str]:
    """The traced ops a what-if moves away from the transfers: the members of each
    template's quiet compute ops (``quiet_compute_ops``) that were not quiet in the profile
    (``was_quiet``, the profile's template's ``quiet_members``, one set per template)."""
    return {name for t, was in zip(templates, was_quiet, strict=True)
            for i in quiet_compute_ops(t) if t.members[i] not in was
            for name, _ in t.members[i]}


def step_scale(quiet_us: Mapping[str, float], moved: set[str], step_us: float) -> float:
    """The factor on the ``moved`` ops' least traced times (``quiet_us``, µs) that makes
    the step's compute total ``step_us``, the step run whole and timed on the machine with
    nothing else running (``gradwire opdb step``), the others kept at theirs: what the
    moved ops ran slower beside the transfers than alone. At most 1 (interference only adds
    time); where the others alone come to ``step_us`` or more, every op's share of it
    (``step_us`` over their sum, at most 1). No constant: the two sums and the timing."""
    moved_us = sum(us for n, us in quiet_us.items() if n in moved)
    kept_us = sum(us for n, us in quiet_us.items() if n not in moved)
    if moved_us > 0 and step_us > kept_us:
        return min(1.0, (step_us - kept_us) / moved_us)
    total = moved_us + kept_us
    return min(1.0, step_us / total) if total > 0 else 1.0


def run_quiet(t: StepTemplate, was_quiet: set[Members], quiet_us: Mapping[str, float]
              ) -> StepTemplate:
    """``t`` with each compute op that is quiet in it (``quiet_compute_ops``) but ran beside
    the worker's transfers in the profile (its members not in ``was_quiet``) costed at its
    traced ops' quiet times (``quiet_us``: ``quiet_times_us``): its time, executor gaps
    included, times their sum over its traced ops' own times."""
    amount = list(t.amount)
    for i in quiet_compute_ops(t):
        members = t.members[i]
        traced = sum(us for _, us in members)
        if members not in was_quiet and traced > 0:
            amount[i] *= min(1.0, sum(min(us, quiet_us.get(name, us)) for name, us in members)
                             / traced)
    return dataclasses.replace(t, amount=amount)
