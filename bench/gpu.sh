#!/bin/sh
# bench/gpu.sh — the GPU check for a machine with an NVIDIA GPU (issue 8;
# docs/gpu.md): configure with CUDA into a build dir, build, run the GPU tests,
# then print matmul TFLOP/s (fp32, tf32, bf16; bf16 also at 8192^3) for tfe,
# cuBLAS called directly (bench/gpu_matmul.c) and PyTorch (when importable),
# and the eager MLP
# training step (bench/mlp_step.tfe) on gpu:0 and on cpu:0. About 3-5 minutes
# on an H200. Results also go to $OUT/gpu_results.txt when OUT is set.
# Usage: sh bench/gpu.sh [BUILD_DIR]     (CUDA=/usr/local/cuda by default)
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-/tmp/tfe-gpu-build}
CUDA=${CUDA:-/usr/local/cuda}
N=${GPU_BENCH_N:-4096}
RES=$(mktemp)
say() { echo "$*" | tee -a "$RES"; }
run() { timeout "$@"; } # every step has a time limit: the script must end

say "== tfe GPU check $(date -u +%Y-%m-%dT%H:%MZ)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$RES"

# -- build ----------------------------------------------------------------------
[ -x "$SRC/configure" ] || (cd "$SRC" && autoreconf -i) || exit 1
mkdir -p "$BUILD" && cd "$BUILD" || exit 1
if ! run 300 "$SRC/configure" -q --with-cuda="$CUDA" >configure.log 2>&1; then
    say "configure failed:"; tail -20 configure.log; exit 1
fi
if ! run 400 make -j"$(nproc)" >make.log 2>&1; then
    say "build failed:"; grep -E "error|Error" make.log | head -20; exit 1
fi
say "build: ok ($BUILD)"
say "devices: $(./tfe -e 'print(devices())' 2>&1)"

# -- tests ----------------------------------------------------------------------
export TFE="$BUILD/tfe" TFE_SRCDIR="$SRC" TFE_PATH="$SRC/stdlib"
say "-- tests/gpu_equiv (every F_GPU op and its gradient, gpu:0 vs cpu:0)"
run 300 python3 "$SRC/tests/gpu_equiv.py" --keep "$BUILD/gpu_equiv.tfe" 2>&1 | tail -40 | tee -a "$RES"
say "-- tests/device_errors"
run 120 sh "$SRC/tests/device_errors.sh" 2>&1 | tail -10 | tee -a "$RES"
say "-- golden tests with TFE_DEVICE=gpu:0 (everything placed on the GPU; informational)"
# in parallel: each run pays CUDA's start-up
ls "$SRC"/tests/golden/*.tfe | TFE_DEVICE=gpu:0 TFE_GOLDEN_MODES=default xargs -P "$(nproc)" -I{} \
    sh -c 'if timeout 60 sh "$1/tests/run-golden" "$2" >/dev/null 2>&1; then echo "PASS $2"; else echo "FAIL $2"; fi' \
    sh "$SRC" {} >"$BUILD/golden_gpu.log"
pass=$(grep -c '^PASS' "$BUILD/golden_gpu.log") failn=$(grep -c '^FAIL' "$BUILD/golden_gpu.log")
failed=$(grep '^FAIL' "$BUILD/golden_gpu.log" | sed 's|.*/||; s|\.tfe$||' | tr '\n' ' ')
say "golden on gpu:0: $pass pass, $failn differ:$(echo "$failed" | cut -c1-600)"

# -- matmul TFLOP/s: fp32, tf32, bf16 at N^3, and bf16 at 8192^3 (the figure:
#    tfe at least 90% of cuBLAS's own bf16 throughput) ----------------------------
gcc -O2 -I"$CUDA/include" "$SRC/bench/gpu_matmul.c" -L"$CUDA/lib64" -Wl,-rpath,"$CUDA/lib64" \
    -lcublas -lcudart -o "$BUILD/gpu_matmul" 2>>"$RES" || say "bench/gpu_matmul.c did not build"
torch_ok=no
python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && torch_ok=yes
# mm MODE SIZE: one line each from tfe, cuBLAS and PyTorch
mm() {
    mode=$1 n=$2
    say "-- matmul ${n}x${n}x${n} $mode, TFLOP/s"
    dt=float32 tf=0
    [ "$mode" = bf16 ] && dt=bfloat16
    [ "$mode" = tf32 ] && tf=1
    cat >"$BUILD/mm.tfe" <<TFE
let a = cast(to(randn(($n, $n)), "gpu:0"), "$dt")
let b = cast(to(randn(($n, $n)), "gpu:0"), "$dt")
let c = a @ b
c = a @ b
let reps = 20
let t0 = time()
let i = 0
while i < reps { c = a @ b; i += 1 }
let dt = (time() - t0) / reps
print(format("TFE_$(echo "$mode" | tr a-z A-Z) {} {:.2f} {}", $n, 2.0 * $n * $n * $n / dt / 1e12, c.dtype))
TFE
    TFE_GPU_TF32=$tf run 120 ./tfe "$BUILD/mm.tfe" 2>&1 | tee -a "$RES"
    [ -x "$BUILD/gpu_matmul" ] && run 120 "$BUILD/gpu_matmul" "$n" 20 "$mode" 2>&1 | tee -a "$RES"
    if [ $torch_ok = yes ]; then
        run 120 python3 - "$n" "$mode" <<'PY' 2>&1 | tee -a "$RES"
import sys, time, torch
n, mode = int(sys.argv[1]), sys.argv[2]
torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
dt = torch.bfloat16 if mode == "bf16" else torch.float32
a = torch.randn(n, n, device="cuda", dtype=dt); b = torch.randn(n, n, device="cuda", dtype=dt)
for _ in range(3): a @ b
torch.cuda.synchronize(); t0 = time.time()
for _ in range(20): c = a @ b
torch.cuda.synchronize(); dt = (time.time() - t0) / 20
print(f"TORCH_{mode.upper()} {n} {2 * n**3 / dt / 1e12:.2f}")
PY
    else
        say "TORCH_$mode: torch with CUDA not importable"
    fi
}
mm fp32 "$N"
mm tf32 "$N"
mm bf16 "$N"
mm bf16 8192

# -- MLP training step (bench/mlp_step.tfe: 784-256-256-10, batch 64, eager) ------
say "-- MLP step, eager, seconds per step (median of 5)"
for dev in gpu:0 cpu:0; do
    TFE_DEVICE=$dev run 180 ./tfe "$SRC/bench/mlp_step.tfe" >"$BUILD/mlp_$dev.log" 2>&1
    med=$(awk '/SECONDS_PER_ITER/ {print $2}' "$BUILD/mlp_$dev.log" | sort -g | sed -n 3p)
    t="${med:-failed: $(tail -3 "$BUILD/mlp_$dev.log")} $(grep LOSS "$BUILD/mlp_$dev.log")"
    say "MLP_STEP_EAGER $dev $t"
done

[ -n "${OUT:-}" ] && mkdir -p "$OUT" && cp "$RES" "$OUT/gpu_results.txt" && cp "$BUILD/make.log" "$OUT/make.log"
rm -f "$RES"
