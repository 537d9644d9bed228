#!/usr/bin/env bash
# Quick start 2: set up everything (venv with all extras, Ray included; tshark, tcpdump,
# iproute2 as root), then run the whole test suite. Extra arguments go to pytest. CI runs
# exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh all
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
