"""How often a lab run's pulls were held by TCP's probe timer, from its PS captures alone.

``python scripts/diag_holds.py CONFIG_DIR [...] [--workers 2,3,4]``: CONFIG_DIR is one
configuration of ``scripts/bench_accuracy.py``'s output (``bench-out/SET/NAME``: its lab runs
``wW*.json`` with their ``logs/<run>/headers/ps*.headers.pcap``, which the bench's runs
capture). A PS's pull to a worker leaves through the PS's own shaped queue; a packet that
queue drops is not counted as sent, and a connection left with nothing in flight waits for
its probe timer, at least ``TCP_RTO_MIN`` (docs/lab.md, "Held flows"). In the capture a hold
is a connection from the PS that sends nothing for ``HOLD_SILENCE_S`` or more, then one
segment of one MSS (the probe: data waits, so the probe is full), and its next segment no
sooner than
``PROBE_WAIT_S`` after it (the probe waited for its ACK; a request's small first frame is
followed at once by its data). Per configuration and W, over its runs:

- holds per run (those whose silence began in the throughput window) and the **held
  share**: their silences, up to the window's end, over the workers' time in the window
  (W x its length): the time the runs' workers spent held;
- **joins**: the pulls that started while another worker's pull to that PS was moving
  (``headers.transfers``; a held pull going on after its probe does not start one), and
  how many of them were followed within ``JOIN_HOLD_S`` by a hold of a connection of the
  workers involved, beside the lab's throughput.

A diagnostic for issue 21 (docs/notes/issue21-link-states.md, "Held pulls, counted"), not
part of ``gradwire``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench_accuracy import lab_run_files  # noqa: E402
from diag_same_phase import DiagError  # noqa: E402
from lab import headers  # noqa: E402

from gradwire.collector.pcapfile import PcapReader  # noqa: E402
from gradwire.errors import GradwireError  # noqa: E402
from gradwire.records import Packet  # noqa: E402
from gradwire.replay.hostqueue import MSS, RTO_MIN_US  # noqa: E402
from gradwire.replay.netns import parse_rate_bps  # noqa: E402

# Linux's floor on the probe timer (TCP_RTO_MIN, 200 ms), less 10 ms for where the capture
# stamps the segments before and after it
HOLD_SILENCE_S = RTO_MIN_US / 1e6 - 0.010
PROBE_WAIT_S = 0.001  # a probe's next segment waits for its ACK: a round trip, at least this
JOIN_HOLD_S = 0.300  # a hold counts for a join when its silence starts this soon after it


@dataclass(frozen=True)
class Hold:
    """One held connection from the PS: the worker it sends to, when its silence began and
    when the probe left (s, the capture's clock)."""

    worker: str
    silent_from_s: float
    probe_s: float


def data_packets(path: Path) -> list[Packet]:
    """The TCP segments carrying data of one PS capture."""
    try:
        return [p for p in PcapReader(path) if p.payload_bytes > 0]
    except (OSError, GradwireError) as e:
        raise DiagError(f"{path}: not a readable capture ({e})") from None


def holds(data: Sequence[Packet]) -> list[Hold]:
    """The holds of one PS capture's connections from the PS (module docstring), given its
    segments carrying data (``data_packets``)."""
    if not data:
        return []
    me = headers._capturing_host([(0.0, p.src, p.dst, 0) for p in data])
    flows: dict[tuple[str, int, int], list[tuple[float, int]]] = defaultdict(list)
    for p in data:
        if p.src == me:
            flows[(p.dst, p.sport, p.dport)].append((p.ts_ns / 1e9, p.payload_bytes))
    out = []
    for (worker, _, _), segs in flows.items():
        segs.sort()
        for (ta, _), (tb, nb), (tc, _) in zip(segs, segs[1:], segs[2:], strict=False):
            if tb - ta >= HOLD_SILENCE_S and nb == MSS and tc - tb >= PROBE_WAIT_S:
                out.append(Hold(worker, ta, tb))
    return sorted(out, key=lambda h: h.silent_from_s)


@dataclass(frozen=True)
class RunHolds:
    """One lab run: its throughput, window (s), holds in the window and their silences (s),
    joins and joins followed by a hold."""

    examples_per_s: float
    window_s: float
    holds: int
    held_s: float
    joins: int
    held_joins: int


def run_holds(result: Path, rate_bps: float) -> RunHolds | None:
    """A lab run's holds and joins over its PS captures (None: the run has no captures)."""
    try:
        doc = json.loads(result.read_text())
        t0, t1 = doc["throughput_window_s"]
        rate = float(doc["throughput_examples_per_s"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DiagError(f"{result}: not a lab result with a throughput window "
                        f"({type(e).__name__}: {e})") from None
    captures = sorted((result.parent / "logs" / result.stem / "headers").glob("ps*.headers.pcap"))
    if not captures:
        return None
    join_s = headers.gap_for_rate(rate_bps)
    n = joins = held_joins = 0
    held_s = 0.0
    for cap in captures:
        data = data_packets(cap)  # one pass over the capture: the holds and the transfers
        found = holds(data)
        mine = [h for h in found if t0 <= h.silent_from_s <= t1]
        n += len(mine)
        held_s += sum(min(h.probe_s, t1) - h.silent_from_s for h in mine)
        pulls = [t for t in headers.transfers(headers.data_rows(data), join_s) if t.out]
        for t in pulls:
            if any(h.worker == t.peer and 0.0 <= t.first - h.probe_s <= JOIN_HOLD_S
                   for h in found):
                continue  # a held pull going on after its probe, not a new one
            moving = {u.peer for u in pulls if u.peer != t.peer and u.first <= t.first < u.last}
            if t0 <= t.first <= t1 and moving:
                joins += 1
                held_joins += any(h.worker in moving | {t.peer}
                                  and t.first - 0.005 <= h.silent_from_s <= t.first + JOIN_HOLD_S
                                  for h in mine)
    return RunHolds(rate, t1 - t0, n, held_s, joins, held_joins)


def report(config_dir: Path, workers: Sequence[int]) -> str:
    """The markdown rows of one configuration, one per W with runs."""
    cfg_path = config_dir / "config.json"
    try:
        rate_bps = parse_rate_bps(str(json.loads(cfg_path.read_text())["bandwidth"]))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DiagError(f"{cfg_path}: not a bench configuration ({type(e).__name__}: {e})"
                        ) from None
    rows = []
    for w in workers:
        runs = [r for r in (run_holds(p, rate_bps) for p in lab_run_files(config_dir, w)) if r]
        if not runs:
            continue
        share = sum(r.held_s for r in runs) / sum(w * r.window_s for r in runs)
        rows.append(
            f"| {config_dir.name} | {w} | {len(runs)} | "
            f"{statistics.median(r.examples_per_s for r in runs):.1f} | "
            f"{', '.join(str(r.holds) for r in runs)} | {100 * share:.1f}% | "
            f"{sum(r.held_joins for r in runs)} of {sum(r.joins for r in runs)} |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("configs", nargs="+", type=Path, help="bench-out/SET/NAME folders")
    ap.add_argument("--workers", default="2,3,4", help="W to count (default 2,3,4)")
    args = ap.parse_args(argv)
    try:
        workers = [int(x) for x in args.workers.split(",")]
        if any(w < 1 for w in workers):
            raise ValueError
    except ValueError:
        print(f"diag_holds: --workers {args.workers}: give whole numbers of 1 or more, "
              "e.g. 2,3,4", file=sys.stderr)
        return 2
    print("| configuration | W | runs | lab ex/s (median) | holds per run | held share | "
          "joins held |")
    print("|---|---:|---:|---:|---|---:|---|")
    try:
        for d in args.configs:
            text = report(d, workers)
            if text:
                print(text)
    except DiagError as e:
        print(f"diag_holds: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
