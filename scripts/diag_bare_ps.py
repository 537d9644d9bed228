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
trio as the lab's TensorFlow trios are slowed? The job is ``replay/emulate.py``'s with one PS,
its numbers given by hand; ``gradwire predict --model emulate`` takes them from a profile.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from diag_two_way_probe import add_link_arguments, link_label  # noqa: E402

from gradwire.errors import PredictError  # noqa: E402
from gradwire.replay.emulate import (  # noqa: E402
    SKIP,
    EmulatedLink,
    EmulatedStep,
    run_once,
    throughput,
)


def run_job(bandwidth: str, queue: str | None, tcp_cc: str | None, qdisc: str, workers: int,
            size: int, pause_s: float, steps: int, apply_s: float = 0.0,
            apply_serial: bool = True) -> list[list[float]]:
    """One job of ``workers`` workers over one PS (``replay/emulate.py``'s ``run_once``):
    each worker's step end times (monotonic s, the first its start). ``apply_s``: the PS
    holds each push's acknowledgement this long (its apply), one push at a time when
    ``apply_serial``, else each on its own."""
    return run_once(EmulatedStep((size,), (size,), pause_s, apply_s),
                    EmulatedLink(bandwidth=bandwidth, queue=queue, tcp_cc=tcp_cc, qdisc=qdisc),
                    workers, steps, serial_apply=apply_serial)


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
            rate, step_s = throughput(ends, args.batch_size)
            print(f"W = {w}: {rate:.1f} ex/s, median step {1e3 * step_s:.1f} ms", flush=True)
    except PredictError as exc:
        print(f"diag_bare_ps: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
