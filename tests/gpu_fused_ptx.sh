#!/bin/sh
# gpu_fused_ptx.sh — fused elementwise groups as CUDA kernels (gpu/fuse.c,
# docs/gpu.md "Fused kernels"), checked without a GPU: NVRTC compiles CUDA C
# to PTX with no device. TFE_GPU_FUSED_PTX_CHECK=1 makes tfe compile every
# fused program it runs (once per distinct program) and fail on a compile
# error; its first check also compiles a program with every fusable op
# (each ELEM_UNARY and ELEM_BINARY row of tensor/elem.def).
# Programs run on the pretend gpu:0 (TFE_FAKE_GPU=1, TFE_DEVICE=gpu:0): then
# staged graphs run through the node walker (graph/exec.c run_fused, the
# path a GPU takes) rather than the CPU plan. When the toolkit's ptxas is
# there, every PTX is also assembled for sm_90 (the H200), as the driver's
# JIT would. Launching the kernels needs a GPU: bench/gpu.sh.
# Exits 77 (skip) in a build without CUDA or when NVRTC cannot be loaded.
: "${TFE:?TFE is not set (run through make check)}"
: "${TFE_SRCDIR:?TFE_SRCDIR is not set (run through make check)}"
tmp=${TMPDIR:-/tmp}/gpu_fused_ptx.$$
mkdir -p "$tmp/ptx" || exit 1
trap 'rm -rf "$tmp"' EXIT
export TFE_FAKE_GPU=1 TFE_DEVICE=gpu:0
# run DIR ARGS...: tfe in DIR (goldens read data next to them) with the
# check on; stderr in $tmp/err, status in $rc. No $TFE_TEST_WRAPPER: NVRTC
# under valgrind would take minutes and check nothing of tfe's.
run() {
    dir=$1
    shift
    (cd "$dir" && TFE_GPU_FUSED_PTX_CHECK=${check:-1} TFE_GPU_FUSED_PTX_DIR="$tmp/ptx" \
        "$TFE" "$@" >"$tmp/out" 2>"$tmp/err")
    rc=$?
}

# a small group, called twice (the first call of a signature runs while it
# is traced; the second runs the graph)
small='@staged
fn f(x, y) { return sigmoid(x) * y + 1.0 }
let x = [[1.0, 2.0, 3.0]]
for i in range(2) { print(f(x, x * 2.0)) }'
check=source
run . -e "$small"
check=1
if grep -q 'has no CUDA backend' "$tmp/err"; then echo "gpu_fused_ptx: a build without CUDA; skipping"; exit 77; fi
if grep -q 'cannot load NVRTC' "$tmp/err"; then echo "gpu_fused_ptx: $(grep -m1 NVRTC "$tmp/err"); skipping"; exit 77; fi
status=0
fail() { echo "FAIL: $*"; status=1; }
[ $rc -eq 0 ] || { fail "the small program (status $rc)"; cat "$tmp/err"; }
# the CUDA C of the small group: the kernel, its loads, the ops, the constant
# 1.0 as its float bits, the store
for want in 'extern "C" __global__ void tfe_fused_' '(const tfe_fargs a)' 'a.in[0] ? a.in[0][o0] : a.v[0]' \
            'tfe_SIGMOID(r' '/* mul */' '__int_as_float(0x3f800000); /* const 1 */' '/* add */' 'a.out[i] = r'; do
    grep -qF "$want" "$tmp/err" || fail "the small group's source has no '$want'"
done
# the every-op program: each fusable row of tensor/elem.def is called, and
# its function is the row's formula as written there (stringified, so the
# same characters the CPU loops are compiled from)
for want in '#define F(fn) fn##f' 'T F(tfe_sigmoid)(T x) { if (x >= 0) return (T)1 / ((T)1 + F(exp)(-x));' \
            '__int_as_float(0x3dcccccd); /* const 0.100000001 */'; do
    grep -qF -- "$want" "$tmp/err" || fail "the every-op source has no '$want'"
done
rows=$(sed -n 's/^ELEM_\(UNARY\|BINARY\)(\([A-Z0-9_]*\), *[0-9]*, *\(.*\))\( *\/\*.*\)\{0,1\}$/\1 \2 \3/p' "$TFE_SRCDIR/tensor/elem.def")
[ "$(echo "$rows" | wc -l)" -ge 20 ] || fail "tensor/elem.def: found only $(echo "$rows" | wc -l) fusable rows"
echo "$rows" | while read -r kind id expr; do
    expr=$(echo "$expr" | sed 's/ *$//')
    args='r0'; params='(T x)'
    [ "$kind" = BINARY ] && args='r0, r1' && params='(T x, T y)'
    grep -qF -- "tfe_$id($args)" "$tmp/err" || echo "FAIL: the every-op program does not call tfe_$id"
    grep -qF -- "T tfe_$id$params { return $expr; }" "$tmp/err" || echo "FAIL: tfe_$id is not elem.def's '$expr'"
done >"$tmp/rows"
[ -s "$tmp/rows" ] && { cat "$tmp/rows"; status=1; }
grep -q 'fused-ptx: ok .*(every op, ' "$tmp/err" || fail "the every-op program did not compile"

# golden programs with fusion, and one group with every op graphs fuse; a
# float64 group and a final reduction are reported as skipped (counts below
# leave out the every-op program, compiled again by each run). Not
# stage_grad_second: its cached calls run under a tape, whose forward keeps
# its activations by running the graph as traced, unfused (docs/staging.md
# section 11), so it runs no fused group.
total=0
for t in tests/gpu_fused_ops stage_opt_reduce stage_opt_passes stage_ops_basic stage_grad_basic \
         stage_grad_step stage_grad_if stage_if_value stdlib_nn_train stdlib_optim_adam; do
    case $t in */*) f="$TFE_SRCDIR/$t.tfe" ;; *) f="$TFE_SRCDIR/tests/golden/$t.tfe" ;; esac
    [ -f "$f" ] || continue
    run "$(dirname "$f")" "$f"
    ok=$(grep '^fused-ptx: ok' "$tmp/err" | grep -vc '(every op, ')
    skipped=$(grep -c '^fused-ptx: skipped' "$tmp/err")
    if [ $rc -ne 0 ] || grep -q 'NVRTC\|error' "$tmp/err"; then
        fail "$t (status $rc)"; grep -v '^fused-ptx: ok\|^fused-ptx: skipped' "$tmp/err" | head -20
    elif [ $((ok + skipped)) -eq 0 ]; then
        fail "$t: no fused group ran"
    else
        echo "ok: $t ($ok compiled, $skipped skipped)"
    fi
    total=$((total + ok))
    if [ $t = tests/gpu_fused_ops ]; then
        grep -q '^fused-ptx: skipped .*(not float32)' "$tmp/err" || fail "$t: no float64 group skipped"
        grep -q '^fused-ptx: skipped .*(a final reduction)' "$tmp/err" || fail "$t: no reduction skipped"
    fi
done
echo "compiled $total fused programs to PTX"

# ptxas: the toolkit next to the NVRTC the build loads (config.h)
nvrtc=$(sed -n 's/^#define TFE_NVRTC_LIB "\(.*\)"$/\1/p' "$(dirname "$TFE")/config.h" 2>/dev/null)
ptxas=${nvrtc:+$(dirname "$(dirname "$nvrtc")")/bin/ptxas}
if [ -n "$ptxas" ] && [ -x "$ptxas" ]; then
    n=0
    for p in "$tmp"/ptx/*.ptx; do
        [ -f "$p" ] || continue
        "$ptxas" -arch=sm_90 -o "$tmp/k.cubin" "$p" 2>"$tmp/ptxas" || { fail "ptxas $(basename "$p")"; head -5 "$tmp/ptxas"; }
        n=$((n + 1))
    done
    echo "ptxas -arch=sm_90 assembled $n PTX files"
else
    echo "no ptxas found: PTX not assembled"
fi
exit $status
