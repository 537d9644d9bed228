"""A ring all-reduce's hops as the workers' links carried them: wire time against the rest.

A diagnostic for issue 22 (not part of ``gradwire``'s predictions). The replay costs each hop
of a ring step as its chunk's time on the wire plus the database's software time for a hop
(``CollectiveRingHop``, timed on loopback), and the rest of the step as the profile's traced
compute. When it predicts a ring job slower than the lab runs it, the hops or the compute
are over-charged; the lab's headers-only capture (``lab --mode ring --capture-headers DIR``,
``scripts/lab/headers.py``: every worker's own link, light enough to leave the run as it is,
no TraceHook) tells them apart.

Each hop is a chunk of the same size on the wire (``--hop-mb``); each direction of each
worker's link is read packet by packet, a hop ending where the packets since the last one
hold its bytes (``hops``: TCP's restart after idle sends a hop's first bytes in bursts a round
trip apart, and two hops may follow each other with no idle time between them). The k-th hop
a worker sends is the ``k mod 2 (W - 1)``-th of its step ``k div 2 (W - 1)`` (the lab starts
the captures before the cluster), and so is the k-th it receives. Per worker, over the steps
after ``--skip``, the medians (ms) of:

- ``hop k``: the k-th hop of a step sent, its first data packet to its last;
- ``wire``: a hop's bytes at the link's payload rate (``--rate``, bits/s of TCP payload: the
  lab's shaped rate times 1448 / 1514; else the median rate of the run's large transfers);
- ``wait k``: from the worker's hop k sent to its hop k received, when that is later (0
  otherwise): the ring step's barrier, where the replay's workers, alike, wait for nothing;
- ``relay k``: from the later of the worker's hop k - 1 sent and its hop k - 1 received to
  its hop k's first packet (the copies and reduction between two hops that the wire did not
  hide: the replay's "copies and reduction" of a ring step, ``mechanisms._relay``);
- ``boundary``: from the later of a step's last hop sent and received to the next step's
  first hop (the last relay, the update, the client gap and the compute);
- ``step``: first hop to the next step's first hop.

Units: seconds and bytes inside, milliseconds and MB (1e6 bytes) printed.

    .venv/bin/python scripts/diag_ring_wire.py DIR --hop-mb 5.01 [--rate 1434mbit]
        [--hops K] [--skip 2] [--json FILE]
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

from gradwire.errors import GradwireError  # noqa: E402
from gradwire.replay.netns import WORKER_HOST0  # noqa: E402
from gradwire.units import parse_rate_bps  # noqa: E402

# a packet with less payload is a control message (a RecvBuf request, an HTTP/2 frame), not
# a hop's data
DATA_MIN_BYTES = 500
# a hop ends once its packets hold its bytes less this (the size is given to 10 kB)
HOP_SLACK = 10_000


@dataclass
class Hop:
    """One hop's chunk on one direction of a link: first and last packet (s), bytes."""

    first: float
    last: float
    nbytes: int


@dataclass
class RingSteps:
    """One worker's hops grouped into steps (seconds, bytes; see the module)."""

    node: str
    steps: int
    hop_s: list[float]  # median duration of the k-th hop sent in a step
    wait_s: list[float]  # median wait from the k-th hop sent to the k-th received (>= 0)
    relay_s: list[float]  # median relay before the k-th hop, k = 2..; one fewer than hop_s
    boundary_s: float | None  # median time from a step's last hop to the next step's first
    step_s: float | None  # median first hop to the next step's first hop


def worker_address(node: str, packets: Sequence[tuple[float, str, str, int]]) -> str | None:
    """The address of lab worker ``node`` (``worker<i>``: ``<subnet>.<WORKER_HOST0 + i>``,
    replay/netns.py) among ``packets``' endpoints; None for another name or if absent.
    A W = 2 ring's links carry one pair of addresses, which says nothing of whose link it is."""
    if not (node.startswith("worker") and node[6:].isdigit()):
        return None
    last = f".{WORKER_HOST0 + int(node[6:])}"
    return next((a for _, src, dst, _ in packets for a in (src, dst) if a.endswith(last)),
                None)


def hops(packets: Sequence[tuple[float, str, str, int]], host: str | None, hop_bytes: int
         ) -> tuple[list[Hop], list[Hop]]:
    """The hops of ``hop_bytes`` the capturing node (``host``, default: the address in most
    pairs, ``headers``) sent and received, each by time: each direction's data packets
    (``DATA_MIN_BYTES`` or more) in order, a hop ending at the packet that brings its bytes to
    ``hop_bytes`` less ``HOP_SLACK``; bytes past a hop's count towards the next (two hops
    back to back, with no idle time between them, are still two)."""
    me = host or headers._capturing_host(packets)
    found: tuple[list[Hop], list[Hop]] = ([], [])
    first: list[float | None] = [None, None]  # per direction: sent (0), received (1)
    acc = [0, 0]
    for ts, src, _, n in sorted(packets):
        if n < DATA_MIN_BYTES:
            continue
        d = 0 if src == me else 1
        if first[d] is None:
            first[d] = ts
        acc[d] += n
        if acc[d] >= hop_bytes - HOP_SLACK:
            found[d].append(Hop(first[d], ts, acc[d]))
            first[d], acc[d] = None, max(0, acc[d] - hop_bytes)
    return found


def ring_steps(node: str, sent: Sequence[Hop], received: Sequence[Hop], per_step: int,
               skip: int = 0) -> RingSteps:
    """One worker's hops (``hops``) grouped into steps of ``per_step``, the first ``skip``
    steps left out (``RingSteps``)."""
    if per_step < 1:
        raise ValueError("a ring step has at least one hop")
    n = min(len(sent), len(received)) // per_step  # whole steps, sent and received
    ready = [max(sent[i].last, received[i].last) for i in range(n * per_step)]
    first = [sent[s * per_step].first for s in range(n)]
    steps = range(skip, n)

    def med(xs: list[float]) -> float | None:
        return statistics.median(xs) if xs else None

    hop_s = [med([sent[s * per_step + k].last - sent[s * per_step + k].first for s in steps])
             for k in range(per_step)]
    wait_s = [med([ready[s * per_step + k] - sent[s * per_step + k].last for s in steps])
              for k in range(per_step)]
    relay_s = [med([sent[s * per_step + k].first - ready[s * per_step + k - 1] for s in steps])
               for k in range(1, per_step)]
    inner = range(skip, n - 1)
    return RingSteps(node, len(steps), [h for h in hop_s if h is not None],
                     [w for w in wait_s if w is not None], [r for r in relay_s if r is not None],
                     med([first[s + 1] - ready[(s + 1) * per_step - 1] for s in inner]),
                     med([first[s + 1] - first[s] for s in inner]))


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{1000 * x:.1f}"


def report(found: Sequence[RingSteps], hop_bytes: int, rate_bps: float) -> str:
    """The markdown table (module docstring); ``rate_bps``: the links' payload rate."""
    k = max((len(r.hop_s) for r in found), default=0)
    head = ["node", "steps", *(f"hop {i + 1} ms" for i in range(k)), "wire ms"]
    head += [*(f"wait {i + 1} ms" for i in range(k)),
             *(f"relay {i + 2} ms" for i in range(k - 1)), "boundary ms", "step ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in found:
        cells = [r.node, str(r.steps), *(_ms(d) for d in r.hop_s), _ms(8 * hop_bytes / rate_bps)]
        cells += [*(_ms(x) for x in (*r.wait_s, *r.relay_s)), _ms(r.boundary_s),
                  _ms(r.step_s)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="a ring run's --capture-headers folder")
    ap.add_argument("--rate", default=None,
                    help="the links' TCP payload rate, e.g. 1434mbit (default: the median "
                         "rate of the run's transfers of 1 MB or more)")
    ap.add_argument("--hop-mb", type=float, required=True,
                    help="bytes of one hop on the wire, MB (the all-reduced bytes over W, and "
                         "gRPC's framing: the most common size of the run's large transfers "
                         "in `python scripts/lab/headers.py` is one hop or two)")
    ap.add_argument("--hops", type=int, default=None,
                    help="hops per ring step (default 2 (W - 1), W the captures found)")
    ap.add_argument("--skip", type=int, default=2, help="first steps left out (default 2)")
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
        packets = {f.name.split(".")[0]: headers._read(f) for f in files}
        hop_bytes = round(args.hop_mb * 1e6)
        if hop_bytes <= HOP_SLACK:
            raise GradwireError(f"--hop-mb {args.hop_mb:g}: a hop must exceed "
                                f"{HOP_SLACK / 1e6:g} MB")
        rate = parse_rate_bps(args.rate) if args.rate else statistics.median(
            t.rate_bps for ps in packets.values() for t in headers.transfers(ps, headers.MIN_GAP_S)
            if t.nbytes >= 1_000_000 and t.rate_bps)
        found = []
        for node, ps in packets.items():
            sent, received = hops(ps, worker_address(node, ps), hop_bytes)
            found.append(ring_steps(node, sent, received, per_step, args.skip))
    except (GradwireError, OSError, ValueError, statistics.StatisticsError) as err:
        print(f"diag_ring_wire: {err}", file=sys.stderr)
        return 2
    print(report(found, hop_bytes, rate))
    print(f"\na hop: {hop_bytes / 1e6:.2f} MB; wire: at {rate / 1e6:.0f} Mbit/s of TCP payload")
    if args.json:
        args.json.write_text(json.dumps({"rate_bps": rate, "hop_bytes": hop_bytes,
                                         "per_step": per_step, "skip": args.skip,
                                         "nodes": [asdict(r) for r in found]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
