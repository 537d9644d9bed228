"""The replay against its own run, over many profiles: one table row per profile.

For each 1-worker profile folder given, ``gradwire predict PROFILE --workers 1 --format json``
(the profile's own PS count and rate) and its ``self_check``: the examples/s the job's untraced
captured steps made (their median, and the 95% interval of it), the replay at the same
configuration, and the replay's signed error. Extra ``gradwire predict`` options after ``--``
apply to every profile (e.g. ``-- --link-burst auto``). Prints a Markdown table and the
median |error|; docs/predict.md, "The replay against its own run".

    python scripts/self_check_table.py bench-out/accuracy/*/profile [-- --link-burst auto]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from bench_accuracy import BenchError, _predict_json, gradwire_command


def self_check(profile: Path, extra: list[str]) -> dict | None:
    """The ``self_check`` of one profile's 1-worker prediction, or None when the profile has
    too few untraced steps (or predict refused it: its message goes to stderr)."""
    try:
        data = _predict_json([*gradwire_command(), "predict", str(profile), "--workers", "1",
                              "--format", "json", "-q", *extra], str(profile))
    except BenchError as e:
        sys.stderr.write(f"{e}\n")
        return None
    return data.get("self_check")


def main(argv: list[str]) -> int:
    profiles, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv \
        else (argv, [])
    if not profiles:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    print("| profile | untraced steps | measured ex/s (95% of the median) | replayed | error % |")
    print("|---|---:|---|---:|---:|")
    errors = []
    for p in map(Path, profiles):
        c = self_check(p, extra)
        name = p.parent.name if p.name == "profile" else p.name
        if c is None:
            print(f"| {name} | | no check | | |")
            continue
        lo, hi = c["measured_range_examples_per_s"]
        errors.append(abs(100 * c["error"]))
        mark = "" if c["inside"] else " (outside)"
        print(f"| {name} | {c['untraced_steps']} | {c['measured_examples_per_s']:.1f} "
              f"({lo:.1f}-{hi:.1f}) | {c['replayed_examples_per_s']:.1f} | "
              f"{100 * c['error']:+.1f}{mark} |")
    if errors:
        print(f"\n{len(errors)} profiles: median |error| {statistics.median(errors):.1f}%, "
              f"max {max(errors):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
