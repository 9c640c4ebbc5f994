#!/bin/sh
# tests/dist_comm.sh — the process group's unit test (tests/unit/test_comm)
# as one process and under `mpirun -np 2` (skipped, 77, without an MPI build
# or mpirun). timeout: a collective that hangs fails the test instead of CI.
# make check sources tests/env.sh (TFE_MPIRUN) first.
prog=./tests/unit/test_comm
"$prog" || exit 1
echo "ok: one process"
[ -n "$TFE_MPIRUN" ] || { echo "skip: no MPI build (configure found no mpirun)"; exit 77; }
. "$TFE_SRCDIR/tests/mpi_env.sh" # as root; Open MPI's leaks under ASan
for np in 2 3; do
    if ! OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
         timeout 60 "$TFE_MPIRUN" --oversubscribe -np $np "$prog"; then
        echo "FAIL: mpirun -np $np"; exit 1
    fi
    echo "ok: mpirun -np $np"
done
