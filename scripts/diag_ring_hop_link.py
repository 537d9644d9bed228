"""How much of a ring hop's software time is left once the wire is slower than the host.

A diagnostic for issue 22 (not part of ``gradwire``'s predictions). ``gradwire opdb build``
times one hop of TensorFlow's collective ring all-reduce (``CollectiveRingHop``,
collector/ringhop.py) between two processes on loopback, and takes loopback TCP's streaming
time out. What is left counts every copy and parse on the way, including gRPC's work on the
bytes as they stream in and out. On a link slower than that work, part of it runs while the
bytes are still on the wire, and only the rest holds the chunk back.

This script times the same all-reduce (two servers, group size 2, 2 x chunk bytes of float32,
3 warm-ups, then ``--reps`` timed runs) between two lab namespaces joined by a link shaped to
each ``--bandwidth`` (both directions, the lab's HTB shaper and FIFO, docs/lab.md), and
reports per chunk size (medians, ms):

- ``loopback hop``: the database's measure (half an all-reduce on loopback, less loopback's
  streaming time; three pairs of processes, as ``gradwire opdb build`` times it);
- ``link half``: half an all-reduce across the shaped link;
- ``wire``: the chunk at the link's TCP payload rate (measured on the link by one bulk
  transfer first), less the shaper's bucket, which leaves at once after an idle spell;
- ``left``: ``link half - wire``, the hop's time the wire did not hide, and its ratio to
  ``loopback hop``; ``left, bucket spent``: the same with no head start (the chunk's whole
  wire time at the rate), for a bucket that had no time to refill. The truth is between.

``--bandwidth veth`` joins the namespaces without shaping (the lab's veths at host speed).
``--burst mtu`` turns GSO off on the shaped veths and leaves the shaper a bucket of 4 MTU, so
that the wire's time is the chunk at the rate, with no head start to guess.

With ``--db FILE`` the hops go into that op cost database too, as ``CollectiveRingHop`` rows
of its machine (``--db-machine``; its threads): the loopback ones as ``opdb build`` keeps them,
and for each shaped link its hops' time beyond the chunk's whole wire time at the link's payload
rate, keyed by that rate. ``gradwire predict --ring-hop link --opdb FILE`` takes each
configuration's line between them (docs/predict.md, "Synchronous training").

Usage, from the repo root, as root, with nothing else running (the lab's rule):

    .venv/bin/python scripts/diag_ring_hop_link.py --bandwidth 1gbit,500mbit \
        [--chunks 62500,250000,1000000] [--reps 10] [--threads 1] [--burst gso|mtu] \
        [--json FILE] [--capture DIR] [--db FILE [--db-machine FINGERPRINT]]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from lab import headers  # noqa: E402

from gradwire.collector.ringhop import hop_timing, measure_hops, time_allreduces  # noqa: E402
from gradwire.errors import GradwireError  # noqa: E402
from gradwire.opdb import Machine, OpDatabase  # noqa: E402
from gradwire.opfeatures import DTYPE_SIZE  # noqa: E402
from gradwire.replay.netns import LabError, Topology, burst_bytes, measure_throughput_bps  # noqa: E402

CHUNKS = (62_500, 125_000, 250_000, 500_000, 1_000_000, 2_000_000)  # float32 elements


def _env() -> dict[str, str]:
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


def link_halves(bandwidth: str | None, chunks: list[int], reps: int, threads: int,
                burst: str = "gso", capture: Path | None = None
                ) -> tuple[dict[int, list[float]], float | None, int]:
    """µs of each timed half all-reduce per chunk size across two lab namespaces joined by a
    link shaped to ``bandwidth`` (None: unshaped) with the lab's ``burst`` (docs/lab.md), the
    link's payload rate (bit/s; None unshaped) and its shaper's bucket (bytes; 0 unshaped).
    ``capture``: the lab's headers-only capture of both links while the all-reduces run, into
    that folder (``worker0.headers.pcap``, ``worker1.headers.pcap``; scripts/lab/headers.py),
    for ``scripts/diag_ring_wire.py`` to read."""
    with Topology(num_ps=0, num_workers=2, bandwidth=bandwidth, shape="all",
                  burst=burst) as topo:
        w0, w1 = topo.workers
        rate = measure_throughput_bps(topo, w0, w1) if bandwidth else None
        nodes = (w0, w1)
        dumps = headers.start(topo, nodes, capture) if capture else []
        times = time_allreduces(
            lambda k, argv: topo.spawn(nodes[k], argv, env=_env(), stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True),
            [n.endpoint for n in nodes], chunks, reps, threads)
        headers.stop(dumps)
    bucket = burst_bytes(burst, topo.rate_bps) if topo.rate_bps else 0
    return {n: [t / 2 for t in times[str(n)]] for n in chunks}, rate, bucket


def database_machine(path: Path, fingerprint: str | None) -> Machine:
    """The machine of ``path`` (an op cost database) the rows are for: ``fingerprint``'s, or
    the database's only one; GradwireError otherwise."""
    with OpDatabase(path) as db:
        machines = db.machines()
    found = [m for m in machines if fingerprint in (None, m.fingerprint)]
    if len(found) != 1:
        have = ", ".join(m.fingerprint for m in machines) or "none"
        raise GradwireError(f"{path}: name the machine with --db-machine (it has: {have})"
                            if found else f"{path}: no machine {fingerprint} (it has: {have})")
    return found[0]


def _ratio(part_us: float, hop_us: float) -> str:
    """``part_us / hop_us`` for the table, or "-" where the loopback hop is nothing: its
    all-reduce took no longer than loopback TCP's own streaming of the chunk (each run's hop is
    kept at 0 or more, collector/ringhop.hop_timing), as on a host whose loopback TCP is slow."""
    return f"{part_us / hop_us:.2f}" if hop_us > 0 else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bandwidth", default="1gbit,500mbit",
                    help="comma-separated link rates ('1gbit'; 'veth': unshaped)")
    ap.add_argument("--chunks", default=",".join(map(str, CHUNKS)),
                    help="chunk sizes, float32 elements, comma-separated")
    ap.add_argument("--reps", type=int, default=10, help="timed all-reduces per chunk size")
    ap.add_argument("--threads", type=int, default=1,
                    help="intra- and inter-op threads of both servers (the lab's: 1; 0: "
                         "TensorFlow's default)")
    ap.add_argument("--burst", default="gso", choices=("gso", "mtu"),
                    help="the shaper's bucket as the lab sets it (docs/lab.md): 'gso' (128 "
                         "KiB, GSO on) or 'mtu' (4 MTU, GSO off: no bucket to speak of)")
    ap.add_argument("--json", type=Path, help="also write the numbers here (a new file)")
    ap.add_argument("--capture", type=Path, metavar="DIR",
                    help="also capture both links' headers while the all-reduces run, into "
                         "this new folder (one --bandwidth; scripts/diag_ring_wire.py reads "
                         "them)")
    ap.add_argument("--db", type=Path,
                    help="also keep the hops as CollectiveRingHop rows in this op cost "
                         "database (gradwire opdb build made it): the loopback ones, and one "
                         "set per shaped link, each its time beyond the chunk at the link's "
                         "payload rate (predict --ring-hop link reads them); the servers then "
                         "run the machine's threads")
    ap.add_argument("--links-only", action="store_true",
                    help="with --db, keep the database's loopback hops as they are (the "
                         "links' rows only)")
    ap.add_argument("--db-machine", metavar="FINGERPRINT",
                    help="the --db machine the rows are for (default: its only one)")
    args = ap.parse_args(argv)
    chunks = [int(x) for x in args.chunks.split(",")]
    if args.json and args.json.exists():
        print(f"diag_ring_hop_link: {args.json}: exists; name a new file", file=sys.stderr)
        return 2
    if args.capture and (args.capture.exists() or "," in args.bandwidth):
        print(f"diag_ring_hop_link: --capture {args.capture}: give a new folder and one "
              "--bandwidth", file=sys.stderr)
        return 2
    try:
        machine = database_machine(args.db, args.db_machine) if args.db else None
        threads = args.threads if machine is None else machine.threads or 0
        # the loopback hops as `opdb build` times them (three pairs of processes, pooled)
        loop_rows = measure_hops(chunks, machine or Machine(fingerprint="-", description="-",
                                                            cores=0, tf_version="-",
                                                            threads=threads),
                                 reps=args.reps)
        loop = {n: r.median_us for n, r in zip(chunks, loop_rows, strict=True)}
        rows = loop_rows if machine and not args.links_only else []
        result: dict[str, object] = {"threads": threads, "reps": args.reps,
                                     "burst": args.burst,
                                     "loopback_hop_us": loop, "links": {}}
        for bw in args.bandwidth.split(","):
            half_times, rate, bucket = link_halves(None if bw == "veth" else bw, chunks,
                                                   args.reps, threads, args.burst,
                                                   args.capture)
            halves = {n: statistics.median(t) for n, t in half_times.items()}
            if machine and rate:
                rows += [hop_timing(n, [h - n * DTYPE_SIZE["float32"] * 8 / rate * 1e6
                                        for h in t], machine, rate)
                         for n, t in half_times.items()]
            result["links"][bw] = {"rate_bps": rate, "bucket_bytes": bucket,
                                   "half_us": halves}
            rate_s = f"{rate / 1e6:.1f} Mbit/s payload" if rate else "unshaped"
            print(f"\n{bw} ({rate_s}, bucket {bucket / 1024:.0f} KiB), {threads} "
                  f"thread(s), median of {args.reps}:")
            print("| chunk MB | loopback hop ms | link half ms | wire ms | left ms | "
                  "left / loopback hop | left, bucket spent ms | its ratio |")
            print("|---:|---:|---:|---:|---:|---:|---:|---:|")
            for n in chunks:
                nbytes = n * DTYPE_SIZE["float32"]
                full = nbytes * 8 / rate * 1e6 if rate else 0.0
                wire = max(0.0, nbytes - bucket) * 8 / rate * 1e6 if rate else 0.0
                left, spent = halves[n] - wire, halves[n] - full
                print(f"| {nbytes / 1e6:.2f} | {loop[n] / 1e3:.2f} | {halves[n] / 1e3:.2f} | "
                      f"{wire / 1e3:.2f} | {left / 1e3:.2f} | {_ratio(left, loop[n])} | "
                      f"{spent / 1e3:.2f} | {_ratio(spent, loop[n])} |")
    except (GradwireError, LabError) as e:
        print(f"diag_ring_hop_link: {e}", file=sys.stderr)
        return 1
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if machine:
        with OpDatabase(args.db) as db:
            db.put(rows)
        print(f"\n{len(rows)} CollectiveRingHop rows kept in {args.db} (machine "
              f"{machine.fingerprint}); a link's are its hops beyond the chunk at its payload "
              "rate, with no head start from the shaper's bucket")
    return 0


if __name__ == "__main__":
    sys.exit(main())
