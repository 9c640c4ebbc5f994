#!/bin/sh
# tests/dev_coll.sh — collectives on device memory (tests/unit/test_devcoll):
# as one process (NCCL on a GPU when the build has it, then the host path;
# without a GPU the pretend one, through the host), and under `mpirun -np 2`
# on the pretend GPU (skipped, 77, without an MPI build or mpirun: one GPU
# cannot hold two NCCL ranks, so the real multi-rank check is bench/nccl.sh on
# a machine with several). make check sources tests/env.sh (TFE_MPIRUN) first.
prog=./tests/unit/test_devcoll
timeout 120 "$prog" || { echo "FAIL: one process"; exit 1; }
echo "ok: one process"
[ -n "$TFE_MPIRUN" ] || { echo "skip: no MPI build (configure found no mpirun)"; exit 77; }
if ! TFE_FAKE_GPU=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
     timeout 60 "$TFE_MPIRUN" --oversubscribe -np 2 "$prog"; then
    echo "FAIL: mpirun -np 2 (TFE_FAKE_GPU=1)"; exit 1
fi
echo "ok: mpirun -np 2 (TFE_FAKE_GPU=1)"
