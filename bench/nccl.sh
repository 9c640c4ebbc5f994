#!/bin/sh
# bench/nccl.sh — the NCCL check for a machine with an NVIDIA GPU
# (docs/distributed.md, "Devices: NCCL"): configure with CUDA and NCCL into a
# build dir, build, then run the collectives on device memory
# (tests/unit/test_devcoll: every dtype and reduction through NCCL, then
# through the host), the collective ops on gpu:0 against cpu:0
# (tests/gpu_nccl.sh: one process, mpirun -np 1, and one rank per GPU when
# there are several), and time a 64 MiB float32 allreduce (sum and mean) on
# gpu:0 through NCCL and through the host. About 2-4 minutes with the build.
# Results also go to $OUT/nccl_results.txt when OUT is set.
# Usage: sh bench/nccl.sh [BUILD_DIR]     (CUDA=/usr/local/cuda by default)
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-/tmp/tfe-nccl-build}
CUDA=${CUDA:-/usr/local/cuda}
RES=$(mktemp)
say() { echo "$*" | tee -a "$RES"; }
finish() {
    if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && cp "$RES" "$OUT/nccl_results.txt"; fi
    rm -f "$RES"
    exit "$1"
}

say "== tfe NCCL check $(date -u +%Y-%m-%dT%H:%MZ)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$RES"
[ -x "$SRC/configure" ] || (cd "$SRC" && autoreconf -i) || finish 1
mkdir -p "$BUILD" && cd "$BUILD" || finish 1
if ! timeout 300 "$SRC/configure" -q --with-cuda="$CUDA" --with-nccl >configure.log 2>&1; then
    say "configure failed (--with-nccl: NCCL must be in the toolkit):"; tail -20 configure.log | tee -a "$RES"; finish 1
fi
say "configure: $(grep -oE 'define (HAVE_MPI|HAVE_CUDA|HAVE_NCCL) 1' config.h | sed 's/define //; s/ 1//' | tr '\n' ' ')"
if ! timeout 400 make -j"$(nproc)" >make.log 2>&1 || ! timeout 120 make tests/unit/test_devcoll >>make.log 2>&1; then
    say "build failed:"; grep -E "error|Error" make.log | head -20 | tee -a "$RES"; finish 1
fi
say "build: ok ($BUILD); tfe links: $(readelf -d tfe | grep -o 'lib[a-z]*nccl[^]]*' || echo 'no libnccl (loaded at run time)')"
devs=$(./tfe -e 'print(devices())' 2>&1)
say "devices: $devs"

. ./tests/env.sh
export TFE TFE_SRCDIR TFE_PATH TFE_MPIRUN
fail=0
say "-- tests/unit/test_devcoll (device buffers: NCCL, then the host path)"
timeout 120 ./tests/unit/test_devcoll >devcoll.log 2>&1 || fail=1
tail -20 devcoll.log | tee -a "$RES"
case "$devs" in *'"gpu:0"'*) ;; *) say "== no GPU here: only the build and test_devcoll (on the pretend GPU) ran"; finish 1 ;; esac
say "-- tests/gpu_nccl.sh (the collective ops on gpu:0 against cpu:0)"
timeout 600 sh "$SRC/tests/gpu_nccl.sh" >gpu_nccl.log 2>&1
rc=$?
[ $rc -eq 0 ] || fail=1
tail -40 gpu_nccl.log | tee -a "$RES"
say "gpu_nccl.sh: exit $rc (77: skipped)"

say "-- 64 MiB float32 allreduce on gpu:0, one process, ms per call (after a first call that starts NCCL)"
cat >bench_nccl.tfe <<'TFE'
import dist
let x = to(randn((4096, 4096)), "gpu:0")
let t0 = time()
let y = dist.allreduce(x)
let first = time() - t0
for op in ("sum", "mean") {
    y = dist.allreduce(x, op=op)
    let reps = 10
    t0 = time()
    let i = 0
    while i < reps { y = dist.allreduce(x, op=op); i += 1 }
    print(format("{} {}: {:.3f} ms (first call {:.1f} ms)", "@PATH@", op, (time() - t0) / reps * 1000, first * 1000))
}
TFE
for p in NCCL host; do
    v=1
    [ $p = host ] && v=0
    sed "s/@PATH@/$p/" bench_nccl.tfe >bench_nccl_$p.tfe
    TFE_NCCL=$v timeout 120 ./tfe bench_nccl_$p.tfe 2>&1 | tail -5 | tee -a "$RES"
done
say "== done: $([ $fail = 0 ] && echo ok || echo FAILED)"
finish $fail
