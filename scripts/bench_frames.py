"""gradwire's HTTP/2 frame decoding against tshark, side by side on the same capture.

For each capture: runs `gradwire frames --format jsonl` and the tshark oracle command
(`tshark -o tcp.reassemble_out_of_order:TRUE -d tcp.port==P,http2 -T fields ...`) as
subprocesses, output to /dev/null, and records
wall time and peak resident memory (RSS) of each (median of --repeats runs, alternating); then
checks frame for frame, at the nanosecond, that both decoded the same frames. Memory is
reported for each capture size so that growth with the capture's size shows. pyshark is timed on
a small capture for reference. Writes JSON.

tshark reassembles out-of-order TCP segments only when told to (its default is
``tcp.reassemble_out_of_order:FALSE``: on a lossy capture it then drops the HTTP/2 frames of
every segment that arrives after a retransmission), while gradwire always does; so the
reference runs with the preference set, or a lossy lab capture reads "same frames: False".

    python scripts/bench_frames.py CAPTURE_OR_BUNDLE... --repeats 3 --out bench_frames.json

``--before REV`` times gradwire at an older revision too (a git worktree, scripts/oldsource.py),
in the same alternation, and checks that it decodes the same frames: a change's speed-up
measured side by side on the same captures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gradwire.bundle import open_bundle
from gradwire.collector.h2capture import iter_frames
from gradwire.collector.oracle import (
    PacketFrames,
    gradwire_frames,
    parse_tshark_line,
    tshark_command,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oldsource import older_gradwire  # noqa: E402

REFERENCE_PREFS = ("-o", "tcp.reassemble_out_of_order:TRUE")


def reference_command(path: Path, ports: list[int]) -> list[str]:
    """The oracle's tshark command with out-of-order reassembly on (as gradwire does it)."""
    cmd = tshark_command(path, ports)
    if "tcp.reassemble_out_of_order:TRUE" in cmd:
        return cmd
    return [cmd[0], *REFERENCE_PREFS, *cmd[1:]]


def reference_frames(path: Path, ports: list[int]) -> list[PacketFrames]:
    """tshark's HTTP/2 frames of a capture per packet, from ``reference_command``."""
    proc = subprocess.run(reference_command(path, ports), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"tshark failed on {path}: {proc.stderr.strip()[-300:]}")
    return [parse_tshark_line(line) for line in proc.stdout.splitlines() if line.strip()]


def measure(cmd: list[str], before: tuple[dict[str, str], Path] | None = None
            ) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of a command, stdout to /dev/null (``before``: the older
    gradwire's environment and working directory)."""
    env, cwd = before or (None, None)
    t0 = time.perf_counter()
    with open(os.devnull, "w") as null:
        proc = subprocess.Popen(cmd, stdout=null, stderr=subprocess.PIPE, env=env, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}: {proc.stderr.read().decode()[-300:]}")
    return wall, usage.ru_maxrss / 1024


def pyshark_seconds(path: Path, ports: list[int]) -> tuple[float, int]:
    """Wall seconds and frame count of pyshark reading every HTTP/2 frame of a capture."""
    import pyshark

    t0 = time.perf_counter()
    cap = pyshark.FileCapture(str(path), decode_as={f"tcp.port=={p}": "http2" for p in ports},
                              display_filter="http2.type")
    n = sum(1 for pkt in cap for layer in pkt.get_multiple_layers("http2")
            if layer.get_field("type") is not None)
    cap.close()
    return time.perf_counter() - t0, n


def printed_frames(cmd: list[str], before: tuple[dict[str, str], Path] | None = None
                   ) -> list[str]:
    """The lines ``gradwire frames`` prints for a capture (``before``: the older gradwire's
    environment and working directory)."""
    env, cwd = before or (None, None)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}: {proc.stderr.strip()[-300:]}")
    return proc.stdout.splitlines()


def bench(path: Path, ports: list[int], repeats: int,
          before: tuple[dict[str, str], Path] | None = None) -> dict[str, Any]:
    """Side-by-side timings and the equality check for one capture (``before``: the
    environment and working directory of an older gradwire, timed in the same alternation
    and checked alike)."""
    gw_cmd = [sys.executable, "-m", "gradwire", "frames", str(path.resolve()), "--format", "jsonl",
              "--port", ",".join(map(str, ports))]
    ts_cmd = reference_command(path, ports)
    runs: dict[str, list[tuple[float, float]]] = {"gradwire": [], "tshark": []}
    if before is not None:
        runs["before"] = []
    for _ in range(repeats):
        runs["gradwire"].append(measure(gw_cmd))
        runs["tshark"].append(measure(ts_cmd))
        if before is not None:
            runs["before"].append(measure(gw_cmd, before))
    frames = list(iter_frames(path, ports))
    same = gradwire_frames(frames) == reference_frames(path, ports)
    row: dict[str, Any] = {"capture": str(path), "bytes": path.stat().st_size,
                           "frames": len(frames), "same_frames": same}
    if before is not None:
        row["same_as_before"] = printed_frames(gw_cmd) == printed_frames(gw_cmd, before)
    for tool, rs in runs.items():
        row[f"{tool}_s"] = statistics.median(w for w, _ in rs)
        row[f"{tool}_rss_mib"] = statistics.median(m for _, m in rs)
    row["speedup"] = row["tshark_s"] / row["gradwire_s"]
    if before is not None:
        row["vs_before"] = row["before_s"] / row["gradwire_s"]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("captures", nargs="+", type=Path, help="bundle folders or capture files")
    ap.add_argument("--port", default="", help="ports for plain capture files, e.g. 2222")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pyshark", type=Path, default=None, help="small capture for pyshark")
    ap.add_argument("--out", default="bench_frames.json")
    ap.add_argument("--before", metavar="REV", default=None,
                    help="also time gradwire at this git revision (e.g. HEAD~1), alternating")
    args = ap.parse_args()
    rows = []
    with older_gradwire(args.before) as before:
        for item in args.captures:
            if item.is_dir():
                b = open_bundle(item)
                path, ports = b.capture_file, b.ports
            else:
                path, ports = item, [int(p) for p in args.port.split(",") if p]
            rows.append(bench(path, ports, args.repeats, before))
            r = rows[-1]
            print(f"{path}: {r['bytes'] / 1e9:.3f} GB, {r['frames']} frames, "
                  f"same={r['same_frames']}, gradwire {r['gradwire_s']:.2f} s / "
                  f"{r['gradwire_rss_mib']:.0f} MiB, tshark {r['tshark_s']:.2f} s / "
                  f"{r['tshark_rss_mib']:.0f} MiB", file=sys.stderr)
    rev = args.before
    extra = f" {rev} (s) | same as {rev} | vs {rev} |" if rev else ""
    print("| capture | size (GB) | frames | same frames | gradwire (s) | tshark (s) | speedup |"
          f" gradwire RSS (MiB) | tshark RSS (MiB) |{extra}")
    print("|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if args.before else ""))
    for r in rows:
        cells = (f" {r['before_s']:.2f} | {r['same_as_before']} | {r['vs_before']:.2f}x |"
                 if args.before else "")
        print(f"| {Path(r['capture']).parent.name}/{Path(r['capture']).name} | "
              f"{r['bytes'] / 1e9:.3f} | {r['frames']:,} | {r['same_frames']} | "
              f"{r['gradwire_s']:.2f} | {r['tshark_s']:.2f} | {r['speedup']:.1f}x | "
              f"{r['gradwire_rss_mib']:.0f} | {r['tshark_rss_mib']:.0f} |{cells}")
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}
    if args.pyshark:
        secs, n = pyshark_seconds(args.pyshark, [int(p) for p in args.port.split(",") if p])
        result["pyshark"] = {"capture": str(args.pyshark), "seconds": secs, "frames": n}
        print(f"\npyshark on {args.pyshark.name}: {n} frames in {secs:.2f} s")
    Path(args.out).write_text(json.dumps(result, indent=1))
    return 0 if all(r["same_frames"] and r.get("same_as_before", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
