#!/bin/sh
# tests/thread_invariance.sh — results do not depend on the thread count
# (TFE_NUM_THREADS): reductions sum in an order set by the sizes alone
# (column sums by blocks of rows, long rows at kn_sum's own split points,
# fused or not),
# and the elementwise kernels' parallel chunks compute what one thread does.
# Each run saves its results; the files must be byte for byte the same.
dir=$(mktemp -d "${TMPDIR:-/tmp}/thread_inv.XXXXXX") || exit 99
trap 'rm -rf "$dir"' EXIT
cat >"$dir/t.tfe" <<'TFE'
import nn
seed(7)
let x = randn((100000, 4))                # column sums of a tall matrix
let img = randn((32, 16, 16, 32))         # NHWC activations
let c = randn((32,))
let long = randn((300001,))
let d = cast(randn((70001, 3)), float64)
let bn = nn.batch_norm(32)
with tape() as t {
    t.watch(img)
    let y = relu(bn.call(img, training=true))
    let l = sum(y * img)
}
let g = t.gradient(l, (img, bn.gamma, bn.beta))
@staged
fn fused_sum(v) { return sum(v * v + 1.0) }   # a fused reduction of one long row
# GEMMs from 2^22 multiply-adds up run as row or column blocks on the pool
# (tensor/blas.c): the MLP step's shapes, 2^22 exactly among them
let a = randn((64, 256))
let w = randn((256, 256))
let a7 = randn((64, 784))
let w7 = randn((784, 256))
# float64 GEMMs of 2^22 multiply-adds and more, n not a multiple of 8 (they
# run on one thread: a block of rows or columns sums those columns
# differently in OpenBLAS's dgemm)
let a64 = cast(randn((64, 257)), float64)
let b64 = cast(randn((257, 300)), float64)
let c64 = cast(randn((3, 129, 257)), float64)
save(argv[0], {s0: sum(x, axis=0), m0: mean(x, axis=0), v0: var(x, axis=0), sd0: std(d, axis=0),
               p0: prod(x * 0.001 + 1.0, axis=0), mx0: max(x, axis=0),
               s012: sum(img, axis=(0, 1, 2)), v012: var(img, axis=(0, 1, 2)),
               all: sum(long), fl: fused_sum(long), fl64: fused_sum(cast(long, float64)), pl: prod(long * 0.0001 + 1.0), sd: sum(d, axis=0), all64: sum(d),
               mm: a @ w, mmt: a @ transpose(w), mtm: transpose(a) @ a, mm7: a7 @ w7, mtm7: transpose(a7) @ a,
               mm64: a64 @ b64, bmm64: c64 @ cast(randn((257, 257)), float64),
               bc: img * c + c, w: where(img > 0.0, img, c), y: y, gx: g[0], gg: g[1], gb: g[2]})
TFE
for n in 1 2 3; do
    TFE_NUM_THREADS=$n $TFE_TEST_WRAPPER "$TFE" "$dir/t.tfe" "$dir/r$n.safetensors" ||
        { echo "FAIL: the run with $n threads failed"; exit 1; }
done
status=0
for n in 2 3; do
    cmp -s "$dir/r1.safetensors" "$dir/r$n.safetensors" ||
        { echo "FAIL: results with $n threads differ from those with 1"; status=1; }
done
[ $status = 0 ] && echo "PASS: results are the same with 1, 2 and 3 threads"
exit $status
