#!/usr/bin/env bash
# bench/run.sh — runs the benchmark rows (bench/rows.py) with one thread count
# for tfe and every peer, prints tfe/peer ratios, writes bench/results/latest.md.
#
# Usage: bench/run.sh [--quick] [--list] [-v] [ROWS...]
#   TFE=./tfe  BENCH_THREADS=<nproc>  BENCH_PYTHON=bench/.venv/bin/python
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec /usr/bin/python3 "$here/harness.py" "$@"
