#!/bin/sh
# stage_grad_orders.sh — runs a fast slice of the property test of second,
# third and fourth order gradients through cached staged calls with traced
# ifs (tests/stage_grad_orders.py): each program, run optimized, with
# --no-optimize, --eager and --stage-all, must print --eager's output bit
# for bit, gradients included (see the script's docstring). The harness
# exports TFE, TFE_SRCDIR and TFE_PYTHON3 (tests/env.sh); without python3
# the test is skipped (exit 77). NumPy is not needed.
if [ -z "$TFE_PYTHON3" ] || ! "$TFE_PYTHON3" -c 'import sys' >/dev/null 2>&1; then
    echo "stage_grad_orders: python3 not found (TFE_PYTHON3=${TFE_PYTHON3:-unset}); skipping"
    exit 77
fi
: "${TFE:?TFE is not set (run through make check)}"
: "${TFE_SRCDIR:?TFE_SRCDIR is not set (run through make check)}"
# SEEDS: the first programs of the default range (every style, order and
# kind of condition shows up in them).
SEEDS=$(seq -s, 1 30)
exec "$TFE_PYTHON3" "$TFE_SRCDIR/tests/stage_grad_orders.py" --seeds "$SEEDS" "$@"
