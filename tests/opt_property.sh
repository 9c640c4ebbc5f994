#!/bin/sh
# opt_property.sh — runs the optimizer property test (tests/opt_property.py)
# under make check: random programs of @staged functions, run optimized,
# with --no-optimize and with --eager, must print the same (see the script's
# docstring for the rules). The harness exports TFE, TFE_SRCDIR and
# TFE_PYTHON3 (tests/env.sh); without python3 the test is skipped (exit 77).
# NumPy is not needed.
if [ -z "$TFE_PYTHON3" ] || ! "$TFE_PYTHON3" -c 'import sys' >/dev/null 2>&1; then
    echo "opt_property: python3 not found (TFE_PYTHON3=${TFE_PYTHON3:-unset}); skipping"
    exit 77
fi
: "${TFE:?TFE is not set (run through make check)}"
: "${TFE_SRCDIR:?TFE_SRCDIR is not set (run through make check)}"
exec "$TFE_PYTHON3" "$TFE_SRCDIR/tests/opt_property.py" --exact "$@"
