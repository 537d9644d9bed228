"""Clock alignment: accuracy of each objective on injected offsets, and solve time against size.

Accuracy: real lab bundles (all nodes on one physical clock, so true offsets are zero) get a
random offset of 0.1-50 ms per host injected into every timestamp (TF ops and captures); each
objective (gradwire's ``centre``, dPRO's ``min-norm``, ``max-slack``) recovers them from the same
constraints, with the captures and from the traces alone. Errors are |recovered - injected|
per non-reference host, microseconds.

Speed: synthetic clusters of 2 PS + (N-2) workers, 20 tensors per PS and direction per step,
one-way latencies of 3 us + exponential(20 us), through the same precedence extraction and solve
(``precedences`` + ``solve_offsets``), best of 3.

    .venv/bin/python scripts/bench_align.py [BUNDLES...] [--seeds 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
import time
from pathlib import Path

from gradwire.aligner.align import align_nodes
from gradwire.aligner.clock import OBJECTIVES, precedences, solve_offsets
from gradwire.aligner.inject import random_offsets_us, shift_nodes
from gradwire.aligner.nodes import NodeData, load_nodes, map_domains
from gradwire.aligner.transfers import Transfer
from gradwire.records import Stream

SAMPLE = Path(__file__).resolve().parent.parent / "tests" / "data" / "small_bundle"


def accuracy(nodes: list[NodeData], seeds: int) -> list[dict]:
    """Error statistics per objective, with captures and trace-only, over ``seeds`` draws."""
    domains = map_domains(nodes)
    rows = []
    for mode in ("captures+traces", "traces only"):
        use = nodes if mode == "captures+traces" else [
            dataclasses.replace(n, streams=[]) for n in nodes]
        for objective in OBJECTIVES:
            errs: list[float] = []
            used = 0
            for seed in range(seeds):
                inj = random_offsets_us(sorted({n.domain for n in nodes}), seed)
                al = align_nodes(shift_nodes(use, domains, inj), objective=objective)
                ref = al.offsets.reference
                errs += [abs(al.offsets.offset_us[d] - (inj[d] - inj[ref])) for d in inj
                         if d != ref]
                used = al.offsets.precedences
            rows.append({"mode": mode, "objective": objective,
                         "hosts": len({n.domain for n in nodes}), "constraints": used,
                         "median_us": statistics.median(errs), "max_us": max(errs)})
    return rows


def _stream(req: int, first: int, last: int) -> Stream:
    return Stream(conn=0, client="", server="", stream_id=1, path=None, status=None, tensor=None,
                  step_id=None, request_ns=req, first_data_ns=first, last_data_ns=last,
                  end_ns=last, request_bytes=0, response_bytes=0, intervals_ns=())


def synthetic_transfers(hosts: int, steps: int, tensors: int, seed: int = 0) -> list[Transfer]:
    """Packet-level transfers of a synthetic 2-PS cluster with random offsets and latencies."""
    rng = random.Random(seed)
    names = [f"ps{i}" for i in range(2)] + [f"w{i}" for i in range(hosts - 2)]
    off = {h: rng.uniform(-50e6, 50e6) for h in names}  # ns

    def lat() -> float:
        return 3000 + rng.expovariate(1 / 20000)

    out = []
    for w in names[2:]:
        for ps in names[:2]:
            t = 0.0
            for step in range(steps):
                for k in range(2 * tensors):
                    src, dst = (ps, w) if k < tensors else (w, ps)
                    t += 50_000
                    req, first, last = t, t + 1000, t + 5000  # true times, ns
                    at_r = _stream(int(req + off[dst]), int(first + lat() + off[dst]),
                                   int(last + lat() + off[dst]))
                    at_s = _stream(int(req + lat() + off[src]), int(first + off[src]),
                                   int(last + off[src]))
                    out.append(Transfer(txn=f"{step}|{k}|{src}->{dst}", direction="x", edge="",
                                        src_device=src, dst_device=dst, src_domain=src,
                                        dst_domain=dst, step_id=step, at_receiver=at_r,
                                        at_sender=at_s))
    return out


def speed(sizes: list[tuple[int, int]]) -> list[dict]:
    """Time precedence extraction + solve for (hosts, steps) pairs, best of 3 runs."""
    rows = []
    for hosts, steps in sizes:
        transfers = synthetic_transfers(hosts, steps, tensors=20)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            precs = precedences(transfers)
            solve_offsets(precs, reference="ps0")
            best = min(best, time.perf_counter() - t0)
        rows.append({"hosts": hosts, "steps": steps, "transfers": len(transfers),
                     "constraints": len(precs), "seconds": best})
        print(f"  {hosts} hosts x {steps} steps: {len(transfers)} transfers, {best:.2f} s",
              file=sys.stderr)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("bundles", nargs="*", type=Path, help="bundle folders (default: the sample)")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    nodes = load_nodes(args.bundles or [SAMPLE])
    acc = accuracy(nodes, args.seeds)
    print(f"accuracy on {', '.join(map(str, args.bundles or [SAMPLE]))}, {args.seeds} draws of "
          "0.1-50 ms offsets per host (errors in us)\n")
    print("| inputs | objective | constraints | median error | max error |")
    print("|---|---|---:|---:|---:|")
    for r in acc:
        print(f"| {r['mode']} | {r['objective']} | {r['constraints']} | "
              f"{r['median_us']:.2f} | {r['max_us']:.2f} |")
    spd = speed([(4, 10), (4, 100), (8, 100), (16, 100), (16, 300), (32, 100)])
    print("\nsolve time (precedences + CVXPY), synthetic 2-PS clusters, best of 3\n")
    print("| hosts | steps | transfers | constraints | seconds |")
    print("|---:|---:|---:|---:|---:|")
    for r in spd:
        print(f"| {r['hosts']} | {r['steps']} | {r['transfers']} | {r['constraints']} | "
              f"{r['seconds']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps({"accuracy": acc, "speed": spd}, indent=1))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from benchcli import run_cli

    from gradwire.errors import GradwireError

    sys.exit(run_cli("bench_align", main, (GradwireError,)))
