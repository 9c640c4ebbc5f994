#!/bin/sh
# docs_examples.sh — every ```tfe block of README.md and docs/*.md runs, and
# its ```output / ```stderr blocks must match exactly; and docs/reference.md
# names every built-in and stdlib function (tests/docs_examples.py has the
# rules; docs/testing.md, "Code blocks in the docs", the convention). The
# harness exports TFE, TFE_SRCDIR and TFE_PYTHON3 (tests/env.sh); without
# python3 the test is skipped (exit 77). NumPy is not needed.
if [ -z "$TFE_PYTHON3" ] || ! "$TFE_PYTHON3" -c 'import sys' >/dev/null 2>&1; then
    echo "docs_examples: python3 not found (TFE_PYTHON3=${TFE_PYTHON3:-unset}); skipping"
    exit 77
fi
: "${TFE:?TFE is not set (run through make check)}"
: "${TFE_SRCDIR:?TFE_SRCDIR is not set (run through make check)}"
exec "$TFE_PYTHON3" "$TFE_SRCDIR/tests/docs_examples.py" "$@"
