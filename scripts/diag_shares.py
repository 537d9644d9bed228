"""How the workers of a W >= 2 lab run shared the PS's link: a transport diagnostic for issue 21.

Reads the PS's capture of a ``python -m lab --workers W --collect DIR`` run (``DIR/ps0``), cuts
each direction's captured payload bytes per worker into bins of ``--bin-ms`` (default 1 ms),
and reports:

- **newcomers**: for each transfer (a worker's run of bins with data, gaps of at most
  ``--gap-ms``, at least ``--min-mb``) that starts while another worker's transfer in the same
  direction moved at least ``--busy-kb`` in the ``--busy-ms`` before it, the newcomer's share of
  the direction's bytes in windows after its first byte (0-2, 2-5, 5-10, 10-20 and 20-40 ms):
  median and 10-90% over the newcomers. Processor sharing gives 1/n from the start; a
  newcomer that queues behind the flows already running (a FIFO bottleneck, or a flow whose
  window must grow first) shows a share near 0 at first.
- **beside the reverse direction**: the rate of each direction's bins while it carries one
  worker's transfer, by whether another worker's data moved the other way in that bin (a pull
  beside a push: its ACKs queue behind the push's data), as a share of ``--rate-mbit``.
- ``--by-flows``: each direction's rate in steady bins (every flow in it moved data in the
  bins either side: no transfer starts or ends there) by how many workers move data each way
  (W >= 4 runs: does a second flow fill the link beside the reverse traffic?).
- ``--timeline FROM LEN``: one line per direction and worker, a character per bin from FROM
  seconds for LEN seconds (`` `` under 5% of the rate, ``.`` under 30%, ``o`` under 70%,
  ``O`` above).

Usage, from the repo root:

    .venv/bin/python scripts/diag_shares.py DIR --rate-mbit 478 [--bin-ms 1] \
        [--timeline 8 0.5]

``DIR``: the ``--collect`` directory (its ``ps0`` bundle) or a PS bundle directory.
``--rate-mbit``: the link's TCP payload rate (the lab's rate x 1448/1514).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from benchcli import OneLineParser, run_cli

from gradwire.collector.pcapfile import PcapReader
from gradwire.errors import CaptureError

PROG = "diag_shares"
WINDOWS_MS = ((0, 2), (2, 5), (5, 10), (10, 20), (20, 40))  # after a newcomer's first byte

Bins = dict[tuple[str, str], dict[int, int]]  # (direction, worker address) -> bin -> bytes


def ps_bundle(path: Path) -> Path:
    """The PS bundle of a ``--collect`` directory (its ``ps0``), or ``path`` itself."""
    return path / "ps0" if (path / "ps0" / "manifest.json").is_file() else path


def binned(bundle: Path, bin_ns: int) -> Bins:
    """Captured payload bytes per (direction, worker) and bin of ``bin_ns`` from the first data
    segment: ``down`` is data the PS sent (pulls), ``up`` data it received (pushes)."""
    try:
        host = set(json.loads((bundle / "manifest.json").read_text())["host"]["addresses"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CaptureError(f"no readable manifest with the host's addresses ({e})",
                           path=bundle / "manifest.json") from None
    bins: Bins = defaultdict(lambda: defaultdict(int))
    t0 = None
    for p in PcapReader(bundle / "capture.pcapng"):
        if p.payload_bytes == 0:
            continue
        if t0 is None:
            t0 = p.ts_ns
        key = ("down", p.dst) if p.src in host else ("up", p.src)
        bins[key][(p.ts_ns - t0) // bin_ns] += p.payload_bytes
    if not bins:
        raise CaptureError("no TCP data segments", path=bundle / "capture.pcapng")
    return bins


def transfer_starts(series: dict[int, int], gap_bins: int, min_bytes: float) -> list[int]:
    """The first bins of ``series``'s transfers: runs of bins with data, separated by more than
    ``gap_bins`` empty bins, of at least ``min_bytes`` in all."""
    runs: list[list[int]] = []
    last = None
    for k in sorted(series):
        if last is None or k - last > gap_bins:
            runs.append([k, 0])
        runs[-1][1] += series[k]
        last = k
    return [k for k, total in runs if total >= min_bytes]


def newcomer_shares(bins: Bins, direction: str, gap_bins: int, min_bytes: float,
                    busy_bins: int, busy_bytes: float, bin_ms: float) -> list[list[float]]:
    """Per newcomer of ``direction`` (module docstring), its share of the direction's bytes
    in each of ``WINDOWS_MS`` (NaN where the direction moved nothing)."""
    workers = sorted(a for d, a in bins if d == direction)
    out = []
    for a in workers:
        mine = bins[(direction, a)]
        others = [bins[(direction, b)] for b in workers if b != a]
        for s in transfer_starts(mine, gap_bins, min_bytes):
            before = sum(o.get(s - j, 0) for o in others for j in range(1, busy_bins + 1))
            if before < busy_bytes:
                continue
            shares = []
            for lo, hi in WINDOWS_MS:
                ks = range(s + int(lo / bin_ms), s + max(int(lo / bin_ms) + 1, int(hi / bin_ms)))
                own = sum(mine.get(k, 0) for k in ks)
                total = own + sum(o.get(k, 0) for o in others for k in ks)
                shares.append(own / total if total else float("nan"))
            out.append(shares)
    return out


def beside_reverse(bins: Bins, direction: str, cap_bytes: float) -> dict[str, list[float]]:
    """Rates of ``direction``'s bins that carry exactly one worker's data, as shares of
    ``cap_bytes`` per bin: ``alone`` (no other worker's data the other way in that bin) and
    ``beside`` (some)."""
    other = "up" if direction == "down" else "down"
    mine = {a: s for (d, a), s in bins.items() if d == direction}
    theirs = {a: s for (d, a), s in bins.items() if d == other}
    out: dict[str, list[float]] = {"alone": [], "beside": []}
    for k in sorted({k for s in mine.values() for k in s}):
        active = [(a, s[k]) for a, s in mine.items() if s.get(k, 0) > 0]
        if len(active) != 1:
            continue
        a, nbytes = active[0]
        rev = any(s.get(k, 0) > 0 for b, s in theirs.items() if b != a)
        out["beside" if rev else "alone"].append(nbytes / cap_bytes)
    return out


STEADY_BINS = 2  # a flow is steady in a bin when it moved data this many bins either side too


def by_flows(bins: Bins, direction: str, cap_bytes: float, lo: int, hi: int
             ) -> dict[tuple[int, int], list[float]]:
    """``direction``'s rate (all its workers' bytes per bin / ``cap_bytes``) in the bins
    ``lo..hi-1`` where every worker moving data that way is steady (data in the
    ``STEADY_BINS`` bins either side too: no transfer starts or ends in the bin), keyed by
    (flows the other way, 0 when under half the link; flows this way), each capped at 3. A
    worker counts as moving data with over 5% of ``cap_bytes`` in a bin."""
    other = "up" if direction == "down" else "down"
    th = 0.05 * cap_bytes

    def flows(d: str, k: int, steady: bool) -> list[dict[int, int]]:
        return [s for (dd, _), s in bins.items() if dd == d and s.get(k, 0) > th and (
            not steady or all(s.get(k + j, 0) > th
                              for j in range(-STEADY_BINS, STEADY_BINS + 1)))]

    out: dict[tuple[int, int], list[float]] = {}
    for k in range(lo, hi):
        mine = flows(direction, k, False)
        if not mine or len(flows(direction, k, True)) != len(mine):
            continue
        rev = flows(other, k, False)
        busy = sum(s[k] for s in rev) >= 0.5 * cap_bytes
        key = (min(3, len(rev)) if busy else 0, min(3, len(mine)))
        out.setdefault(key, []).append(sum(s[k] for s in mine) / cap_bytes)
    return out


def timeline(bins: Bins, first_bin: int, n_bins: int, cap_bytes: float) -> list[str]:
    """One line per direction and worker: a character per bin (module docstring)."""
    def mark(x: int) -> str:
        f = x / cap_bytes
        return " " if f < 0.05 else "." if f < 0.3 else "o" if f < 0.7 else "O"

    span = range(first_bin, first_bin + n_bins)
    return [f"{d:4} {a:>15} |" + "".join(mark(s.get(k, 0)) for k in span) + "|"
            for (d, a), s in sorted(bins.items())]


def _spread(v: list[float]) -> str:
    v = sorted(x for x in v if x == x)
    if not v:
        return "-"
    return (f"{statistics.median(v):.2f} ({v[len(v) // 10]:.2f}-{v[(9 * len(v)) // 10]:.2f}), "
            f"n={len(v)}")


def main(argv: list[str] | None = None) -> int:
    """Command line."""
    p = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path, help="a lab --collect directory or a PS bundle")
    p.add_argument("--rate-mbit", type=float, required=True,
                   help="the link's TCP payload rate, Mbit/s")
    p.add_argument("--bin-ms", type=float, default=1.0, help="bin width, ms")
    p.add_argument("--gap-ms", type=float, default=5.0, help="a longer gap ends a transfer")
    p.add_argument("--min-mb", type=float, default=1.0, help="leave out smaller transfers")
    p.add_argument("--busy-ms", type=float, default=3.0,
                   help="how far back another worker's data make a transfer a newcomer")
    p.add_argument("--busy-kb", type=float, default=50.0,
                   help="bytes another worker moved in --busy-ms that make it a newcomer")
    p.add_argument("--timeline", type=float, nargs=2, metavar=("FROM", "LEN"),
                   help="print the bins from FROM s for LEN s")
    p.add_argument("--by-flows", action="store_true",
                   help="also each direction's rate in steady bins (no transfer starting or "
                   "ending) by its flows and the other direction's, over the middle of the run "
                   "(from 25%% to 90%% of its bins)")
    a = p.parse_args(argv)
    if a.bin_ms <= 0 or a.rate_mbit <= 0:
        p.error("--bin-ms and --rate-mbit must be > 0")

    def body() -> int:
        bin_ns = int(a.bin_ms * 1e6)
        bins = binned(ps_bundle(a.dir), bin_ns)
        cap = a.rate_mbit * 1e6 / 8 * a.bin_ms / 1e3
        gap, busy = int(a.gap_ms / a.bin_ms), max(1, int(a.busy_ms / a.bin_ms))
        for d in ("down", "up"):
            rows = newcomer_shares(bins, d, gap, a.min_mb * 1e6, busy, a.busy_kb * 1e3, a.bin_ms)
            print(f"{d}: {len(rows)} newcomers joining another worker's transfer")
            for (lo, hi), col in zip(WINDOWS_MS, zip(*rows, strict=True) if rows else (),
                                     strict=False):
                print(f"  {lo}-{hi} ms after its first byte: its share {_spread(list(col))}")
            rev = beside_reverse(bins, d, cap)
            print(f"  one worker's bins, rate / link rate: alone {_spread(rev['alone'])}; "
                  f"beside another's reverse data {_spread(rev['beside'])}")
        if a.by_flows:
            last = max(max(s) for s in bins.values())
            for d in ("down", "up"):
                print(f"{d}, steady bins, rate / link rate by (flows the other way, 0: under "
                      "half the link; flows this way):")
                for key, v in sorted(by_flows(bins, d, cap, last // 4, last * 9 // 10).items()):
                    print(f"  {key}: {_spread(v)}")
        if a.timeline:
            first, n = int(a.timeline[0] * 1e3 / a.bin_ms), int(a.timeline[1] * 1e3 / a.bin_ms)
            print("\n".join(timeline(bins, first, n, cap)))
        return 0

    return run_cli(PROG, body, (CaptureError,))


if __name__ == "__main__":
    sys.exit(main())
