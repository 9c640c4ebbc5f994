#!/bin/sh
# tests/dev_coll.sh — collectives on device memory: tests/unit/test_devcoll
# (the buffers: NCCL on a GPU when the build has it, then the host path;
# without a GPU the pretend one, whose device path stands for NCCL) as one
# process and under `mpirun -np 2` on the pretend GPU, then the collective
# ops on the pretend gpu:0 against cpu:0 (tests/gpu_nccl.sh with
# TFE_FAKE_GPU=1: the dispatch and kernels of the device path run here; only
# NCCL's calls need a GPU). Skipped (77) in part without an MPI build or
# mpirun. make check sources tests/env.sh (TFE, TFE_MPIRUN) first.
prog=./tests/unit/test_devcoll
timeout 120 "$prog" || { echo "FAIL: one process"; exit 1; }
echo "ok: one process"
TFE_FAKE_GPU=1 sh "$TFE_SRCDIR/tests/gpu_nccl.sh" gpu:0 || { echo "FAIL: tests/gpu_nccl.sh on the pretend gpu:0"; exit 1; }
[ -n "$TFE_MPIRUN" ] || { echo "skip: no MPI build (configure found no mpirun)"; exit 77; }
. "$TFE_SRCDIR/tests/mpi_env.sh" # Open MPI's leaks under ASan
if ! TFE_FAKE_GPU=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
     timeout 60 "$TFE_MPIRUN" --oversubscribe -np 2 "$prog"; then
    echo "FAIL: mpirun -np 2 (TFE_FAKE_GPU=1)"; exit 1
fi
echo "ok: mpirun -np 2 (TFE_FAKE_GPU=1)"
