#!/bin/sh
# tests/examples.sh — every program in examples/ runs to the end without an
# error, in its quick mode (TFE_QUICK=1: fewer steps, same code paths; each
# example that checks a figure, e.g. an accuracy, checks it itself and fails
# with an error when it falls short). Progress bars off (TFE_PROGRESS=0).
status=0
export TFE_QUICK=1 TFE_PROGRESS=0
for f in "$TFE_SRCDIR"/examples/*.tfe; do
    if ! out=$(cd "$TFE_SRCDIR/examples" && timeout "${TFE_EXAMPLE_TIMEOUT:-120}" "$TFE" "$(basename "$f")" 2>&1 >/dev/null); then
        echo "FAIL: $f exited with an error:"; echo "$out"; status=1
    elif [ -n "$out" ]; then
        echo "FAIL: $f wrote to stderr:"; echo "$out"; status=1
    else
        echo "ok: $f"
    fi
done
exit $status
