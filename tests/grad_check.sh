#!/bin/sh
# grad_check.sh — runs the finite-difference gradient test (tests/grad_check.py)
# under make check. The harness exports TFE, TFE_SRCDIR, TFE_PYTHON3 and
# TFE_HAVE_NUMPY (tests/env.sh); without NumPy the test is skipped (exit 77).
if [ "$TFE_HAVE_NUMPY" != yes ]; then
    echo "grad_check: python3 with NumPy not found (TFE_HAVE_NUMPY=${TFE_HAVE_NUMPY:-unset}); skipping"
    exit 77
fi
: "${TFE:?TFE is not set (run through make check)}"
: "${TFE_SRCDIR:?TFE_SRCDIR is not set (run through make check)}"
exec "$TFE_PYTHON3" "$TFE_SRCDIR/tests/grad_check.py" "$@"
