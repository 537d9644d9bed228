"""Packet headers of the lab's shaped links, light enough to leave a run's phases as they are.

``--capture-headers DIR`` runs ``tcpdump -s 128`` in each PS's namespace (every worker's for
ring all-reduce) on its link, into ``DIR/<node>.headers.pcap``. The node's own end of its veth
sees both directions after their shapers (its egress after its HTB; its ingress after the
bridge side's), and veths pass GSO packets, so a 550 Mbit/s link gives about 1,000 packets a
second each way: a few per cent of a core. A full capture (``--collect``, every byte, every
node) and the socket sampler (``--tcp-sample``) cost enough CPU to move two asynchronous
workers out of taking turns; this does not (docs/notes/issue21-3ps-pair-lockstep.md: the deep
MLP over 3 PSes at W = 2 made 455.0 ex/s under it, 432.6-464.8 without).

What it tells: every *bulk transfer* on the link (a connection's bytes one way, split where
the link carried none of them for ``gap_s``; at least ``min_bytes``), its rate, and what the
*other* endpoints' bulk transfers on the same link did meanwhile (``classify``): ``same`` (half
or more of it beside another endpoint's transfer the same way), ``reverse`` (half or more
beside one the other way, less than a fifth beside one the same way), ``alone`` (less than a
fifth beside either) or ``mixed``. Two workers taking turns on a PS link show almost no
``same``; a pair in step shows mostly ``same``.

``python scripts/lab/headers.py [--rate RATE] FILE...`` prints the table; with ``--phases``
the FILEs are one run's PS links, and it prints each worker's steps as those links saw them
(``worker_cycles``: its pulls, the gap, its pushes and the time to its next pulls). Units: seconds,
bytes and bits per second unless a name says otherwise.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import select
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradwire.collector.pcapfile import PcapReader
from gradwire.errors import GradwireError
from gradwire.records import Packet

if not __package__:  # run as ``python scripts/lab/headers.py``: the lab package beside it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gradwire.replay.netns import LabError  # noqa: E402
from lab import tcpsample  # noqa: E402

__all__ = [
    "CLASSES",
    "Cycle",
    "GSO_BYTES",
    "MIN_BYTES",
    "MIN_GAP_S",
    "SNAPLEN",
    "Transfer",
    "capture_command",
    "capture_file",
    "classify",
    "cycles_report",
    "gap_for_rate",
    "start",
    "summaries",
    "stop",
    "summary",
    "transfers",
    "worker_cycles",
]

# bytes kept of each packet: Ethernet (14) + IPv6 (40) + TCP with every option (60) = 114
SNAPLEN = 128
# the largest packet a veth passes (a GSO packet), which leaves the shaper in one piece
GSO_BYTES = 65536
# a bulk transfer carries at least one GSO packet's worth; below that, control messages
MIN_BYTES = GSO_BYTES
# an idle spell this long ends a transfer: longer than a sender's pauses inside one (the PS
# writing tensor after tensor paused up to ~5 ms on the 2-core machine's captures), shorter
# than anything between one worker's transfers the same way (a step's other phases)
MIN_GAP_S = 0.010
# seconds tcpdump may take to attach to its link (it says so on stderr)
READY_S = 10.0
# seconds to let the kernel hand tcpdump its last packets before stopping it (``stop``)
FLUSH_S = 1.2
CLASSES = ("alone", "reverse", "same", "mixed")
# a transfer is beside others when they cover this share of it (``classify``)
MOST, LITTLE = 0.5, 0.2


@dataclass
class Transfer:
    """One bulk transfer: ``src`` -> ``dst`` (addresses), ``out`` when the capturing node sent
    it; ``first``/``last`` the first and last packet's capture time (s); ``nbytes`` TCP
    payload bytes; ``cls`` its class (``classify``; empty until then)."""

    src: str
    dst: str
    out: bool
    first: float
    last: float
    nbytes: int
    first_nbytes: int = 0  # the first packet's: it left before ``first``, the time counted
    cls: str = ""

    @property
    def peer(self) -> str:
        """The other endpoint (a worker, on a PS's link)."""
        return self.dst if self.out else self.src

    @property
    def duration(self) -> float:
        return self.last - self.first

    @property
    def rate_bps(self) -> float | None:
        """Payload bits per second from the first packet's time to the last's (the first
        packet's bytes left before it), None for a transfer of one packet."""
        return (8 * (self.nbytes - self.first_nbytes) / self.duration if self.duration > 0
                else None)


def capture_file(folder: Path, node: str) -> Path:
    """Where ``node``'s headers go."""
    return folder / f"{node}.headers.pcap"


def capture_command(iface: str, path: Path) -> list[str]:
    """tcpdump on ``iface``, headers only, into ``path`` (an 8 MiB kernel buffer, so a burst
    of small packets is not dropped)."""
    return ["tcpdump", "-i", iface, "-s", str(SNAPLEN), "-B", "8192", "-w", str(path)]


def start(topo: Any, nodes: Sequence[Any], folder: Path, ready_s: float = READY_S
          ) -> list[tuple[Any, Path]]:
    """Start tcpdump in each of ``nodes``' namespaces on its link and wait until each says it
    is listening (at most ``ready_s`` seconds); ``topo`` (a ``Topology``) tracks the
    processes and stops them at teardown. Returns each capture's process and file (for
    ``stop``). Raises ``LabError`` naming a tcpdump that failed."""
    folder.mkdir(parents=True, exist_ok=True)
    dumps = [(topo.spawn(node, capture_command(node.iface, path := capture_file(folder, node.name)),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), path)
             for node in nodes]
    for node, (proc, _) in zip(nodes, dumps, strict=True):
        _await_listening(proc, node.name, ready_s)
    return dumps


def stop(dumps: Sequence[tuple[Any, Path]]) -> None:
    """Stop the captures ``start`` began, after ``FLUSH_S``: libpcap hands tcpdump its packets
    in blocks, a block at the latest 1 s after its first packet, and a tcpdump stopped
    earlier loses the block it has not been handed yet."""
    if any(proc.poll() is None for proc, _ in dumps):
        time.sleep(FLUSH_S)
    tcpsample.stop(list(dumps))
    for proc, _ in dumps:
        if proc.stderr is not None:
            proc.stderr.close()


def _await_listening(proc: subprocess.Popen[bytes], name: str, ready_s: float) -> None:
    """Read tcpdump's stderr until its "listening on" line; its last words if it exits or
    stays silent."""
    assert proc.stderr is not None
    said = b""
    deadline = time.monotonic() + ready_s
    while b"listening on" not in said:
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            words = said.decode(errors="replace").strip().splitlines()
            raise LabError(f"tcpdump on {name}'s link did not start: "
                           + (words[-1] if words else f"nothing said in {ready_s:g} s"))
        if select.select([proc.stderr], [], [], left)[0]:
            chunk = os.read(proc.stderr.fileno(), 4096)
            said += chunk
            if not chunk:
                proc.wait(timeout=ready_s)


def gap_for_rate(rate_bps: float | None) -> float:
    """The idle time that ends a transfer: ``MIN_GAP_S``, or two GSO packets' time at the
    link's rate where that is longer (a shaped link lets one out every ``GSO_BYTES`` at the
    rate, 10.5 ms at 100 Mbit/s)."""
    return max(MIN_GAP_S, 2 * 8 * GSO_BYTES / rate_bps) if rate_bps else MIN_GAP_S


def _capturing_host(packets: Sequence[tuple[float, str, str, int]]) -> str:
    """The address in the most address pairs: the node whose link was captured; among equals
    (one pair: a PS's link with one worker) the lowest, as the lab numbers its PSes below
    its workers."""
    peers: dict[str, set[str]] = defaultdict(set)
    for _, src, dst, _ in packets:
        peers[src].add(dst)
        peers[dst].add(src)
    return min(peers, key=lambda a: (-len(peers[a]), ipaddress.ip_address(a)))


def _read(path: Path) -> list[tuple[float, str, str, int]]:
    """(time s, src, dst, payload bytes) of each captured TCP packet carrying data."""
    return data_rows(PcapReader(path))


def data_rows(packets: Iterable[Packet]) -> list[tuple[float, str, str, int]]:
    """(time s, src, dst, payload bytes) of each of ``packets`` carrying data."""
    return [(p.ts_ns / 1e9, p.src, p.dst, p.payload_bytes)
            for p in packets if p.payload_bytes > 0]


def transfers(packets: Iterable[tuple[float, str, str, int]], gap_s: float,
              min_bytes: int = MIN_BYTES, host: str | None = None) -> list[Transfer]:
    """The bulk transfers among ``packets`` ((time s, src, dst, payload bytes), any order),
    by time: each direction of each address pair split where it carried nothing for more
    than ``gap_s``, those of at least ``min_bytes`` kept. ``host``: the capturing node
    (default: ``_capturing_host``). Connections between the same two
    addresses count as one flow: a worker's pulls and pushes each go one way."""
    pkts = sorted(packets)
    if not pkts:
        return []
    me = host or _capturing_host(pkts)
    by_flow: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
    for ts, src, dst, n in pkts:
        by_flow[(src, dst)].append((ts, n))
    out: list[Transfer] = []
    for (src, dst), seq in by_flow.items():
        cur: Transfer | None = None
        for ts, n in seq:
            if cur is not None and ts - cur.last <= gap_s:
                cur.last, cur.nbytes = ts, cur.nbytes + n
                continue
            if cur is not None and cur.nbytes >= min_bytes:
                out.append(cur)
            cur = Transfer(src, dst, src == me, ts, ts, n, n)
        if cur is not None and cur.nbytes >= min_bytes:
            out.append(cur)
    return sorted(out, key=lambda t: (t.first, t.src, t.dst))


def _covered(t: Transfer, others: Iterable[Transfer]) -> float:
    """Share of ``t``'s span that ``others`` cover (their spans merged)."""
    spans = sorted((max(o.first, t.first), min(o.last, t.last)) for o in others
                   if o.last > t.first and o.first < t.last)
    covered, end = 0.0, t.first
    for a, b in spans:
        if b > end:
            covered += b - max(a, end)
            end = b
    return covered / t.duration if t.duration > 0 else 0.0


def classify(found: Sequence[Transfer]) -> list[Transfer]:
    """Set each transfer's ``cls`` from the other peers' transfers on the link (module
    docstring); returns ``found``."""
    for t in found:
        others = [o for o in found if o.peer != t.peer]
        same = _covered(t, (o for o in others if o.out == t.out))
        rev = _covered(t, (o for o in others if o.out != t.out))
        t.cls = ("same" if same >= MOST else "reverse" if rev >= MOST and same < LITTLE
                 else "alone" if same < LITTLE and rev < LITTLE else "mixed")
    return list(found)


def _median(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if vals else None


def summary(path: str | Path, rate_bps: float | None = None, min_bytes: int = MIN_BYTES,
            host: str | None = None) -> dict[str, Any]:
    """One capture's bulk transfers each way (``out``: the node sent them): how many, their
    bytes in all, their median bytes and rate, and per class how many and their median rate;
    ``same_share``: the share of them beside another peer's the same way; ``host``: the
    capturing node's address (``transfers``). Raises ``GradwireError`` for a file that
    cannot be read as a capture."""
    found = classify(transfers(_read(Path(path)), gap_for_rate(rate_bps), min_bytes, host))
    out: dict[str, Any] = {"transfers": len(found), "peers": len({t.peer for t in found})}
    for way, flag in (("out", True), ("in", False)):
        mine = [t for t in found if t.out == flag]
        counts = Counter(t.cls for t in mine)
        out[way] = {
            "transfers": len(mine),
            "bytes": sum(t.nbytes for t in mine),
            "median_bytes": _median(t.nbytes for t in mine),
            "median_rate_bps": _median(t.rate_bps for t in mine),
            "same_share": counts["same"] / len(mine) if mine else None,
            "classes": {c: {"transfers": counts[c],
                            "median_rate_bps": _median(t.rate_bps for t in mine if t.cls == c)}
                        for c in CLASSES if counts[c]},
        }
    return out


def summaries(paths: Sequence[tuple[str, Path, str]], rate_bps: float | None
              ) -> dict[str, dict[str, Any]]:
    """``summary`` of each (node, capture, node's address); a capture that cannot be read
    gets its ``error`` instead, so a run's result is never lost to it."""
    out: dict[str, dict[str, Any]] = {}
    for node, path, addr in paths:
        try:
            out[node] = {"file": str(path), **summary(path, rate_bps, host=addr)}
        except (GradwireError, OSError) as e:
            out[node] = {"file": str(path), "error": str(e)}
    return out


@dataclass(frozen=True)
class Cycle:
    """One step of one worker as its PS links saw it, every link together (seconds): its
    pulls (the PSes sending to it) from the first one's first packet to the last one's last,
    the gap to its first push, its pushes likewise, and from its pushes' end to its next
    pulls' start (``boundary``: negative where the next pulls began before the pushes
    ended); ``cycle`` the whole, pull start to the next pull start."""

    pull: float
    gap: float
    push: float
    boundary: float

    @property
    def cycle(self) -> float:
        return self.pull + self.gap + self.push + self.boundary


def _phases_of(spans: list[tuple[float, float]], join_s: float) -> list[list[float]]:
    """``spans`` merged where one starts at most ``join_s`` after the running one ends."""
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if out and a - out[-1][1] <= join_s:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def worker_cycles(found: Iterable[Transfer], join_s: float) -> dict[str, list[Cycle]]:
    """Each worker's steps from the bulk transfers of every PS link of one run: a worker's
    pulls on all links merged into pull phases, its pushes into push phases (``join_s``: the
    idle time inside one, ``gap_for_rate``), and each pull phase followed by a push phase
    and the next pull phase taken as one ``Cycle``. Worker -> its cycles in time order."""
    pulls: dict[str, list[tuple[float, float]]] = defaultdict(list)
    pushes: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for t in found:
        (pulls if t.out else pushes)[t.peer].append((t.first, t.last))
    out: dict[str, list[Cycle]] = {}
    for peer in sorted(pulls):
        events = sorted([(a, b, True) for a, b in _phases_of(pulls[peer], join_s)]
                        + [(a, b, False) for a, b in _phases_of(pushes[peer], join_s)])
        out[peer] = [Cycle(p[1] - p[0], q[0] - p[1], q[1] - q[0], n[0] - q[1])
                     for p, q, n in zip(events, events[1:], events[2:], strict=False)
                     if p[2] and not q[2] and n[2]]
    return out


def cycles_report(paths: Sequence[str], rate_bps: float | None) -> dict[str, dict[str, float]]:
    """Worker -> the median of each ``Cycle`` field (ms) and the number of cycles, over the
    captures of one run's PS links (``paths``, each its PS's own)."""
    gap = gap_for_rate(rate_bps)
    found: list[Transfer] = []
    for p in paths:
        found += transfers(_read(Path(p)), gap)
    out: dict[str, dict[str, float]] = {}
    for peer, cyc in worker_cycles(found, gap).items():
        if cyc:
            out[peer] = {"cycles": len(cyc), **{
                f: 1000 * statistics.median(getattr(c, f) for c in cyc)
                for f in ("pull", "gap", "push", "boundary", "cycle")}}
    return out


def _mbit(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e6:.0f}"


def _report(paths: Sequence[str], rate_bps: float | None, host: str | None,
            phases: bool = False) -> int:
    """Print each capture's table, or with ``phases`` the run's workers' cycles; exit code."""
    try:
        if phases:
            cycles = cycles_report(paths, rate_bps)
            if not cycles:
                print(f"headers: no worker's pulls, pushes and next pulls in {', '.join(paths)}",
                      file=sys.stderr)
                return 1
            for peer, m in cycles.items():
                print(f"{peer}: {m['cycles']:.0f} steps, median ms: pull {m['pull']:.1f}, gap "
                      f"{m['gap']:.1f}, push {m['push']:.1f}, to the next pull "
                      f"{m['boundary']:.1f}, step {m['cycle']:.1f}")
            return 0
        found = [(p, summary(p, rate_bps, host=host)) for p in paths]
    except GradwireError as e:
        print(f"headers: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"headers: cannot read {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    for p, s in found:
        print(f"{p}: {s['transfers']} bulk transfers with {s['peers']} peers")
        for way in ("out", "in"):
            d = s[way]
            if not d["transfers"]:
                continue
            share = d["same_share"]
            print(f"  {way:3s} {d['transfers']:5d}, median {d['median_bytes'] / 1e6:.2f} MB at "
                  f"{_mbit(d['median_rate_bps'])} Mbit/s; beside another's the same way: "
                  f"{100 * share:.0f}%")
            for c, v in d["classes"].items():
                print(f"      {c:8s} {v['transfers']:5d}  {_mbit(v['median_rate_bps']):>5s} Mbit/s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from gradwire.units import parse_rate_bps

    p = argparse.ArgumentParser(
        prog="python scripts/lab/headers.py",
        description="Bulk transfers on the lab's links from --capture-headers files: how many, "
        "their rates, and whether each ran alone, beside another worker's going the other way, "
        "or beside one going the same way (two workers taking turns vs in step).")
    p.add_argument("files", nargs="+", metavar="FILE", help="<node>.headers.pcap files")
    p.add_argument("--rate", default=None,
                   help="the link's shaped rate, e.g. 100mbit: a transfer ends after 10 ms without "
                   "data, or two GSO packets' time at the rate where that is longer")
    p.add_argument("--host", default=None, metavar="ADDR",
                   help="the captured node's address (default: the address with the most "
                   "peers; with one peer, the lower address, the lab's PS)")
    p.add_argument("--phases", action="store_true",
                   help="the FILEs are one run's PS links: each worker's steps, every link "
                   "together (its pulls, the gap to its pushes, its pushes, the time to its "
                   "next pulls), medians in ms; each file's PS is the address with the most "
                   "peers, --host is not used")
    args = p.parse_args(argv)
    try:
        rate = parse_rate_bps(args.rate) if args.rate else None
    except ValueError as e:
        p.error(str(e))
    return _report(args.files, rate, args.host, args.phases)


if __name__ == "__main__":
    sys.exit(main())
