#!/bin/sh
# tests/dist_train.sh — data-parallel training under `mpirun -np 2`: the
# goldens tests/golden/dist_train_*.tfe (which make check also runs as one
# process, rank 0 of 1) must print the same lines on 2 ranks, in the three
# modes of tests/run-golden. Rank 0 prints them (dist.print); rank 1 prints
# only the lines of dist.print(..., all=true), rank 0's "[rank 0] ..." lines
# with its own number. Each rank's stdout and stderr are read apart (mpirun
# --output-filename), stderr empty but for --stage-all's notes.
# Then examples/digits_mlp_dist.tfe in its quick mode on 2 ranks (it checks
# its accuracy, that the replicas agree and its checkpoint itself).
# Skipped (77) without an MPI build or mpirun. timeout: a hang fails the test.
[ -n "$TFE_MPIRUN" ] || { echo "skip: no MPI build (configure found no mpirun)"; exit 77; }
command -v "$TFE_MPIRUN" >/dev/null 2>&1 || { echo "skip: $TFE_MPIRUN is not there"; exit 77; }
case $TFE in
    /*) ;;
    *) TFE=$(pwd)/$TFE ;;
esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dist_train.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
. "$TFE_SRCDIR/tests/mpi_env.sh" # Open MPI's leaks under ASan
status=0
touch "$tmp/empty"
for name in dist_train_equiv dist_train_shard; do
    golden=$TFE_SRCDIR/tests/golden/$name.out
    grep '^\[rank 0\]' "$golden" | sed 's/^\[rank 0\]/[rank 1]/' >"$tmp/want.1"
    for flag in "" --eager --stage-all; do
        rm -rf "$tmp/o"
        # cd as tests/run-golden does; TMPDIR for the checkpoint file
        (cd "$TFE_SRCDIR/tests/golden" && TMPDIR="$tmp" \
            timeout 120 "$TFE_MPIRUN" --oversubscribe -np 2 --output-filename "$tmp/o" \
            "$TFE" $flag "$name.tfe" </dev/null >"$tmp/console" 2>&1)
        rc=$?
        bad=0
        [ $rc -eq 0 ] || { echo "FAIL: $name $flag: mpirun -np 2 exited with $rc"; bad=1; }
        for r in 0 1; do
            d=$(ls -d "$tmp"/o/*/rank.$r 2>/dev/null | head -n 1)
            out=${d:+$d/stdout}; err=${d:+$d/stderr}
            [ -f "$out" ] || out=$tmp/empty
            [ -f "$err" ] || err=$tmp/empty
            want=$golden
            [ $r -eq 1 ] && want=$tmp/want.1
            if ! diff -u "$want" "$out"; then
                echo "FAIL: $name $flag: rank $r's stdout"; bad=1
            fi
            if grep -v '^tfe: --stage-all: ' "$err" | grep -q .; then
                echo "FAIL: $name $flag: rank $r's stderr:"; cat "$err"; bad=1
            fi
        done
        if [ $bad -eq 0 ]; then
            echo "ok: $name $flag on 2 ranks"
        else
            status=1; echo "--- mpirun's own output:"; cat "$tmp/console"
        fi
    done
done
if (cd "$TFE_SRCDIR/examples" && TMPDIR="$tmp" TFE_QUICK=1 TFE_PROGRESS=0 \
    timeout 120 "$TFE_MPIRUN" --oversubscribe -np 2 "$TFE" digits_mlp_dist.tfe </dev/null) >"$tmp/out" 2>"$tmp/err"; then
    echo "ok: examples/digits_mlp_dist.tfe on 2 ranks: $(tail -n 1 "$tmp/out")"
else
    echo "FAIL: examples/digits_mlp_dist.tfe on 2 ranks"; cat "$tmp/out" "$tmp/err"; status=1
fi
exit $status
