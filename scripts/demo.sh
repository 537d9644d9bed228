#!/usr/bin/env bash
# Quick start 1: set up, then run gradwire's main job on the bundle shipped with it.
# Extra arguments go to the command (e.g. --json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/gradwire inspect "$@"
