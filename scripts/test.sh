#!/usr/bin/env bash
# Quick start 2: set up everything (venv with all extras, Ray included; tshark, tcpdump,
# iproute2 as root), then run the whole test suite. CI runs exactly this.
#
# With no arguments (or only -v, -vv, -q), the suite runs in two passes: the tests that are
# neither slow nor root on two processes at once (pytest-xdist; they measure nothing), then
# the slow and root ones (real TensorFlow clusters, network namespaces, tc, captures: they
# measure throughput) one at a time, alone on the machine. Any other arguments go to one
# plain pytest run, as given.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh all
.venv/bin/ruff check .

# numba compiles the replay kernel's loop once per machine code it needs (plain, recording
# rows, host queues: about a minute each on a fresh cache, replay/kernel.py) and keeps them in
# __pycache__; compiled here, three at once, no test waits on a compile or compiles one twice
warm=$(mktemp -d)
warm_args=(--sample --workers 2 --replications 2 --max-replications 2 --steps 10 -q)
.venv/bin/python -m gradwire predict "${warm_args[@]}" > /dev/null 2>&1 &
.venv/bin/python -m gradwire predict "${warm_args[@]}" --link hostqueue > /dev/null 2>&1 &
.venv/bin/python -m gradwire predict "${warm_args[@]}" --bandwidth 20Mbit --timeline 2,1,20Mbit \
    -o "$warm" > /dev/null 2>&1 &
wait  # a failure here shows again in the tests, with its message
rm -rf "$warm"

whole=1
for arg in "$@"; do
    case "$arg" in
        -v | -vv | -q) ;;
        *) whole=0 ;;
    esac
done
if [ "$whole" = 0 ]; then
    exec .venv/bin/python -m pytest "$@"
fi

# pytest's exit 5 is "no test selected": a failure for the suite as a whole, not for a pass
workers=$(( $(nproc) >= 2 ? 2 : 1 ))
set +e
.venv/bin/python -m pytest "$@" -n "$workers" -m "not slow and not root"
quick=$?
.venv/bin/python -m pytest "$@" -m "slow or root"
real=$?
set -e
echo "test.sh: quick pass exit $quick, slow and root pass exit $real"
if [ "$quick" = 5 ] && [ "$real" = 5 ]; then
    exit 5
fi
for rc in "$quick" "$real"; do
    if [ "$rc" != 0 ] && [ "$rc" != 5 ]; then
        exit "$rc"
    fi
done
exit 0
