#!/bin/sh
# tests/onnx_torch.sh — models PyTorch's torch.onnx.export wrote (Gemm, Conv,
# BatchNormalization, MaxPool, Flatten; tests/fixtures/torch_*, made by
# tests/onnx_torch_fixture.py) run by import_onnx on the stored input give
# PyTorch's stored output (rtol 1e-5, the same argmax); the CNN's gradient
# matches central differences and its staged run the eager one bit for bit;
# a wrong argument is a located error naming the input, and an attribute
# value tfe has no form for one naming it. Needs no Python.
: "${TFE:?TFE is not set (run through make check)}"
: "${TFE_SRCDIR:?TFE_SRCDIR is not set (run through make check)}"
dir=$(mktemp -d "${TMPDIR:-/tmp}/onnx_torch.XXXXXX") || exit 99
trap 'rm -rf "$dir"' EXIT
cat >"$dir/run.tfe" <<'TFE'
let fx = argv[0]
for name in ("mlp", "cnn") {
    let m = import_onnx(fx + "/torch_" + name + ".onnx")
    let x = load_npy(fx + "/torch_" + name + ".x.npy")
    let want = load_npy(fx + "/torch_" + name + ".y.npy")
    let y = m(x)
    print(name, y.shape == want.shape, allclose(y, want, rtol=1e-5, atol=1e-6),
          all(argmax(y, axis=1) == argmax(want, axis=1)))
}
# the MLP's batch is a symbolic dim: any number of rows
let mlp = import_onnx(fx + "/torch_mlp.onnx")
print("mlp rows", mlp(load_npy(fx + "/torch_mlp.x.npy")[0:2]).shape)
# the CNN's gradient: central differences along the gradient itself (the model
# is piecewise linear, so they are exact but for float32's rounding)
let cnn = import_onnx(fx + "/torch_cnn.onnx")
let x = load_npy(fx + "/torch_cnn.x.npy")
seed(1)
let w = randn((2, 3))
with tape() as t {
    t.watch(x)
    let l = sum(cnn(x) * w)
}
let g = t.gradient(l, x)
let d = g / sqrt(sum(g * g))
let h = 1e-2
let fd = (sum(cnn(x + h * d) * w) - sum(cnn(x - h * d) * w)) / (2.0 * h)
let an = sum(g * d)
print("cnn grad", g.shape, an > 0.1, abs(fd - an) <= 1e-3 * an)
@staged
fn loss(x) {
    with tape() as t2 {
        t2.watch(x)
        let l2 = sum(cnn(x) * w)
    }
    return (cnn(x), t2.gradient(l2, x))
}
let (ys, gs) = loss(x)
print("cnn staged", all(ys == cnn(x)), all(gs == g))
TFE
want='mlp true true true
cnn true true true
mlp rows (2, 3)
cnn grad (2, 1, 8, 8) true true
cnn staged true true'
got=$("$TFE" "$dir/run.tfe" "$TFE_SRCDIR/tests/fixtures" 2>"$dir/err")
status=0
if [ "$got" != "$want" ]; then
    echo "FAIL: the PyTorch models in tfe:"; echo "$got"; cat "$dir/err"; status=1
fi
# an argument of another dtype or shape than the model declares
printf 'let m = import_onnx(argv[0])\nlet y = m(ones((2, 1, 8, 8), dtype=float64))\n' >"$dir/bad1.tfe"
printf 'let m = import_onnx(argv[0])\nlet y = m(ones((2, 8)))\n' >"$dir/bad2.tfe"
printf 'let m = import_onnx(argv[0])\nlet y = m(ones((3, 7)))\n' >"$dir/bad3.tfe"
check_err() { # file model expected-stderr-text
    "$TFE" "$dir/$1" "$TFE_SRCDIR/tests/fixtures/$2" 2>"$dir/err" >/dev/null
    rc=$?
    if [ $rc -ne 1 ] || ! grep -qF "$3" "$dir/err"; then
        echo "FAIL: $1: want rc 1 and '$3', got rc $rc:"; cat "$dir/err"; status=1
    fi
}
check_err bad1.tfe torch_cnn.onnx "bad1.tfe:2:9: error: the ONNX model '$TFE_SRCDIR/tests/fixtures/torch_cnn.onnx' takes its input 'x' as float32[2, 1, 8, 8], given float64[2, 1, 8, 8]"
check_err bad2.tfe torch_cnn.onnx "bad2.tfe:2:9: error: the ONNX model '$TFE_SRCDIR/tests/fixtures/torch_cnn.onnx' takes its input 'x' as float32[2, 1, 8, 8], given float32[2, 8]"
check_err bad3.tfe torch_mlp.onnx "takes its input 'x' as float32[batch, 8], given float32[3, 7]"
# an attribute value tfe has no form for: refused when the model is read
check_err bad3.tfe maxpool_dilated.onnx "bad3.tfe:1:9: error: import_onnx(): '$TFE_SRCDIR/tests/fixtures/maxpool_dilated.onnx': MaxPool's dilations 2, 2: tfe's pools are not dilated"
[ $status -eq 0 ] && echo "onnx_torch: PyTorch's MLP and CNN imported: its outputs, a gradient, staged; 3 wrong arguments and a dilated MaxPool refused"
exit $status
