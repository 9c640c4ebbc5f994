#!/bin/sh
# onnx_export.sh — export() read back by the onnx package and run by
# onnxruntime (tests/onnx_export.py). The Python used: $TFE_ONNX_PYTHON if
# set (.ci/run sets it to its venv's), else $TFE_PYTHON, else python3. Without
# onnx and onnxruntime there the test is skipped (77).
: "${TFE:?TFE is not set (run through make check)}"
: "${TFE_SRCDIR:?TFE_SRCDIR is not set (run through make check)}"
has_onnx() { "$1" -c 'import onnx, onnxruntime, numpy' >/dev/null 2>&1; }
for py in "${TFE_ONNX_PYTHON:-}" "${TFE_PYTHON:-}" "${TFE_PYTHON3:-python3}"; do
    [ -n "$py" ] && has_onnx "$py" && exec "$py" "$TFE_SRCDIR/tests/onnx_export.py" "$@"
done
echo "onnx_export: no Python here can import onnx and onnxruntime (pip install onnx onnxruntime); skipping"
exit 77
