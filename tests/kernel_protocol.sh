#!/bin/sh
# kernel_protocol.sh — tfe --kernel driven over a pipe, no Jupyter needed
# (tests/kernel_protocol.py; the protocol is in docs/notebooks.md).
: "${TFE:?TFE is not set (run through make check)}"
: "${TFE_SRCDIR:?TFE_SRCDIR is not set (run through make check)}"
exec "${TFE_PYTHON3:-python3}" "$TFE_SRCDIR/tests/kernel_protocol.py" "$@"
