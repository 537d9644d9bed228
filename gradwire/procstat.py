"""The machine's CPU counters from /proc/stat (Linux): what every core did since boot, read by
``gradwire collect`` over its capture and by the lab's orchestrator and workers. A node's
network namespace does not hide /proc/stat."""

from __future__ import annotations

import os
from typing import NamedTuple

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


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


def host_cpu_between(start: tuple[int, int, int], end: tuple[int, int, int],
                     seconds: float) -> HostCpu | None:
    """The machine's CPU between two ``host_cpu_ticks`` readings ``seconds`` apart; None over
    no time."""
    if seconds <= 0:
        return None
    return HostCpu(seconds, (end[0] - start[0]) / CLK_TCK / seconds,
                   (end[2] - start[2]) / CLK_TCK / seconds)
