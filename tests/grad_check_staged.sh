#!/bin/sh
# grad_check_staged.sh — the finite-difference gradient test again with every
# function staged (--stage-all) and called once before it is taped, so the
# taped call runs the cached graph: one tape entry whose backward is the
# graph's own backward graph (stage/grad.c). First and second order.
if [ "$TFE_HAVE_NUMPY" != yes ]; then
    echo "grad_check_staged: python3 with NumPy not found (TFE_HAVE_NUMPY=${TFE_HAVE_NUMPY:-unset}); skipping"
    exit 77
fi
: "${TFE:?TFE is not set (run through make check)}"
: "${TFE_SRCDIR:?TFE_SRCDIR is not set (run through make check)}"
exec "$TFE_PYTHON3" "$TFE_SRCDIR/tests/grad_check.py" --tfe-flag=--stage-all --warm "$@"
