"""The workers' HTTP/2 PINGs on the pull connections, as the host-queue replay times them.

A pull the PS's own queue dropped with nothing in flight is *held* (replay/hostqueue.py): in
Linux it waits in the socket for the probe timer (an RTO) unless something makes TCP try again
first. In the lab the worker's next PING on that connection does: the PS's gRPC answers it with
a PING ACK, and that write sends what waits (``tcp_push``), if the queue has room by then
(docs/notes/issue22-sync-bbr-v1.md, "Bare pulls"; collector/h2pings.py). So a held connection
tries again at the earlier of its probe timer and its worker's next PING plus the PS's answer.

When a worker pings is gRPC's own timing, so each connection's PINGs follow the intervals the
profile's PS capture shows (``Profile.ps_pings``), in turn and over again, from a start and a
first interval of the connection's own (``ping_seed``): the same for the kernel
(replay/hqkernel.py) and its oracle (replay/hostqueue.py). No intervals: no PINGs, a held
connection waits for its timer. Times in microseconds.
"""

from __future__ import annotations

import math

import numpy as np

from gradwire.jit import njit

__all__ = ["next_ping", "ping_row", "ping_seed"]


@njit(cache=True)
def ping_seed(queue: int, conn: int) -> int:
    """Where connection ``conn`` of host queue ``queue`` starts in its PINGs' cycle (a draw
    of its own, as ``hostqueue.bbr_seed`` is BBR's)."""
    return (queue * 15485863 + conn * 32452843 + 7) % 2147483647


@njit(cache=True)
def next_ping(now: float, intervals: np.ndarray, seed: int) -> float:
    """The first PING after ``now`` (us) of a connection whose PINGs come ``intervals`` apart
    (us; the row's leading values above 0, in turn and over again), started at the fraction
    ``seed % 1000 / 1000`` of their cycle, its first interval ``intervals[seed % n]``; inf
    without intervals."""
    n = 0
    cycle = 0.0
    while n < intervals.shape[0] and intervals[n] > 0.0:
        cycle += intervals[n]
        n += 1
    if n == 0:
        return math.inf
    start = (seed % 1000) / 1000.0 * cycle
    t = start + math.floor((now - start) / cycle) * cycle
    j = seed % n
    while t <= now:
        t += intervals[j]
        j = (j + 1) % n
    return t


def ping_row(intervals_us: tuple[float, ...] | list[float], width: int) -> np.ndarray:
    """``intervals_us`` as a kernel row of ``width`` (at least one) values, zeros after them;
    the ones above 0 kept, at most ``width``."""
    kept = [float(x) for x in intervals_us if x > 0.0 and math.isfinite(x)][:width]
    row = np.zeros(max(1, width))
    row[:len(kept)] = kept
    return row
