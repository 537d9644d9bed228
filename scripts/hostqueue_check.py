"""What the PS's own egress queue does to a synchronous PS step: the host-queue model
(``replay/hostqueue.py``) in a closed loop, against the replay's equal sharing.

Not the product's prediction: the replay's kernel does not have the host queue yet. This is
the check that the mechanism, with no parameter fitted, moves a synchronous step the way the
lab's FIFO runs do, before it goes into the kernel (docs/notes/issue22-sync-stagger.md).

The loop, per step: the W workers' pulls (G bytes each) start together through the host
queue, Reno, connections kept from step to step; each worker computes for ``c``, then pushes
G bytes up a link it shares equally with the other pushes (processor sharing, the replay's
model of that direction); the next step's pulls start when the last push ends (the barrier).
G and c come from the profile through the replay itself: with one PS and equal sharing each
direction carries one phase at a time, so the replay's step is ``2 W G / C + c`` and
``gradwire predict --workers 1,6 --link fair`` gives both (G from the difference of the two
step times, c from the 1-worker step). The queue is the lab's: 10 ms of the rate unless
``--queue`` says otherwise. Pull ACKs waiting behind the pushes' queue (the replay's
``_duplex``) are left out, so the loop over-states how fast a late pull runs beside pushes.

Output: per W and queue, the loop's step with the host queue against the same loop with equal
sharing (``speed-up``), the replay's examples/s, that times the speed-up, the queue's drops
and held connections per step, and the lab's examples/s where ``--measured`` gives them.

    python scripts/hostqueue_check.py PROFILE --bandwidth 500mbit --workers 3-6 \\
        [--queue 625000,1048576] [--steps 20] [--measured 6@1048576=98.4 ...]
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchcli import OneLineParser  # noqa: E402

from gradwire.replay.hostqueue import HostQueue, Transfer, _Sim  # noqa: E402
from gradwire.units import parse_rate_bps, parse_size_bytes  # noqa: E402

WARMUP = 3  # steps left out of the mean: connections start with no RTT estimate


def shared_ends(starts: list[float], size: float, rate: float) -> list[float]:
    """End times (us) of transfers of ``size`` bytes starting at ``starts`` (us) on one link
    of ``rate`` bytes/us shared equally by those active (processor sharing)."""
    left = {w: size for w in range(len(starts))}
    ends = [math.nan] * len(starts)
    pending = sorted(range(len(starts)), key=lambda w: starts[w])
    active: list[int] = []
    t = starts[pending[0]]
    while pending or active:
        arrive = starts[pending[0]] if pending else math.inf
        if active:
            share = rate / len(active)
            first = min(left[w] for w in active) / share
            if t + first <= arrive:
                t += first
                for w in active:
                    left[w] -= first * share
                for w in [w for w in active if left[w] <= 1e-6]:
                    ends[w] = t
                    active.remove(w)
                continue
            for w in active:
                left[w] -= (arrive - t) * share
        t = arrive
        active.append(pending.pop(0))
    return ends


def closed_loop(workers: int, rate: float, buffer: float | None, pull: float, compute: float,
                steps: int) -> tuple[float, float, float]:
    """Mean step (us) after WARMUP, and drops and held connections per step, of ``steps``
    synchronous steps on a link of ``rate`` bytes/us; ``buffer``: the host queue's bytes, or
    None for pulls shared equally."""
    sim = _Sim(HostQueue(rate=rate, buffer=buffer), workers) if buffer else None
    t, lengths = 0.0, []
    for _ in range(steps):
        if sim is not None:
            idx = [sim.add(Transfer(w, t, pull)) for w in range(workers)]
            sim.run()
            ends = [sim.ends[j] for j in idx]
        else:
            ends = [t + workers * pull / rate] * workers
        done = max(shared_ends([e + compute for e in ends], pull, rate))
        lengths.append(done - t)
        t = done
    if sim is None:
        return statistics.mean(lengths[WARMUP:]), 0.0, 0.0
    out = sim.outcome()
    return statistics.mean(lengths[WARMUP:]), out.drops / steps, out.holds / steps


def replay_steps(profile: str, bandwidth: str, workers: list[int]) -> dict[int, dict]:
    """The replay's rows (equal sharing) for these W, by W."""
    cmd = [sys.executable, "-m", "gradwire", "predict", profile, "--workers",
           ",".join(map(str, workers)), "--ps", "1", "--worker-bandwidth", "unlimited",
           "--bandwidth", bandwidth, "--model", "sim", "--link", "fair", "--format", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"hostqueue_check: {' '.join(cmd[2:])} failed: "
                         f"{out.stderr.strip().splitlines()[-1] if out.stderr else out.returncode}")
    return {r["workers"]: r for r in json.loads(out.stdout)["rows"]}


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(prog="hostqueue_check.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", help="a 1-worker synchronous PS profile (bundle folder)")
    ap.add_argument("--bandwidth", required=True, help="the PS link's rate, e.g. 500mbit")
    ap.add_argument("--workers", default="2-6", help="W values: a list or range (2-6)")
    ap.add_argument("--queue", default="",
                    help="queue sizes in bytes, comma separated (default: 10 ms of the rate)")
    ap.add_argument("--steps", type=int, default=20, help="steps per loop (default 20)")
    ap.add_argument("--measured", nargs="*", default=[], metavar="W@QUEUE=EX/S",
                    help="lab results to print beside the loop's, e.g. 6@1048576=98.4")
    args = ap.parse_args(argv)
    try:
        rate = parse_rate_bps(args.bandwidth) / 8 / 1e6  # bytes/us
        ws = _workers(args.workers)
        queues = [parse_size_bytes(x) for x in args.queue.split(",") if x] or [rate * 10_000]
        measured = {}
        for m in args.measured:
            key, val = m.split("=")
            w, q = key.split("@")
            measured[(int(w), float(q))] = float(val)
    except ValueError as exc:
        ap.error(str(exc))
    if args.steps <= WARMUP:
        ap.error(f"--steps must be more than {WARMUP}")
    rows = replay_steps(args.profile, args.bandwidth, sorted({1, 6, *ws}))
    # steps_per_s counts every worker's steps: a synchronous step lasts W / steps_per_s
    one, six = 1e6 / rows[1]["steps_per_s"], 6e6 / rows[6]["steps_per_s"]
    pull = rate * (six - one) / 10  # bytes per worker and direction per step
    compute = one - 2 * pull / rate
    if not (pull > 0 and compute >= 0):
        raise SystemExit(f"hostqueue_check: {args.profile}: the replay's step does not grow "
                         "as 2 W G / B + c with W (one PS, one phase at a time): no pull size "
                         "to take from it")
    print(f"profile {args.profile}: G = {pull / 1e6:.2f} MB each way per worker and step, "
          f"c = {compute / 1e3:.1f} ms (from the replay's 1- and 6-worker steps)")
    print("| W | queue (B) | speed-up | replay ex/s | x speed-up | drops/step | held/step "
          "| lab ex/s | lab vs replay |")
    print("|---|---|---|---|---|---|---|---|---|")
    for w in ws:
        equal, _, _ = closed_loop(w, rate, None, pull, compute, args.steps)
        for qb in queues:
            step, drops, holds = closed_loop(w, rate, qb, pull, compute, args.steps)
            gain = equal / step - 1
            ex = rows[w]["examples_per_s"]
            lab = measured.get((w, qb))
            labcols = f"{lab:.1f} | {lab / ex - 1:+.1%}" if lab else "- | -"
            print(f"| {w} | {qb:.0f} | {gain:+.1%} | {ex:.1f} | {ex * (1 + gain):.1f} "
                  f"| {drops:.1f} | {holds:.2f} | {labcols} |")
    return 0


def _workers(text: str) -> list[int]:
    """W values from ``2-6`` or ``2,4,6``."""
    out: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            out.extend(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        out = []
    if not out or min(out) < 1:
        raise ValueError(f"bad --workers {text!r}: expected counts from 1, e.g. 2-6 or 2,4")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
