#!/usr/bin/env bash
# Quick start 1: set up, then run gradwire's main job on the bundle shipped with it (--sample):
# predict training throughput for 1-8 workers and 1-2 parameter servers from the shipped
# 1-worker lab recording, beside the lab's measured runs of the same job at W = 1..4. Extra
# arguments go to the command (e.g. -o pred/ for JSON, CSV and the plot).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh predict  # predict is an extra: numpy, cvxpy, numba...
exec .venv/bin/gradwire predict --sample --workers 1-8 --ps 1,2 "$@"
