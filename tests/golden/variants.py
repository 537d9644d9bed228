"""The predictions frozen before the replay engine's redesign (issue 20): every option that
changes the simulation, one at a time from a base, on two lab profiles.

``python tests/golden/variants.py`` rewrites ``tests/golden/*.json`` from the current code;
``tests/test_golden.py`` checks that the code gives them again, every row field to the bit.
Run it only when a change of predictions is meant, and say why in the commit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PROFILES = {
    "small": ["tests/data/small_bundle"],  # the lab's MLP 0.2 MB at 1 Gbit/s
    "sample": ["--sample"],  # the shipped sample: MLP 0.5 MB at 20 Mbit/s, a lossy link
}
# pinned so that each variant runs in seconds; what is frozen is the engine, not the defaults
# --link-burst off (the default) pinned: the rows frozen before the token bucket (issue 21) keep
# their meaning whatever the default; the variant link-burst-auto (frozen when it came) adds
# the bucket the captures show; --link-windows off pinned alike (two-way traffic, issue 21),
# with the variant link-windows-ratio (the rule --link-windows auto was until 2026-11-28);
# --link-shares equal pinned alike (shares by window, issue 21: the variant link-shares-windows)
BASE = ["--workers", "1,2,4", "--steps", "20", "--seed", "3", "--jobs", "1", "--model", "sim",
        "--link-burst", "off", "--link-windows", "off", "--link-shares", "equal"]
# the replications of a sweep at random phases (--start together runs one run, and refuses them)
REPLICATIONS = ["--replications", "4", "--max-replications", "4"]
VARIANTS = {
    "base": [],
    "order-tic": ["--order", "tic"],
    "order-earliest": ["--order", "earliest"],
    "order-reverse": ["--order", "reverse"],
    "order-random": ["--order", "random"],
    "flow-control-off": ["--flow-control", "off"],
    "link-fifo": ["--link", "fifo"],
    "win-65536": ["--win", "65536"],
    "ps-2-nic-same": ["--ps", "2"],
    "ps-2-nic-unlimited": ["--ps", "2", "--worker-bandwidth", "unlimited"],
    "ps-2-nic-rate": ["--ps", "2", "--worker-bandwidth", "600Mbit"],
    "ps-cores-1": ["--ps-cores", "1"],
    "start-random": ["--start", "random"],
    "start-stratified": ["--start", "stratified"],
    "start-together": ["--start", "together", "--max-steps", "40"],
    "bandwidth-two": ["--bandwidth", "10Mbit,2Gbit"],
    "link-burst-auto": ["--link-burst", "auto"],
    "link-windows-ratio": ["--link-windows", "ratio"],
    "link-windows-burst-ratio": ["--link-windows", "ratio", "--link-burst", "auto"],
    "link-overflow": ["--link", "overflow"],
    "link-shares-windows": ["--link-shares", "windows"],
}


def predict_rows(profile: str, variant: str) -> list[dict]:
    """The rows ``gradwire predict`` gives for one profile and variant (JSON on stdout)."""
    together = "together" in VARIANTS[variant]
    cmd = [sys.executable, "-m", "gradwire", "predict", *PROFILES[profile], *BASE,
           *([] if together else REPLICATIONS), *VARIANTS[variant], "--format", "json", "-q"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{profile} {variant}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)["rows"]


def golden_path(profile: str) -> Path:
    return HERE / f"{profile}.json"


def main() -> None:
    for profile in PROFILES:
        doc = {variant: predict_rows(profile, variant) for variant in VARIANTS}
        golden_path(profile).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"wrote {golden_path(profile)}: {sum(map(len, doc.values()))} rows")


if __name__ == "__main__":
    main()
