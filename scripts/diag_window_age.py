"""The window a profile's transfers keep, by how long each has been sending.

A diagnostic for issue 21 (not part of ``gradwire``'s predictions). Shares by window
(docs/predict.md, "Shares by window") give each transfer on a FIFO link a share in proportion
to the bytes it keeps there, one draw per worker and step. A transfer does not keep the same
bytes from its first segment: it fills its share of the queue over its first milliseconds.
Beside a flow already running, a newcomer's share is that small part, which is the FIFO's
first-come advantage. This script reads a profile's captures and prints, for the PS's pulls
(its captures) and the worker's pushes (its capture), the byte-weighted mean window (in-flight
plus queued bytes, ``TransportStats.sent_segments`` as ``--link-shares windows`` reads it)
by the age of the transfer the segment belongs to, in bins of ``--bin-ms``, and each bin's
window relative to the largest (the *ramp*). A transfer is the one ``--link-shares windows``
uses: one connection's segments with no idle spell longer than ``grid.transfer_gap_s`` at
the rate.

Usage, from the repo root:

    .venv/bin/python scripts/diag_window_age.py PROFILE... [--bin-ms 5] [--bins 12] \
        [--bandwidth RATE]

``PROFILE``: the bundles ``gradwire predict`` reads; ``--bandwidth``: the link's rate where the
profile's lab result does not say it. Units: windows in KB (1000 bytes), ages in ms.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from gradwire.collector.transport import TransportStats
from gradwire.errors import GradwireError
from gradwire.replay import grid
from gradwire.replay.profile import load_profile
from gradwire.units import parse_rate_bps


def window_by_age(stats: TransportStats, rate_bytes_per_s: float, gap_s: float,
                  bin_s: float, bins: int) -> list[tuple[float, int]]:
    """Per age bin (``bin_s`` seconds wide, ``bins`` of them, the last holding every older
    segment): (the byte-weighted mean window of the segments sent at that age of their
    transfer, bytes; the segments' payload bytes). A bin without segments is (0.0, 0)."""
    acc = [[0.0, 0] for _ in range(bins)]
    bin_ns = bin_s * 1e9
    for _, _, start, t, window, w in stats.sent_segments(rate_bytes_per_s, gap_s):
        k = min(int((t - start) // bin_ns), bins - 1)
        acc[k][0] += window * w
        acc[k][1] += int(w)
    return [(s / n if n else 0.0, n) for s, n in acc]


def table(rows: Sequence[tuple[str, list[tuple[float, int]]]], bin_ms: float) -> str:
    """The markdown table of ``rows`` ((side, ``window_by_age``)), each window also as its
    share of the side's largest."""
    bins = max(len(r) for _, r in rows)
    head = [f"{k * bin_ms:g}-{(k + 1) * bin_ms:g}" if k < bins - 1 else f">= {k * bin_ms:g}"
            for k in range(bins)]
    out = ["| side | " + " | ".join(head) + " |", "|---|" + "---:|" * bins]
    for side, r in rows:
        peak = max((w for w, _ in r), default=0.0)
        cells = [f"{w / 1e3:.0f} ({w / peak:.2f})" if n and peak > 0 else "-" for w, n in r]
        out.append(f"| {side} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="diag_window_age", description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", nargs="+", type=Path, help="the profile's bundles")
    ap.add_argument("--bin-ms", type=float, default=5.0, help="age bin width (default 5)")
    ap.add_argument("--bins", type=int, default=12, help="age bins, the last open (default 12)")
    ap.add_argument("--bandwidth", help="the link's rate (e.g. 525mbit), in place of the "
                    "profile's (needed where the profile does not say it)")
    args = ap.parse_args(argv)
    if not args.bin_ms > 0 or args.bins < 1:
        print("diag_window_age: --bin-ms must be > 0 and --bins >= 1", file=sys.stderr)
        return 2
    try:
        prof = load_profile(args.profile)
        if args.bandwidth is not None:
            prof = dataclasses.replace(prof, profile_bandwidth_bps=parse_rate_bps(
                args.bandwidth))
    except (GradwireError, ValueError, OSError) as e:
        print(f"diag_window_age: {e}", file=sys.stderr)
        return 2
    rate = grid.payload_rate(prof)
    if not rate > 0:
        print(f"diag_window_age: {args.profile[0]}: no link rate in the profile; give "
              "--bandwidth", file=sys.stderr)
        return 2
    gap = grid.transfer_gap_s(rate)
    rows = [(side, window_by_age(t, rate, gap, args.bin_ms / 1e3, args.bins))
            for side, t in (("pulls (PS captures)", prof.transport),
                            ("pushes (worker capture)", prof.worker_transport))
            if t is not None and t.sent_ns]
    if not rows:
        print(f"diag_window_age: {args.profile[0]}: no capture with its segments' windows",
              file=sys.stderr)
        return 2
    print(f"# Window by age of transfer, KB (share of the largest): {args.profile[0]}\n")
    print(table(rows, args.bin_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
