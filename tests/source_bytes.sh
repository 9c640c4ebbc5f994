#!/bin/sh
# tests/source_bytes.sh — source files with bytes a golden file cannot hold
# as text (made here with printf): Python's universal newlines (CRLF and a
# lone CR end a line: a string literal over two lines of a CRLF file kept
# the '\r', the echoed source line too, and a file of CR line ends was one
# line), a UTF-8 byte order mark at the start (it was "unexpected
# character"), and a NUL byte inside a string literal (it was "unterminated
# string" at the opening quote).
dir=$(mktemp -d "${TMPDIR:-/tmp}/source_bytes.XXXXXX") || exit 99
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 99
status=0
fail() { echo "FAIL: $*"; status=1; }
# expect FILE STDOUT STDERR: the run's exact output
expect() {
    out=$("$TFE" "$1" 2>err.txt)
    [ "$out" = "$2" ] || fail "$1: stdout '$out', expected '$2'"
    [ "$(cat err.txt)" = "$3" ] || fail "$1: stderr '$(cat err.txt)', expected '$3'"
}
printf '\357\273\277print(1)\r\nlet s = "a\r\nb"\r\nprint(len(s), s == "a\\nb")\rprint(2)\r\n' >crlf.tfe
expect crlf.tfe "$(printf '1\n3 true\n2')" ""
printf 'print(1)\r\nprint(1 +)\r\n' >crlf_err.tfe
expect crlf_err.tfe "" "$(printf "crlf_err.tfe:2:10: error: expected expression before ')'\n 2 | print(1 +)\n   |          ^")"
printf 'let s = "abc\000def"\nprint(s)\n' >nul.tfe
expect nul.tfe "" "$(printf 'nul.tfe:1:13: error: unexpected byte 0x00 in a string (write \\0 for a NUL)\n 1 | let s = "abc\n   |             ^')"
printf '\357\273\277' >bom_only.tfe
expect bom_only.tfe "" ""
exit $status
