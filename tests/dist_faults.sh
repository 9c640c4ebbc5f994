#!/bin/sh
# tests/dist_faults.sh — faults of a distributed run under `mpirun -np 2`
# (docs/distributed.md, "Errors, mismatches and killed ranks"): an error on
# one rank while the other waits in dist.barrier(), a rank that finishes
# while the other waits, mismatched shapes, a rank killed with SIGKILL; and
# a program on standard input, and a job of one rank, whose errors are those
# of a plain run. A failing job must end with a non-zero status within
# $LIMIT seconds, print each failing rank's message (rank prefix, source
# line, caret) once, and leave no process behind; `timeout` turns a hang into
# a failure instead of a stuck CI. Any sanitizer report fails (in an ASan
# build the ranks run with tests/lsan_mpi.supp: tests/mpi_env.sh). Skipped
# (77) without an MPI build or mpirun.
: "${TFE:?TFE is not set (run through make check)}"
[ -n "$TFE_MPIRUN" ] || { echo "skip: no MPI build (configure found no mpirun)"; exit 77; }
command -v "$TFE_MPIRUN" >/dev/null 2>&1 || { echo "skip: $TFE_MPIRUN is not there"; exit 77; }
case $TFE in
    /*) ;;
    *) TFE=$(pwd)/$TFE ;;
esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dist_faults.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
trap 'exit 99' HUP INT TERM
cd "$tmp" || exit 99
. "$TFE_SRCDIR/tests/mpi_env.sh"
LIMIT=60 # measured 1 to 2 s, up to 12 s for an ASan build on a loaded machine
fail=0
bad() { echo "FAIL $*"; fail=1; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# job NAME MPIRUN-ARGS...: runs mpirun under a time limit, stdin from $stdin
# (default /dev/null), into NAME.out and NAME.err; sets rc and ms
job() {
    name=$1
    shift
    t0=$(now_ms)
    timeout -k 5 $LIMIT "$TFE_MPIRUN" --oversubscribe "$@" <"${stdin:-/dev/null}" >"$name.out" 2>"$name.err"
    rc=$?
    ms=$(($(now_ms) - t0))
    echo "$name: mpirun's status $rc after $ms ms"
}

# ended LABEL: the job failed, and in bounded time
ended() {
    if [ $ms -ge $((LIMIT * 1000)) ]; then bad "$1: still running after $LIMIT s (a hang)"
    elif [ $rc -eq 0 ]; then bad "$1: mpirun's status 0, not the failure"; fi
}

# once LABEL FILE TEXT: the lines of TEXT are in FILE, in a row, exactly once
once() {
    first=$(printf '%s\n' "$3" | head -n 1)
    n=$(grep -cxF -- "$first" "$2")
    if [ "$n" != 1 ]; then bad "$1: '$first' is in $2 $n times, not once"; return; fi
    got=$(grep -xF -A $(($(printf '%s\n' "$3" | wc -l) - 1)) -- "$first" "$2")
    [ "$got" = "$3" ] || bad "$1: message [$got], expected [$3]"
}

# clean LABEL FILE: no sanitizer report, and no tfe process of this test left
clean() {
    if grep -qE 'Sanitizer|runtime error:' "$2"; then bad "$1: a sanitizer report"; fi
    left=$(pgrep -f "$tmp/" 2>/dev/null)
    if [ -n "$left" ]; then
        bad "$1: processes left behind: $left"
        kill -KILL $left 2>/dev/null
    fi
}

# errors FILE: the number of tfe error lines in FILE
errors() { grep -c ': error: ' "$1"; }

# 1. An error on rank 1 while rank 0 waits in dist.barrier(): the job ends,
#    rank 1's message is printed once, rank 0 prints none.
cat >bar.tfe <<'EOF'
import dist
print("rank", dist.rank(), "of", dist.size())
if dist.rank() == 1 {
    for i in range(20000) {}
    let x = [1.0, 2.0] + [1.0, 2.0, 3.0]
}
dist.barrier()
print("after the barrier")
EOF
job bar -np 2 "$TFE" "$tmp/bar.tfe"
ended bar
once bar bar.err "[rank 1] $tmp/bar.tfe:5:24: error: add: shapes (2,) and (3,) cannot be broadcast
 5 |     let x = [1.0, 2.0] + [1.0, 2.0, 3.0]
   |                        ^"
[ "$(errors bar.err)" = 1 ] || bad "bar: $(errors bar.err) error lines, expected 1"
grep -q 'after the barrier' bar.out && bad "bar: a rank went past the barrier"
clean bar bar.err

# 2. Rank 1 finishes while rank 0 waits in dist.barrier(): not a hang (both
#    in MPI_Finalize's fence), an error on rank 0 naming rank 1.
cat >done.tfe <<'EOF'
import dist
if dist.rank() == 0 {
    dist.barrier()
}
print("rank", dist.rank(), "done")
EOF
job done -np 2 "$TFE" "$tmp/done.tfe"
ended done
once done done.err "[rank 0] $tmp/done.tfe:3:10: error: dist.barrier: rank 1 finished its program and will not join this collective
 3 |     dist.barrier()
   |          ^~~~~~~"
[ "$(errors done.err)" = 1 ] || bad "done: $(errors done.err) error lines, expected 1"
grep -q 'rank 0 done' done.out && bad "done: rank 0 went past the barrier"
clean done done.err

# 3. Mismatched shapes in dist.allreduce: an error on every rank. Each rank
#    prints its message at most once; a rank may be ended by the other's
#    exit before it prints, so at least one of the two is there.
cat >shapes.tfe <<'EOF'
import dist
let x = dist.allreduce(ones(2 + dist.rank()))
print(x)
EOF
job shapes -np 2 "$TFE" "$tmp/shapes.tfe"
ended shapes
found=0
for r in 0 1; do
    first="[rank $r] $tmp/shapes.tfe:2:14: error: dist.allreduce: shapes differ across ranks: rank 0 has (2,) float32, rank 1 has (3,) float32"
    grep -qxF -- "$first" shapes.err || continue
    found=$((found + 1))
    once shapes shapes.err "$first
 2 | let x = dist.allreduce(ones(2 + dist.rank()))
   |              ^~~~~~~~~"
done
[ $found -ge 1 ] || bad "shapes: no rank's message"
[ "$(errors shapes.err)" = $found ] || bad "shapes: $(errors shapes.err) error lines, expected $found"
clean shapes shapes.err

# 4. Rank 1 killed with SIGKILL while rank 0 waits in dist.barrier(): mpirun
#    ends the job. Two programs (mpirun's `:`), so that the victim can be
#    told by its command line; each writes a file once it runs.
cat >wait.tfe <<'EOF'
import dist
write_text("wait.ready", "")
dist.barrier()
print("after the barrier")
EOF
cat >victim.tfe <<'EOF'
import dist
write_text("victim.ready", "")
let s = 0
while true { s = s + 1 }
EOF
t0=$(now_ms)
timeout -k 5 $LIMIT "$TFE_MPIRUN" --oversubscribe -np 1 "$TFE" "$tmp/wait.tfe" : -np 1 "$TFE" "$tmp/victim.tfe" \
    </dev/null >kill.out 2>kill.err &
tpid=$!
victim=
i=0
while [ $i -lt 200 ] && { [ ! -f wait.ready ] || [ ! -f victim.ready ]; }; do sleep 0.1; i=$((i + 1)); done
for p in $(pgrep -f "$tmp/victim.tfe"); do
    case $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) in "$TFE $tmp/victim.tfe ") victim=$p ;; esac
done
if [ -z "$victim" ]; then
    bad "kill: the victim rank never ran ($(cat kill.err))"
else
    sleep 0.5
    t1=$(now_ms)
    kill -KILL "$victim"
fi
wait $tpid
rc=$?
t2=$(now_ms)
ms=$((t2 - t0))
echo "kill: mpirun's status $rc, $((t2 - ${t1:-$t2})) ms after the SIGKILL"
ended kill
grep -q 'after the barrier' kill.out && bad "kill: rank 0 went past the barrier"
clean kill kill.err

# 5. A program on standard input: rank 0 reads it and every rank runs it
#    (mpirun gives the other ranks /dev/null).
printf 'import dist\nprint(dist.allreduce(1.0 + dist.rank()))\n' >sum.tfe
stdin=sum.tfe job stdin -np 2 "$TFE"
[ $rc -eq 0 ] || bad "stdin: mpirun's status $rc: $(cat stdin.err)"
[ "$(cat stdin.out)" = "3.0
3.0" ] || bad "stdin: printed [$(cat stdin.out)], expected 3.0 on each rank"
clean stdin stdin.err

# 6. A job of one rank: the message of a plain run, byte for byte (no rank
#    prefix), among what mpirun adds.
cat >one.tfe <<'EOF'
import dist
dist.barrier()
let x = [1.0, 2.0] + [1.0, 2.0, 3.0]
EOF
"$TFE" "$tmp/one.tfe" >/dev/null 2>plain.err
job one -np 1 "$TFE" "$tmp/one.tfe"
ended one
[ -s plain.err ] || bad "one: a plain run printed no error"
once one one.err "$(cat plain.err)"
grep -q '^\[rank' one.err && bad "one: a rank prefix in a job of one rank"
clean one one.err

[ $fail = 0 ] && echo "dist_faults: all passed"
exit $fail
