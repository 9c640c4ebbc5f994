#!/bin/sh
# gpu_equiv.sh — runs the CPU/GPU equivalence test (tests/gpu_equiv.py) under
# make check; it skips (exit 77) when devices() lists no GPU (docs/gpu.md).
: "${TFE:?TFE is not set (run through make check)}"
: "${TFE_SRCDIR:?TFE_SRCDIR is not set (run through make check)}"
py=${TFE_PYTHON3:-python3}
command -v "$py" >/dev/null 2>&1 || { echo "gpu_equiv: no python3; skipping"; exit 77; }
exec "$py" "$TFE_SRCDIR/tests/gpu_equiv.py" "$@"
