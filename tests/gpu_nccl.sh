#!/bin/sh
# gpu_nccl.sh — collectives on GPU tensors (docs/distributed.md, "Devices:
# NCCL"): dist.allreduce (sum, mean, max, min), broadcast and allgather of
# every dtype, a transposed view, a 0-d tensor, a tuple and a gradient, with
# the tensors on DEVICE, must print exactly what the same program prints on
# cpu:0 (the CPU backend is the GPU's oracle), as one process and under
# mpirun, through NCCL and again through the host (TFE_NCCL=0). On a GPU in
# a build with NCCL it runs with TFE_NCCL=1 and checks that NCCL started
# (NCCL_DEBUG=VERSION); with several GPUs it also runs one rank per GPU and
# checks that ranks on different paths get an error, not a hang.
# Exits 77 (skip) when devices() has no DEVICE. TFE_FAKE_GPU=1 with gpu:0
# checks the test itself on the pretend GPU (tests/dev_coll.sh does).
# Usage: gpu_nccl.sh [DEVICE]      (default gpu:0)
: "${TFE:?TFE is not set (run through make check)}"
dev=${1:-gpu:0}
devs=$("$TFE" -e 'print(devices())' 2>&1)
case "$devs" in *"\"$dev\""*) ;; *) echo "gpu_nccl: no $dev here ($devs); skipping"; exit 77 ;; esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu_nccl.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
. "${TFE_SRCDIR:-$(dirname "$0")/..}/tests/mpi_env.sh" # Open MPI's leaks under ASan
real=yes
[ "${TFE_FAKE_GPU:-}" = 1 ] && real=no
ngpu=$(echo "$devs" | grep -o '"gpu:' | wc -l)
nccl=no # a real GPU in a build with NCCL: NCCL must run
[ $real = yes ] && grep -q '^#define HAVE_NCCL 1' "$(dirname "$TFE")/config.h" 2>/dev/null && nccl=yes

# Small dyadic values: every sum is exact in every dtype in any order (up to a
# few ranks), so the paths must agree bit for bit. Rank 0 prints.
cat >"$tmp/prog.tfe" <<'TFE'
import dist
let dev = "@DEV@"
let r = dist.rank()
let base = [[1.5, -2.25, 3.0], [0.125, 7.0, -0.5]]
fn show(label, y) {
    if r == 0 { print(label, y.dtype, y.shape, y.device == dev, to(y, "cpu:0")) }
}
for dt in ("float32", "float64", "float16", "bfloat16", "int32", "int64") {
    let x = to(cast(base * (r + 1) - r, dt), dev)
    for op in ("sum", "mean", "max", "min") {
        show(dt + " allreduce " + op, dist.allreduce(x, op=op))
    }
    show(dt + " broadcast 0", dist.broadcast(x, 0))
    show(dt + " broadcast last, a transposed view", dist.broadcast(x.T, dist.size() - 1))
    show(dt + " allgather", dist.allgather(x))
    show(dt + " allgather 0-d", dist.allgather(x[1, 1]))
}
let b = to(cast(base, "float32") > r, dev)
show("bool allreduce sum", dist.allreduce(b))
show("bool allreduce max", dist.allreduce(b, op="max"))
show("bool allgather", dist.allgather(b))
let t = dist.allreduce((to(cast(base, "float32"), dev), to([1, 2, r], dev)), op="sum")
show("tuple 0", t[0])
show("tuple 1", t[1])
let w = to(cast(base, "float32") + r, dev)
let g = grad(fn (v) => sum(dist.allreduce(v * w, op="mean") * w))(to(cast(base, "float32"), dev))
show("grad", g)
TFE
sed "s/@DEV@/$dev/" "$tmp/prog.tfe" >"$tmp/dev.tfe"
sed "s/@DEV@/cpu:0/" "$tmp/prog.tfe" >"$tmp/cpu.tfe"

mpirun_np() { # mpirun_np N CMD...: N ranks, each seeing its own GPU as gpu:0 on a machine with several
    n=$1
    shift
    if [ $real = yes ] && [ "$n" -gt 1 ]; then
        set -- sh -c 'CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK exec "$0" "$@"' "$@"
    fi
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 "$TFE_MPIRUN" --oversubscribe -np "$n" "$@"
}
fail=0
# check LABEL NP [VAR=VALUE...]: the program on dev as NP ranks (0: no mpirun)
# prints what it prints on cpu:0
check() {
    label=$1 np=$2
    shift 2
    if [ "$np" = 0 ]; then
        timeout 120 "$TFE" "$tmp/cpu.tfe" >"$tmp/want" 2>&1
        (export "$@" NCCL_DEBUG=VERSION; timeout 120 "$TFE" "$tmp/dev.tfe") >"$tmp/got" 2>&1
    else
        mpirun_np "$np" "$TFE" "$tmp/cpu.tfe" >"$tmp/want" 2>&1
        (export "$@" NCCL_DEBUG=VERSION; mpirun_np "$np" "$TFE" "$tmp/dev.tfe") >"$tmp/got" 2>&1
    fi
    rc=$?
    grep -v 'NCCL version' "$tmp/got" >"$tmp/got.data"
    if [ $rc -ne 0 ] || ! cmp -s "$tmp/want" "$tmp/got.data"; then
        echo "FAIL $label: $dev differs from cpu:0 (rc $rc):"
        diff "$tmp/want" "$tmp/got" | head -20
        fail=1
    elif [ $nccl = yes ] && [ "$*" = TFE_NCCL=1 ] && ! grep -q 'NCCL version' "$tmp/got"; then
        echo "FAIL $label: NCCL did not start (no 'NCCL version' line with NCCL_DEBUG=VERSION)"
        fail=1
    else
        echo "ok: $label ($(grep -c . "$tmp/want") lines)"
    fi
}
path=TFE_NCCL=
[ $nccl = yes ] && path=TFE_NCCL=1
check "one process, $dev" 0 $path
check "one process, $dev through the host" 0 TFE_NCCL=0
if [ -z "${TFE_MPIRUN:-}" ]; then
    echo "gpu_nccl: no mpirun (an MPI build's tests/env.sh sets TFE_MPIRUN): one process only"
else
    check "mpirun -np 1, $dev" 1 $path
    np=2
    [ $real = yes ] && np=$ngpu
    if [ "$np" -ge 2 ]; then
        check "mpirun -np $np, $dev" "$np" $path
        check "mpirun -np $np, $dev through the host" "$np" TFE_NCCL=0
        # rank 1 through the host, the others on the device: an error on every rank
        if [ $real = no ] || [ $nccl = yes ]; then
            OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 "$TFE_MPIRUN" --oversubscribe \
                -np 1 sh -c 'CUDA_VISIBLE_DEVICES=0 exec "$0" "$@"' "$TFE" "$tmp/dev.tfe" : \
                -np 1 sh -c 'CUDA_VISIBLE_DEVICES=1 TFE_NCCL=0 exec "$0" "$@"' "$TFE" "$tmp/dev.tfe" >"$tmp/mixed" 2>&1
            if grep -q 'dist.allreduce: devices differ across ranks: rank 0 has a GPU tensor (NCCL), rank 1 has' "$tmp/mixed"; then
                echo "ok: mixed paths are an error"
            else
                echo "FAIL mixed paths: no 'devices differ' error:"; head -20 "$tmp/mixed"; fail=1
            fi
        fi
    fi
fi
exit $fail
