# tests/mpi_env.sh — sourced by the MPI tests (dist_comm.sh, dist_faults.sh,
# dist_train.sh, dist_overlap.sh, golden_mpi.sh, dev_coll.sh, gpu_nccl.sh; docs/testing.md,
# "MPI tests"): the environment of their mpirun jobs. $TFE and $TFE_SRCDIR:
# tests/env.sh.

# Open MPI will not run as root (CI, containers) without both.
OMPI_ALLOW_RUN_AS_ROOT=1
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM

# An ASan build: what Open MPI keeps until exit is not reported as leaks
# (tests/lsan_mpi.supp, without the table of suppressions used that LSan
# would print on stderr), and the slow unwinder puts the library frames the
# suppressions match in the stacks (Open MPI has no frame pointers).
if [ -n "$TFE_SRCDIR" ] && grep -q __asan_init "$TFE" 2>/dev/null; then
    LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$TFE_SRCDIR/tests/lsan_mpi.supp:print_suppressions=0"
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
    export LSAN_OPTIONS ASAN_OPTIONS
fi
