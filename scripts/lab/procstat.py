"""The machine's CPU counters from /proc/stat, read by the orchestrator's sampler and by every
worker at each step end (a node's network namespace does not hide /proc/stat)."""

from __future__ import annotations

import os

CLK_TCK = os.sysconf("SC_CLK_TCK")


def host_cpu_ticks() -> tuple[int, int, int]:
    """(busy, softirq, steal) clock ticks of every CPU since boot, from /proc/stat's ``cpu``
    line: busy is user, nice, system, irq and softirq (guest time is inside user and nice;
    iowait is not this machine's work); steal is the time a virtual machine's hypervisor ran
    something else while this machine had work (0 on bare metal): the CPU a noisy neighbour
    takes, which slows every node alike."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    steal = fields[7] if len(fields) > 7 else 0
    return fields[0] + fields[1] + fields[2] + fields[5] + fields[6], fields[6], steal
