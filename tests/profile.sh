#!/bin/sh
# tests/profile.sh — the profiler (docs/profiling.md): the trace p.save and
# TFE_PROFILE write (checked by structure with tests/profile_check.py: JSON,
# nesting, self times adding up, every op of a known program with its count,
# staged calls as trace or cached, pool work on worker threads, collectives
# under mpirun), the table with its times masked (tests/profile/known.out),
# and TFE_DEBUG levels 1 and 3 under TFE_DEBUG_NOTIME=1
# (tests/profile/debug*.err). Never a time.
[ -n "$TFE_PYTHON3" ] || { echo "SKIP: no python3"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/profile.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
dir=$TFE_SRCDIR/tests/profile
status=0
fail() { echo "FAIL: $*"; status=1; }
# times, percentages and the run's length vary: each number with a decimal
# point, and the blanks before it, becomes one '#'
mask() { sed -E 's/ +[0-9]+\.[0-9]+%?/ #/g'; }

# with profile() as p: the table, the rows, and p.save
TFE_PROFILE_TMP=$tmp $TFE_TEST_WRAPPER "$TFE" "$dir/known.tfe" >"$tmp/known.raw" 2>"$tmp/known.err" ||
    fail "known.tfe: status $? ($(cat "$tmp/known.err"))"
mask <"$tmp/known.raw" >"$tmp/known.out"
diff -u "$dir/known.out" "$tmp/known.out" || fail "known.tfe: the tables differ from known.out"
"$TFE_PYTHON3" "$TFE_SRCDIR/tests/profile_check.py" "$tmp/known.json" --known || fail "known.json"
[ -z "$(ls "$tmp" | grep '\.tmp$')" ] || fail "a .tmp file was left behind"

# TFE_PROFILE: the whole run, written when the program ends (a profile
# recording inside it nests)
TFE_PROFILE=$tmp/whole.json TFE_PROFILE_TMP=$tmp $TFE_TEST_WRAPPER "$TFE" "$dir/known.tfe" >/dev/null 2>&1 ||
    fail "TFE_PROFILE: status $?"
"$TFE_PYTHON3" "$TFE_SRCDIR/tests/profile_check.py" "$tmp/whole.json" --known || fail "whole.json"

# thread-pool work on its workers' threads
TFE_NUM_THREADS=2 TFE_PROFILE_TMP=$tmp $TFE_TEST_WRAPPER "$TFE" "$dir/threads.tfe" >/dev/null 2>"$tmp/threads.err" ||
    fail "threads.tfe: status $? ($(cat "$tmp/threads.err"))"
"$TFE_PYTHON3" "$TFE_SRCDIR/tests/profile_check.py" "$tmp/threads.json" --threads || fail "threads.json"

# TFE_DEBUG: one line per event on stderr, the program's output unchanged
for level in 1 3; do
    TFE_DEBUG=$level TFE_DEBUG_NOTIME=1 $TFE_TEST_WRAPPER "$TFE" "$dir/debug.tfe" >"$tmp/debug.out" 2>"$tmp/debug$level.err" ||
        fail "TFE_DEBUG=$level: status $?"
    diff -u "$dir/debug.out" "$tmp/debug.out" || fail "TFE_DEBUG=$level changed stdout"
    diff -u "$dir/debug$level.err" "$tmp/debug$level.err" || fail "TFE_DEBUG=$level: stderr differs from debug$level.err"
done
# with no TFE_DEBUG_NOTIME every line ends in a time
TFE_DEBUG=1 "$TFE" "$dir/debug.tfe" 2>&1 >/dev/null | grep -qE '; [0-9]+\.[0-9]{3}ms$' || fail "TFE_DEBUG=1 prints no time"

# collectives under mpirun -np 2 (with an MPI build): each rank writes its
# own file (rank 1: NAME.rank1.json)
if [ -n "$TFE_MPIRUN" ] && command -v "$TFE_MPIRUN" >/dev/null 2>&1; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    . "$TFE_SRCDIR/tests/mpi_env.sh"
    case $TFE in /*) abs=$TFE ;; *) abs=$(pwd)/$TFE ;; esac
    if TFE_PROFILE=$tmp/mpi.json timeout 120 "$TFE_MPIRUN" --oversubscribe -np 2 "$abs" "$dir/collective.tfe" \
        </dev/null >"$tmp/mpi.out" 2>&1; then
        for f in mpi.json mpi.rank1.json; do
            "$TFE_PYTHON3" "$TFE_SRCDIR/tests/profile_check.py" "$tmp/$f" --collective || fail "$f"
        done
    else
        fail "mpirun -np 2 collective.tfe: $(cat "$tmp/mpi.out")"
    fi
fi

[ $status -eq 0 ] && echo "ok: profile"
exit $status
