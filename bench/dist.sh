#!/usr/bin/env bash
# bench/dist.sh — the distributed benchmarks in one run (bench/dist_bench.py):
# (a) allreduce, tfe against a C MPI loop; (b) the mlp_step data-parallel on
# 2 ranks against 1 rank and PyTorch DDP; (c) allreduce/backward overlap.
# Writes bench/results/dist.md and dist.json (docs/benchmarks.md).
#
# Usage: bench/dist.sh [--quick] [--rounds N] [-v] [a] [b] [c]
#   TFE=./tfe  BENCH_PYTHON=bench/.venv/bin/python  MPIRUN=mpirun  MPICC=mpicc
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec /usr/bin/python3 "$here/dist_bench.py" "$@"
