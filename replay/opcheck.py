"""Whole steps costed from the op cost database, against the steps a bundle traced.

For each recorded step of a worker, every compute op gets the database's time for its type
and shapes (``replay.opcost.CostModel``: the measured point, else the regression); ops of a
type the database has no rows of keep their traced time and count as not covered. Two step
measures are compared, predicted against traced:

* ``compute_sum``: the sum of the covered ops' times (what one core would take);
* ``critical_path``: the longest chain of the worker's data-flow graph (its partition graph's
  edges, data and control), weighted by op times, transfers and waits weighing nothing: the
  compute a step cannot go below however many cores run it (Huang et al.'s replay with
  unbounded inter-op parallelism).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from gradwire.collector.opshapes import ExecutedOp

from .opcost import CostModel, shaped_row


@dataclass(frozen=True, kw_only=True)
class StepCheck:
    """One step: traced and predicted compute sums and critical paths (µs), the share of
    the traced compute time whose op types the database covers, and the step's peak memory
    (bytes) as its tensors' lifetimes give it and as TensorFlow's allocator counted it, both
    without the tensors received from other tasks (``received_bytes`` in all;
    replay/memory.py); the lifetimes hold each sent tensor until its last byte left the
    worker where the capture shows it (``sends_held`` of them: replay/sentholds.py), and
    ``local_peak_bytes`` is the estimate that frees them at their last local reader."""

    step: int
    traced_sum_us: float
    predicted_sum_us: float
    traced_path_us: float
    predicted_path_us: float
    covered_share: float
    estimated_peak_bytes: float = 0.0
    allocator_peak_bytes: float = 0.0
    received_bytes: float = 0.0
    local_peak_bytes: float = 0.0
    sends_held: int = 0

    def memory_error(self, local: bool = False) -> float | None:
        """(estimated - TensorFlow's allocator peak) / that peak, the estimate that holds the
        sends or with ``local`` the one that frees them at once; None without records."""
        if self.allocator_peak_bytes <= 0:
            return None
        est = self.local_peak_bytes if local else self.estimated_peak_bytes
        return (est - self.allocator_peak_bytes) / self.allocator_peak_bytes

    def sum_error(self) -> float:
        return (self.predicted_sum_us - self.traced_sum_us) / self.traced_sum_us

    def path_error(self) -> float:
        return (self.predicted_path_us - self.traced_path_us) / self.traced_path_us


def critical_path_us(ops: Sequence[ExecutedOp], weight: dict[str, float]) -> float:
    """Longest chain through ``ops`` (their ``preds`` edges; a predecessor not among them
    weighs nothing and starts nothing), each op weighing ``weight[name]`` (0 if absent). An
    edge that closes a cycle (a while loop's back edge, NextIteration to Merge) is ignored."""
    by_name = {o.name: o for o in ops}
    finish: dict[str, float] = {}
    on_path: set[str] = set()
    for root in by_name:
        if root in finish:
            continue
        stack = [(root, False)]
        while stack:
            name, expanded = stack.pop()
            if name in finish:
                continue
            if expanded:
                on_path.discard(name)
                preds = [p for p in by_name[name].preds if p in finish]
                finish[name] = weight.get(name, 0.0) + max(
                    (finish[p] for p in preds), default=0.0)
                continue
            on_path.add(name)
            stack.append((name, True))
            stack.extend((p, False) for p in by_name[name].preds
                         if p in by_name and p not in finish and p not in on_path)
    return max(finish.values(), default=0.0)


def check_step(step: int, ops: Sequence[ExecutedOp], model: CostModel,
               compute: frozenset[str]) -> StepCheck | None:
    """Compare one step (``ops``: all of one device's executed ops; ``compute``: the names of
    the compute ones) with its costing by ``model``; None when it has no compute."""
    traced: dict[str, float] = {}
    predicted: dict[str, float] = {}
    covered = 0.0
    for o in ops:
        if o.name not in compute:
            continue
        traced[o.name] = o.duration_us
        guess = None
        if all(s is not None for s in o.inputs):
            row = shaped_row(o.op, o.inputs, o.outputs, o.attrs, o.dtype)  # type: ignore[arg-type]
            guess = model.predict_us(o.op, row, o.dtype, o.device)
        if guess is None:
            predicted[o.name] = o.duration_us
        else:
            predicted[o.name] = guess
            covered += o.duration_us
    total = sum(traced.values())
    if total <= 0:
        return None
    return StepCheck(step=step, traced_sum_us=total, predicted_sum_us=sum(predicted.values()),
                     traced_path_us=critical_path_us(ops, traced),
                     predicted_path_us=critical_path_us(ops, predicted),
                     covered_share=covered / total)


def summarise(checks: Sequence[StepCheck]) -> dict[str, float | None]:
    """Medians over the steps: errors (fractions), covered share, peak memory."""
    memory = [e for c in checks if (e := c.memory_error()) is not None]
    memory_local = [e for c in checks if (e := c.memory_error(local=True)) is not None]
    return {"steps": len(checks),
            "memory_error": statistics.median(memory) if memory else None,
            "estimated_peak_bytes": statistics.median(c.estimated_peak_bytes for c in checks),
            "allocator_peak_bytes": statistics.median(c.allocator_peak_bytes for c in checks),
            "received_bytes": statistics.median(c.received_bytes for c in checks),
            "local_peak_bytes": statistics.median(c.local_peak_bytes for c in checks),
            "local_memory_error": statistics.median(memory_local) if memory_local else None,
            "sends_held": statistics.median(c.sends_held for c in checks),
            "sum_error": statistics.median(c.sum_error() for c in checks),
            "path_error": statistics.median(c.path_error() for c in checks),
            "covered_share": statistics.median(c.covered_share for c in checks),
            "traced_path_us": statistics.median(c.traced_path_us for c in checks),
            "predicted_path_us": statistics.median(c.predicted_path_us for c in checks)}
