#!/bin/sh
# conv_threads.sh — conv2d and both of its gradients give the same bits at
# 1, 2 and 3 threads (TFE_NUM_THREADS), for float32 and float64, over shapes
# that take each of the chunked paths (tensor/kernels_nn.c): LeNet's and
# ResNet-20's layers, a strided and a dilated one. With two images a thread
# or more, the forward and the stride-1 d/dx run image by image, else on
# the whole batch padded (4 images: image by image at 1 and 2 threads, the
# batch at 3): image by image, an image with an inside is read in place and
# only its border padded (the 5x4 kernels at strides 1 and 2: uneven
# borders of two rows and columns), a 3x3 image under a 5x5 kernel padded
# whole. Each run saves its results with save_npy; the files must be byte-identical.
: "${TFE:?TFE is not set (run through make check)}"
dir=$(mktemp -d "${TMPDIR:-/tmp}/conv_threads.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
cat > "$dir/prog.tfe" <<'TFE'
seed(3)
let cases = (
    ((9, 28, 28, 1), (5, 5, 1, 6), 1, 1, "same", "float32"),
    ((7, 14, 14, 6), (5, 5, 6, 16), 1, 1, "valid", "float32"),
    ((5, 32, 32, 3), (3, 3, 3, 16), 1, 1, "same", "float32"),
    ((4, 32, 32, 16), (3, 3, 16, 16), 1, 1, "same", "float32"),
    ((3, 8, 8, 64), (3, 3, 64, 64), 1, 1, "same", "float32"),
    ((3, 16, 16, 32), (3, 3, 32, 64), 2, 1, "same", "float32"),
    ((2, 70, 90, 5), (3, 4, 5, 20), 2, 1, "same", "float32"),
    ((3, 12, 12, 8), (3, 3, 8, 8), 1, 2, "same", "float32"),
    ((4, 9, 11, 8), (5, 4, 8, 9), 1, 1, "same", "float32"),
    ((4, 10, 13, 12), (5, 4, 12, 20), 2, 1, "same", "float32"),
    ((4, 3, 3, 8), (5, 5, 8, 8), 1, 1, "same", "float32"),
    ((9, 28, 28, 1), (5, 5, 1, 6), 1, 1, "same", "float64"),
    ((4, 16, 16, 16), (3, 3, 16, 16), 1, 1, "same", "float64")
)
let i = 0
for c in cases {
    let x = cast(randn(c[0]), c[5])
    let w = cast(randn(c[1]) * 0.1, c[5])
    let y = conv2d(x, w, stride=c[2], dilation=c[3], padding=c[4])
    let dy = cast(randn(shape(y)), c[5])
    with tape() as t {
        t.watch(x)
        t.watch(w)
        let l = sum(conv2d(x, w, stride=c[2], dilation=c[3], padding=c[4]) * dy)
    }
    let g = t.gradient(l, [x, w])
    save_npy(format("{}/y{}.npy", OUT, i), y)
    save_npy(format("{}/dx{}.npy", OUT, i), g[0])
    save_npy(format("{}/dw{}.npy", OUT, i), g[1])
    i += 1
}
print(i)
TFE
fail=0
for t in 1 2 3; do
    mkdir "$dir/t$t"
    { echo "let OUT = \"$dir/t$t\""; cat "$dir/prog.tfe"; } > "$dir/p$t.tfe"
    TFE_NUM_THREADS=$t "$TFE" "$dir/p$t.tfe" > "$dir/out$t" || { echo "conv_threads: tfe failed at $t threads"; exit 1; }
done
for f in "$dir"/t1/*.npy; do
    b=$(basename "$f")
    for t in 2 3; do
        if ! cmp -s "$f" "$dir/t$t/$b"; then
            echo "conv_threads: $b differs between 1 and $t threads"
            fail=1
        fi
    done
done
[ "$(cat "$dir/out1")" = 13 ] || { echo "conv_threads: unexpected output: $(cat "$dir/out1")"; fail=1; }
exit $fail
