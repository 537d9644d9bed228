"""An asynchronous parameter-server job with no TensorFlow: each worker's step is a pull of
``--bytes`` from the PS, a pause, and a push of as many bytes back, over the lab's shaped link.

``python scripts/diag_bare_ps.py --bandwidth 1600mbit --workers 1,2,3 [--bytes 10485760]
[--pause-ms 0] [--queue 512k] [--tcp-cc reno] [--qdisc ackfirst] [--steps 40] [--batch-size
40]`` (root: it builds the lab's namespaces, ``replay/netns.py``, one PS and W workers, the
PS's link shaped both ways). Each worker keeps two TCP connections to the PS, as a TensorFlow
worker keeps two gRPC ones: on the first it asks for the parameters (one byte) and the PS
answers with ``--bytes``; it then sleeps ``--pause-ms`` (its compute) and sends ``--bytes`` of
gradients on the second, which the PS acknowledges (one byte) once all have arrived; then the
next step. Python sockets, the namespaces' congestion control, no HTTP/2, no CPU-heavy work.

``--apply-ms A`` has the PS hold each push's acknowledgement A ms before it answers, one push
at a time (a PS with one compute thread), or each on its own with ``--apply-overlap``: idle
time after the push rather than before it. To stand for a profiled job
(docs/preregistered/issue21-bare-gaps.md): ``--bytes`` from the profile's capture (``gradwire
inspect``: MB per direction a step); the idle time, the profile's W = 1 step less this job's
W = 1 step with none; split between ``--pause-ms`` and ``--apply-ms`` (``--apply-overlap``)
as the profile's PS capture splits it (the median gap from a pull's end to the push, and
from the push's end to the next pull).

Per W it prints the examples per second (``--batch-size`` per step, every worker's steps
after its first ``SKIP`` over the span they all ran) and the median step (ms). Issue 21
(docs/notes/issue21-link-states.md): does TCP alone, with the job's transfer pattern, slow a
trio as the lab's TensorFlow trios are slowed? A diagnostic, not part of ``gradwire``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from diag_two_way_probe import add_link_arguments, link_label  # noqa: E402

from gradwire.replay.netns import LabError, Topology, json_result  # noqa: E402

SKIP = 3  # each worker's first steps left out (connections' slow start)
PORT = 5400

_PS = r"""
import socket, sys, threading, time
addr, port, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
apply_s, serial = float(sys.argv[4]), sys.argv[5] == "serial"
applying = threading.Lock()  # one apply at a time, as a PS with one compute thread
blob = b"\0" * size
def serve(c):
    kind = c.recv(1)
    while True:
        if kind == b"L":  # the pull connection: a byte asks for the parameters
            if not c.recv(1):
                return
            c.sendall(blob)
        else:  # the push connection: read a step's gradients, acknowledge them
            got = 0
            while got < size:
                d = c.recv(min(1 << 20, size - got))
                if not d:
                    return
                got += len(d)
            if apply_s and serial:
                with applying:
                    time.sleep(apply_s)
            elif apply_s:
                time.sleep(apply_s)
            c.sendall(b"k")
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((addr, port)); srv.listen(64); print("ready", flush=True)
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""

_WORKER = r"""
import json, socket, sys, time
host, port, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pause, steps = float(sys.argv[4]), int(sys.argv[5])
pull = socket.create_connection((host, port)); pull.sendall(b"L")
push = socket.create_connection((host, port)); push.sendall(b"U")
blob = b"\0" * size
ends = [time.monotonic()]
for _ in range(steps):
    pull.sendall(b"P")
    got = 0
    while got < size:
        d = pull.recv(1 << 20)
        if not d:
            raise SystemExit("PS closed the pull connection")
        got += len(d)
    time.sleep(pause)
    push.sendall(blob)
    if push.recv(1) != b"k":
        raise SystemExit("PS closed the push connection")
    ends.append(time.monotonic())
print(json.dumps(ends))
"""


def run_job(bandwidth: str, queue: str | None, tcp_cc: str | None, qdisc: str, workers: int,
            size: int, pause_s: float, steps: int, apply_s: float = 0.0,
            apply_serial: bool = True) -> list[list[float]]:
    """One job of ``workers`` workers: each worker's step end times (monotonic s, the first
    its start). ``apply_s``: the PS holds each push's acknowledgement this long (its apply),
    one push at a time when ``apply_serial``, else each on its own."""
    with Topology(num_ps=1, num_workers=workers, bandwidth=bandwidth, queue=queue,
                  tcp_cc=tcp_cc, qdisc=qdisc) as topo:
        ps = topo.ps[0]
        server = topo.spawn(ps, [sys.executable, "-c", _PS, ps.addr, str(PORT), str(size),
                                 str(apply_s), "serial" if apply_serial else "overlap"],
                            stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            raise LabError("the bare PS did not start")
        procs = [topo.spawn(w, [sys.executable, "-c", _WORKER, ps.addr, str(PORT), str(size),
                                str(pause_s), str(steps)], stdout=subprocess.PIPE, text=True)
                 for w in topo.workers]
        return [json_result(proc, 600, "a bare worker") for proc in procs]


def throughput(ends: Sequence[Sequence[float]], batch: int) -> tuple[float, float]:
    """(examples/s over the span every worker ran after its first SKIP steps, the median step
    in ms)."""
    t0 = max(e[SKIP] for e in ends)
    t1 = min(e[-1] for e in ends)
    if t1 <= t0:
        raise LabError("the workers' steady spans do not overlap: more --steps")
    done = sum(sum(1 for t in e if t0 < t <= t1) for e in ends)
    steps = [b - a for e in ends for a, b in zip(e[SKIP:], e[SKIP + 1:], strict=False)]
    return done * batch / (t1 - t0), statistics.median(steps) * 1e3


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_link_arguments(ap)
    ap.add_argument("--qdisc", default="fifo", choices=("fifo", "fair", "ackfirst"),
                    help="how the shaped link's buffer serves its flows, as the lab's --qdisc")
    ap.add_argument("--workers", default="1,2,3", help="the W to run, comma-separated")
    ap.add_argument("--bytes", type=int, default=10 * 2**20, help="bytes each way per step")
    ap.add_argument("--pause-ms", type=float, default=0.0, help="a worker's compute per step")
    ap.add_argument("--apply-ms", type=float, default=0.0,
                    help="the PS's apply per push, one at a time, before it acknowledges")
    ap.add_argument("--apply-overlap", action="store_true",
                    help="the PS's applies may overlap (each push on its own) instead")
    ap.add_argument("--steps", type=int, default=40, help="steps per worker")
    ap.add_argument("--batch-size", type=int, default=40, help="examples per step")
    args = ap.parse_args(argv)
    try:
        ws = [int(w) for w in args.workers.split(",")]
    except ValueError:
        print(f"diag_bare_ps: bad --workers {args.workers!r}: expected e.g. 1,2,3",
              file=sys.stderr)
        return 2
    for bad, text in ((args.steps <= SKIP + 1, f"--steps must exceed {SKIP + 1}"),
                      (min(ws) < 1, "--workers must be at least 1"),
                      (args.bytes < 1 or args.batch_size < 1,
                       "--bytes and --batch-size must be at least 1"),
                      (args.pause_ms < 0 or args.apply_ms < 0,
                       "--pause-ms and --apply-ms must not be negative")):
        if bad:
            print(f"diag_bare_ps: {text}", file=sys.stderr)
            return 2
    print(f"# bare PS, {link_label(args)}, qdisc {args.qdisc}, {args.bytes} B each way, pause "
          f"{args.pause_ms} ms, apply {args.apply_ms} ms"
          f"{' overlapping' if args.apply_overlap else ''}, batch {args.batch_size}")
    try:
        for w in ws:
            ends = run_job(args.bandwidth, args.queue, args.tcp_cc, args.qdisc, w, args.bytes,
                           args.pause_ms / 1e3, args.steps, args.apply_ms / 1e3,
                           not args.apply_overlap)
            rate, step_ms = throughput(ends, args.batch_size)
            print(f"W = {w}: {rate:.1f} ex/s, median step {step_ms:.1f} ms", flush=True)
    except LabError as exc:
        print(f"diag_bare_ps: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
