#!/bin/sh
# repl_pty.sh — the REPL through a pseudo-terminal (tests/repl_pty.py):
# multi-line entries, errors and their entry numbers, Ctrl-C, :help and
# help(), echo, if/else across lines, history of whole entries, completion,
# :reload. Needs python3.
: "${TFE:?TFE is not set (run through make check)}"
: "${TFE_SRCDIR:=$(dirname "$0")/..}"
py=${TFE_PYTHON3:-}
if [ -z "$py" ] || [ "$py" = no ] || ! command -v "$py" >/dev/null 2>&1; then
    py=$(command -v python3 2>/dev/null) || py=
fi
if [ -z "$py" ]; then
    echo "repl_pty: python3 not found; skipping"
    exit 77
fi
exec "$py" "$TFE_SRCDIR/tests/repl_pty.py" "$TFE"
