"""Profiling from a capture alone (MASCOTS'18 section III-A): per worker and step, the downlink
time S^D, worker time S^W, uplink time S^U and server time S^S, and the bytes each way.

From the RecvTensor streams of a capture (decoded rendezvous keys give the direction: a tensor
sent by a PS is downlink, by a worker uplink; step ids group a step): S^D spans the step's
downlink DATA, S^W runs from the end of the downlink to the first uplink DATA, S^U spans the
uplink DATA, and S^S runs from the end of the uplink to the first downlink DATA of the worker's
next step. Phase bounds come from the streams holding at least 1% of their direction's bytes.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from gradwire.records import Stream

PHASES = ("downlink", "worker", "uplink", "server")


def sending_job(stream: Stream) -> str | None:
    """Job of the device that sends a RecvTensor stream's tensor (from its rendezvous key)."""
    if not stream.tensor:
        return None
    src = stream.tensor.split(";", 1)[0]
    return src.split("/job:", 1)[1].split("/", 1)[0] if "/job:" in src else None


@dataclass(frozen=True)
class StepPhases:
    """One step of one worker: phase durations in seconds and bytes each way."""

    worker: str
    step_id: int
    start_s: float
    downlink_s: float
    worker_s: float
    uplink_s: float
    server_s: float | None
    down_bytes: int
    up_bytes: int


def worker_of(stream: Stream) -> str:
    """The worker side of a RecvTensor stream: the client of a pull, the server of a push."""
    return stream.client.rsplit(":", 1)[0] if sending_job(stream) == "ps" else stream.server


BULK_SHARE = 0.01  # streams below this share of a direction's bytes do not set phase bounds


def _span(streams: list[Stream]) -> tuple[int, int]:
    """First and last DATA of the streams that carry the bulk of the bytes (a 4-byte constant
    pulled at the start of a step must not stretch the uplink phase over the whole step)."""
    total = sum(s.response_bytes for s in streams)
    bulk = [s for s in streams if s.response_bytes >= BULK_SHARE * total] or streams
    return min(s.first_data_ns for s in bulk), max(s.last_data_ns for s in bulk)


def step_phases(streams: Iterable[Stream]) -> list[StepPhases]:
    """Phases of every (worker, step) that has both downlink and uplink streams, in time order."""
    groups: dict[tuple[str, int], dict[str, list[Stream]]] = defaultdict(
        lambda: {"ps": [], "worker": []})
    for s in streams:
        job = sending_job(s)
        if job in ("ps", "worker") and s.step_id is not None and s.first_data_ns is not None:
            key = (worker_of(s).rsplit(":", 1)[0], s.step_id)
            groups[key][job].append(s)
    rows: list[StepPhases] = []
    by_worker: dict[str, list[tuple[int, int, int, int, int, int, int]]] = defaultdict(list)
    for (worker, step), g in groups.items():
        down, up = g["ps"], g["worker"]
        if not down or not up:
            continue
        d0, d1 = _span(down)
        u0, u1 = _span(up)
        by_worker[worker].append((d0, d1, u0, u1, step, sum(s.response_bytes for s in down),
                                  sum(s.response_bytes for s in up)))
    for worker, steps in by_worker.items():
        steps.sort()
        for i, (d0, d1, u0, u1, step, nd, nu) in enumerate(steps):
            nxt = steps[i + 1][0] if i + 1 < len(steps) else None
            rows.append(StepPhases(worker, step, d0 / 1e9, (d1 - d0) / 1e9, (u0 - d1) / 1e9,
                                   (u1 - u0) / 1e9, None if nxt is None else (nxt - u1) / 1e9,
                                   nd, nu))
    return sorted(rows, key=lambda r: (r.worker, r.start_s))


def summarize_phases(rows: list[StepPhases], skip: int = 1) -> dict[str, dict[str, float]]:
    """Mean, std, median and count of each phase and of bytes per worker, after ``skip``
    warm-up steps of each worker."""
    out: dict[str, dict[str, float]] = {}
    for worker in sorted({r.worker for r in rows}):
        mine = [r for r in rows if r.worker == worker][skip:]
        stats: dict[str, float] = {"steps": len(mine)}
        for name in (*PHASES, "down_bytes", "up_bytes"):
            vals = [v for r in mine if (v := getattr(r, name if "bytes" in name
                                                     else f"{name}_s")) is not None]
            if vals:
                stats[f"{name}_mean"] = statistics.fmean(vals)
                stats[f"{name}_std"] = statistics.pstdev(vals)
                stats[f"{name}_median"] = statistics.median(vals)
        out[worker] = stats
    return out
