"""Synchronous pulls with no TensorFlow, through Linux and through the host-queue model.

``python scripts/diag_bare_sync.py --bandwidth 300mbit [--stagger-ms 0,2,5,10,20]
[--size 1200000] [--first-bytes 0 | --write-chunk 0] [--receiver-ping-ms 0] [--workers 2]
[--period-ms 300] [--rounds 20] [--tcp-cc bbr] [--queue Q] [--json FILE]`` (root: it builds
the lab's namespaces, ``replay/netns.py``, one PS and W workers, the PS's link shaped as the
lab shapes it).

Every ``--period-ms`` (a round) the PS writes ``--size`` bytes to each worker's connection,
one write after another ``--stagger-ms`` apart, in a random order; the workers read. With
``--first-bytes B`` each write is B bytes, then 0.2 ms later the rest, as a gRPC response's
first frames go before its tensor. With ``--write-chunk N`` the PS's sockets are non-blocking
and one select loop writes N bytes at a time to every connection of the round that has room,
the stagger then the gap between their starts: many writes, each of which has Linux try to
send, as an event loop such as gRPC's hands a response to its socket. With
``--receiver-ping-ms P`` each worker also sends 17 bytes on its connection every P ms, as a
gRPC client's HTTP/2 PING, and the PS answers each with 17 bytes, as gRPC's PING ACK: a write
to the socket, on which Linux tries to send what waits (the pongs count in the bytes a
transfer's end is found by, 17 each); ``--ping-answer read`` has the PS read the pings and
write nothing, ``none`` leaves them unread: which of the segment, the read and the write
makes Linux send a held pull. Python sockets, the namespaces' congestion control.
The PS's link is captured (headers only, ``scripts/lab/headers.py``): a worker's transfer
ends with the PS's packet that carries its last byte.

The same write starts go to the host-queue model (``replay/hostqueue.py``'s oracle, the twin
of the replay's kernel) with each of its congestion controls: ``reno`` (the synchronous
replay's default), ``bbr`` (BBR's window only) and ``bbr-v1`` (Linux's BBR whole), through
the lab's queue and the HTB bucket of the same rate (``replay/netns.py``'s ``queue_bytes``
and ``burst_bytes``); the model is handed each transfer whole at its start.

Per stagger, the writes' measured median gap (in whole writes the gap runs from the previous
write's return, so it is the stagger plus that write's time), then Linux's and each model's
rounds: the median round (from its first write to the last byte of its last transfer, ms;
rounds that never ended left out) and the *held* rounds, those longer than the time between
their first and last writes plus their bytes at the link's payload rate plus half of
``TCP_RTO_MIN`` (a round one connection of which waited for its probe timer: it sent nothing
for at least 200 ms); the model's local drops beside the qdisc's (read once every worker has
read everything). With ``--json`` the rows are written as each stagger ends. Issue 22
(docs/notes/issue22-sync-bbr-v1.md, "Bare pulls"): does the model's TCP, with no TensorFlow
in the way, hold the rounds Linux holds? A diagnostic, not part of
``gradwire``.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from benchcli import OneLineParser, nonnegative_float, output_file, positive_int  # noqa: E402
from lab import headers, tcpsample  # noqa: E402

from gradwire.collector.pcapfile import PcapReader  # noqa: E402
from gradwire.replay.hostqueue import (  # noqa: E402
    CONGESTION_CONTROLS,
    MSS,
    MSS_WIRE,
    RTO_MIN_US,
    HostQueue,
    Transfer,
    simulate,
)
from gradwire.replay.netns import (  # noqa: E402
    LabError,
    Topology,
    burst_bytes,
    json_result,
    parse_rate_bps,
    queue_bytes,
    run,
)
from gradwire.replay.predict import GOODPUT  # noqa: E402

PORT = 5500
FIRST_GAP_S = 0.0002  # between a write's first bytes and the rest (--first-bytes)
SKIP_ROUNDS = 2  # rounds left out: the connections' first, with no estimates yet
HELD_EXTRA_S = RTO_MIN_US / 2e6  # a round this much over its wire time waited for a probe
READ_OUT_S = 30.0  # the longest a reader may take to finish after the last write

# A worker: accept the PS's connection and read until it closes.
_READER = r"""
import socket, sys, threading, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
print("ready", flush=True)
c, _ = s.accept()
ping_s = float(sys.argv[3])
def pings():
    try:
        while True:
            time.sleep(ping_s); c.send(b"p" * 17)
    except OSError:
        pass
if ping_s > 0:
    threading.Thread(target=pings, daemon=True).start()
try:
    while c.recv(1 << 20):
        pass
except ConnectionResetError:
    pass
"""

# The PS: connect to every worker, then each round write to each (random order, busy-waiting
# to the stagger), and print [worker index, wall-clock time of the write's start] per write.
_WRITER = r"""
import json, random, select, socket, sys, threading, time
cfg = json.loads(sys.argv[1])
addrs, port, size, first, rounds, chunk = (cfg[k] for k in
                                           ("addrs", "port", "size", "first", "rounds", "chunk"))
period, stagger, start, first_gap = (cfg[k] for k in ("period", "stagger", "start", "first_gap"))
conns = []
for a in addrs:
    c = socket.create_connection((a, port)); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conns.append(c)
payload, log = b"x" * size, []
def pong(c):  # read each 17-byte ping and answer it with 17 bytes, as gRPC answers an HTTP/2
    answer = cfg["pong"] == "answer"  # PING; once the PS has shut its side, read on to the
    # worker's end (no reset)
    while True:
        try:
            if len(c.recv(17, socket.MSG_WAITALL)) < 17:
                return
        except OSError:
            return
        if answer:
            try:
                c.sendall(b"q" * 17)
            except OSError:
                answer = False
pongs = [threading.Thread(target=pong, args=(c,), daemon=True) for c in conns
         if cfg["pong"] in ("answer", "read")]
for t in pongs:
    t.start()
def until(t):
    while time.time() < t:
        pass
def whole(order):
    for j, k in enumerate(order):
        if j:
            until(time.time() + stagger)
        log.append([k, time.time()])
        if first:
            conns[k].sendall(payload[:first]); until(time.time() + first_gap)
            conns[k].sendall(payload[first:])
        else:
            conns[k].sendall(payload)
def chunked(order):
    t0 = time.time()
    begin = {k: t0 + j * stagger for j, k in enumerate(order)}
    pending, left = list(order), {}
    while pending or left:
        while pending and begin[pending[0]] <= time.time():
            k = pending.pop(0); left[k] = size; log.append([k, time.time()])
        if not left:
            until(begin[pending[0]]); continue
        wait = 1.0 if not pending else max(0.0, begin[pending[0]] - time.time())
        _, ready, _ = select.select([], [conns[k] for k in left], [], wait)
        for c in ready:
            k = conns.index(c); at = size - left[k]
            try:
                left[k] -= c.send(payload[at:at + chunk])
            except BlockingIOError:
                pass
            if left[k] <= 0:
                del left[k]
if chunk:
    for c in conns:
        c.setblocking(False)
for r in range(rounds):
    until(start + r * period)
    order = list(range(len(conns))); random.shuffle(order)
    chunked(order) if chunk else whole(order)
for c in conns:  # the last bytes go before the FIN; the readers then end, and the pongs
    c.setblocking(True); c.shutdown(socket.SHUT_WR)
for t in pongs:
    t.join(30)
for c in conns:
    c.close()
print(json.dumps(log))
"""


@dataclass(frozen=True)
class Rounds:
    """One way of running a stagger's rounds: the median of the rounds that ended (ms; None if
    none did), the held rounds and the rounds counted, and the local drops (Linux: the
    qdisc's)."""

    median_ms: float | None
    held: int
    rounds: int
    drops: int


def transfer_ends(writes: Sequence[tuple[int, float]],
                  sent: Sequence[Sequence[tuple[float, int, int]]], size: int) -> list[float]:
    """When each write's last byte first left the PS (s; nan if it never did): ``writes`` are
    (worker, start s) in order, ``sent[k]`` the (time s, TCP sequence number, payload bytes)
    of the PS's data packets to worker k in order, each write ``size`` bytes. Bytes count by
    sequence number from the first packet's, so a segment sent again is not counted twice."""
    ends = []
    done, reach, at = [0] * len(sent), [0] * len(sent), [0] * len(sent)
    for k, _ in writes:
        done[k] += 1
        need, pkts = done[k] * size, sent[k]
        while reach[k] < need and at[k] < len(pkts):
            t, seq, n = pkts[at[k]]
            reach[k] = max(reach[k], (seq - pkts[0][1]) % 2**32 + n)
            at[k] += 1
        ends.append(pkts[at[k] - 1][0] if reach[k] >= need else math.nan)
    return ends


def summarize(writes: Sequence[tuple[int, float]], ends: Sequence[float], workers: int,
              wire_s: float, drops: int, skip: int = SKIP_ROUNDS) -> Rounds:
    """Rounds of ``workers`` writes each (``writes`` in order, ``ends`` theirs, s), the first
    ``skip`` left out: a round from its first write to its last end; held if longer than the
    time from its first write to its last plus ``wire_s`` (its bytes at the link's payload
    rate) plus ``HELD_EXTRA_S``. A round with a transfer that never ended counts as held and
    is left out of the median."""
    times, held = [], 0
    for r in range(skip, len(writes) // workers):
        span = range(r * workers, (r + 1) * workers)
        last, starts = [ends[i] for i in span], [writes[i][1] for i in span]
        if any(math.isnan(e) for e in last):
            held += 1
            continue
        times.append(max(last) - min(starts))
        held += times[-1] > max(starts) - min(starts) + wire_s + HELD_EXTRA_S
    rounds = len(writes) // workers - skip
    if rounds <= 0:
        raise LabError(f"no round left after the first {skip}: ask for more --rounds")
    return Rounds(median_ms=float(1e3 * statistics.median(times)) if times else None,
                  held=int(held), rounds=rounds, drops=drops)


def wire_time_s(workers: int, size: int, rate_bps: float) -> float:
    """A round's bytes (``workers`` writes of ``size``) at the link's TCP payload rate, s."""
    return workers * size * 8 / (rate_bps * GOODPUT)


def model_rounds(writes: Sequence[tuple[int, float]], workers: int, rate_bps: float,
                 size: int, first_bytes: int, cc: str, wire_s: float,
                 queue: str | None = None) -> Rounds:
    """The host-queue model's rounds for the same writes: the lab's queue (``queue`` as
    ``--queue`` gives it) and HTB bucket at ``rate_bps``, connections ``cc``; a write of
    ``first_bytes`` then the rest is two transfers, ``FIRST_GAP_S`` apart."""
    buffer = queue_bytes(queue, rate_bps)
    if buffer is None:
        raise LabError("--queue kernel: the model needs a queue of a size")
    q = HostQueue(rate=rate_bps / 8e6, buffer=float(buffer),
                  bucket=float(burst_bytes("gso", rate_bps)), cc=cc)
    t0 = min(t for _, t in writes)
    wire = lambda n: math.ceil(n / MSS) * MSS_WIRE  # noqa: E731 (bytes as the queue counts)
    transfers, last = [], []
    for k, t in writes:
        start = (t - t0) * 1e6
        if first_bytes:
            transfers.append(Transfer(conn=k, start=start, size=wire(first_bytes)))
            start += FIRST_GAP_S * 1e6
        transfers.append(Transfer(conn=k, start=start, size=wire(size - first_bytes)))
        last.append(len(transfers) - 1)
    out = simulate(q, transfers, workers)
    ends = [t0 + out.ends[i] / 1e6 for i in last]
    return summarize(writes, ends, workers, wire_s, int(out.drops))


def run_linux(args: object, stagger_s: float, folder: Path
              ) -> tuple[list[tuple[int, float]], list[list[tuple[float, int, int]]], int]:
    """One stagger through the lab's namespaces: the writes (worker, wall-clock s), the PS's
    data packets to each worker (time s, sequence number, payload bytes) and the qdisc's
    drops, read once every worker has read everything."""
    a = args
    with Topology(num_ps=1, num_workers=a.workers, bandwidth=a.bandwidth, queue=a.queue,
                  tcp_cc=a.tcp_cc) as topo:
        ps = topo.ps[0]
        readers = []
        for w in topo.workers:
            proc = topo.spawn(w, [sys.executable, "-c", _READER, w.addr, str(PORT),
                                  str(a.receiver_ping_ms / 1e3)],
                              stdout=subprocess.PIPE, text=True)
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise LabError(f"the reader on {w.name} did not start")
            readers.append(proc)
        dumps = headers.start(topo, [ps], folder)
        start = time.time() + 0.5
        cfg = {"addrs": [w.addr for w in topo.workers], "port": PORT, "size": a.size,
               "first": a.first_bytes, "rounds": a.rounds, "chunk": a.write_chunk,
               "period": a.period_ms / 1e3, "stagger": stagger_s, "start": start,
               "first_gap": FIRST_GAP_S,
               "pong": a.ping_answer if a.receiver_ping_ms > 0 else "none"}
        writer = topo.spawn(ps, [sys.executable, "-c", _WRITER, json.dumps(cfg)],
                            stdout=subprocess.PIPE, text=True)
        log = json_result(writer, a.rounds * a.period_ms / 1e3 + 60, "the PS's writer")
        for proc, w in zip(readers, topo.workers, strict=True):  # each reads to the end
            try:
                proc.wait(timeout=READ_OUT_S)
            except subprocess.TimeoutExpired:
                raise LabError(f"the reader on {w.name} had not read everything "
                               f"{READ_OUT_S:g} s after the last write") from None
        stats = run(["ip", "netns", "exec", ps.ns, "tc", "-s", "qdisc", "show", "dev",
                     ps.iface])  # LabError with tc's words if it fails
        drops = tcpsample.qdisc_drops(stats.stdout)
        if not drops:
            raise LabError(f"no drop count from tc on {ps.name}'s link: "
                           f"{stats.stdout.strip()[:80]!r}")
        headers.stop(dumps)
        sent: list[list[tuple[float, int, int]]] = [[] for _ in topo.workers]
        index = {w.addr: k for k, w in enumerate(topo.workers)}
        for p in PcapReader(dumps[0][1]):
            if p.src == ps.addr and p.dst in index and p.payload_bytes > 0:
                sent[index[p.dst]].append((p.ts_ns / 1e9, p.seq, p.payload_bytes))
    return [(int(k), float(t)) for k, t in log], sent, drops[0]


def start_gaps_ms(writes: Sequence[tuple[int, float]], workers: int) -> float | None:
    """The median gap between consecutive writes of a round (ms; None with one worker): in
    whole writes from the previous write's return, the nominal stagger plus its time."""
    gaps = [1e3 * (writes[i + 1][1] - writes[i][1]) for r in range(len(writes) // workers)
            for i in range(r * workers, (r + 1) * workers - 1)]
    return float(statistics.median(gaps)) if gaps else None


def study(args: object, out: Path | None = None) -> list[dict]:
    """Every stagger through Linux and the models; a row per stagger, printed and, with
    ``out``, written there as each is done."""
    a = args
    rate = parse_rate_bps(a.bandwidth)
    wire_s = wire_time_s(a.workers, a.size, rate)
    rows = []
    for stagger_ms in a.stagger_ms:
        with tempfile.TemporaryDirectory(prefix="gw-bare-sync-") as tmp:
            writes, sent, drops = run_linux(a, stagger_ms / 1e3, Path(tmp))
        ends = transfer_ends(writes, sent, a.size)
        row = {"stagger_ms": stagger_ms, "start_gap_ms": start_gaps_ms(writes, a.workers),
               "linux": asdict(summarize(writes, ends, a.workers, wire_s, drops)),
               "writes": writes, "linux_ends": [e if e == e else None for e in ends]}
        for cc in CONGESTION_CONTROLS:
            row[cc] = asdict(model_rounds(writes, a.workers, rate, a.size, a.first_bytes, cc,
                                          wire_s, a.queue))
        rows.append(row)
        print(format_row(row), flush=True)
        if out is not None:
            out.write_text(json.dumps({"args": {k: v for k, v in vars(a).items()
                                                if k != "json"}, "rows": rows}, indent=1) + "\n")
    return rows


def format_row(row: dict) -> str:
    """One stagger (and the writes' measured median gap): each way's median round, held rounds
    and drops."""
    gap = row["start_gap_ms"]
    cells = [f"{row['stagger_ms']:>7g}", f"{gap:6.2f}" if gap is not None else f"{'-':>6s}"]
    for way in ("linux", *CONGESTION_CONTROLS):
        r = row[way]
        median = f"{r['median_ms']:7.1f}" if r["median_ms"] is not None else f"{'-':>7s}"
        cells.append(f"{median} {r['held']:>3d}/{r['rounds']:<3d} {r['drops']:>5d}")
    return " | ".join(cells)


def header() -> str:
    """The table's heading, for ``format_row``'s cells."""
    ways = " | ".join(f"{w + ': round ms, held, drops':<24s}"
                      for w in ("linux", *CONGESTION_CONTROLS))
    return f"{'stagger':>7s} | {'gap ms':>6s} | {ways}"


def staggers(text: str) -> list[float]:
    """argparse type: comma-separated gaps, ms, each a finite number >= 0."""
    return [nonnegative_float(x) for x in text.split(",")]


def main(argv: Sequence[str] | None = None) -> int:
    ap = OneLineParser(prog="diag_bare_sync.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bandwidth", required=True, help="the PS link's rate, e.g. 300mbit")
    ap.add_argument("--stagger-ms", type=staggers,
                    default=[0.0, 2.0, 5.0, 10.0, 20.0],
                    help="gaps between a round's writes, ms, comma-separated (default 0,2,5,10,20)")
    ap.add_argument("--size", type=positive_int, default=1_200_000, help="bytes per write")
    ap.add_argument("--first-bytes", type=int, default=0,
                    help="write this many bytes first, the rest 0.2 ms later (default 0: "
                    "one write)")
    ap.add_argument("--write-chunk", type=int, default=0,
                    help="write each transfer in pieces of this many bytes, every connection "
                    "of the round as it has room (non-blocking sockets, one select loop, as "
                    "gRPC's event loop writes); default 0: each whole, one after another")
    ap.add_argument("--receiver-ping-ms", type=nonnegative_float, default=0.0,
                    help="each worker sends 17 bytes on its connection every this many ms, "
                    "as a gRPC client's HTTP/2 PING (default 0: the workers only read)")
    ap.add_argument("--ping-answer", choices=("answer", "read", "none"), default="answer",
                    help="with --receiver-ping-ms: the PS reads each ping and answers it with "
                    "17 bytes (answer, the default, as gRPC does), reads it only (read), or "
                    "never reads the pings (none)")
    ap.add_argument("--workers", type=positive_int, default=2)
    ap.add_argument("--period-ms", type=nonnegative_float, default=300.0)
    ap.add_argument("--rounds", type=positive_int, default=20)
    ap.add_argument("--tcp-cc", default="bbr", help="the namespaces' congestion control")
    ap.add_argument("--queue", default=None, help="the PS link's queue (default: the lab's)")
    ap.add_argument("--json", type=output_file, default=None, help="write the rows here too")
    a = ap.parse_args(argv)
    if not 0 <= a.first_bytes < a.size:
        ap.error(f"--first-bytes {a.first_bytes}: expected 0 to --size less one")
    if a.queue is not None and a.queue.strip().lower() == "kernel":
        ap.error("--queue kernel: the model needs a queue of a size")
    if a.write_chunk < 0 or (a.write_chunk and a.first_bytes):
        ap.error(f"--write-chunk {a.write_chunk}: expected 0, or a size in bytes without "
                 "--first-bytes")
    if a.rounds <= SKIP_ROUNDS:
        ap.error(f"--rounds {a.rounds}: expected more than {SKIP_ROUNDS} (those are left out)")
    if a.period_ms <= 0:
        ap.error("--period-ms must be above 0")
    try:
        rate = parse_rate_bps(a.bandwidth)
        writes = f"in {a.write_chunk} B pieces" if a.write_chunk else "whole"
        print(f"{a.workers} x {a.size} B every {a.period_ms:g} ms at {rate / 1e6:g} Mbit/s, "
              f"{a.tcp_cc}, written {writes}, first bytes {a.first_bytes}; held: a round "
              f"over its wire time "
              f"+ {HELD_EXTRA_S * 1e3:g} ms; {a.rounds - SKIP_ROUNDS} rounds a stagger")
        print(header())
        queue_bytes(a.queue, rate)  # refuses a bad one before the namespaces are built
        study(a, a.json)
    except LabError as exc:
        print(f"diag_bare_sync.py: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
