"""Sample the lab's TCP sockets and queues while a run goes on, and find held-back flows.

``--tcp-sample DIR`` runs, in each sampled namespace (the PSes; the workers for ring
all-reduce), a shell loop that prints a timestamp, ``ss -tinH state established`` (every
socket's congestion window, bytes acked and received, data not yet sent, data in flight, time
since its last send, BBR's bandwidth estimate...) and ``tc -s qdisc show`` (each queue's
backlog in bytes), about every 15 ms on an idle 2-core machine (each ``ss`` takes a few ms of
CPU, so the loop costs the run some CPU: about 0.1 core).

What it is for: seeing how flows share a shaped link, per socket, without a packet capture.
Its first finding (docs/notes/issue22-sync-stagger.md) was the *held* flow: a socket with data
waiting to be sent (``notsent``), nothing in flight (no ``unacked``) and nothing sent for
longer than the sampling could explain. Linux holds a flow so when the sender's own queue
(the lab's ``bfifo`` on the PS's egress) drops its packet: the packet is not counted as sent,
no ACK is coming to clock out the next, and only the zero-window probe timer, armed at the
retransmission timeout (at least ``TCP_RTO_MIN``, 200 ms), sends again. (The samples agree:
the held episodes of the runs in that note lasted 196-212 ms, the flows' ``rto``.)

``python scripts/lab/tcpsample.py FILE...`` prints each sampled flow's bytes sent and its held
episodes; with ``--rate``, where the flows run BBR, how often each busy one's bandwidth
estimate stood over twice the link (``bbr_estimates``). Units: times in seconds from the first
sample unless named ``_ms``; bytes.
"""

from __future__ import annotations

import bisect
import math
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "HELD_MS",
    "MAX_PAUSE_S",
    "MIN_PAUSE_S",
    "PAUSE_RANGE",
    "PAUSE_S",
    "Held",
    "Sample",
    "bbr_estimates",
    "direction_rates",
    "flow_bytes",
    "held_episodes",
    "loop_command",
    "parse",
    "queue_shares",
    "sample_file",
    "start",
    "stop",
    "summary",
    "valid_pause",
]

# A flow counts as held when it has sent nothing for this long with data waiting and none in
# flight: 3-4 sampling periods, a quarter of TCP_RTO_MIN (200 ms, the least a probe timer
# waits), so a held episode is seen whatever the sampling phase.
HELD_MS = 50
# A flow with fewer segments in flight is not counted as busy by ``queue_shares``: a request or
# a window update, not a transfer (a GSO packet here is 45 segments).
BUSY_SEGMENTS = 20
# ``direction_rates``: bins of 40 ms, about three samples each (a 400 Mbit/s link moves 1.9 MB
# in one), and a flow moving when it carries a tenth of the link's payload in a bin (a
# request or a window update carries far less)
BIN_S = 0.04
ACTIVE_SHARE = 0.1
PAYLOAD_PER_FRAME = 1448 / 1514  # TCP payload of a full Ethernet frame (timestamps on)

_LOOP = (
    'while kill -0 $PPID 2>/dev/null; do echo "T $(date +%s.%N)"; '
    "ss -tinH state established; tc -s qdisc show | grep -E '^qdisc|^ Sent|backlog'; "
    "sleep {pause}; done"
)
# Seconds the loop sleeps between samples: with ss's and tc's own few ms, a sample about every
# 15 ms. That costs a run about a tenth of a core, enough to knock two asynchronous workers out
# of taking turns (docs/lab.md, "Known limits"); 0.1 s kept them taking turns.
# The switch's loop: its queues only (the shapers toward each PS, which hold the workers'
# pushes and the ACKs of the PS's pulls); it has no sockets.
_QUEUE_LOOP = (
    'while kill -0 $PPID 2>/dev/null; do echo "T $(date +%s.%N)"; '
    "tc -s qdisc show | grep -E '^qdisc|^ Sent|backlog'; sleep {pause}; done"
)
SWITCH = "switch"  # the switch namespace's file is SWITCH.ss.txt
PAUSE_S = 0.003
MIN_PAUSE_S = 0.001  # the loop writes the pause in ms: a shorter one would read "sleep 0.000"
MAX_PAUSE_S = 10.0  # a longer sleep samples too seldom to see a step
_FIELD = re.compile(r"\b(bytes_acked|bytes_received|cwnd|unacked|notsent|lastsnd):(\d+)")
# BBR's own state as ``ss -i`` prints it: its bandwidth estimate and minimum RTT (ms), and the
# socket's pacing and last delivery rates; rates in bps, scaled by K/M/G where ss humanises
_BBR = re.compile(r"bbr:\(bw:([\d.]+)([KMG]?)bps,mrtt:([\d.]+)")
_RATE = re.compile(r"\b(pacing_rate|delivery_rate) ([\d.]+)([KMG]?)bps")
_BACKLOG = re.compile(r"^ backlog (\d+)([KMG]?)b")
_DROPPED = re.compile(r"^ Sent \d+ bytes \d+ pkt \(dropped (\d+)")
_SCALE = {"": 1, "K": 1_000, "M": 1_000_000, "G": 1_000_000_000}


PAUSE_RANGE = f"[{MIN_PAUSE_S:g}, {MAX_PAUSE_S:g}]"  # as the errors say it


def loop_command(pause_s: float = PAUSE_S, queues_only: bool = False) -> list[str]:
    """The sampling loop, sleeping ``pause_s`` seconds between samples, to run inside one
    namespace (``ip netns exec NS ...``, which execs it, so its parent is the lab); it ends
    when stopped, or when the lab process is gone. ``queues_only``: ``tc`` without ``ss``
    (the switch's loop)."""
    if not valid_pause(pause_s):
        raise ValueError(f"pause between samples must be in {PAUSE_RANGE} s, got {pause_s!r}")
    return ["sh", "-c", (_QUEUE_LOOP if queues_only else _LOOP).format(pause=f"{pause_s:.3f}")]


def valid_pause(pause_s: float) -> bool:
    """Whether the loop may sleep ``pause_s`` seconds between samples: [``MIN_PAUSE_S``,
    ``MAX_PAUSE_S``]."""
    return MIN_PAUSE_S <= pause_s <= MAX_PAUSE_S


@dataclass
class Sample:
    """One pass of the loop: ``t`` (seconds since the epoch), each established socket's fields
    by ``(local, peer)`` address pair, and, for each queue shown, its backlog (bytes) and the
    packets it has dropped since it was made."""

    t: float
    sockets: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    backlogs: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Held:
    """A held episode of one flow: first and last sample it was seen held in (seconds from the
    file's first sample), the longest time since its last send seen in it (ms), and when it
    last sent before the episode (seconds from the file's first sample: the first held
    sample's time less its time since the last send), where the hold began."""

    flow: tuple[str, str]
    first_s: float
    last_s: float
    longest_ms: int
    last_send_s: float


def qdisc_drops(text: str) -> list[int]:
    """The drops of each qdisc in ``tc -s qdisc show``'s ``text``, in its order (the root
    first)."""
    return [int(m.group(1)) for line in text.splitlines() if (m := _DROPPED.match(line))]


def parse(path: str | Path) -> list[Sample]:
    """The samples of one ``--tcp-sample`` file, in order. A line the loop did not write (a
    torn last line after the run stopped it) is skipped."""
    samples: list[Sample] = []
    sock: tuple[str, str] | None = None
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("T "):
                try:
                    samples.append(Sample(float(line.split()[1])))
                except (IndexError, ValueError):
                    continue
                sock = None
            elif not samples:
                continue
            elif m := _DROPPED.match(line):
                samples[-1].dropped.append(int(m.group(1)))
            elif m := _BACKLOG.match(line):
                samples[-1].backlogs.append(int(m.group(1)) * _SCALE[m.group(2)])
            elif line.startswith("\t"):
                if sock is not None:
                    samples[-1].sockets[sock] = _socket_fields(line)
                sock = None
            elif not line.startswith(("qdisc", " ")):
                parts = line.split()  # Recv-Q Send-Q Local:port Peer:port
                sock = (parts[2], parts[3]) if len(parts) >= 4 else None
    return samples


def _socket_fields(line: str) -> dict[str, int]:
    """One socket's ``ss -i`` line: its counters (``_FIELD``) and, where it runs BBR,
    ``bbr_bw_bps``, ``bbr_min_rtt_us``, ``pacing_rate_bps`` and ``delivery_rate_bps``."""
    d = {k: int(v) for k, v in _FIELD.findall(line)}
    if m := _BBR.search(line):
        d["bbr_bw_bps"] = round(float(m.group(1)) * _SCALE[m.group(2)])
        d["bbr_min_rtt_us"] = round(float(m.group(3)) * 1000)
    for name, value, unit in _RATE.findall(line):
        d[f"{name}_bps"] = round(float(value) * _SCALE[unit])
    return d


def _busy(d: dict[str, int], min_unacked: int) -> bool:
    """A socket's sample is *busy*: at least ``min_unacked`` segments in flight and data
    waiting (so neither the application nor an empty window holds it back)."""
    return d.get("unacked", 0) >= min_unacked and d.get("notsent", 0) > 0


def bbr_estimates(samples: list[Sample], payload_bps: float,
                  min_unacked: int = BUSY_SEGMENTS, above: float = 2.0
                  ) -> dict[tuple[str, str], dict[str, float]]:
    """BBR's state on each flow that was busy (``_busy``) in some sample: its busy samples,
    the share of them whose bandwidth estimate (payload, as BBR counts delivered segments) was
    over ``above`` x the link's ``payload_bps`` (a shaper's bucket burst read as the path's
    rate: the flow paces far above the link and fills the queue with its window), the medians
    of its window and of what it had in flight then (segments), its least minimum RTT (us),
    and how long (seconds, the median) the estimate stayed above before falling back, over
    every sample of the flow (a spell still on at the flow's last sample counts to there)."""
    limit = above * payload_bps
    out: dict[tuple[str, str], dict[str, float]] = {}
    for key in {k for smp in samples for k in smp.sockets}:
        points = [(smp.t, smp.sockets[key]) for smp in samples
                  if "bbr_bw_bps" in smp.sockets.get(key, {})]
        busy = [d for _, d in points if _busy(d, min_unacked)]
        if not busy:
            continue
        high = [d for d in busy if d["bbr_bw_bps"] > limit]
        spells, since = [], None
        for t, d in points:
            if d["bbr_bw_bps"] > limit:
                since = t if since is None else since
            elif since is not None:
                spells.append(t - since)
                since = None
        if since is not None:
            spells.append(points[-1][0] - since)
        out[key] = {"busy_samples": len(busy), "high_share": len(high) / len(busy),
                    "cwnd": statistics.median(d.get("cwnd", 0) for d in busy),
                    "in_flight": statistics.median(d["unacked"] for d in busy),
                    "min_rtt_us": min(d["bbr_min_rtt_us"] for _, d in points),
                    "high_spell_s": statistics.median(spells) if spells else math.nan}
    return out


def flow_bytes(samples: list[Sample]) -> dict[tuple[str, str], tuple[int, int]]:
    """Bytes each socket sent (acked) and received between its first and last sample."""
    first: dict[tuple[str, str], dict[str, int]] = {}
    last: dict[tuple[str, str], dict[str, int]] = {}
    for s in samples:
        for k, d in s.sockets.items():
            first.setdefault(k, d)
            last[k] = d
    return {
        k: (last[k].get("bytes_acked", 0) - first[k].get("bytes_acked", 0),
            last[k].get("bytes_received", 0) - first[k].get("bytes_received", 0))
        for k in first
    }


def held_episodes(samples: list[Sample], held_ms: int = HELD_MS) -> list[Held]:
    """Every held episode (module docstring): consecutive samples of a flow with ``notsent``
    > 0, no ``unacked`` and ``lastsnd`` >= ``held_ms``; in order of their first sample."""
    if not samples:
        return []
    t0 = samples[0].t
    open_: dict[tuple[str, str], list[Any]] = {}
    done: list[Held] = []
    for s in samples:
        for k, d in s.sockets.items():
            held = (d.get("notsent", 0) > 0 and not d.get("unacked")
                    and d.get("lastsnd", 0) >= held_ms)
            if held:
                ep = open_.setdefault(k, [s.t - t0, s.t - t0, 0,
                                          s.t - t0 - d["lastsnd"] / 1000])
                ep[1], ep[2] = s.t - t0, max(ep[2], d["lastsnd"])
            elif k in open_:
                done.append(Held(k, *open_.pop(k)))
    done.extend(Held(k, *ep) for k, ep in open_.items())
    return sorted(done, key=lambda h: (h.first_s, h.flow))


def summary(path: str | Path) -> dict[str, Any]:
    """What a run's result JSON keeps of one sample file: samples, seconds covered, the largest
    backlog seen (bytes), the packets its queues dropped while sampled (each qdisc's counter,
    last sample less first; a GSO packet counts once), and the held episodes (flow, first
    second, longest ms)."""
    samples = parse(path)
    held = held_episodes(samples)
    return {
        "samples": len(samples),
        "span_s": samples[-1].t - samples[0].t if samples else 0.0,
        "max_backlog_bytes": max((b for s in samples for b in s.backlogs), default=0),
        "dropped_packets": _dropped(samples),
        "held": [[f"{h.flow[0]} -> {h.flow[1]}", round(h.first_s, 3), h.longest_ms]
                 for h in held],
    }


def queue_shares(samples: list[Sample], min_unacked: int = BUSY_SEGMENTS
                 ) -> tuple[dict[int, tuple[int, float]], list[tuple[int, int]]]:
    """How the busy flows share the sampled queue. A flow is *busy* in a sample when it has at
    least ``min_unacked`` segments in flight and data waiting (so neither the application nor
    an empty window holds it back). Returns, for each number N of busy flows, the samples with
    N and a nonzero backlog and the median of the largest queue's backlog / N (bytes per
    flow); and the five commonest in-flight counts (segments) of busy flows, with how often
    each was seen. Through the PS's own queue each busy flow keeps about two GSO packets
    there (docs/notes/issue22-sync-stagger.md): 136 kB, 90 segments in flight."""
    per_n: dict[int, list[float]] = {}
    inflight: dict[int, int] = {}
    for s in samples:
        busy = [d["unacked"] for d in s.sockets.values() if _busy(d, min_unacked)]
        for u in busy:
            inflight[u] = inflight.get(u, 0) + 1
        if busy and s.backlogs and max(s.backlogs) > 0:
            per_n.setdefault(len(busy), []).append(max(s.backlogs) / len(busy))
    shares = {n: (len(v), statistics.median(v)) for n, v in sorted(per_n.items())}
    common = sorted(inflight.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    return shares, common


def direction_rates(samples: list[Sample], payload_bytes_per_s: float, bin_s: float = BIN_S,
                    active: float = ACTIVE_SHARE) -> dict[tuple[str, int, int], list[float]]:
    """Each direction's rate in bins of ``bin_s`` seconds, by how many flows move data each
    way. A socket's bytes sent (``bytes_acked``: the PS's pulls) and received (pushes) are
    read off its samples at the bins' edges (linearly between samples); a flow is *moving*
    one way in a bin when it carried at least ``active`` of the link's payload there, and
    *steady* when it also moved in the bins before and after. Only bins in which every moving
    flow is steady count (a transfer that starts or ends inside a bin would read slow).
    Returns, per ``("pulls" | "pushes", flows this way, flows the other way)``, each counted
    bin's bytes that way over ``payload_bytes_per_s x bin_s`` (1.0: the link's full rate)."""
    if len(samples) < 2 or payload_bytes_per_s <= 0 or bin_s <= 0:
        return {}
    t0, t1 = samples[0].t, samples[-1].t
    edges = [t0 + k * bin_s for k in range(int((t1 - t0) / bin_s) + 1)]
    cap = payload_bytes_per_s * bin_s
    per_dir: dict[str, list[list[float]]] = {"pulls": [], "pushes": []}
    for key in {k for smp in samples for k in smp.sockets}:
        points = [(smp.t, smp.sockets[key]) for smp in samples if key in smp.sockets]
        if len(points) < 2:
            continue
        for name, field_name in (("pulls", "bytes_acked"), ("pushes", "bytes_received")):
            cum = _at_edges([t for t, _ in points], [d.get(field_name, 0) for _, d in points],
                            edges)
            per_dir[name].append([b - a for a, b in zip(cum, cum[1:], strict=False)])
    out: dict[tuple[str, int, int], list[float]] = {}
    for k in range(1, len(edges) - 2):
        moving = {d: [f for f in flows if f[k] >= active * cap] for d, flows in per_dir.items()}
        if not all(f[k - 1] >= active * cap and f[k + 1] >= active * cap
                   for flows in moving.values() for f in flows):
            continue
        for d, other in (("pulls", "pushes"), ("pushes", "pulls")):
            if moving[d]:
                out.setdefault((d, len(moving[d]), len(moving[other])), []).append(
                    sum(f[k] for f in moving[d]) / cap)
    return out


def _at_edges(ts: list[float], values: list[int], edges: list[float]) -> list[float]:
    """A counter sampled at times ``ts``, read at ``edges`` (linearly between samples, held
    at its first and last value outside them)."""
    out, j = [], 0
    for e in edges:
        while j + 1 < len(ts) and ts[j + 1] <= e:
            j += 1
        if e <= ts[0]:
            out.append(float(values[0]))
        elif j + 1 >= len(ts):
            out.append(float(values[-1]))
        else:
            span = ts[j + 1] - ts[j]
            frac = (e - ts[j]) / span if span > 0 else 1.0
            out.append(values[j] + frac * (values[j + 1] - values[j]))
    return out


def _dropped(samples: list[Sample]) -> int:
    """Packets dropped by the sampled queues between the first and the last sample that list
    the same queues."""
    full = [s.dropped for s in samples if s.dropped]
    if not full or len(full[0]) != len(full[-1]):
        return 0
    return sum(b - a for a, b in zip(full[0], full[-1], strict=True))


def sample_file(folder: Path, node: str) -> Path:
    """Where ``start`` writes the samples of node ``node`` ('ps0', 'worker1', ...)."""
    return folder / f"{node}.ss.txt"


def start(topo: Any, nodes: list[Any], folder: Path, pause_s: float = PAUSE_S
          ) -> list[tuple[Any, Path]]:
    """Start the loop (``pause_s`` seconds between samples) in each of ``nodes``' namespaces,
    writing ``folder/<node>.ss.txt``; ``topo`` (a ``Topology``) tracks the processes and stops
    them at teardown. Returns each loop's process and file."""
    folder.mkdir(parents=True, exist_ok=True)
    loops = []
    for node in nodes:
        path = sample_file(folder, node.name)
        with open(path, "wb") as out:
            loops.append((topo.spawn(node, loop_command(pause_s), stdout=out,
                                     stderr=subprocess.DEVNULL), path))
    return loops


def start_switch(topo: Any, folder: Path, pause_s: float = PAUSE_S) -> tuple[Any, Path]:
    """Start the queues-only loop in ``topo``'s switch namespace, writing
    ``folder/switch.ss.txt``: the shapers there hold what flows *toward* each shaped node
    (the workers' pushes and the ACKs of the PS's pulls). Returns its process and file."""
    folder.mkdir(parents=True, exist_ok=True)
    path = sample_file(folder, SWITCH)
    with open(path, "wb") as out:
        proc = topo.spawn_in(topo.switch_ns, loop_command(pause_s, queues_only=True),
                             stdout=out, stderr=subprocess.DEVNULL)
    return proc, path


def backlog_spread(samples: list[Sample]) -> dict[str, float]:
    """The largest sampled queue's backlog over the samples: the share of samples it was
    empty in, and its median, 90th percentile and largest backlog (bytes) over the others.
    (A shaper's ``htb`` counts its ``bfifo``'s bytes again, so the largest is one link's
    queue; with several shaped links, the fullest of them.)"""
    backlogs = [max(s.backlogs) for s in samples if s.backlogs]
    busy = sorted(b for b in backlogs if b > 0)
    if not busy:
        return {"samples": len(backlogs), "empty_share": 1.0 if backlogs else 0.0,
                "median_bytes": 0.0, "p90_bytes": 0.0, "max_bytes": 0.0}
    return {"samples": len(backlogs), "empty_share": 1 - len(busy) / len(backlogs),
            "median_bytes": float(statistics.median(busy)),
            "p90_bytes": float(busy[min(len(busy) - 1, int(0.9 * len(busy)))]),
            "max_bytes": float(busy[-1])}


def backlog_by_pushes(node: list[Sample], queue: list[Sample], payload_bytes_per_s: float,
                      active: float = ACTIVE_SHARE, longest_gap_s: float = 0.2
                      ) -> dict[int, tuple[int, float, float, float]]:
    """The fullest queue of ``queue``'s samples (the switch's: toward the PS) by how many of
    ``node``'s sockets (the PS's) were receiving pushes then. For each sample of ``queue``, the
    PS's two samples around it (at most ``longest_gap_s`` apart) say which sockets moved data
    between them: a socket *pushing* (``bytes_received``) or *pulling* (``bytes_acked``) at
    least ``active`` of the link's payload rate (``payload_bytes_per_s``). Returns, per number
    of pushes moving, (samples, the share of them with the queue empty, its mean backlog
    (bytes, empty samples counted), the mean number of pulls moving)."""
    times = [s.t for s in node]
    per: dict[int, list[tuple[int, int]]] = {}
    for q in queue:
        i = bisect.bisect_right(times, q.t)
        if i == 0 or i >= len(node) or not q.backlogs:
            continue
        a, b = node[i - 1], node[i]
        dt = b.t - a.t
        if not 0 < dt <= longest_gap_s:
            continue
        least = active * payload_bytes_per_s * dt
        pushes = pulls = 0
        for k, now in b.sockets.items():
            before = a.sockets.get(k)
            if before is None:
                continue
            pushes += now.get("bytes_received", 0) - before.get("bytes_received", 0) >= least
            pulls += now.get("bytes_acked", 0) - before.get("bytes_acked", 0) >= least
        per.setdefault(pushes, []).append((max(q.backlogs), pulls))
    return {n: (len(v), sum(1 for bl, _ in v if bl == 0) / len(v),
                sum(bl for bl, _ in v) / len(v), sum(p for _, p in v) / len(v))
            for n, v in sorted(per.items())}


def stop(loops: list[tuple[Any, Path]], grace_s: float = 2.0) -> None:
    """Stop the loops started by ``start`` (by their PIDs) and wait for them."""
    for proc, _ in loops:
        if proc.poll() is None:
            proc.terminate()
    for proc, _ in loops:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _report(paths: list[str], payload_bytes_per_s: float | None = None) -> int:
    """Print each file's queue shares and flows (bytes sent and received, held episodes) and,
    given the link's payload rate, each direction's rates by flows each way; exit code."""
    for p in paths:
        try:
            samples = parse(p)
        except OSError as e:
            print(f"tcpsample: cannot read {p}: {e.strerror}", file=sys.stderr)
            return 2
        if not samples:
            print(f"tcpsample: {p}: no samples (not a --tcp-sample file?)", file=sys.stderr)
            return 2
        held = held_episodes(samples)
        print(f"{p}: {len(samples)} samples over {samples[-1].t - samples[0].t:.1f} s, "
              f"{_dropped(samples)} packets dropped by its queues, {len(held)} held episodes "
              f"(>= {HELD_MS} ms with data waiting, none in flight)")
        spread = backlog_spread(samples)
        if spread["samples"]:
            print(f"  the fullest queue: empty in {spread['empty_share']:.0%} of samples; "
                  f"otherwise {spread['median_bytes'] / 1e3:.1f} kB median, "
                  f"{spread['p90_bytes'] / 1e3:.1f} kB 90th percentile, "
                  f"{spread['max_bytes'] / 1e3:.1f} kB most")
        if payload_bytes_per_s and Path(p).name == sample_file(Path(), SWITCH).name:
            _print_backlog_by_pushes(Path(p), samples, payload_bytes_per_s)
        shares, common = queue_shares(samples)
        for n, (count, per) in shares.items():
            print(f"  {n} busy flows: {per / 1e3:.1f} kB of the queue each (median of "
                  f"{count} samples)")
        if common:
            print("  busy flows' commonest segments in flight: "
                  + ", ".join(f"{u} ({c}x)" for u, c in common))
        per_flow: dict[tuple[str, str], list[Held]] = {}
        for h in held:
            per_flow.setdefault(h.flow, []).append(h)
        for k, (sent, received) in sorted(flow_bytes(samples).items()):
            if sent < 1_000_000 and received < 1_000_000 and k not in per_flow:
                continue  # control connections
            eps = per_flow.get(k, [])
            when = ", ".join(f"{h.first_s:.2f} s ({h.longest_ms} ms)" for h in eps)
            print(f"  {k[0]} -> {k[1]}: sent {sent / 1e6:.1f} MB, received "
                  f"{received / 1e6:.1f} MB, held {len(eps)}x{': ' + when if eps else ''}")
        for k, b in sorted(bbr_estimates(samples, payload_bytes_per_s * 8).items()
                           if payload_bytes_per_s else ()):
            spell = ("" if math.isnan(b["high_spell_s"])
                     else f", {b['high_spell_s'] * 1e3:.0f} ms before falling back (median)")
            print(f"  BBR {k[0]} -> {k[1]}: estimate over twice the link in "
                  f"{b['high_share']:.0%} of {b['busy_samples']} busy samples{spell}; window "
                  f"{b['cwnd']:.0f}, in flight {b['in_flight']:.0f} segments (medians); "
                  f"least min RTT {b['min_rtt_us']:.0f} us")
        rates = direction_rates(samples, payload_bytes_per_s) if payload_bytes_per_s else {}
        if rates:
            print(f"  each direction's rate over the link's ({BIN_S * 1e3:g} ms bins, every "
                  "moving flow steady):")
            for (d, mine, other), shares in sorted(rates.items()):
                print(f"    {d}: {mine} moving, {other} the other way: median "
                      f"{statistics.median(shares):.2f} of the rate ({len(shares)} bins)")
    return 0


def _print_backlog_by_pushes(path: Path, switch: list[Sample], payload_bytes_per_s: float
                             ) -> None:
    """The switch's queue toward the PS by how many pushes moved (``backlog_by_pushes``), read
    beside the one PS's samples in the same folder; with several PSes the switch's fullest
    queue may be any one's, so nothing is printed."""
    ps_files = sorted(path.parent.glob("ps*.ss.txt"))
    if len(ps_files) != 1:
        print(f"  (the queue by pushes moving needs one PS's samples beside it; "
              f"{len(ps_files)} found)")
        return
    rows = backlog_by_pushes(parse(ps_files[0]), switch, payload_bytes_per_s)
    print(f"  the queue toward the PS by how many pushes moved ({ps_files[0].name}'s samples "
          "around each):")
    for n, (count, empty, mean, pulls) in rows.items():
        print(f"    {n} pushes: {count} samples, empty in {empty:.0%}, mean {mean / 1e3:.0f} kB "
              f"({mean / payload_bytes_per_s * 1e3 * PAYLOAD_PER_FRAME:.1f} ms of the link), "
              f"{pulls:.1f} pulls moving")


def main(argv: list[str]) -> int:
    """``FILE... [--rate RATE]``: the report of ``_report``; RATE the shaped link's rate (a tc
    rate such as 400mbit), for each direction's rates over its TCP payload and BBR's estimates
    against it."""
    usage = ("usage: python scripts/lab/tcpsample.py FILE.ss.txt... [--rate RATE]  (files of "
             "--tcp-sample; RATE the shaped link's, e.g. 400mbit)")
    if not argv or argv[0] in ("-h", "--help"):
        print(usage, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    payload = None
    if "--rate" in argv:
        i = argv.index("--rate")
        if i + 1 >= len(argv):
            print(f"tcpsample: --rate needs a rate\n{usage}", file=sys.stderr)
            return 2
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from gradwire.replay.netns import LabError, parse_rate_bps

        try:
            payload = parse_rate_bps(argv[i + 1]) * PAYLOAD_PER_FRAME / 8
        except LabError as e:
            print(f"tcpsample: {e}", file=sys.stderr)
            return 2
        argv = argv[:i] + argv[i + 2:]
    return _report(argv, payload)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
