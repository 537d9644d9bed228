"""Measure what collection costs in the lab: the TraceHook's overhead, and the capture's drops.

Runs real TensorFlow PS training in the lab (network namespaces, tc at the given bandwidth),
interleaving the variants in each repeat so machine noise hits them alike:

* ``plain``: no hook, no capture;
* ``hook``: the TraceHook records steps [trace_first, trace_first + trace_steps), no capture;
* ``collect``: `gradwire collect` (dumpcap with the default settings) on every node + the hook.

Reports median step time for unrecorded and recorded steps (ratios to ``plain``), throughput,
and for ``collect`` the packets captured and dropped by kernel, tool and interface.
Writes JSON. Needs root. Example (the README's table):

    python scripts/bench_collect.py --repeats 3 --out bench_collect.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lab.cluster import LabConfig, run_lab  # noqa: E402


def step_times(result: dict[str, Any]) -> dict[int, float]:
    """Step index -> duration (s) of every worker step after the first, from end times."""
    out: dict[int, float] = {}
    for info in result["per_worker"].values():
        t = info["step_end_times_s"]
        for i in range(1, len(t)):
            out.setdefault(i, t[i] - t[i - 1])
    return out


def manifests(folder: Path) -> list[dict[str, Any]]:
    """Every node bundle's manifest under ``folder``."""
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*/manifest.json"))]


def run_variant(variant: str, base: LabConfig, tmp: Path) -> dict[str, Any]:
    """One lab run of ``variant``; returns step times by kind, throughput and capture stats."""
    cfg = dataclasses.replace(base)
    if variant == "hook":
        cfg.hook_dir = str(tmp / "hook")
    elif variant == "collect":
        cfg.collect_dir = str(tmp / "collect")
    res = run_lab(cfg)
    times = step_times(res)
    recorded = set(range(cfg.trace_first, cfg.trace_first + cfg.trace_steps))
    warm = cfg.trace_first // 2  # skip start-up steps everywhere
    row: dict[str, Any] = {
        "variant": variant,
        "throughput": res["throughput_examples_per_s"],
        "unrecorded_s": [d for i, d in times.items() if i >= warm and i not in recorded],
        "recorded_s": [d for i, d in times.items() if i in recorded],
    }
    folder = tmp / ("hook" if variant == "hook" else "collect")
    row["store_s"] = [x for p in folder.glob("*/trace/session.json")
                      for x in json.loads(p.read_text())["record_seconds"]]
    if variant == "collect":
        caps = [m["capture"] for m in manifests(tmp / "collect")]
        row["packets"] = sum(c["packets_captured"] or 0 for c in caps)
        row["drops"] = sum((c["drops_kernel"] or 0) + (c["drops_capturer"] or 0)
                           + (c["drops_iface"] or 0) for c in caps)
        row["capture_bytes"] = sum(p.stat().st_size
                                   for p in (tmp / "collect").glob("*/capture.pcap*"))
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--model-mb", type=float, default=50.0)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--bandwidth", default="1gbit")
    ap.add_argument("--trace-first", type=int, default=10)
    ap.add_argument("--trace-steps", type=int, default=5)
    ap.add_argument("--out", default="bench_collect.json")
    args = ap.parse_args()
    base = LabConfig(model=args.model, model_mb=args.model_mb, batch_size=args.batch_size,
                     workers=args.workers, steps=args.steps, bandwidth=args.bandwidth,
                     trace_first=args.trace_first, trace_steps=args.trace_steps)
    rows: list[dict[str, Any]] = []
    for r in range(args.repeats):
        for variant in ("plain", "hook", "collect"):
            with tempfile.TemporaryDirectory(prefix="gw-bench-") as tmp:
                row = run_variant(variant, base, Path(tmp))
            row["repeat"] = r
            rows.append(row)
            print(f"repeat {r} {variant:8s} {row['throughput']:.1f} ex/s"
                  + (f" packets {row['packets']} drops {row['drops']}" if "drops" in row else ""),
                  file=sys.stderr)

    def med(variant: str, key: str) -> float:
        return statistics.median(x for row in rows if row["variant"] == variant for x in row[key])

    plain = med("plain", "unrecorded_s")
    summary = []
    for variant in ("plain", "hook", "collect"):
        thr = statistics.median(row["throughput"] for row in rows if row["variant"] == variant)
        un = med(variant, "unrecorded_s")
        rec = med(variant, "recorded_s") if variant != "plain" else None
        store = [x for row in rows if row["variant"] == variant for x in row["store_s"]]
        line = {"variant": variant, "throughput_median": thr, "unrecorded_step_s": un,
                "hook_store_s_median": statistics.median(store) if store else None,
                "unrecorded_ratio": un / plain, "recorded_step_s": rec,
                "recorded_ratio": rec / plain if rec else None}
        if variant == "collect":
            cols = [row for row in rows if row["variant"] == "collect"]
            line["packets_total"] = sum(row["packets"] for row in cols)
            line["drops_total"] = sum(row["drops"] for row in cols)
            line["capture_gb_total"] = sum(row["capture_bytes"] for row in cols) / 1e9
        summary.append(line)
    print(f"\n{args.model} {args.model_mb} MB, W={args.workers}, {args.bandwidth}, "
          f"{args.steps} steps, {args.repeats} repeats (medians)")
    print("| variant | examples/s | unrecorded step (s) | vs plain | recorded step (s) | vs plain |"
          " hook store (s) | packets | drops |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s in summary:
        rec = (f"{s['recorded_step_s']:.3f} | {s['recorded_ratio']:.2f}x"
               if s["recorded_step_s"] else "- | -")
        store = "-" if s["hook_store_s_median"] is None else f"{s['hook_store_s_median']:.3f}"
        print(f"| {s['variant']} | {s['throughput_median']:.1f} | {s['unrecorded_step_s']:.3f} | "
              f"{s['unrecorded_ratio']:.2f}x | {rec} | {store} | {s.get('packets_total', '-')} | "
              f"{s.get('drops_total', '-')} |")
    Path(args.out).write_text(json.dumps({"args": vars(args), "summary": summary, "runs": rows},
                                         indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
