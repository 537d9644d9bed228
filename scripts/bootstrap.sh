#!/usr/bin/env bash
# Set up gradwire on a fresh Debian machine: a venv in .venv with gradwire installed editable,
# and (as root, when missing) the Debian packages tshark, tcpdump and iproute2.
# Usage: bash scripts/bootstrap.sh [EXTRAS]   e.g. all, or predict (default: the core alone)
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
py="${PYTHON:-$(command -v python3.11 || command -v python3)}"

need_apt=()
for pair in tshark:tshark tcpdump:tcpdump ip:iproute2 tc:iproute2 dumpcap:tshark; do
  pkg="${pair#*:}"
  command -v "${pair%%:*}" >/dev/null 2>&1 || [[ " ${need_apt[*]:-} " == *" $pkg "* ]] ||
    need_apt+=("$pkg")
done
if [ "${#need_apt[@]}" -gt 0 ] && [ "$extras" = all ]; then  # the tests need them, not the demo
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: installing Debian packages: ${need_apt[*]}" >&2
    # another apt (a second bootstrap, an unattended upgrade) may hold apt's locks: wait for
    # them, up to 10 minutes (install waits by DPkg::Lock::Timeout; update does not, so retry;
    # its messages in English, to be matched)
    for try in $(seq 120); do
      if out=$(LC_ALL=C apt-get update -qq 2>&1); then
        [ -z "$out" ] || echo "$out" >&2  # its warnings (a repository's key...)
        break
      fi
      case "$out" in
        *"Could not get lock"*) [ "$try" -lt 120 ] && sleep 5 && continue ;;
      esac
      echo "$out" >&2; exit 1
    done
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
      "${need_apt[@]}" >/dev/null
  else
    echo "bootstrap: missing ${need_apt[*]} (run as root on Debian or Ubuntu, or install" \
         "them); tests that need them will be skipped" >&2
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $py" >&2
  "$py" -m venv .venv
fi
stamp=".venv/.gradwire-installed${extras:+-$extras}"
# an install with every extra also serves one with fewer (the demo after the tests)
if [ "$extras" != all ] && [ -f .venv/.gradwire-installed-all ] &&
   [ ! pyproject.toml -nt .venv/.gradwire-installed-all ]; then
  stamp=.venv/.gradwire-installed-all
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  log=.venv/install.log
  # a full install (TensorFlow 1.9 GB, Ray, LLVM...) takes 3.1 GB in .venv; with [predict]
  # about 0.8 GB, the core alone 22 MB. Say so at once rather than fail minutes in with pip's ENOSPC.
  # What an earlier or partial install already holds counts towards it.
  need_mb=$(( $([ "$extras" = all ] && echo 3500 || echo 900) - $(du -sm .venv | cut -f1) ))
  free_mb=$(df -Pm .venv | awk 'NR==2 {print $4}')
  if [ -n "$free_mb" ] && [ "$free_mb" -lt "$need_mb" ]; then
    echo "bootstrap: only ${free_mb} MB free on the disk of $PWD/.venv; installing" \
         "gradwire${extras:+[$extras]} needs about ${need_mb} MB: free some space and rerun" >&2
    exit 1
  fi
  echo "bootstrap: installing gradwire${extras:+[$extras]} into .venv (first run takes minutes;" \
       "log: $log)" >&2
  # pip's and setuptools' chatter goes to the log; it is shown only when the install fails.
  # No pip cache (a second copy of each wheel fetched from an index) and pip's temporary
  # files beside the venv, not in a /tmp that may be a small separate filesystem.
  mkdir -p .venv/tmp
  pip=(env TMPDIR="$PWD/.venv/tmp" PIP_NO_CACHE_DIR=1 .venv/bin/python -m pip install -q)
  if ! { "${pip[@]}" --upgrade pip && "${pip[@]}" -e ".${extras:+[$extras]}"; } >"$log" 2>&1
  then
    tail -n 40 "$log" >&2
    if grep -q "No space left on device" "$log"; then
      echo "bootstrap: the disk of $PWD/.venv filled up during the install ($(df -Pm .venv |
            awk 'NR==2 {print $4}') MB free now; about ${need_mb} MB are needed)" >&2
    fi
    echo "bootstrap: installing into .venv failed (whole log: $log)" >&2
    exit 1
  fi
  rm -rf .venv/tmp
  touch "$stamp"
fi
