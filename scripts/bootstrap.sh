#!/usr/bin/env bash
# Set up gradwire on a fresh Debian machine: a venv in .venv with gradwire installed editable,
# and (as root, when missing) the Debian packages tshark, tcpdump and iproute2.
# Usage: bash scripts/bootstrap.sh [EXTRAS]   e.g. EXTRAS=all (default: no extras)
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
py="${PYTHON:-$(command -v python3.11 || command -v python3)}"

need_apt=()
for pair in tshark:tshark tcpdump:tcpdump ip:iproute2 tc:iproute2 dumpcap:tshark; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need_apt+=("${pair#*:}")
done
if [ "${#need_apt[@]}" -gt 0 ] && [ -n "$extras" ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "bootstrap: installing Debian packages: ${need_apt[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "bootstrap: missing ${need_apt[*]} (run as root, or apt-get install them); tests" \
         "that need them will be skipped" >&2
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $py" >&2
  "$py" -m venv .venv
fi
stamp=".venv/.gradwire-installed${extras:+-$extras}"
# an install with every extra also serves one without extras (the demo after the tests)
if [ -z "$extras" ] && [ -f .venv/.gradwire-installed-all ] &&
   [ ! pyproject.toml -nt .venv/.gradwire-installed-all ]; then
  stamp=.venv/.gradwire-installed-all
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  log=.venv/install.log
  echo "bootstrap: installing gradwire${extras:+[$extras]} into .venv (first run takes minutes;" \
       "log: $log)" >&2
  # pip's and setuptools' chatter goes to the log; it is shown only when the install fails
  if ! { .venv/bin/python -m pip install -q --upgrade pip &&
         .venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"; } >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "bootstrap: installing into .venv failed (whole log: $log)" >&2
    exit 1
  fi
  touch "$stamp"
fi
