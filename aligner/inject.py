"""Shift loaded nodes onto other clocks: known offsets for validating the aligner.

Lab nodes share one physical clock, so their true offsets are zero; adding a known offset per
domain to every timestamp recorded in it (TF ops of its devices, its capture) gives data whose
true offsets are known. Nothing on disk changes.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

from gradwire.aligner.nodes import Domains, NodeData
from gradwire.records import OpRecord, StepTrace, Stream


def random_offsets_us(domains: Sequence[str], seed: int, low_ms: float = 0.1,
                      high_ms: float = 50.0) -> dict[str, float]:
    """A random offset per domain, ``low_ms``..``high_ms`` in magnitude, random sign, integer
    microseconds (capture times are nanoseconds, op times microseconds)."""
    rng = random.Random(seed)
    return {d: float(rng.choice((-1, 1)) * round(rng.uniform(low_ms, high_ms) * 1000))
            for d in domains}


def _shift_op(op: OpRecord, us: int) -> OpRecord:
    return dataclasses.replace(op, start_us=op.start_us + us, end_us=op.end_us + us)


def _shift_stream(s: Stream, ns: int) -> Stream:
    def sh(v: int | None) -> int | None:
        return None if v is None else v + ns
    return dataclasses.replace(
        s, request_ns=sh(s.request_ns), first_data_ns=sh(s.first_data_ns),
        last_data_ns=sh(s.last_data_ns), end_ns=sh(s.end_ns),
        intervals_ns=tuple((a + ns, b + ns) for a, b in s.intervals_ns))


def shift_nodes(nodes: Sequence[NodeData], domains: Domains, offsets_us: dict[str, float],
                capture_only: bool = False) -> list[NodeData]:
    """Copies of ``nodes`` with every timestamp of domain ``d`` moved by ``offsets_us[d]``.

    With ``capture_only``, only capture times move (a capture clock disagreeing with TF's).
    """
    out = []
    for n in nodes:
        steps = n.steps
        if not capture_only:
            steps = [StepTrace(step=t.step, deps=t.deps, devices=t.devices, ops=tuple(
                _shift_op(op, int(offsets_us.get(domains.of_device(op.device), 0)))
                for op in t.ops)) for t in n.steps]
        ns = int(offsets_us.get(n.domain, 0) * 1000)
        out.append(dataclasses.replace(n, steps=steps,
                                       streams=[_shift_stream(s, ns) for s in n.streams]))
    return out
