#!/bin/sh
# stage_property.sh — runs the staged control-flow property test
# (tests/stage_property.py) under make check: random programs of @staged
# functions with graph loops and conds, tapes and variable updates inside
# them, run optimized, with --no-optimize, --eager and --stage-all, must
# print the same, gradients bit for bit too (--grad-rtol 0 --grad-atol 0:
# the default seeds agree exactly; see the script's docstring).
# The harness exports TFE, TFE_SRCDIR and TFE_PYTHON3 (tests/env.sh);
# without python3 the test is skipped (exit 77). NumPy is not needed.
if [ -z "$TFE_PYTHON3" ] || ! "$TFE_PYTHON3" -c 'import sys' >/dev/null 2>&1; then
    echo "stage_property: python3 not found (TFE_PYTHON3=${TFE_PYTHON3:-unset}); skipping"
    exit 77
fi
: "${TFE:?TFE is not set (run through make check)}"
: "${TFE_SRCDIR:?TFE_SRCDIR is not set (run through make check)}"
exec "$TFE_PYTHON3" "$TFE_SRCDIR/tests/stage_property.py" --grad-rtol 0 --grad-atol 0 "$@"
