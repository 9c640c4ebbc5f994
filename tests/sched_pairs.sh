#!/bin/sh
# sched_pairs.sh — the planned executor's concurrent GEMM pairs
# (graph/sched.c) give the bits of one thread: tests/golden/stage_concurrent_gemm.tfe
# at TFE_NUM_THREADS=1 and 2 (staged == eager in each, and the same
# checksum of every parameter bit after three training steps).
set -eu
TFE=${TFE:-./tfe}
: "${TFE_PATH:=${TFE_SRCDIR:-$(dirname "$0")/..}/stdlib}"
export TFE_PATH TFE_SCHED_CHECKSUM=1
prog=${TFE_SRCDIR:-$(dirname "$0")/..}/tests/golden/stage_concurrent_gemm.tfe
# shellcheck disable=SC2086 # the wrapper is a command line (valgrind ...)
one=$(TFE_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ${TFE_TEST_WRAPPER:-} "$TFE" "$prog")
# shellcheck disable=SC2086
two=$(TFE_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 ${TFE_TEST_WRAPPER:-} "$TFE" "$prog")
echo "$two"
case "$two" in *false*) echo "sched_pairs: staged and eager differ at 2 threads"; exit 1 ;; esac
case "$one" in *false*) echo "sched_pairs: staged and eager differ at 1 thread"; exit 1 ;; esac
if [ "$one" != "$two" ]; then
    echo "sched_pairs: 1 and 2 threads differ:"; echo "$one"; exit 1
fi
echo "sched_pairs: ok"
