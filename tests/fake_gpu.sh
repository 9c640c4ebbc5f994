#!/bin/sh
# tests/fake_gpu.sh — the device layer without a GPU: TFE_FAKE_GPU=1 makes
# gpu:0 a device in host memory with no kernels of its own (docs/gpu.md), and
# TFE_DEVICE=gpu:0 puts every new tensor there, so placement, copies, the CPU
# fallback, gradients and staged calls on a device all run. These golden
# programs print values only (no graph constants, no checkpoints of device
# tensors), so they must give their usual output. stage_index_data caught a
# staged gradient that the tape had moved between devices with an untraced
# copy (stale values on every later call).
status=0
for t in stage_index_data stage_grad_basic stdlib_optim_sgd stdlib_optim_adam stdlib_nn_train \
         stdlib_nn_rnn stage_grad_second stage_grad_step stage_grad_if half_precision \
         lib_ops linalg_basic linalg_grad; do
    f="$TFE_SRCDIR/tests/golden/$t.tfe"
    [ -f "$f" ] || continue
    if out=$(TFE_FAKE_GPU=1 TFE_DEVICE=gpu:0 sh "$TFE_SRCDIR/tests/run-golden" "$f" 2>&1); then
        echo "ok: $t on a pretend gpu:0"
    else
        echo "FAIL: $t on a pretend gpu:0"; echo "$out" | head -30; status=1
    fi
done
# the equivalence test's program (every F_GPU op, its cases and gradients,
# half precision included) against the pretend device: proves the generated
# program runs and covers every op before a real GPU runs it
py=${TFE_PYTHON3:-python3}
if command -v "$py" >/dev/null 2>&1; then
    if out=$(TFE_FAKE_GPU=1 "$py" "$TFE_SRCDIR/tests/gpu_equiv.py" 2>&1); then
        echo "ok: $(echo "$out" | tail -1)"
    else
        echo "FAIL: gpu_equiv on a pretend gpu:0"; echo "$out" | grep -v '^OK' | head -30; status=1
    fi
fi
exit $status
