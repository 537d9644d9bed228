"""How the workers occupy a PS link, in the lab and in the replay: the share of time in each
state (pulls moving, pushes moving), and the lab's goodput in each.

``python scripts/diag_link_states.py CONFIG_DIR [...] [--workers 2,3,4] [--bin-ms 10]
[--predict-args "..."]``: CONFIG_DIR is one configuration of ``scripts/bench_accuracy.py``'s
output (``bench-out/SET/NAME``: its ``predict.json``, its ``profile/`` and its lab runs
``wW*.json`` with their ``logs/<run>/headers/ps*.headers.pcap``, which the bench's runs
capture). Each PS link's throughput window is cut into bins; in each bin a worker's pull (or
push) counts as moving when it carried more than 5% of the bin's capacity. A bin's **state**
is ``m|n``: m workers pulling from that PS, n pushing to it. Per W it prints:

- the share of the busy bins (a link's bins with anything moving, every PS link pooled) in
  each state, the lab's runs (none yet: the replay's row alone, to write down before the
  runs) against the replay's replications as the bench predicted them
  (``predict.json``'s command line, that W alone, in this process, every op recorded:
  ``replay.predict.RECORD_REPLICATIONS``), a replay chunk counted as moving over its span;
- the **one-way** share (one direction moving, the other idle: half the link unused) of
  both;
- the lab's goodput per state and direction, as a share of the link's TCP payload rate, over
  its *steady* bins (no worker on that link starting or stopping in the bin or the bins beside
  it): how fast a pull runs beside n pushes, and a push beside m pulls.
- how unequally the lab's workers moving the same way share it: in each steady bin with two
  or more of them, the fastest one's bytes over the slowest one's (median and quartiles; the
  replay shares a direction equally, 1.00), and whether a worker keeps its share from one
  transfer to its next that way (each transfer's rate over the mean rate of the others' it
  overlaps; the lag-1 Pearson correlation of those over each worker's transfers);
- over several PSes, how far apart a worker's transfers one way on the PS links end: for
  each of its pulls (pushes) from PS 0, those from the other PSes that overlap it most; the
  mean spread of their ends (ms), and that over the mean per-PS transfer (a worker waits for
  the last of them), lab against replay. A transfer is its chunks or packets merged where the
  link carried nothing of it for less than two GSO packets' time (``headers.gap_for_rate``).

A diagnostic for issue 21 (docs/notes/issue21-link-states.md), not part of ``gradwire``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench_accuracy import lab_run_files  # noqa: E402
from diag_same_phase import (  # noqa: E402
    DiagError,
    config_args,
    observe_replications,
    predict_argv,
    print_reports,
)
from lab import headers  # noqa: E402

from gradwire.replay import predict as replay_predict  # noqa: E402
from gradwire.replay.netns import parse_rate_bps  # noqa: E402
from gradwire.replay.predict import GOODPUT  # noqa: E402

MOVING = 0.05  # a worker moves in a bin where it carried more than this share of its capacity
MIN_BINS = 5  # a state's goodput is shown from this many steady bins (display only)

State = tuple[int, int]  # (workers pulling, workers pushing) on one PS link in one bin


def states(moving: dict[tuple[str, object], Sequence[bool]], bins: int) -> list[State]:
    """Each bin's state on one link: ``moving[("down"|"up", worker)][bin]``."""
    return [(sum(v[i] for k, v in moving.items() if k[0] == "down"),
             sum(v[i] for k, v in moving.items() if k[0] == "up")) for i in range(bins)]


def shares(counts: Counter[State]) -> dict[State, float]:
    """Each state's share of the busy bins (every state but 0|0)."""
    busy = {s: c for s, c in counts.items() if s != (0, 0)}
    total = sum(busy.values())
    return {s: c / total for s, c in sorted(busy.items())} if total else {}


def one_way(share: dict[State, float]) -> float:
    """The share of busy time with exactly one direction moving."""
    return sum(v for (m, n), v in share.items() if (m == 0) != (n == 0))


Goodputs = dict[State, dict[str, list[float]]]  # per state, per direction, per steady bin
Spreads = dict[str, list[float]]  # per direction, per steady bin: fastest worker / slowest


def lab_link(packets: Iterable[tuple[float, str, str, int]], t0: float, t1: float,
             rate_bps: float, bin_s: float) -> tuple[list[State], Goodputs, Spreads]:
    """One PS link's capture (``headers._read``'s packets) over [t0, t1] s: each bin's state;
    per state of the steady bins each direction's goodput as a share of the link's TCP
    payload rate; and per direction, in each steady bin where two or more workers move that
    way, the fastest one's bytes over the slowest one's (1.0: they share equally)."""
    pkts = list(packets)
    if not pkts:
        return [], {}, {}
    me = headers._capturing_host(pkts)
    n = int((t1 - t0) / bin_s)
    cap = rate_bps * GOODPUT / 8 * bin_s
    carried: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0] * n)
    for ts, src, dst, nbytes in pkts:
        i = int((ts - t0) / bin_s)
        if 0 <= i < n:
            carried[("down", dst) if src == me else ("up", src)][i] += nbytes
    moving = {k: [x > MOVING * cap for x in v] for k, v in carried.items()}
    per_bin = states(moving, n)
    rates: Goodputs = defaultdict(lambda: defaultdict(list))
    spread: Spreads = defaultdict(list)
    for i in range(1, n - 1):
        if any(v[i - 1] != v[i] or v[i + 1] != v[i] for v in moving.values()):
            continue
        for way in ("down", "up"):
            if per_bin[i][0 if way == "down" else 1]:
                rates[per_bin[i]][way].append(
                    sum(v[i] for k, v in carried.items() if k[0] == way) / cap)
            each = [v[i] for k, v in carried.items() if k[0] == way and moving[k][i]]
            if len(each) >= 2:
                spread[way].append(max(each) / min(each))
    return per_bin, rates, spread


def carried_over(found: Iterable[headers.Transfer]) -> dict[str, list[tuple[float, float]]]:
    """Does a worker keep its share of a direction from one transfer to its next? Each
    transfer's rate (``Transfer.rate_bps``) over the mean rate of the other workers' transfers
    it overlaps the same way, paired with the same of that worker's next transfer that way:
    ``{"down"|"up": [(this, next), ...]}``, transfers overlapping none (or of one packet, no
    rate) left out."""
    found = list(found)
    rel: dict[tuple[str, str], list[float]] = defaultdict(list)
    for t in found:
        others = [u.rate_bps for u in found if u.out == t.out and u.peer != t.peer
                  and u.first < t.last and u.last > t.first and u.rate_bps is not None]
        rel[("down" if t.out else "up", t.peer)].append(
            t.rate_bps / statistics.fmean(others) if others and t.rate_bps is not None
            else math.nan)
    pairs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for (way, _), xs in rel.items():
        pairs[way] += [(a, b) for a, b in zip(xs, xs[1:], strict=False)
                       if not (math.isnan(a) or math.isnan(b))]
    return pairs


class LabLinks(NamedTuple):
    """What ``lab_states`` found in a configuration's lab runs at one W."""

    counts: Counter[State]  # the bins' states, every PS link
    rates: Goodputs  # the steady bins' goodputs
    runs: int  # lab runs with captures
    spreads: dict[str, list[tuple[float, float]]]  # several PS links: ``end_spreads``
    shares: Spreads  # steady bins: fastest worker one way over the slowest
    carried: dict[str, list[tuple[float, float]]]  # ``carried_over`` of every link


def lab_states(config_dir: Path, workers: int, rate_bps: float, bin_s: float) -> LabLinks:
    """The lab runs at ``workers``: their bins' states (every PS link), the steady bins'
    goodputs and how unequally the workers moving one way share it, how many runs had
    captures, over several PS links the ``end_spreads`` of the transfers starting in the
    throughput window, and whether a worker's share one way carries over to its next
    transfer (``carried_over`` of those transfers)."""
    counts: Counter[State] = Counter()
    rates: Goodputs = defaultdict(lambda: defaultdict(list))
    spreads: dict[str, list[tuple[float, float]]] = defaultdict(list)
    shares_: Spreads = defaultdict(list)
    carried: dict[str, list[tuple[float, float]]] = defaultdict(list)
    join_s = headers.gap_for_rate(rate_bps)
    runs = 0
    for path in lab_run_files(config_dir, workers):
        try:
            t0, t1 = json.loads(path.read_text())["throughput_window_s"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise DiagError(f"{path}: not a lab result with a throughput window "
                            f"({type(e).__name__}: {e})") from None
        captures = sorted((config_dir / "logs" / path.stem / "headers").glob("ps*.headers.pcap"))
        if not captures:
            continue
        runs += 1
        spans: Spans = defaultdict(list)
        for cap in captures:
            ps_id = cap.name[2:].split(".")[0]  # psN.headers.pcap
            if not ps_id.isdigit():
                raise DiagError(f"{cap}: not a PS's capture (psN.headers.pcap)")
            ps = int(ps_id)
            try:
                packets = headers._read(cap)
            except (OSError, ValueError) as e:
                raise DiagError(f"{cap}: not a readable capture ({e})") from None
            per_bin, r, unequal = lab_link(packets, t0, t1, rate_bps, bin_s)
            counts.update(per_bin)
            for s, ways in r.items():
                for way, xs in ways.items():
                    rates[s][way] += xs
            for way, xs in unequal.items():
                shares_[way] += xs
            found = [t for t in headers.transfers(packets, join_s) if t0 <= t.first <= t1]
            for t in found:
                spans[(t.peer, "down" if t.out else "up", ps)].append((t.first, t.last))
            for way, xs in carried_over(found).items():
                carried[way] += xs
        if len(captures) > 1:
            for way, xs in end_spreads(spans, join_s).items():
                spreads[way] += xs
    return LabLinks(counts, rates, runs, spreads, shares_, carried)


def replay_link_states(spans: Iterable[tuple[int, str, int, float, float]], ps: int,
                       t0: float, t1: float, bin_us: float) -> list[State]:
    """The replay's bins on PS ``ps``'s link over [t0, t1] us from ``Simulator.transfer_spans``:
    a worker moves in a bin its chunks cover for more than ``MOVING`` of it."""
    n = int((t1 - t0) / bin_us)
    cover: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0] * n)
    for worker, kind, p, start, end in spans:
        if p != ps:
            continue
        a, z = max(start, t0), min(end, t1)
        i = int((a - t0) / bin_us)
        while a < z and i < n:
            e = min(z, t0 + (i + 1) * bin_us)
            cover[(kind, worker)][i] += (e - a) / bin_us
            a, i = e, i + 1
    return states({k: [x > MOVING for x in v] for k, v in cover.items()}, n)


Spans = dict[tuple[object, str, int], list[tuple[float, float]]]  # (worker, way, ps) -> s


def end_spreads(spans: Spans, join_s: float) -> dict[str, list[tuple[float, float]]]:
    """Way ("down": pulls, "up": pushes) -> (end spread s, mean duration s) of each of a
    worker's transfers that way on PS 0's link (``spans`` merged where they are at most
    ``join_s`` apart) with, from each other PS's link, the transfer overlapping it most;
    transfers with no overlapping one on some link are left out."""
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for (worker, way, ps), first in spans.items():
        if ps != 0:
            continue
        others = [headers._phases_of(v, join_s) for (w, y, p), v in spans.items()
                  if w == worker and y == way and p != 0]
        if not others:
            continue
        for a, b in headers._phases_of(first, join_s):
            group = [(a, b)]
            for phases in others:
                best = max(phases, key=lambda q: min(b, q[1]) - max(a, q[0]), default=None)
                if best is None or min(b, best[1]) <= max(a, best[0]):
                    break
                group.append((best[0], best[1]))
            else:
                ends = [z for _, z in group]
                out[way].append((max(ends) - min(ends),
                                 statistics.fmean(z - y for y, z in group)))
    return out


def replay_states(argv: Sequence[str], ps: int, bin_us: float, join_s: float
                  ) -> tuple[Counter[State], dict[str, list[tuple[float, float]]]]:
    """Replay ``argv`` (a ``gradwire predict`` command line) with its replications recorded:
    their bins' states on every PS link, and over several PSes their ``end_spreads``."""
    counts: Counter[State] = Counter()
    spreads: dict[str, list[tuple[float, float]]] = defaultdict(list)

    def observe(sim: replay_predict.Simulator, window_us: tuple[float, float],
                steps_per_s: float) -> None:
        spans = sim.transfer_spans()
        for p in range(ps):
            counts.update(replay_link_states(spans, p, *window_us, bin_us))
        if ps > 1:
            mine: Spans = defaultdict(list)
            for worker, kind, p, start, end in spans:
                if window_us[0] <= start <= window_us[1]:
                    mine[(worker, kind, p)].append((start / 1e6, end / 1e6))
            for way, xs in end_spreads(mine, join_s).items():
                spreads[way] += xs

    observe_replications(argv, observe, record=True)
    return counts, spreads


def _spread(xs: Sequence[tuple[float, float]]) -> str:
    if not xs:
        return "-"
    gap = statistics.fmean(x for x, _ in xs)
    return f"{1e3 * gap:.1f} ms ({gap / statistics.fmean(d for _, d in xs):.2f})"


def _quartiles(xs: Sequence[float]) -> str:
    """``median (lower-upper quartile)`` of two or more values."""
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return f"{q[1]:.2f} ({q[0]:.2f}-{q[2]:.2f})"


def _row(share: dict[State, float], keys: Sequence[State]) -> str:
    return " | ".join(f"{100 * share.get(s, 0.0):.0f}" for s in keys)


def report(config_dir: Path, workers: Sequence[int], bin_ms: float,
           extra: Sequence[str]) -> str:
    """The markdown section of one configuration."""
    cfg_path = config_dir / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
        ps = int(cfg["ps"])
        rate_bps = parse_rate_bps(str(cfg["bandwidth"]))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DiagError(f"{cfg_path}: not a bench configuration ({type(e).__name__}: {e})"
                        ) from None
    out = [f"## {config_dir.name}" + (f" ({' '.join(extra)})" if extra else ""), ""]
    for w in workers:
        found = lab_states(config_dir, w, rate_bps, bin_ms / 1e3)
        lab, rates, runs, lab_spread = found.counts, found.rates, found.runs, found.spreads
        rep, rep_spread = replay_states(predict_argv(config_dir, w, extra), ps, bin_ms * 1e3,
                                        headers.gap_for_rate(rate_bps))
        lab_s, rep_s = shares(lab), shares(rep)
        keys = sorted(set(lab_s) | set(rep_s))
        out += [f"W = {w} ({runs} lab runs): % of the busy {bin_ms:g} ms bins per state "
                "(pulls|pushes)", "",
                "| | " + " | ".join(f"{m}\\|{n}" for m, n in keys) + " | one-way |",
                "|---|" + "---:|" * (len(keys) + 1)]
        if runs:  # a configuration not yet run: the replay's alone, to write down first
            out.append(f"| lab | {_row(lab_s, keys)} | {100 * one_way(lab_s):.0f} |")
        out += [f"| replay | {_row(rep_s, keys)} | {100 * one_way(rep_s):.0f} |", ""]
        parts = [f"{m}\\|{n} " + ", ".join(f"{way} {statistics.median(xs):.2f} ({len(xs)})"
                                          for way, xs in sorted(rates[(m, n)].items())
                                          if len(xs) >= MIN_BINS)
                 for m, n in sorted(rates) if m and n
                 and any(len(xs) >= MIN_BINS for xs in rates[(m, n)].values())]
        if parts:
            out += ["lab goodput in steady bins beside the other direction, share of the link "
                    "(median, bins): " + "; ".join(parts), ""]
        unequal = [f"{way} {_quartiles(xs)} ({len(xs)})"
                   for way, xs in sorted(found.shares.items()) if len(xs) >= MIN_BINS]
        if unequal:
            out += ["lab: the fastest worker over the slowest in steady bins with two or more "
                    "moving one way (median, quartiles, bins; the replay shares equally, 1.00): "
                    + "; ".join(unequal), ""]
        kept = [f"{way} {statistics.correlation(*zip(*xs, strict=True)):+.2f} ({len(xs)})"
                for way, xs in sorted(found.carried.items())
                if len(xs) >= MIN_BINS and len({x for x, _ in xs}) > 1
                and len({y for _, y in xs}) > 1]
        if kept:
            out += ["lab: a transfer's rate over that of the others' it overlaps, correlated "
                    "with the worker's next transfer's the same way (Pearson, pairs): "
                    + "; ".join(kept), ""]
        if ps > 1:
            out += [f"{ps} PS links: where a worker's transfers one way end, mean spread (of a "
                    "transfer), lab / replay: " + "; ".join(
                        f"{name} {_spread(lab_spread.get(way, []))} / "
                        f"{_spread(rep_spread.get(way, []))}"
                        for way, name in (("down", "pulls"), ("up", "pushes"))), ""]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    config_args(ap)
    ap.add_argument("--bin-ms", type=float, default=10.0, help="bin width, ms (default 10)")
    args = ap.parse_args(argv)
    if not args.bin_ms > 0:
        print(f"diag_link_states: --bin-ms {args.bin_ms}: must be above 0", file=sys.stderr)
        return 2
    return print_reports("diag_link_states", args,
                         lambda d, w, extra: report(d, w, args.bin_ms, extra))


if __name__ == "__main__":
    sys.exit(main())
