#!/usr/bin/env bash
# bench/setup.sh — installs what the benchmarks compare tfe against: Debian's
# python3-venv, lua5.4 and hyperfine, and a venv at bench/.venv with NumPy,
# PyTorch, tensorflow-cpu and JAX from PyPI. Re-running is quick and harmless.
#
# Usage (as root on Debian 12):  bench/setup.sh
#   PYTHON=/usr/bin/python3   interpreter the venv is made from
#   BENCH_VENV=bench/.venv    where the venv goes
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
VENV=${BENCH_VENV:-$here/.venv}

# --- Debian packages ---------------------------------------------------------
need=()
dpkg -s python3-venv >/dev/null 2>&1 || need+=(python3-venv)
command -v lua5.4 >/dev/null 2>&1 || need+=(lua5.4)
command -v hyperfine >/dev/null 2>&1 || need+=(hyperfine)
if ((${#need[@]})); then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup.sh: missing ${need[*]}; run as root to install them" >&2
        exit 1
    fi
    echo "setup.sh: installing ${need[*]} from Debian"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

# --- the venv ----------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
    echo "setup.sh: creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
py="$VENV/bin/python"

# Each peer is installed on its own so one that has no wheel for this Python
# does not stop the others; run.sh reports a missing peer instead of failing.
# torch from PyPI is the CUDA build on Linux x86_64 (PyPI is the only index
# reachable here); it runs on the CPU when no GPU is visible.
# find_spec looks the module up without importing it (TensorFlow takes seconds).
have() { "$py" -c "import importlib.util as u, sys; sys.exit(u.find_spec('$1') is None)" 2>/dev/null; }
install() {  # install MODULE PIP-SPEC...
    local mod=$1; shift
    if have "$mod"; then return 0; fi
    echo "setup.sh: pip install $*"
    "$py" -m pip install --quiet --disable-pip-version-check "$@" ||
        echo "setup.sh: warning: could not install $* (the benchmarks will mark it missing)" >&2
}
install numpy numpy
install torch torch
install tensorflow tensorflow-cpu
install jax 'jax[cpu]'

# Versions from the installed metadata; whether each imports and runs is
# what run.sh finds out (a peer that fails to import shows "missing").
"$py" - <<'PY'
from importlib import metadata
for mod, dist in (("numpy", "numpy"), ("torch", "torch"),
                  ("tensorflow", "tensorflow-cpu"), ("jax", "jax")):
    try:
        print(f"setup.sh: {mod:<11} {metadata.version(dist)}")
    except metadata.PackageNotFoundError:
        print(f"setup.sh: {mod:<11} MISSING")
PY
