#!/bin/sh
# tests/dist_train.sh — data-parallel training under `mpirun -np 2`: the
# goldens tests/golden/dist_train_*.tfe (which make check also runs as one
# process, rank 0 of 1) must print the same lines on 2 ranks, eagerly and
# with --stage-all; rank 0 prints them (dist.print), and the lines of the
# other ranks (dist.print(..., all=true), "[rank N] ...") are checked apart,
# since mpirun interleaves the ranks' output in no fixed order.
# Then examples/digits_mlp_dist.tfe in its quick mode on 2 ranks (it checks
# its accuracy, that the replicas agree and its checkpoint itself).
# Skipped (77) without an MPI build or mpirun. timeout: a hang fails the test.
[ -n "$TFE_MPIRUN" ] || { echo "skip: no MPI build (configure found no mpirun)"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dist_train.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
status=0
for name in dist_train_equiv dist_train_shard; do
    for flag in "" --eager --stage-all; do
        # cd as tests/run-golden does; TMPDIR for the checkpoint file
        if ! (cd "$TFE_SRCDIR/tests/golden" && TMPDIR="$tmp" \
              OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
              timeout 120 "$TFE_MPIRUN" --oversubscribe -np 2 "$TFE" $flag "$name.tfe") \
              >"$tmp/out" 2>"$tmp/err"; then
            echo "FAIL: $name $flag: mpirun -np 2 failed"; cat "$tmp/err"; status=1; continue
        fi
        grep -v '^\[rank [1-9]' "$tmp/out" >"$tmp/rank0"
        if ! diff -u "$TFE_SRCDIR/tests/golden/$name.out" "$tmp/rank0"; then
            echo "FAIL: $name $flag: rank 0 printed other lines on 2 ranks"; status=1
        fi
        # the lines of the other ranks: rank 0's with its number changed
        grep '^\[rank 0\]' "$TFE_SRCDIR/tests/golden/$name.out" | sed 's/^\[rank 0\]/[rank 1]/' >"$tmp/want1"
        grep '^\[rank 1\]' "$tmp/out" >"$tmp/got1"
        if ! diff -u "$tmp/want1" "$tmp/got1"; then
            echo "FAIL: $name $flag: rank 1's own lines"; status=1
        fi
        # stderr: only --stage-all's notes
        if grep -v '^tfe: --stage-all: ' "$tmp/err" | grep -q .; then
            echo "FAIL: $name $flag: stderr:"; cat "$tmp/err"; status=1
        fi
        [ $status -eq 0 ] && echo "ok: $name $flag on 2 ranks"
    done
done
if (cd "$TFE_SRCDIR/examples" && TMPDIR="$tmp" TFE_QUICK=1 TFE_PROGRESS=0 \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    timeout 120 "$TFE_MPIRUN" --oversubscribe -np 2 "$TFE" digits_mlp_dist.tfe) >"$tmp/out" 2>"$tmp/err"; then
    echo "ok: examples/digits_mlp_dist.tfe on 2 ranks: $(tail -n 1 "$tmp/out")"
else
    echo "FAIL: examples/digits_mlp_dist.tfe on 2 ranks"; cat "$tmp/out" "$tmp/err"; status=1
fi
exit $status
