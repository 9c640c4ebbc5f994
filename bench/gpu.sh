#!/bin/sh
# bench/gpu.sh — the GPU check for a machine with an NVIDIA GPU (docs/gpu.md): configure with CUDA into a build dir, build, run the GPU tests,
# then print matmul TFLOP/s (fp32, tf32, bf16; bf16 also at 8192^3) for tfe,
# cuBLAS called directly (bench/gpu_matmul.c) and PyTorch (when importable),
# and the MLP and CNN training steps, eager and staged, on gpu:0 against
# PyTorch eager and torch.compile on the same GPU. About 5-8 minutes on an
# H200. Results also go to $OUT/gpu_results.txt when OUT is set.
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

# -- training steps (the figures: tfe staged <= PyTorch eager, tfe eager <=
#    1.5x PyTorch eager, on the same GPU). Seconds per step, median of 5. ----
# MLP 784-256-256-10 batch 64 (bench/mlp_step*.tfe, bench/mlp_step.py) and a
# LeNet-5-style CNN on 28x28x1 batch 64 (bench/cnn_step.tfe, run staged with
# --stage-all; bench/cnn_step.py). PyTorch: BENCH_TORCH_DEVICE=cuda, and
# BENCH_TORCH_COMPILE=1 for torch.compile (bench/benchlib.py).
median() { awk '/SECONDS_PER_ITER/ {print $2}' "$1" | sort -g | sed -n 3p; }
# step LABEL LOG CMD...: run CMD (time-limited), say LABEL and its median
step() {
    label=$1 log=$BUILD/$2; shift 2
    run 300 "$@" >"$log" 2>&1
    m=$(median "$log")
    say "$label ${m:-failed: $(tail -2 "$log" | tr '\n' ' ')} $(grep LOSS "$log")"
}
say "-- training steps, seconds per step (median of 5)"
step "MLP_TFE_EAGER gpu:0" mlp_eager.log env TFE_DEVICE=gpu:0 ./tfe "$SRC/bench/mlp_step.tfe"
step "MLP_TFE_STAGED gpu:0" mlp_staged.log env TFE_DEVICE=gpu:0 ./tfe "$SRC/bench/mlp_step_staged.tfe"
step "CNN_TFE_EAGER gpu:0" cnn_eager.log env TFE_DEVICE=gpu:0 ./tfe "$SRC/bench/cnn_step.tfe"
step "CNN_TFE_STAGED gpu:0" cnn_staged.log env TFE_DEVICE=gpu:0 ./tfe --stage-all "$SRC/bench/cnn_step.tfe"
step "MLP_TFE_EAGER cpu:0" mlp_cpu.log env TFE_DEVICE=cpu:0 ./tfe "$SRC/bench/mlp_step.tfe"
if [ $torch_ok = yes ]; then
    for m in mlp cnn; do
        M=$(echo $m | tr a-z A-Z)
        step "${M}_TORCH_EAGER cuda" ${m}_torch.log env BENCH_TORCH_DEVICE=cuda \
            python3 "$SRC/bench/${m}_step.py" --lib torch
        step "${M}_TORCH_COMPILE cuda" ${m}_torch_compile.log env BENCH_TORCH_DEVICE=cuda BENCH_TORCH_COMPILE=1 \
            python3 "$SRC/bench/${m}_step.py" --lib torch
    done
else
    say "PyTorch with CUDA not importable: no peer figures for the training steps"
fi

[ -n "${OUT:-}" ] && mkdir -p "$OUT" && cp "$RES" "$OUT/gpu_results.txt" && cp "$BUILD/make.log" "$OUT/make.log"
rm -f "$RES"
