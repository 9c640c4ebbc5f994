#!/bin/sh
# tests/examples.sh — every program in examples/ runs to the end without an
# error (their output is shown in the docs; golden tests pin behaviour).
status=0
for f in "$TFE_SRCDIR"/examples/*.tfe; do
    if ! out=$(cd "$TFE_SRCDIR/examples" && timeout 120 "$TFE" "$(basename "$f")" 2>&1 >/dev/null); then
        echo "FAIL: $f exited with an error:"; echo "$out"; status=1
    elif [ -n "$out" ]; then
        echo "FAIL: $f wrote to stderr:"; echo "$out"; status=1
    else
        echo "ok: $f"
    fi
done
exit $status
