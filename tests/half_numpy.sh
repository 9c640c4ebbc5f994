#!/bin/sh
# half_numpy.sh — float16 and bfloat16 print their own shortest round-trip
# digits, and .npy files of float16 go both ways with NumPy
# (tests/half_numpy.py). The harness exports TFE, TFE_SRCDIR, TFE_PYTHON3 and
# TFE_HAVE_NUMPY (tests/env.sh); without NumPy the test is skipped (exit 77).
if [ "$TFE_HAVE_NUMPY" != yes ]; then
    echo "half_numpy: python3 with NumPy not found (TFE_HAVE_NUMPY=${TFE_HAVE_NUMPY:-unset}); skipping"
    exit 77
fi
: "${TFE:?TFE is not set (run through make check)}"
: "${TFE_SRCDIR:?TFE_SRCDIR is not set (run through make check)}"
exec "$TFE_PYTHON3" "$TFE_SRCDIR/tests/half_numpy.py" "$@"
