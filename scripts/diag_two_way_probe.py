"""A lone TCP flow beside two going the other way, through the lab's shaped PS link, with no
TensorFlow: how much of the link the lone flow gets.

``python scripts/diag_two_way_probe.py --bandwidth 1600mbit [--queue 512k] [--tcp-cc reno]
[--seconds 4] [--repeats 3]`` (root: it builds the lab's namespaces, ``replay/netns.py``,
one PS and three workers, the PS's link shaped both ways as the lab shapes it). Per repeat it
runs, one after the other, bulk TCP transfers (python sockets, the namespaces' congestion
control):

- **alone**: a pull (PS -> worker 0) with nothing else on the link;
- **pull beside two pushes**: workers 1 and 2 push (worker -> PS) for the whole spell, and a
  second into it worker 0's pull starts;
- **push beside two pulls**: the PS sends to workers 1 and 2, and worker 0 pushes.

With ``--size B --gap S`` the lone flow is messages of B bytes, S seconds apart, each
answered by its receiver, on one connection. With ``--after-sharing ON_S`` (one PS, four
workers) it runs instead a bulk pull beside a companion pull that sends in spells of ON_S
seconds and rests as long, once with nothing going the other way and once beside two bulk
pushes, and prints the pull's share while the companion runs and in each 10 ms window after
the companion's stops: whether a flow takes the link back once it no longer shares it.

The rate of each is its receiver's goodput over the lone flow's middle (its first half second
and last 0.2 s left out) as a share of the link's TCP payload rate (``GOODPUT`` of the tc
rate), as ``scripts/diag_link_states.py`` reports the lab's TensorFlow trios; beside it, the
two reverse flows' goodput over the same span. Issue 21 (docs/notes/issue21-link-states.md):
does the link alone, its queue and its congestion control, set the rate a lone transfer gets
beside two going the other way, the rate the replay's two-way rule takes from the profile's
window? A diagnostic, not part of ``gradwire``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from gradwire.replay.netns import _RECEIVER, _SENDER, LabError, Node, Topology, json_result  # noqa: E402
from gradwire.replay.predict import GOODPUT  # noqa: E402

LEAD_S = 1.0  # the reverse flows run this long before the lone flow starts
SKIP_S = 0.5  # the lone flow's start left out of its rate (slow start, the HTB burst)
TAIL_S = 0.2  # and its end
RAMP_S = 0.01  # after_sharing: the windows after a companion's stop, s
Marks = list[tuple[float, int]]  # (monotonic s, bytes received so far)

# The lone flow as messages: the sender sends SIZE bytes, waits for the receiver's one-byte
# reply once all have arrived, sleeps GAP s, and sends the next, on one connection (as a
# worker's pulls or pushes follow one another on its gRPC connection).
_MSG_SENDER = r"""
import socket, sys, time
host, port, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
gap, limit_s = float(sys.argv[4]), float(sys.argv[5])
s = socket.create_connection((host, port), timeout=10)
buf = b"\0" * size
t_end = time.monotonic() + limit_s
while time.monotonic() < t_end:
    s.sendall(buf)
    if s.recv(1) != b"k":
        break
    time.sleep(gap)
s.close()
"""

# A companion flow that sends for ON s, rests ON s, and so on. At most 128 KiB wait unsent in
# its socket (TCP_NOTSENT_LOWAT), so it stops soon after it stops writing; the stops are read
# from the receiver's marks all the same.
_ON_OFF_SENDER = r"""
import socket, sys, time
host, port, on, limit_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
s = socket.create_connection((host, port), timeout=10)
s.setsockopt(socket.IPPROTO_TCP, getattr(socket, "TCP_NOTSENT_LOWAT", 25), 131072)
buf = b"\0" * 65536
t_end = time.monotonic() + limit_s
while time.monotonic() < t_end:
    t_on = time.monotonic() + on
    while time.monotonic() < t_on:
        s.send(buf)
    time.sleep(on)
s.close()
"""

_MSG_RECEIVER = r"""
import json, socket, sys, time
addr, port, size, limit_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((addr, port)); srv.listen(1); print("ready", flush=True)
srv.settimeout(15); c, _ = srv.accept(); c.settimeout(limit_s + 5)
spans, got, first = [], 0, None
t_end = time.monotonic() + limit_s + 5
while time.monotonic() < t_end:
    d = c.recv(1 << 20)
    if not d:
        break
    if first is None:
        first = time.monotonic()
    got += len(d)
    if got >= size:
        spans.append((first, time.monotonic()))
        got, first = got - size, None
        c.sendall(b"k")
c.close()
print(json.dumps({"spans": spans}))
"""


def bytes_at(marks: Marks, t: float) -> float:
    """Bytes received by ``t`` (s), interpolated between a receiver's marks."""
    if not marks or t <= marks[0][0]:
        return 0.0
    for (t0, b0), (t1, b1) in zip(marks, marks[1:], strict=False):
        if t <= t1:
            return b0 + (b1 - b0) * (t - t0) / (t1 - t0) if t1 > t0 else float(b1)
    return float(marks[-1][1])


def marks_of(report: dict) -> Marks:
    """A bulk receiver's report's marks as (s, bytes) pairs; a flow that delivered nothing is
    refused."""
    if not report["marks"]:
        raise LabError("a probe flow delivered nothing")
    return [(float(t), int(b)) for t, b in report["marks"]]


def share(marks: Marks, t0: float, t1: float, payload_bps: float) -> float:
    """The goodput over [t0, t1] (s) as a share of ``payload_bps`` (bit/s)."""
    return (bytes_at(marks, t1) - bytes_at(marks, t0)) * 8 / (t1 - t0) / payload_bps


@dataclass
class Flow:
    """One TCP flow of a probe: ``src`` sends to ``dst`` from ``delay`` s for ``seconds`` s;
    bulk when ``size`` is 0, else messages of ``size`` bytes ``gap`` s apart."""

    src: Node
    dst: Node
    delay: float
    seconds: float
    size: int = 0
    gap: float = 0.0
    on_off: float = 0.0  # bulk in spells of this many s, resting as long between them


def run_flows(topo: Topology, flows: Sequence[Flow], port0: int = 5300) -> list[dict]:
    """Run ``flows`` at once: receivers first, then senders, each after its delay. Returns
    each receiver's report: ``marks`` (bulk) or ``spans`` (messages: first and last byte's
    monotonic s)."""
    receivers = []
    for k, f in enumerate(flows):
        limit = str(f.delay + f.seconds + 2)
        code, extra = (_MSG_RECEIVER, [str(f.size)]) if f.size else (_RECEIVER, [])
        proc = topo.spawn(f.dst, [sys.executable, "-c", code, f.dst.addr, str(port0 + k),
                                  *extra, limit], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise LabError(f"probe receiver on {f.dst.name} did not start")
        receivers.append(proc)
    senders = []
    for k, f in enumerate(flows):
        wait = f"import time; time.sleep({f.delay})\n"
        if f.on_off:
            argv = [wait + _ON_OFF_SENDER, f.dst.addr, str(port0 + k), str(f.on_off),
                    str(f.seconds)]
        elif f.size:
            argv = [wait + _MSG_SENDER, f.dst.addr, str(port0 + k), str(f.size), str(f.gap),
                    str(f.seconds)]
        else:
            argv = [wait + _SENDER, f.dst.addr, str(port0 + k), str(10**12), str(f.seconds)]
        senders.append(topo.spawn(f.src, [sys.executable, "-c", *argv]))
    out = []
    wait_s = max(f.delay + f.seconds for f in flows) + 30
    for proc, flow in zip(receivers, flows, strict=True):
        out.append(json_result(proc, wait_s, f"the probe receiver on {flow.dst.name}"))
    for proc in senders:
        proc.wait(timeout=15)
    return out


def lone_share(report: dict, seconds: float, size: int, payload_bps: float
               ) -> tuple[float, tuple[float, float]]:
    """The lone flow's share of the link and the span (s) it is taken over: bulk, its
    receiver's goodput over its middle; messages (of ``size`` bytes), the median message's
    size over its span, the messages received in the middle."""
    if "marks" in report:
        marks = marks_of(report)
        start = marks[0][0]
        t0, t1 = start + SKIP_S, start + seconds - TAIL_S
        return share(marks, t0, t1, payload_bps), (t0, t1)
    spans = report["spans"]
    if not spans:
        raise LabError("the lone flow delivered no message: a longer --seconds")
    start = spans[0][0]
    mid = [(a, b) for a, b in spans if start + SKIP_S <= a and b <= start + seconds - TAIL_S]
    if not mid:
        raise LabError("no message of the lone flow ended in its middle: a longer --seconds")
    rate = statistics.median(size * 8 / (b - a) for a, b in mid if b > a)
    return rate / payload_bps, (mid[0][0], mid[-1][1])


def lone_beside(topo: Topology, lone: Flow, reverse: Sequence[tuple[Node, Node]],
                payload_bps: float) -> tuple[float, float]:
    """Run ``reverse`` bulk flows for LEAD_S + the lone flow's seconds + 0.5, the ``lone``
    flow from LEAD_S on; return (the lone flow's share, the reverse flows' summed share over
    the same span)."""
    flows = [lone] + [Flow(s, d, 0.0, LEAD_S + lone.seconds + 0.5) for s, d in reverse]
    reports = run_flows(topo, flows)
    rate, (t0, t1) = lone_share(reports[0], lone.seconds, lone.size, payload_bps)
    back = sum(share(marks_of(r), t0, t1, payload_bps) for r in reports[1:])
    return rate, back


def probe(bandwidth: str, queue: str | None, tcp_cc: str | None, seconds: float,
          repeats: int, size: int, gap: float) -> dict[str, list[tuple[float, float]]]:
    """The three measurements, ``repeats`` times each, in one topology."""
    out: dict[str, list[tuple[float, float]]] = {"alone": [], "pull": [], "push": []}
    with Topology(num_ps=1, num_workers=3, bandwidth=bandwidth, queue=queue,
                  tcp_cc=tcp_cc) as topo:
        assert topo.rate_bps is not None
        payload = topo.rate_bps * GOODPUT
        ps, (w0, w1, w2) = topo.ps[0], topo.workers
        for _ in range(repeats):
            report = run_flows(topo, [Flow(ps, w0, 0.0, seconds, size, gap)])[0]
            out["alone"].append((lone_share(report, seconds, size, payload)[0], 0.0))
            out["pull"].append(lone_beside(topo, Flow(ps, w0, LEAD_S, seconds, size, gap),
                                           [(w1, ps), (w2, ps)], payload))
            out["push"].append(lone_beside(topo, Flow(w0, ps, LEAD_S, seconds, size, gap),
                                           [(ps, w1), (ps, w2)], payload))
    return out


def stops(marks: Marks, quiet_s: float) -> list[float]:
    """The times (s) a flow's receiver got its last bytes before a silence of at least
    ``quiet_s``."""
    return [a[0] for a, b in zip(marks, marks[1:], strict=False)
            if b[1] > a[1] and b[0] - a[0] >= quiet_s]


def after_sharing(topo: Topology, reverse: bool, seconds: float, on_s: float,
                  payload_bps: float) -> tuple[float, list[float]]:
    """A bulk pull (PS -> worker 0) beside a companion pull (PS -> worker 1) that runs in
    spells of ``on_s`` s, resting as long between them; with ``reverse``, workers 2 and 3
    push bulk all the while. Returns the pull's share of the link while the companion runs
    (median over its spells' middles) and, after each of the companion's stops, the pull's
    share in each RAMP_S window of the next 0.9 ``on_s`` (medians over the stops)."""
    ps, w = topo.ps[0], topo.workers
    flows = [Flow(ps, w[0], 0.0, seconds), Flow(ps, w[1], LEAD_S, seconds - LEAD_S,
                                                  on_off=on_s)]
    if reverse:
        flows += [Flow(w[2], ps, 0.0, seconds + 0.5), Flow(w[3], ps, 0.0, seconds + 0.5)]
    reports = run_flows(topo, flows)
    bins = max(1, int(on_s * 0.9 / RAMP_S))  # the companion's rest, less its drain
    lone, comp = marks_of(reports[0]), marks_of(reports[1])
    ends = [t for t in stops(comp, on_s / 2) if t + RAMP_S * bins < lone[-1][0]]
    if not ends:
        raise LabError("the companion flow never stopped: a longer --seconds")
    shared = statistics.median(share(lone, t - on_s * 0.75, t - on_s * 0.25, payload_bps)
                               for t in ends)
    after = [statistics.median(share(lone, t + k * RAMP_S, t + (k + 1) * RAMP_S, payload_bps)
                               for t in ends) for k in range(bins)]
    return shared, after


def print_after_sharing(args: argparse.Namespace) -> int:
    """``--after-sharing``: ``after_sharing`` without and with the reverse flows,
    ``--repeats`` times each, in one topology (a PS and four workers)."""
    print(f"# {link_label(args)}: a bulk pull beside a companion pull in "
          f"{args.after_sharing} s spells; share of the link's TCP payload rate while it "
          f"runs, then in {RAMP_S * 1e3:.0f} ms windows after it stops")
    try:
        with Topology(num_ps=1, num_workers=4, bandwidth=args.bandwidth, queue=args.queue,
                      tcp_cc=args.tcp_cc) as topo:
            assert topo.rate_bps is not None
            for _ in range(args.repeats):
                for reverse in (False, True):
                    shared, after = after_sharing(topo, reverse, args.seconds,
                                                  args.after_sharing,
                                                  topo.rate_bps * GOODPUT)
                    label = "beside two pushes" if reverse else "no reverse flows  "
                    print(f"{label}: sharing {shared:.2f}; after its stop "
                          + " ".join(f"{x:.2f}" for x in after), flush=True)
    except LabError as exc:
        print(f"diag_two_way_probe: {exc}", file=sys.stderr)
        return 1
    return 0


def link_label(args: argparse.Namespace) -> str:
    """The link ``add_link_arguments`` read, as the tools' headers name it."""
    return (f"{args.bandwidth}, queue {args.queue or 'default'}, "
            f"cc {args.tcp_cc or 'host default'}")


def add_link_arguments(ap: argparse.ArgumentParser) -> None:
    """The shaped PS link's options, as the lab's: ``--bandwidth``, ``--queue``,
    ``--tcp-cc``."""
    ap.add_argument("--bandwidth", required=True, help="the PS link's rate, e.g. 1600mbit")
    ap.add_argument("--queue", default=None,
                    help="its buffer as the lab reads it (default: 10 ms of the rate)")
    ap.add_argument("--tcp-cc", default=None, help="congestion control (default: the host's)")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_link_arguments(ap)
    ap.add_argument("--seconds", type=float, default=4.0, help="the lone flow's length (s)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--size", type=int, default=0,
                    help="the lone flow as messages of this many bytes (default: bulk)")
    ap.add_argument("--gap", type=float, default=0.0,
                    help="seconds between the lone flow's messages")
    ap.add_argument("--after-sharing", type=float, default=0.0, metavar="ON_S",
                    help="instead: a bulk pull beside a companion pull running in spells of "
                         "ON_S s, with and without two bulk pushes the other way; the pull's "
                         "share while the companion runs and in the windows after it stops")
    args = ap.parse_args(argv)
    least = LEAD_S + args.after_sharing * 2 if args.after_sharing else SKIP_S + TAIL_S
    for bad, text in ((args.repeats < 1, "--repeats must be at least 1"),
                      (args.seconds <= least, f"--seconds must exceed {least:g}"),
                      (args.after_sharing < 0, "--after-sharing must be positive"),
                      (args.size < 0 or args.gap < 0, "--size and --gap must be positive")):
        if bad:
            print(f"diag_two_way_probe: {text}", file=sys.stderr)
            return 2
    if args.after_sharing:
        return print_after_sharing(args)
    try:
        res = probe(args.bandwidth, args.queue, args.tcp_cc, args.seconds, args.repeats,
                    args.size, args.gap)
    except LabError as exc:
        print(f"diag_two_way_probe: {exc}", file=sys.stderr)
        return 1
    lone = f"{args.size} B messages {args.gap} s apart" if args.size else "bulk"
    print(f"# {link_label(args)}, lone flow {lone}: "
          "share of the link's TCP payload rate")
    for key, label in (("alone", "pull alone"), ("pull", "lone pull beside two pushes"),
                       ("push", "lone push beside two pulls")):
        xs = res[key]
        lone = ", ".join(f"{a:.2f}" for a, _ in xs)
        back = "" if key == "alone" else (
            "; the two reverse flows " + ", ".join(f"{b:.2f}" for _, b in xs))
        print(f"{label}: {statistics.median(a for a, _ in xs):.2f} (runs {lone}{back})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
