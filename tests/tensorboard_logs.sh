#!/bin/sh
# tensorboard_logs.sh — event files written by tfe's summary module read back by
# the tensorboard package (tests/tensorboard_logs.py). The Python used:
# $TFE_TB_PYTHON if set (.ci/run sets it to its venv's), else $TFE_PYTHON,
# else python3 (tests/env.sh's TFE_PYTHON3). Without the tensorboard package
# there the test is skipped (77).
: "${TFE:?TFE is not set (run through make check)}"
: "${TFE_SRCDIR:?TFE_SRCDIR is not set (run through make check)}"
has_tb() { "$1" -c 'import tensorboard.backend.event_processing.event_accumulator, numpy' >/dev/null 2>&1; }
for py in "${TFE_TB_PYTHON:-}" "${TFE_PYTHON:-}" "${TFE_PYTHON3:-python3}"; do
    [ -n "$py" ] && has_tb "$py" && exec "$py" "$TFE_SRCDIR/tests/tensorboard_logs.py" "$@"
done
echo "tensorboard: no Python here can import tensorboard (pip install tensorboard); skipping"
exit 77
