"""A ring all-reduce's hops as the workers' links carried them: wire time against the rest.

A diagnostic for issue 22 (not part of ``gradwire``'s predictions). The replay costs each hop
of a ring step as its chunk's time on the wire plus the database's software time for a hop
(``CollectiveRingHop``, timed on loopback), and the rest of the step as the profile's traced
compute. When it predicts a ring job slower than the lab runs it, the hops or the compute
are over-charged; the lab's headers-only capture (``lab --mode ring --capture-headers DIR``,
``scripts/lab/headers.py``: every worker's own link, light enough to leave the run as it is,
no TraceHook) tells them apart.

Each worker's outbound data on its link is cut into bulk transfers (``headers.transfers``,
idle spells over ``--gap-ms``), which a ring step sends ``2 (W - 1)`` of, one per hop. The
transfers are grouped into steps at the longest gaps (the step's compute lies there), and
per worker the medians (ms) are printed of:

- ``hop k``: the k-th hop's transfer, first packet to last, and its MB;
- ``wire k``: that hop's bytes at the link's payload rate (``--rate``, bits/s of TCP payload:
  the lab's shaped rate times 1448 / 1514; else the median rate of the run's hops);
- ``between``: the idle time between two hops of one step (software the wire did not hide);
- ``boundary``: the idle time from a step's last hop to the next step's first (the compute,
  with any software before the first hop and after the last);
- ``step``: first hop to the next step's first hop.

Units: seconds and bytes inside, milliseconds and MB (1e6 bytes) printed.

    .venv/bin/python scripts/diag_ring_wire.py DIR [--rate 1434mbit] [--gap-ms 2]
        [--hops K] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from lab import headers  # noqa: E402
from lab.netns import WORKER_HOST0  # noqa: E402

from gradwire.errors import GradwireError  # noqa: E402
from gradwire.units import parse_rate_bps  # noqa: E402

# default idle spell that ends a hop's transfer: 2 ms, far beyond a GSO packet's time at the
# lab's rates (0.35 ms at 1.5 Gbit/s) and below the hops' software time (milliseconds, the
# database's line); --gap-ms sets another
GAP_S = 0.002


@dataclass
class RingSteps:
    """One worker's outbound hops grouped into steps (seconds, bytes; see the module)."""

    node: str
    steps: int
    hop_s: list[float]  # median duration of the k-th hop of a step
    hop_bytes: list[float]  # median bytes of the k-th hop
    between_s: float | None  # median idle time between two hops of one step
    boundary_s: float | None  # median idle time between steps
    step_s: float | None  # median first hop to the next step's first hop


def worker_address(node: str, packets: Sequence[tuple[float, str, str, int]]) -> str | None:
    """The address of lab worker ``node`` (``worker<i>``: ``<subnet>.<WORKER_HOST0 + i>``,
    scripts/lab/netns.py) among ``packets``' endpoints; None for another name or if absent.
    A W = 2 ring's links carry one pair of addresses, which says nothing of whose link it is."""
    if not (node.startswith("worker") and node[6:].isdigit()):
        return None
    last = f".{WORKER_HOST0 + int(node[6:])}"
    return next((a for _, src, dst, _ in packets for a in (src, dst) if a.endswith(last)),
                None)


def outbound_hops(packets: Sequence[tuple[float, str, str, int]], gap_s: float,
                  host: str | None = None) -> list[headers.Transfer]:
    """The outbound bulk transfers of the capturing node (``host``, default:
    ``headers.transfers``' guess), by time."""
    return [t for t in headers.transfers(packets, gap_s, host=host) if t.out]


def group_steps(hops: Sequence[headers.Transfer], per_step: int
                ) -> list[list[headers.Transfer]]:
    """``hops`` in consecutive groups of ``per_step``, starting at the offset whose group
    boundaries have the longest mean idle time before them (a step's compute lies there);
    a group cut short at either end is dropped."""
    if per_step < 1:
        raise ValueError("a ring step has at least one hop")
    gaps = [b.first - a.last for a, b in zip(hops, hops[1:], strict=False)]
    best, best_mean = 0, -1.0
    for off in range(per_step):
        before = [gaps[i - 1] for i in range(off, len(hops), per_step) if i >= 1]
        mean = statistics.fmean(before) if before else 0.0
        if mean > best_mean:
            best, best_mean = off, mean
    return [list(hops[i:i + per_step]) for i in range(best, len(hops) - per_step + 1, per_step)]


def ring_steps(node: str, packets: Sequence[tuple[float, str, str, int]], per_step: int,
               gap_s: float = GAP_S) -> RingSteps:
    """One worker's capture summarised (``RingSteps``)."""
    steps = group_steps(outbound_hops(packets, gap_s, worker_address(node, packets)),
                        per_step)

    def med(xs: list[float]) -> float | None:
        return statistics.median(xs) if xs else None

    between = [b.first - a.last for s in steps for a, b in zip(s, s[1:], strict=False)]
    boundary = [n[0].first - s[-1].last for s, n in zip(steps, steps[1:], strict=False)]
    period = [n[0].first - s[0].first for s, n in zip(steps, steps[1:], strict=False)]
    return RingSteps(
        node, len(steps),
        [statistics.median(s[k].duration for s in steps) for k in range(per_step)]
        if steps else [],
        [statistics.median(s[k].nbytes for s in steps) for k in range(per_step)]
        if steps else [],
        med(between), med(boundary), med(period))


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{1000 * x:.1f}"


def report(found: Sequence[RingSteps], rate_bps: float | None) -> str:
    """The markdown table (module docstring); ``rate_bps`` None: no wire columns."""
    k = max((len(r.hop_s) for r in found), default=0)
    head = ["node", "steps"]
    for i in range(k):
        head += [f"hop {i + 1} ms", f"MB {i + 1}"] + ([f"wire {i + 1} ms"] if rate_bps else [])
    head += ["between ms", "boundary ms", "step ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in found:
        cells = [r.node, str(r.steps)]
        for d, b in zip(r.hop_s, r.hop_bytes, strict=True):
            cells += [_ms(d), f"{b / 1e6:.2f}"] + ([_ms(8 * b / rate_bps)] if rate_bps else [])
        cells += [_ms(r.between_s), _ms(r.boundary_s), _ms(r.step_s)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="a ring run's --capture-headers folder")
    ap.add_argument("--rate", default=None,
                    help="the links' TCP payload rate, e.g. 1434mbit (default: the median "
                         "rate of the hops' transfers)")
    ap.add_argument("--gap-ms", type=float, default=1000 * GAP_S,
                    help="idle milliseconds that end a transfer (default %(default)g)")
    ap.add_argument("--hops", type=int, default=None,
                    help="hops per ring step (default 2 (W - 1), W the captures found)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = ap.parse_args(argv)
    try:
        files = sorted(args.folder.glob("*.headers.pcap"))
        if not files:
            raise GradwireError(f"{args.folder}: no *.headers.pcap (lab --capture-headers)")
        per_step = args.hops or 2 * (len(files) - 1)
        if per_step < 1:
            raise GradwireError(f"{args.folder}: one worker's capture: a ring of one has no "
                                "hops (give --hops)")
        gap = args.gap_ms / 1000
        packets = {f.name.split(".")[0]: headers._read(f) for f in files}
        rate = parse_rate_bps(args.rate) if args.rate else None
        if rate is None:
            rates = [t.rate_bps for n, p in packets.items()
                     for t in outbound_hops(p, gap, worker_address(n, p)) if t.rate_bps]
            rate = statistics.median(rates) if rates else None
        found = [ring_steps(n, p, per_step, gap) for n, p in packets.items()]
    except (GradwireError, OSError, ValueError) as err:
        print(f"diag_ring_wire: {err}", file=sys.stderr)
        return 2
    print(report(found, rate))
    if rate:
        print(f"\nwire: the hop's bytes at {rate / 1e6:.0f} Mbit/s of TCP payload")
    if args.json:
        args.json.write_text(json.dumps({"rate_bps": rate, "gap_s": gap, "per_step": per_step,
                                         "nodes": [asdict(r) for r in found]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
