"""Which of a lab run's slow rounds (steps) coincide with a held connection on its PSes.

``python scripts/diag_held_rounds.py RESULT.json [...] [--slow-ms 220] [--skip 4]
[--overlap-ms 50]``: RESULT.json is a ``python -m lab ... --tcp-sample DIR --out RESULT.json``
run's result. For each, worker 0's rounds (the times between its step ends, its first
``--skip`` left out as warm-up) longer than ``--slow-ms`` are its slow rounds; a held episode
(``scripts/lab/tcpsample.py``: data waiting, nothing in flight, nothing sent for 50 ms or more)
spans from the flow's last send before it (``tcpsample.Held.last_send_s``) to its last held
sample. The table says how many slow rounds share at least ``--overlap-ms`` with a held
episode on any PS. Written for docs/preregistered/issue22-sync-recsys-reno.md (check 4).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab import tcpsample  # noqa: E402


@dataclass(frozen=True)
class Episode:
    """One held episode: its PS, its start and end (s, the sample files' clock) and its
    longest time since the flow's last send (ms)."""

    ps: str
    start_s: float
    end_s: float
    longest_ms: int


def episodes(sample_file: Path, ps: str) -> list[Episode]:
    """The held episodes of one ``--tcp-sample`` file, on the samples' own clock."""
    samples = tcpsample.parse(sample_file)
    if not samples:
        return []
    t0 = samples[0].t
    return [Episode(ps, t0 + h.last_send_s, t0 + h.last_s, h.longest_ms)
            for h in tcpsample.held_episodes(samples)]


def slow_rounds(step_ends_s: Sequence[float], skip: int, slow_s: float
                ) -> tuple[int, list[tuple[float, float]]]:
    """The number of rounds after the first ``skip`` step ends, and those longer than
    ``slow_s`` as (start, end) in seconds."""
    rounds = list(zip(step_ends_s[skip:], step_ends_s[skip + 1:], strict=False))
    return len(rounds), [(a, b) for a, b in rounds if b - a > slow_s]


def overlapping(rounds: Sequence[tuple[float, float]], eps: Sequence[Episode],
                overlap_s: float) -> list[tuple[float, float]]:
    """The rounds that share at least ``overlap_s`` with one of ``eps``."""
    return [(a, b) for a, b in rounds
            if any(min(b, e.end_s) - max(a, e.start_s) >= overlap_s for e in eps)]


def run_row(result_path: Path, skip: int, slow_s: float, overlap_s: float) -> str:
    """One table row for a lab result with socket samples."""
    try:
        r = json.loads(result_path.read_text())
        step_ends = r["per_worker"]["worker0"]["step_end_times_s"]
        files = {ps: Path(v["file"]) for ps, v in (r.get("tcp_samples") or {}).items()}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"diag_held_rounds: {result_path}: not a lab result with worker 0's "
                         f"step clocks ({type(e).__name__}: {e})") from None
    if not files:
        raise SystemExit(f"diag_held_rounds: {result_path}: the run has no socket samples "
                         "(run the lab with --tcp-sample DIR)")
    try:
        eps = [e for ps, f in sorted(files.items()) for e in episodes(f, ps)]
    except OSError as e:
        raise SystemExit(f"diag_held_rounds: {result_path}: its socket samples cannot be read "
                         f"({e})") from None
    n, slow = slow_rounds(step_ends, skip, slow_s)
    hit = overlapping(slow, eps, overlap_s)
    tp = r.get("throughput_examples_per_s")
    return (f"| {result_path.stem} | {'-' if tp is None else f'{tp:.1f}'} | {n} | "
            f"{', '.join(str(round(1000 * (b - a))) for a, b in slow) or 'none'} | {len(hit)} | "
            f"{len(eps)}: {', '.join(f'{e.ps} {e.longest_ms}' for e in eps) or '-'} |")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", type=Path, metavar="RESULT.json")
    ap.add_argument("--slow-ms", type=float, default=220.0,
                    help="a round longer than this is slow (default 220)")
    ap.add_argument("--skip", type=int, default=4,
                    help="worker 0's first step ends left out as warm-up (default 4)")
    ap.add_argument("--overlap-ms", type=float, default=50.0,
                    help="the least time a slow round shares with a held episode (default 50)")
    a = ap.parse_args(argv)
    rows = [run_row(p, a.skip, a.slow_ms / 1000, a.overlap_ms / 1000) for p in a.results]
    print("| run | ex/s | rounds | slow rounds (ms) | overlapping a held episode | "
          "held episodes (PS, longest ms) |")
    print("|---|---:|---:|---|---:|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
