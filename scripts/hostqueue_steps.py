"""Step by step through one replay of the PS's own queue: each connection's state after each
worker step, to set beside the lab's socket samples (``scripts/lab --tcp-sample``).

``gradwire predict --link hostqueue`` gives the mean over start phases; where it misses the
lab, this shows what one replay's connections did: after every step (the first worker to
finish it), the simulated time, and per worker's connection to PS 0 its window and ssthresh
(segments), smoothed RTT (ms) and drops and held episodes so far. The lab's samples give the
same quantities as ``cwnd``, ``ssthresh``, ``rtt`` and the queue's ``dropped``
(docs/preregistered/issue21-async-hostqueue-reno-report.md used both).

    python scripts/hostqueue_steps.py PROFILE [--workers 2] [--bandwidth 250mbit]
        [--seed 0] [--steps 20] [--no-ack-wait] [--tcp reno|bbr|bbr-v1]
        [--pings auto|capture|none]

``--tcp``: the connections' congestion control, as ``gradwire predict --tcp`` takes it
(BBR's window target from the profile's capture where its PSes ran BBR); with ``bbr-v1``
(BBR whole) each connection's BBR state too: its mode, bandwidth estimate (Mbit/s of
payload) and minimum RTT (us), beside the lab's samples of the same (``tcpsample.py FILE
--rate RATE`` prints how often the lab's estimate stood over twice the link;
docs/notes/issue22-sync-bbr-v1.md). ``--no-ack-wait``:
without the pulls' ACKs waiting behind the other workers' pushes (two-way traffic off), a
diagnostic of how much that wait costs; not a prediction option. ``--pings``, as predict
takes it: whether a held pull goes at its worker's next HTTP/2 PING, as the profile's PS
capture times them (``auto``: with BBR whole), or at its probe timer. The workers start as
``--start random`` starts the seed's first replication. Diagnostic only: the model is the
kernel's, unchanged.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from gradwire.errors import GradwireError
from gradwire.replay import bbr
from gradwire.replay.engine import Simulator
from gradwire.replay.grid import measured_burst_bytes, measured_window_bytes
from gradwire.replay.hostqueue import CONGESTION_CONTROLS, MSS, HostQueueSpec
from gradwire.replay.hqkernel import NHC, connection_table
from gradwire.replay.options import PINGS
from gradwire.replay.predict import assign_ps, replication_seed, sim_config, start_offsets
from gradwire.replay.predictflow import bbr_window_of, replayed_pings
from gradwire.replay.profile import load_profile
from gradwire.units import parse_rate_bps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--bandwidth", default=None, help="default: the profile's rate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--no-ack-wait", action="store_true")
    ap.add_argument("--pings", choices=PINGS, default="auto",
                    help="as gradwire predict --pings: a held pull goes at its worker's next "
                    "PING (capture; auto: with --tcp bbr-v1) or at its probe timer (none)")
    ap.add_argument("--tcp", choices=CONGESTION_CONTROLS, default="reno")
    args = ap.parse_args(argv)
    try:
        prof = load_profile([args.profile])
        bw = (parse_rate_bps(args.bandwidth) if args.bandwidth
              else prof.profile_bandwidth_bps or prof.link_rate_bps)
    except (GradwireError, ValueError) as exc:
        ap.error(str(exc))
    seed = replication_seed(args.seed, 0)
    # the workers' PINGs end a held pull where predict's --pings would replay them
    pings = replayed_pings(prof, args.pings, args.tcp)
    windows = (0.0, 0.0) if args.no_ack_wait else measured_window_bytes(prof)
    cfg = sim_config(args.workers, 1, bw, "observed", prof.fitted_win_bytes, seed, False,
                     "hostqueue", None, start_offsets(prof.templates, args.workers, seed, False),
                     None, measured_burst_bytes(prof), windows, prof.mechanism,
                     HostQueueSpec(bbr_window_bytes=bbr_window_of(args.tcp, prof),
                                   pings_us=pings.intervals_us, ping_answer_us=pings.answer_us))
    sim = Simulator(prof.templates, cfg, assign_ps(prof.templates, 1, "greedy"))
    whole = args.tcp == "bbr-v1"
    heads = ["cwnd", "ssthresh", "srtt ms", "drops", "held"]
    heads += ["BBR mode", "bw Mbit/s", "min RTT us"] if whole else []
    print("| step | time s | " + " | ".join(f"w{w} {h}" for w in range(args.workers)
                                           for h in heads) + " |")
    print("|---|---|" + "---|" * (len(heads) * args.workers))
    for n in range(1, args.steps + 1):
        sim.run(n)
        cells = []
        table = connection_table(sim.kernel.S.hc)[0]
        for w, (cwnd, ssthresh, srtt_us, drops, held) in enumerate(table):
            cells += [f"{cwnd:.0f}", "-" if ssthresh == float("inf") else f"{ssthresh:.0f}",
                      f"{srtt_us / 1e3:.1f}", f"{drops:.0f}", f"{held:.0f}"]
            if whole:
                cells += bbr_cells(sim.kernel.S.hc[0, w])
        print(f"| {n} | {sim.now / 1e6:.2f} | " + " | ".join(cells) + " |")
    return 0


def bbr_cells(row: np.ndarray) -> list[str]:
    """One connection's BBR whole state (its kernel row, ``replay/bbr.py``'s vector after the
    connection's own columns): mode, bandwidth estimate (the filter's max, Mbit/s of payload;
    the long-term policer rate where in use) and minimum RTT (us)."""
    b = row[NHC - bbr.NB:]
    return [bbr.MODES[int(b[bbr.B_MODE])], f"{bbr.estimate(b) * MSS * 8:,.0f}",
            f"{b[bbr.B_MINRTT]:.0f}"]


if __name__ == "__main__":
    sys.exit(main())
