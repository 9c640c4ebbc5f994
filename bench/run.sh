#!/usr/bin/env bash
# bench/run.sh — runs the benchmark rows (bench/rows.py) with one thread count
# for tfe and every peer, prints tfe/peer ratios, writes bench/results/latest.md.
#
# Usage: bench/run.sh [--quick] [--rounds N] [--list] [-v] [ROWS...]
#   TFE=./tfe  BENCH_THREADS=<nproc>  BENCH_PYTHON=bench/.venv/bin/python  BENCH_ROUNDS=1
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec /usr/bin/python3 "$here/harness.py" "$@"
