#!/bin/sh
# conv_property.sh — runs the staged conv-net property test
# (tests/conv_property.py) under make check: random small conv/batch-norm/
# residual nets, an inference function and a whole training step staged,
# must print the same, bit for bit, optimized and planned, with
# --no-optimize and with --eager. The harness exports TFE and TFE_PYTHON3
# (tests/env.sh); without python3 the test is skipped (exit 77).
if [ -z "$TFE_PYTHON3" ] || ! "$TFE_PYTHON3" -c 'import sys' >/dev/null 2>&1; then
    echo "conv_property: python3 not found (TFE_PYTHON3=${TFE_PYTHON3:-unset}); skipping"
    exit 77
fi
: "${TFE:?TFE is not set (run through make check)}"
: "${TFE_SRCDIR:?TFE_SRCDIR is not set (run through make check)}"
exec "$TFE_PYTHON3" "$TFE_SRCDIR/tests/conv_property.py" "$@"
