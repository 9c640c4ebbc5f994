#!/bin/sh
# tests/dist_overlap.sh — a staged data-parallel step under `mpirun -np 2`
# overlaps its gradient allreduces with the backward pass and still trains
# the eager (blocking) step's parameters bit for bit: tests/golden/
# dist_overlap_step.tfe (which make check also runs as one process) must
# print its expected lines on 2 ranks, overlapped and with TFE_OVERLAP=0
# (blocking); and the executor's TFE_DIST_STATS lines of the overlapped run
# must show every bucket split into a start and a wait, the first start
# issued before the backward pass ended (ops ran between the first start and
# the last) and ops run while allreduces were in flight.
# Skipped (77) without an MPI build or mpirun. timeout: a hang fails the test.
[ -n "$TFE_MPIRUN" ] || { echo "skip: no MPI build (configure found no mpirun)"; exit 77; }
. "$TFE_SRCDIR/tests/mpi_env.sh" # as root; Open MPI's leaks under ASan
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dist_overlap.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
name=dist_overlap_step
status=0
for mode in overlap blocking; do
    ov=1
    [ $mode = blocking ] && ov=0
    if ! (cd "$TFE_SRCDIR/tests/golden" && TMPDIR="$tmp" TFE_OVERLAP=$ov TFE_DIST_STATS=1 \
          OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
          timeout 120 "$TFE_MPIRUN" --oversubscribe -np 2 "$TFE" "$name.tfe") \
          >"$tmp/out" 2>"$tmp/err"; then
        echo "FAIL: $name ($mode): mpirun -np 2 failed"; cat "$tmp/err"; status=1; continue
    fi
    if ! diff -u "$TFE_SRCDIR/tests/golden/$name.out" "$tmp/out"; then
        echo "FAIL: $name ($mode): rank 0 printed other lines on 2 ranks"; status=1
    fi
    if grep -v '^dist_stats ' "$tmp/err" | grep -q .; then
        echo "FAIL: $name ($mode): stderr:"; cat "$tmp/err"; status=1
    fi
    # the staged step runs its graph at calls 2 to 4 (call 1 traces, eagerly)
    grep '^dist_stats .* graph=step ' "$tmp/err" >"$tmp/stats"
    if ! awk -v mode=$mode '
        { for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
          n++
          if (mode == "blocking") { if (f["split"] != 0) bad = bad "\n  split in a blocking run: " $0; next }
          ns = split(f["starts"], st, ",")
          if (f["split"] != 6 || ns != 6) bad = bad "\n  not 6 buckets split: " $0
          else if (st[1] + 0 >= st[ns] + 0) bad = bad "\n  the first start ran after the backward pass: " $0
          if (f["ops_overlapped"] + 0 <= 0) bad = bad "\n  no op ran while an allreduce was in flight: " $0 }
        END { if (n != 6) bad = bad "\n  " n " dist_stats lines for step, not 3 per rank"
              if (bad != "") { print "FAIL:" bad; exit 1 } }' "$tmp/stats"; then
        echo "FAIL: $name ($mode): the executor statistics"; cat "$tmp/err"; status=1
    fi
    [ $status -eq 0 ] && echo "ok: $name ($mode) on 2 ranks"
done
exit $status
