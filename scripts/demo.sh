#!/usr/bin/env bash
# Quick start 1: set up, then run gradwire's main job on the bundle shipped with it: predict
# training throughput for 1-8 workers, 1-2 parameter servers and 1 or 10 Gbit/s links from the
# shipped 1-worker lab recording. Extra arguments go to the command (e.g. --out pred/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/gradwire predict --sample --workers 1-8 --ps 1,2 --bandwidth 1Gbit,10Gbit "$@"
