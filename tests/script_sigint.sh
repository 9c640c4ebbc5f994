#!/bin/sh
# tests/script_sigint.sh — Ctrl-C (SIGINT) stops a script with the located
# error "interrupted", and the program still ends through its usual exit:
# an open TensorBoard writer's records reach its file and TFE_PROFILE's trace
# is written (docs/visualizing.md, docs/profiling.md). Before, the signal
# killed tfe and both were lost.
dir=$(mktemp -d "${TMPDIR:-/tmp}/script_sigint.XXXXXX") || exit 99
trap 'rm -rf "$dir"' EXIT
cat >"$dir/loop.tfe" <<'TFE'
import summary
let w = summary.writer(argv[0])
w.scalar("a", 4.0, 1)
w.flush()
w.scalar("b", 5.0, 2)
while true { let q = 1 }
TFE
# a background job of a script starts with SIGINT ignored (and tfe keeps it
# so); python3 gives it back its default disposition, as a terminal has
TFE_PROFILE="$dir/trace.json" python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])' "$TFE" "$dir/loop.tfe" "$dir/runs" >"$dir/out" 2>"$dir/err" &
pid=$!
# wait until the loop runs (the flushed first record is in the file; at
# most 20 s), then interrupt it: the second record is still buffered
i=0
until [ -s "$(ls "$dir"/runs/events.out.tfevents.* 2>/dev/null | head -1)" ]; do
    i=$((i + 1))
    [ $i -gt 200 ] && { kill -9 $pid; echo "FAIL: the program did not start"; exit 1; }
    sleep 0.1
done
ev=$(ls "$dir"/runs/events.out.tfevents.* | head -1)
before=$(wc -c <"$ev")
kill -INT $pid
i=0
while kill -0 $pid 2>/dev/null; do
    i=$((i + 1))
    [ $i -gt 200 ] && { kill -9 $pid; echo "FAIL: SIGINT did not stop the program"; exit 1; }
    sleep 0.1
done
wait $pid
rc=$?
[ $rc = 1 ] || { echo "FAIL: exit status $rc, not 1"; cat "$dir/err"; exit 1; }
grep -q 'loop.tfe:6:1: error: interrupted' "$dir/err" || { echo "FAIL: no located error:"; cat "$dir/err"; exit 1; }
after=$(wc -c <"$ev")
[ "$after" -gt "$before" ] || { echo "FAIL: the buffered record was lost ($before bytes before Ctrl-C, $after after)"; exit 1; }
grep -q '"traceEvents"' "$dir/trace.json" 2>/dev/null || { echo "FAIL: TFE_PROFILE's trace was not written"; exit 1; }
echo "script_sigint: stopped with a located error; event file and trace written"
