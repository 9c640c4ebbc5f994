#!/bin/sh
# safetensors_interop.sh — checkpoints written by tfe load in Python's
# safetensors package and the other way round, and corrupt files give errors
# (tests/safetensors_interop.py). The Python used: $TFE_PYTHON if set, else
# bench/.venv/bin/python when it has safetensors, else python3 (tests/env.sh's
# TFE_PYTHON3). Without safetensors and NumPy there the test is skipped (77).
: "${TFE:?TFE is not set (run through make check)}"
: "${TFE_SRCDIR:?TFE_SRCDIR is not set (run through make check)}"
has_st() { "$1" -c 'import safetensors.numpy, numpy' >/dev/null 2>&1; }
py=${TFE_PYTHON:-}
if [ -z "$py" ]; then
    venv=$TFE_SRCDIR/bench/.venv/bin/python
    if [ -x "$venv" ] && has_st "$venv"; then
        py=$venv
    else
        py=${TFE_PYTHON3:-python3}
    fi
fi
if ! has_st "$py"; then
    echo "safetensors_interop: '$py' cannot import safetensors and numpy; skipping"
    exit 77
fi
exec "$py" "$TFE_SRCDIR/tests/safetensors_interop.py" "$@"
