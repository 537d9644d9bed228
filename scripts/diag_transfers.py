"""What TCP did to each transfer in a lab capture: bytes, duration, retransmissions, stalls.

A diagnostic for issue 21's transport study (not part of ``gradwire``'s predictions): it reads
one node's capture (a PS's, normally: it sees every worker's pulls leave and pushes arrive),
cuts each TCP connection's data, per direction, into transfers at idle gaps longer than
``--gap-ms`` (default 20 ms: between one step's pull and the next; a lab step is 0.1-4 s),
and reports per direction:

- transfers, their median size (MB) and duration (ms), and their median goodput (Mbit/s);
- the share of data segments retransmitted;
- stalls: gaps inside a transfer longer than ``--stall-ms`` (default 5 ms), their count and
  total time, and how many of them ended in a retransmission (a loss the sender recovered
  from after waiting: at Linux's RTO floor, 200 ms, a retransmission timeout);
- what else was in flight when the transfer started: ``alone``, ``same`` (another
  connection's transfer in the same direction), ``reverse`` (only one in the other direction);
- with ``--overlap``: for two transfers of different connections that meet in one direction,
  the earlier one's share of the bytes captured while both ran, by its head start (equal
  sharing: 0.5).

Usage, from the repo root:

    .venv/bin/python scripts/diag_transfers.py CAPTURE [--host ADDR] [--gap-ms 20] \
        [--rate-mbit 95.6]

``--rate-mbit`` (the link's TCP payload rate) also reports each transfer's burst ahead of the
rate, by how long its direction had been idle (the token bucket of docs/predict.md).

``--host``: the capturing node's address (default: the address seen in the most packets), so
"down" is data it sends and "up" data it receives.
"""

from __future__ import annotations

import bisect
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from benchcli import OneLineParser, run_cli

from gradwire.collector.pcapfile import PcapReader
from gradwire.errors import CaptureError

PROG = "diag_transfers"

_MASK = 0xFFFFFFFF


@dataclass
class Transfer:
    """One transfer: a run of one connection's data segments in one direction."""

    conn: tuple[str, int, str, int]
    direction: str  # "down" (sent by the host) or "up" (received)
    start_ns: int
    end_ns: int
    bytes: int = 0
    segments: int = 0
    retransmitted: int = 0
    stalls_ms: list[float] = field(default_factory=list)
    stalls_ending_in_retransmission: int = 0
    context: str = "alone"
    inflight: list[int] = field(default_factory=list)  # bytes sent and not yet acked, per segment
    inflight_ns: list[int] = field(default_factory=list)  # the time of each ``inflight`` sample
    burst: float = 0.0  # the most bytes ahead of the rate line from its first segment (bytes)
    idle_before_ms: float = 0.0  # since the previous transfer in its direction ended (ms)
    marks: list[tuple[int, int]] = field(default_factory=list)  # (ns, bytes so far), per segment

    @property
    def duration_ms(self) -> float:
        """First to last data segment, milliseconds."""
        return (self.end_ns - self.start_ns) / 1e6


def transfers(path: Path, host: str | None, gap_ms: float, stall_ms: float,
              rate_bps: float | None = None) -> list[Transfer]:
    """Cut the capture's data segments into transfers (see the module's docstring); with
    ``rate_bps`` (TCP payload bits per second) also each transfer's burst: the most payload
    bytes it got ahead of ``rate_bps`` since its first segment (a token bucket's depth shows
    as that, on a transfer that starts after the link was idle)."""
    every = list(PcapReader(path))
    packets = [p for p in every if p.payload_bytes > 0]
    if not packets:
        raise CaptureError("no TCP data segments", path=path)
    if host is None:
        seen = Counter(a for p in packets for a in (p.src, p.dst))
        host = seen.most_common(1)[0][0]
    open_: dict[tuple, Transfer] = {}
    highest: dict[tuple, int] = {}
    acked: dict[tuple, int] = {}  # the peer's cumulative ACK of the host's data, per connection
    last_ns: dict[tuple, int] = {}
    done: list[Transfer] = []
    for p in every:
        key = (p.src, p.sport, p.dst, p.dport)
        if p.src != host and p.flags & 0x10:  # an ACK of the host's data in the reverse key
            acked[(p.dst, p.dport, p.src, p.sport)] = p.ack
        if p.payload_bytes == 0:
            continue
        direction = "down" if p.src == host else "up"
        end_seq = (p.seq + p.payload_bytes) & _MASK
        t = open_.get(key)
        gap = (p.ts_ns - last_ns[key]) / 1e6 if key in last_ns else None
        # a segment ending at or below the highest sequence number seen resends bytes
        retrans = key in highest and ((highest[key] - end_seq) & _MASK) < (1 << 31)
        if t is None or gap is None or (gap > gap_ms and not retrans):
            if t is not None:
                done.append(t)
            t = open_[key] = Transfer(key, direction, p.ts_ns, p.ts_ns)
        elif gap > stall_ms:  # a retransmission after any gap belongs to its transfer
            t.stalls_ms.append(gap)
            t.stalls_ending_in_retransmission += bool(retrans)
        t.end_ns = p.ts_ns
        t.bytes += p.payload_bytes
        t.marks.append((p.ts_ns, t.bytes))
        if rate_bps:
            ahead = t.bytes - p.payload_bytes - rate_bps / 8 * (p.ts_ns - t.start_ns) / 1e9
            t.burst = max(t.burst, ahead)
        t.segments += 1
        t.retransmitted += bool(retrans)
        if not retrans:
            highest[key] = end_seq
        if direction == "down" and key in acked:
            t.inflight.append((highest[key] - acked[key]) & _MASK)
            t.inflight_ns.append(p.ts_ns)
        last_ns[key] = p.ts_ns
    done.extend(open_.values())
    done.sort(key=lambda x: x.start_ns)
    last_end: dict[str, int] = {}
    for t in done:  # how long its direction had been idle
        t.idle_before_ms = (t.start_ns - last_end[t.direction]) / 1e6 \
            if t.direction in last_end else float("inf")
        last_end[t.direction] = max(last_end.get(t.direction, 0), t.end_ns)
    for t in done:  # what else was in flight at its first segment
        others = [o for o in done if o is not t and o.conn != t.conn
                  and o.start_ns < t.start_ns <= o.end_ns]
        if any(o.direction == t.direction for o in others):
            t.context = "same"
        elif others:
            t.context = "reverse"
    return done


def report(ts: list[Transfer], min_mb: float) -> None:
    """Print the per-direction, per-context summary of transfers of at least ``min_mb``."""
    print("| direction | started | n | MB | ms | Mbit/s | retrans % | stalls/transfer | "
          "stall ms/transfer | stalls ending in a retransmission | in flight KB (median, "
          "p90) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for direction in ("down", "up"):
        for ctx in ("alone", "reverse", "same"):
            g = [t for t in ts if t.direction == direction and t.context == ctx
                 and t.bytes >= min_mb * 1e6]
            if not g:
                continue
            mb = statistics.median(t.bytes / 1e6 for t in g)
            ms = statistics.median(t.duration_ms for t in g)
            rate = statistics.median(8 * t.bytes / max(t.duration_ms, 1e-3) / 1e3 for t in g)
            seg = sum(t.segments for t in g)
            print(f"| {direction} | {ctx} | {len(g)} | {mb:.2f} | {ms:.1f} | {rate:.0f} | "
                  f"{100 * sum(t.retransmitted for t in g) / seg:.2f} | "
                  f"{sum(len(t.stalls_ms) for t in g) / len(g):.2f} | "
                  f"{sum(sum(t.stalls_ms) for t in g) / len(g):.1f} | "
                  f"{sum(t.stalls_ending_in_retransmission for t in g)} | "
                  f"{_inflight([x for t in g for x in t.inflight])} |")


def burst_report(ts: list[Transfer], min_mb: float) -> None:
    """Print, per direction, the median burst of transfers that start after their direction
    was idle (``alone``), by how long it had been idle."""
    for direction in ("down", "up"):
        for lo, hi in ((0, 5), (5, 20), (20, 100), (100, float("inf"))):
            g = [t.burst for t in ts if t.direction == direction and t.context == "alone"
                 and t.bytes >= min_mb * 1e6 and lo <= t.idle_before_ms < hi]
            if g:
                print(f"{direction}: idle {lo}-{hi} ms before: n={len(g)}, burst ahead of the "
                      f"rate: median {statistics.median(g) / 1e3:.0f} KB, "
                      f"10-90% {_q(g, 0) / 1e3:.0f}-{_q(g, -1) / 1e3:.0f} KB")


def _bytes_by(t: Transfer, ns: int) -> int:
    """Bytes of ``t`` sent (segments captured) at or before ``ns``."""
    k = bisect.bisect_right(t.marks, (ns, 1 << 62))
    return t.marks[k - 1][1] if k else 0


def overlap_shares(ts: list[Transfer], min_mb: float
                   ) -> list[tuple[str, float, float, float, float | None]]:
    """Each pair of transfers of two connections in one direction that overlap in time (both at
    least ``min_mb``): (direction, the earlier one's head start in ms, its share of the two's
    bytes captured while both ran, the two's rate then in Mbit/s, and its share of the two's
    mean bytes in flight then (sent past the capture point, not yet acknowledged): None
    without in-flight samples, as for data the capturing host receives)."""
    out = []
    big = sorted((t for t in ts if t.bytes >= min_mb * 1e6), key=lambda t: t.start_ns)
    for i, a in enumerate(big):
        for b in big[i + 1:]:
            if b.start_ns >= a.end_ns:
                break
            if b.direction != a.direction or b.conn == a.conn:
                continue
            lo, hi = b.start_ns, min(a.end_ns, b.end_ns)
            if hi - lo < 1_000_000:  # under 1 ms together: nothing to share
                continue
            mine = _bytes_by(a, hi) - _bytes_by(a, lo)
            theirs = _bytes_by(b, hi) - _bytes_by(b, lo)
            if mine + theirs:
                wa, wb = _inflight_between(a, lo, hi), _inflight_between(b, lo, hi)
                out.append((a.direction, (b.start_ns - a.start_ns) / 1e6,
                            mine / (mine + theirs), 8 * (mine + theirs) / (hi - lo) * 1e3,
                            wa / (wa + wb) if wa is not None and wb is not None and wa + wb
                            else None))
    return out


def _inflight_between(t: Transfer, lo: int, hi: int) -> float | None:
    """The mean of ``t``'s in-flight samples in (``lo``, ``hi``], bytes; None without."""
    i = bisect.bisect_right(t.inflight_ns, lo)
    j = bisect.bisect_right(t.inflight_ns, hi)
    return statistics.fmean(t.inflight[i:j]) if j > i else None


def overlap_report(ts: list[Transfer], min_mb: float) -> None:
    """Print how two transfers that meet in one direction split it: the earlier one's share of
    the bytes while both ran, by its head start."""
    rows = overlap_shares(ts, min_mb)
    for direction in ("down", "up"):
        for lo, hi in ((0, 5), (5, 20), (20, 50), (50, float("inf"))):
            g = [r for r in rows if r[0] == direction and lo <= r[1] < hi]
            if g:
                share = [r[2] for r in g]
                windows = [r[4] for r in g if r[4] is not None]
                print(f"{direction}: head start {lo}-{hi} ms: n={len(g)}, the first's share "
                      f"median {statistics.median(share):.2f}, 10-90% {_q(share, 0):.2f}-"
                      f"{_q(share, -1):.2f}, above 0.5 in {sum(x > 0.5 for x in share)}; "
                      f"the two's rate median {statistics.median(r[3] for r in g):.0f} Mbit/s"
                      + (f"; its share of the bytes in flight median "
                         f"{statistics.median(windows):.2f}" if windows else ""))
    pairs = [(r[2], r[4]) for r in rows if r[4] is not None]
    if len(pairs) >= 3:
        gap = statistics.median(abs(a - b) for a, b in pairs)
        shares, windows = [a for a, _ in pairs], [b for _, b in pairs]
        print(f"bytes share against in-flight share ({len(pairs)} pairs): median |difference| "
              f"{gap:.2f}, correlation {statistics.correlation(shares, windows):.2f}")


def _q(v: list[float], i: int) -> float:
    return statistics.quantiles(v, n=10)[i] if len(v) >= 2 else v[0]


def _inflight(samples: list[int]) -> str:
    """Median and 90th percentile of in-flight bytes, KB (``-`` without samples)."""
    if len(samples) < 10:
        return "-"
    q = statistics.quantiles(samples, n=10)
    return f"{statistics.median(samples) / 1e3:.0f}, {q[-1] / 1e3:.0f}"


def main(argv: list[str] | None = None) -> int:
    """Command line."""
    p = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("capture", type=Path)
    p.add_argument("--host", help="the capturing node's address (default: the most seen)")
    p.add_argument("--gap-ms", type=float, default=20.0, help="idle gap that ends a transfer")
    p.add_argument("--stall-ms", type=float, default=5.0, help="gap inside a transfer that "
                   "counts as a stall")
    p.add_argument("--min-mb", type=float, default=0.1, help="leave out smaller transfers")
    p.add_argument("--rate-mbit", type=float, help="the link's TCP payload rate, Mbit/s: "
                   "also report each transfer's burst ahead of it")
    p.add_argument("--overlap", action="store_true", help="also report how two transfers "
                   "that meet in one direction split it (the earlier one's share)")
    a = p.parse_args(argv)
    rate = a.rate_mbit * 1e6 if a.rate_mbit else None

    def body() -> int:
        ts = transfers(a.capture, a.host, a.gap_ms, a.stall_ms, rate)
        report(ts, a.min_mb)
        if rate:
            burst_report(ts, a.min_mb)
        if a.overlap:
            overlap_report(ts, a.min_mb)
        return 0

    return run_cli(PROG, body, (CaptureError,))


if __name__ == "__main__":
    sys.exit(main())
