"""The machine's CPU counters from /proc/stat (Linux): what every core did since boot, read by
``gradwire collect`` over its capture and by the lab's orchestrator and workers. A node's
network namespace does not hide /proc/stat."""

from __future__ import annotations

import os
from typing import NamedTuple

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# a machine that lost more than this share of its cores to its hypervisor over a run did not
# run the job at its own speed: one-worker lab runs that lost 0.3 of 2 cores or more were
# 5-47% slow, those under 0.2 within 3.3% (docs/preregistered/issue21-steal-drift-report.md;
# set from throughput against steal, not from any prediction's error). The accuracy bench
# runs such a run again, the lab's summary and `gradwire predict` say so.
STOLEN_SHARE_LIMIT = 0.1


def too_much_stolen(stolen_cores: float, cores: int | float) -> bool:
    """Whether ``stolen_cores`` is more than ``STOLEN_SHARE_LIMIT`` of a machine's ``cores``."""
    return stolen_cores > STOLEN_SHARE_LIMIT * cores


def host_cpu_ticks() -> tuple[int, int, int]:
    """(busy, softirq, steal) clock ticks of every CPU since boot, from /proc/stat's ``cpu``
    line: busy is user, nice, system, irq and softirq (guest time is inside user and nice;
    iowait is not this machine's work); steal is the time a virtual machine's hypervisor ran
    something else while this machine had work (0 on bare metal): the CPU a noisy neighbour
    takes, which slows every process alike. OSError where there is no /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    steal = fields[7] if len(fields) > 7 else 0
    return fields[0] + fields[1] + fields[2] + fields[5] + fields[6], fields[6], steal


class HostCpu(NamedTuple):
    """The machine's CPU over a span: its ``seconds``, the cores busy and the cores stolen by
    its hypervisor on average (cores; 1.0 is one core all the time)."""

    seconds: float
    busy_cores: float
    stolen_cores: float


def cores_between(start: tuple[int, ...], end: tuple[int, ...],
                  seconds: float) -> tuple[float, ...]:
    """Each counter of two ``host_cpu_ticks`` readings ``seconds`` (> 0) apart as the cores it
    kept busy on average: (busy, softirq, steal)."""
    return tuple((b - a) / CLK_TCK / seconds for a, b in zip(start, end, strict=True))


def host_cpu_between(start: tuple[int, int, int], end: tuple[int, int, int],
                     seconds: float) -> HostCpu | None:
    """The machine's CPU between two ``host_cpu_ticks`` readings ``seconds`` apart; None over
    no time."""
    if seconds <= 0:
        return None
    busy, _, stolen = cores_between(start, end, seconds)
    return HostCpu(seconds, busy, stolen)
