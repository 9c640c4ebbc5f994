#!/bin/sh
# tests/alloc_faults.sh — every allocation may fail, and tfe stays clean.
# For each program in tests/alloc_faults/, TFE_FAIL_ALLOC (util/xalloc.h)
# makes one allocation fail, over many runs:
#   - every large tensor allocation (TFE_FAIL_ALLOC=large:N, all of them):
#     the program must stop with a located error naming "out of memory
#     allocating" (source line and caret), exit status 1, or finish with
#     its normal output (the staged executor's arena falls back to one
#     tensor per value);
#   - the same under TFE_CHECK_STAGED=1 for the staged_* programs;
#   - a sample of all allocations (TFE_FAIL_ALLOC=N, about 150 per
#     program): either the program finishes with its normal output, or it
#     exits with status 1 and "out of memory" on stderr.
# Always: no signal, no sanitizer report, and what was printed before the
# failure is a prefix of the normal output (nothing wrong is printed, e.g. a
# gradient missing a term). In the ASan+UBSan job of .ci/run this also checks
# that the error paths free what they allocated.
dir=$(mktemp -d "${TMPDIR:-/tmp}/alloc_faults.XXXXXX") || exit 99
trap 'rm -rf "$dir"' EXIT
srcdir=${TFE_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
export TFE_PATH=${TFE_PATH:-$srcdir/stdlib}
cd "$dir" || exit 99
status=0 runs=0

# run PROG FAIL: one run; sets rc, leaves o.out and o.err
run() {
    TFE_FAIL_ALLOC=$2 $TFE_TEST_WRAPPER "$TFE" "$1" >o.out 2>o.err
    rc=$?
    runs=$((runs + 1))
}

# bad PROG FAIL WHY: report a failing run
bad() {
    echo "FAIL: $(basename "$1") with TFE_FAIL_ALLOC=$2: $3 (status $rc)"
    sed 's/^/  | /' o.err | head -8
    status=1
}

# check PROG FAIL LARGE: the invariants of one run
check() {
    if [ $rc -gt 128 ]; then bad "$1" "$2" "killed by signal $((rc - 128))"; return; fi
    if grep -q -e 'Sanitizer' -e 'runtime error:' o.err; then bad "$1" "$2" "sanitizer report"; return; fi
    if [ $rc -eq 0 ]; then
        cmp -s o.out ref.out || bad "$1" "$2" "finished with other output"
        return
    fi
    [ $rc -eq 1 ] || { bad "$1" "$2" "expected status 1"; return; }
    if [ "$3" = yes ]; then
        grep -q -E ':[0-9]+:[0-9]+: error: .*out of memory allocating [0-9]+ bytes' o.err ||
            { bad "$1" "$2" "no located out-of-memory error"; return; }
        grep -q '\^' o.err || { bad "$1" "$2" "no caret under the source line"; return; }
    else
        grep -q 'out of memory' o.err || { bad "$1" "$2" "stderr does not say out of memory"; return; }
    fi
    head -c "$(wc -c <o.out)" ref.out | cmp -s - o.out || bad "$1" "$2" "printed what the normal run does not"
}

# sweep_large PROG COUNT NOTE: a run failing each large allocation in turn
sweep_large() {
    n=1
    while [ "$n" -le "$2" ]; do
        run "$1" "large:$n"
        check "$1" "large:$n$3" yes
        n=$((n + 1))
    done
}

for prog in "$srcdir"/tests/alloc_faults/*.tfe; do
    "$TFE" "$prog" >ref.out 2>ref.err || { echo "FAIL: $prog does not run"; cat ref.err; exit 1; }
    counts=$(TFE_FAIL_ALLOC=count "$TFE" "$prog" 2>&1 >/dev/null | sed -n 's/^allocations: \([0-9]*\) (\([0-9]*\) large.*/\1 \2/p')
    set -- $counts
    total=$1 large=$2
    [ -n "$total" ] && [ "$total" -gt 0 ] || { echo "FAIL: no allocation count for $prog"; exit 1; }
    sweep_large "$prog" "$large" ""
    # a staged program under TFE_CHECK_STAGED=1 too, every large allocation:
    # one that fails in the eager run only is that run's located error
    # (eager stops there, staged does not), not a host call the eager run
    # "did not make"
    case $(basename "$prog") in staged_*)
        export TFE_CHECK_STAGED=1
        clarge=$(TFE_FAIL_ALLOC=count "$TFE" "$prog" 2>&1 >/dev/null | sed -n 's/^allocations: [0-9]* (\([0-9]*\) large.*/\1/p')
        sweep_large "$prog" "${clarge:-0}" " (checked)"
        unset TFE_CHECK_STAGED
        ;;
    esac
    stride=$((total / 150 + 1))
    n=1
    while [ "$n" -le "$total" ]; do
        run "$prog" "$n"
        check "$prog" "$n" no
        n=$((n + stride))
    done
    echo "$(basename "$prog"): $total allocations ($large large tensors) checked"
done
[ $status -eq 0 ] && echo "PASS: $runs runs with one failing allocation each, all clean"
exit $status
