#!/bin/sh
# ops_numpy.sh — runs the NumPy-oracle op test (tests/ops_numpy.py) under make
# check. The harness exports TFE, TFE_SRCDIR, TFE_PYTHON3 and TFE_HAVE_NUMPY
# (tests/env.sh); without NumPy the test is skipped (exit 77).
if [ "$TFE_HAVE_NUMPY" != yes ]; then
    echo "ops_numpy: python3 with NumPy not found (TFE_HAVE_NUMPY=${TFE_HAVE_NUMPY:-unset}); skipping"
    exit 77
fi
: "${TFE:?TFE is not set (run through make check)}"
: "${TFE_SRCDIR:?TFE_SRCDIR is not set (run through make check)}"
exec "$TFE_PYTHON3" "$TFE_SRCDIR/tests/ops_numpy.py" "$@"
