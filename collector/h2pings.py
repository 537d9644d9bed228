"""The HTTP/2 PINGs a PS's capture shows its clients sending on the connections it serves.

Why: a pull the PS's own queue dropped with nothing in flight waits in its socket for the probe
timer, an RTO (a *held* pull, replay/hostqueue.py). In the lab such holds end sooner, at the
worker's next PING on that connection: gRPC's bandwidth-delay probe (``BdpEstimator``), which
the PS's gRPC answers at once with a PING ACK, and a write to a socket makes Linux try to send
what waits in it (``tcp_push``). A traced lab run ended all four of its holds 0.03-0.15 ms after
such a frame (docs/notes/issue22-sync-bbr-v1.md, "Bare pulls"). When the worker pings is gRPC's
own timing (a delay it adapts, 100 ms to start with), so the replay takes it from the profile's
capture: the intervals between one connection's PINGs, and how long the PS took to answer each.

``PingLog`` is fed every frame of one capture (``h2capture.capture_streams(pings=...)``, the
pass that decodes its streams); a connection counts when the capturing host serves it (a
request's HEADERS, one with a path, came to one of its ``addresses`` or to an endpoint it
serves); a PING counts when it came to the host and is not itself an ACK; its answer is the
host's next PING ACK on that connection. A host known by neither gives no PINGs (the replay
then waits for the timer). The answer as captured is the PING ACK's departure: after the PS's
gRPC wrote it, behind what its socket and queue held before it.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass

from gradwire.collector.h2capture import split_endpoint
from gradwire.records import Frame

__all__ = ["PingLog", "PingTimes"]

HEADERS, PING = 0x1, 0x6
ACK_FLAG = 0x1


@dataclass(frozen=True)
class PingTimes:
    """The PINGs clients sent a host on the connections it serves, from its capture:
    ``intervals_us``, between consecutive PINGs of one connection (each connection's in
    capture order, one connection after another); ``answers_us``, from each PING to the
    host's PING ACK on that connection. Empty where the capture shows none."""

    intervals_us: tuple[float, ...] = ()
    answers_us: tuple[float, ...] = ()

    @property
    def answer_us(self) -> float:
        """The host's median answer to a PING (us); 0 without one."""
        return statistics.median(self.answers_us) if self.answers_us else 0.0

    @staticmethod
    def merge(parts: list[PingTimes]) -> PingTimes:
        """Several captures' PINGs as one (their intervals and answers in the given order)."""
        return PingTimes(tuple(x for p in parts for x in p.intervals_us),
                         tuple(x for p in parts for x in p.answers_us))


class PingLog:
    """The PINGs of one capture taken on a host of ``addresses``, or serving at ``endpoints``
    ((ip, port) pairs: a cluster on loopback, whose addresses are every task's) (module
    docstring)."""

    def __init__(self, addresses: tuple[str, ...] | list[str],
                 endpoints: tuple[tuple[str, int], ...] | set[tuple[str, int]] = ()) -> None:
        self._addresses = set(addresses)
        self._endpoints = set(endpoints)
        self._served: set[int] = set()  # connections the host serves
        self._pings: dict[int, list[int]] = {}  # connection -> its PINGs' times (ns)
        self._open: dict[int, int] = {}  # connection -> its unanswered PING's time (ns)
        self._answers: list[tuple[int, float]] = []  # (connection, us)

    def _mine(self, endpoint: str) -> bool:
        ip, port = split_endpoint(endpoint)
        return ip in self._addresses or (ip, port) in self._endpoints

    def frame(self, f: Frame) -> None:
        """Take one frame of the capture, in capture order."""
        if f.type == HEADERS:
            if f.path is not None and self._mine(f.dst):
                self._served.add(f.conn)
            return
        if f.type != PING:
            return
        if not f.flags & ACK_FLAG:
            if self._mine(f.dst):
                self._pings.setdefault(f.conn, []).append(f.ts_ns)
                self._open[f.conn] = f.ts_ns
        elif self._mine(f.src) and f.conn in self._open:
            self._answers.append((f.conn, (f.ts_ns - self._open.pop(f.conn)) / 1e3))

    def times(self) -> PingTimes:
        """The PINGs of the connections the host serves (``PingTimes``)."""
        intervals = [(b - a) / 1e3 for c in sorted(self._pings) if c in self._served
                     for a, b in itertools.pairwise(self._pings[c]) if b > a]
        return PingTimes(tuple(intervals),
                         tuple(us for c, us in self._answers if c in self._served))
