"""Workers and PSes that share one host's cores (``gradwire predict --host-cores``).

By default the replay gives every worker a machine of its own: a compute chunk lasts what the
profile traced, however many workers compute at once. A cluster packed onto one host (the
project's lab runs every worker and PS on one machine's cores) cannot: while more compute
runs than the host has cores, each runs slower. ``--host-cores N`` replays that as processor
sharing, in the kernel's coupled group of ports (``taskgraph.NET``): every worker's compute
chunk and every PS's update chunk is a flow across the host's port and a port of its own;
the host's port carries N cores, a flow's own port the cores one chunk uses while it runs
(``HostShare.chunk_cores``), and the group's max-min fair rates give each running chunk
``min(1, N / (c x n))`` of its traced speed when n chunks of c cores run.

``chunk_cores`` comes from the profile's trace: the busy-time weighted op concurrency of the
worker's compute chunks (the traced ops' durations over the chunks' busy spans), at least
one core (a chunk's executor gaps are the executor's own work) and at most the host's. TF's
intra-op threads are not in the trace, so this is a lower bound of what a chunk keeps busy.
The PS's update chunks are charged the same. The profile's own run (one worker beside its
PSes) shares the host too, and its traced times already carry that.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from gradwire.errors import PredictError
from gradwire.replay.template import GAP, WORKER, StepTemplate


class HostShare(NamedTuple):
    """One host's cores shared by every worker's and PS's compute: ``cores`` of the host,
    ``chunk_cores`` the cores one running compute chunk uses (both in cores)."""

    cores: float
    chunk_cores: float

    @property
    def chunks_at_full_speed(self) -> float:
        """How many chunks run at once before each slows (the host's port, in chunks)."""
        return self.cores / self.chunk_cores


def traced_chunk_cores(templates: Sequence[StepTemplate]) -> float:
    """The busy-time weighted op concurrency of the templates' worker compute chunks: the
    summed traced durations of their ops over the chunks' summed busy spans (cores; 1.0
    without traced ops). The client's gap between steps is left out (it has no ops)."""
    ops_us = span_us = 0.0
    for t in templates:
        for kind, name, amount, members in zip(t.kind, t.name, t.amount, t.members,
                                               strict=True):
            if kind != WORKER or name == GAP or amount <= 0.0 or not members:
                continue
            ops_us += sum(us for _, us in members)
            span_us += amount
    return ops_us / span_us if span_us > 0.0 else 1.0


def cores_of(spec: str | float) -> float:
    """A number of cores from ``--host-cores N``; ValueError unless finite and above 0."""
    cores = float(spec)
    if not (math.isfinite(cores) and cores > 0):
        raise ValueError(f"{spec!r} is not a number of cores above 0")
    return cores


def host_share(spec: str | float | None, templates: Sequence[StepTemplate],
               lab: dict) -> HostShare | None:
    """The host of ``--host-cores``: ``None``/``off`` none (every node its own machine);
    ``auto`` the cores of the machine the profile's lab ran on (its ``lab_result.json``'s
    ``cpu_count``; PredictError for a profile from no lab); a number of cores. Its chunks'
    cores come from the trace (``traced_chunk_cores``), between 1 and the host's cores."""
    if spec is None or spec == "off":
        return None
    if spec == "auto":
        spec = lab.get("cpu_count") or 0
        if not spec:
            raise PredictError("--host-cores auto needs a profile recorded by the lab (its "
                               "lab_result.json names the machine's cores): give the cores, "
                               "--host-cores N", usage=True)
    try:
        cores = cores_of(spec)
    except ValueError:
        raise PredictError(f"--host-cores {spec}: give a number of cores above 0, auto or "
                           "off", usage=True) from None
    return HostShare(cores, min(cores, max(1.0, traced_chunk_cores(templates))))
