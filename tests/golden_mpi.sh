#!/bin/sh
# tests/golden_mpi.sh — the golden programs of tests/golden_mpi/, each run on
# two ranks (`mpirun --oversubscribe -np 2`) in the three modes of
# tests/run-golden (no flag, --eager, --stage-all), with each rank's stdout
# and stderr compared on its own (mpirun --output-filename writes them apart).
# Usage: sh tests/golden_mpi.sh [NAME ...]   (default: every NAME.tfe there)
#
# Expected output, per rank r: NAME.out.r when it exists, else NAME.out (so a
# program whose ranks print the same needs one file); likewise NAME.err.r /
# NAME.err for stderr. With any NAME.err* the run must fail (mpirun's status
# not 0), else succeed with empty stderr on both ranks. The directive
# "# modes: ..." on line 1 or 2 keeps only the modes named, as in run-golden.
# Lines "tfe: --stage-all: ..." are left out of stderr under --stage-all.
# Rank r's error messages must start with "[rank r] ", which is taken off
# before the comparison (so one NAME.err serves every rank).
# Each run has a 60 s limit (timeout), so a hang fails instead of stalling.
# Skipped (77) without mpirun or an MPI build ($TFE_MPIRUN empty: tests/env.sh).
if [ -z "$TFE" ]; then
    echo "golden_mpi: TFE is not set (source tests/env.sh)" >&2
    exit 99
fi
[ -n "$TFE_MPIRUN" ] || { echo "skip: no MPI build (configure found no mpirun)"; exit 77; }
command -v "$TFE_MPIRUN" >/dev/null 2>&1 || { echo "skip: $TFE_MPIRUN is not there"; exit 77; }
case $TFE in
    /*) ;;
    *) TFE=$(pwd)/$TFE ;;
esac
srcdir=${TFE_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$srcdir/tests/golden_mpi" || exit 99
if [ $# -eq 0 ]; then
    set -- $(ls *.tfe | sed 's/\.tfe$//')
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/golden_mpi.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
trap 'exit 99' HUP INT TERM
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
. "$srcdir/tests/mpi_env.sh" # Open MPI's leaks under ASan
np=2
failed=0
for name in "$@"; do
    name=$(basename "$name" .tfe)
    if [ ! -f "$name.out" ]; then
        echo "golden_mpi: $name.out is missing (an empty file means no output)" >&2
        exit 99
    fi
    modes=$(sed -n '1,2s/^# modes:[[:space:]]*//p' "$name.tfe")
    [ -n "$modes" ] || modes="default eager stage-all"
    want_fail=0
    ls "$name".err* >/dev/null 2>&1 && want_fail=1
    ran=
    tfailed=0
    for mode in $modes; do
        case $mode in
            default) flag= ;;
            eager | stage-all) flag=--$mode ;;
            *) echo "golden_mpi: $name.tfe: unknown mode '$mode'" >&2; exit 99 ;;
        esac
        rm -rf "$tmp/o"
        # no $TFE_TEST_WRAPPER: valgrind reports Open MPI's own writes of
        # uninitialised bytes and is 40 times slower (docs/testing.md, "MPI tests")
        # shellcheck disable=SC2086
        timeout 60 "$TFE_MPIRUN" --oversubscribe -np $np --output-filename "$tmp/o" \
            "$TFE" $flag "$name.tfe" </dev/null >"$tmp/console" 2>&1
        rc=$?
        bad=0
        if [ $rc -eq 124 ]; then
            echo "FAIL [$name ${flag:-default}]: timed out after 60 s"
            bad=1
        elif [ $want_fail -eq 1 ] && [ $rc -eq 0 ]; then
            echo "FAIL [$name ${flag:-default}]: succeeded, expected an error"
            bad=1
        elif [ $want_fail -eq 0 ] && [ $rc -ne 0 ]; then
            echo "FAIL [$name ${flag:-default}]: exit status $rc"
            bad=1
        fi
        r=0
        while [ $r -lt $np ]; do
            d=$(ls -d "$tmp"/o/*/rank.$r 2>/dev/null | head -n 1)
            touch "$tmp/empty"
            out=${d:+$d/stdout}; err=${d:+$d/stderr}
            [ -f "$out" ] || out=$tmp/empty
            [ -f "$err" ] || err=$tmp/empty
            if [ "$mode" = stage-all ]; then
                grep -v '^tfe: --stage-all: ' "$err" >"$tmp/err"
            else
                cp "$err" "$tmp/err"
            fi
            # A rank's error messages start with "[rank R] " (docs/distributed.md,
            # "Errors, mismatches and killed ranks"): each must have its own
            # rank's, and the expected files hold them without it.
            if grep ': error: ' "$tmp/err" | grep -qv "^\[rank $r\] "; then
                echo "FAIL [$name ${flag:-default}]: rank $r's error message does not start with [rank $r]"
                bad=1
            fi
            sed "s/^\[rank $r\] //" "$tmp/err" >"$tmp/err.r" && mv "$tmp/err.r" "$tmp/err"
            want_out=$name.out
            [ -f "$name.out.$r" ] && want_out=$name.out.$r
            want_err=/dev/null
            [ -f "$name.err" ] && want_err=$name.err
            [ -f "$name.err.$r" ] && want_err=$name.err.$r
            if ! diff -u "$want_out" "$out" >"$tmp/diff"; then
                echo "FAIL [$name ${flag:-default}]: rank $r's stdout differs from $want_out (- expected, + actual)"
                cat "$tmp/diff"
                bad=1
            fi
            if ! diff -u "$want_err" "$tmp/err" >"$tmp/diff"; then
                echo "FAIL [$name ${flag:-default}]: rank $r's stderr differs from $want_err (- expected, + actual)"
                cat "$tmp/diff"
                bad=1
            fi
            r=$((r + 1))
        done
        if [ $bad -ne 0 ]; then
            failed=1
            tfailed=1
            echo "--- mpirun's own output:"
            cat "$tmp/console"
        fi
        ran="$ran ${flag:-default}"
    done
    if [ $tfailed -eq 0 ]; then echo "PASS: $name ($ran )"; else echo "FAIL: $name"; fi
done
exit $failed
