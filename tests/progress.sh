#!/bin/sh
# tests/progress.sh — progress(iterable): the items `for` sees, the plain
# lines on a stderr that is not a terminal (one per 10%, with count, rate and
# ETA), silence with TFE_PROGRESS=0, nothing ever on stdout, and (with
# python3) the in-place bar on a terminal. The bar's times vary, so this is a
# script test rather than a golden one.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/progress.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

cat >"$tmp/items.tfe" <<'EOF'
# the same items as the bare iterable, for every kind `for` walks
for i in progress(range(2, 11, 3)) { print(i) }
for x in progress(list(1, "a", nil)) { print(x) }
for x in progress((4, 5)) { print(x) }
for row in progress([[1, 2], [3, 4]], label="rows") { print(row) }
for k in progress({a: 1, b: 2}) { print(k) }
for c in progress("hey") { print(c) }
for i in progress(range(0)) { print("never") }
for i in progress(range(10)) {
    if i == 2 { continue }
    if i == 4 { break }
    print(i)
}
fn first(n) {
    for i in progress(range(n)) { if i == 1 { return i } }
}
print(first(5))
let p = progress(range(2), label="again")
print(p)
for i in p { print(i) }
for i in p { print(i) }
for e in progress(range(2), label="epoch") {
    for b in progress(range(3), label="batch") { print(e, b) }
}
EOF
cat >"$tmp/items.expected" <<'EOF'
2
5
8
1
a
nil
4
5
[1, 2]
[3, 4]
a
b
h
e
y
0
1
3
1
<progress again over range>
0
1
0
1
0 0
0 1
0 2
1 0
1 1
1 2
EOF

# silent: stdout is the items, stderr empty, in every mode
for mode in "" --eager --stage-all; do
    TFE_PROGRESS=0 $TFE_TEST_WRAPPER "$TFE" $mode "$tmp/items.tfe" >"$tmp/out" 2>"$tmp/err" </dev/null ||
        fail "items.tfe $mode exited with $?"
    grep -v '^tfe: --stage-all: ' "$tmp/err" >"$tmp/err2"
    diff -u "$tmp/items.expected" "$tmp/out" || fail "items.tfe $mode: stdout differs"
    [ -s "$tmp/err2" ] && { fail "items.tfe $mode: TFE_PROGRESS=0 but stderr has:"; cat "$tmp/err2"; }
done

# not a terminal: the same stdout; on stderr plain lines only
"$TFE" "$tmp/items.tfe" >"$tmp/out" 2>"$tmp/err" </dev/null || fail "items.tfe (bar on) exited with $?"
diff -u "$tmp/items.expected" "$tmp/out" || fail "the bar changed stdout"
line='^([a-z]+: )?[ 1][ 0-9][0-9]% [0-9]+/[0-9]+ \[[0-9:]+<([0-9:]+|\?), ([0-9.]+ (it/s|s/it)|\? it/s)\]$'
if grep -Evq "$line" "$tmp/err"; then
    fail "stderr lines not in the plain format:"; grep -Ev "$line" "$tmp/err"
fi
cr=$(printf '\r')
grep -q "$cr" "$tmp/err" && fail "carriage return on a stderr that is not a terminal"

cat >"$tmp/ten.tfe" <<'EOF'
let s = 0
for i in progress(range(100), label="train") { s += i }
print(s)
for i in progress(range(100)) { if i == 45 { break } }
for i in progress(range(3), label="short") { }
EOF
"$TFE" "$tmp/ten.tfe" >"$tmp/out" 2>"$tmp/err" </dev/null || fail "ten.tfe exited with $?"
[ "$(cat "$tmp/out")" = 4950 ] || fail "ten.tfe: stdout is '$(cat "$tmp/out")', not 4950"
got=$(sed 's/ \[.*//' "$tmp/err")
want='train:  10% 10/100
train:  20% 20/100
train:  30% 30/100
train:  40% 40/100
train:  50% 50/100
train:  60% 60/100
train:  70% 70/100
train:  80% 80/100
train:  90% 90/100
train: 100% 100/100
 10% 10/100
 20% 20/100
 30% 30/100
 40% 40/100
 45% 45/100
short:  33% 1/3
short:  67% 2/3
short: 100% 3/3'
[ "$got" = "$want" ] || { fail "ten.tfe: plain lines differ:"; printf '%s\n--- wanted\n%s\n' "$got" "$want"; }
grep -Eq '^train: 100% 100/100 \[[0-9]{2}:[0-9]{2}<00:00, [0-9.]+ it/s\]$' "$tmp/err" ||
    fail "ten.tfe: the last line has no elapsed time, ETA 00:00 and rate"

# inside a function that --stage-all cannot stage: runs eagerly, same lines
cat >"$tmp/fn.tfe" <<'EOF'
fn train(n) {
    let s = 0
    for i in progress(range(n), label="fn") { s += i }
    return s
}
print(train(20))
EOF
"$TFE" --stage-all "$tmp/fn.tfe" >"$tmp/out" 2>"$tmp/err" </dev/null || fail "fn.tfe --stage-all exited with $?"
[ "$(cat "$tmp/out")" = 190 ] || fail "fn.tfe --stage-all: stdout '$(cat "$tmp/out")'"
[ "$(grep -c '^fn: ' "$tmp/err")" = 10 ] || { fail "fn.tfe --stage-all: not 10 bar lines:"; cat "$tmp/err"; }

# a terminal: redrawn in place with \r, cleared to the end of the line, one
# final newline; stdout (a pipe here) untouched
if [ -n "$TFE_PYTHON3" ] && "$TFE_PYTHON3" -c 'import pty' 2>/dev/null; then
    "$TFE_PYTHON3" - "$TFE" "$tmp/ten.tfe" <<'EOF' || fail "the bar on a terminal"
import os, pty, subprocess, sys
master, slave = pty.openpty()
p = subprocess.run([sys.argv[1], sys.argv[2]], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                   stderr=slave, timeout=60)
os.close(slave)
err = b""
while True:
    try:
        chunk = os.read(master, 65536)
    except OSError:
        break
    if not chunk:
        break
    err += chunk
text = err.decode("utf-8")
ok = (p.returncode == 0 and p.stdout == b"4950\n" and "\r" in text and "\x1b[K" in text
      and "\u2588" in text and "train: 100%|" in text and text.endswith("\n")
      and text.count("\n") == 3)
if not ok:
    print("terminal output:", repr(text[-400:]), "stdout:", repr(p.stdout), "rc", p.returncode)
    sys.exit(1)
EOF
else
    echo "SKIP: the terminal check (python3 with pty not found)"
fi

# print() during a bar on a terminal: stdout and stderr on one terminal, as
# in an interactive session. Each printed line must end up on a line of its
# own, whole, with the bar redrawn below it (tqdm.write's behaviour); the
# screen is rebuilt from the byte stream (\r, \n, ESC[K).
cat >"$tmp/print.tfe" <<'EOF'
for i in progress(range(5), label="train") {
    print("epoch", i, "loss", 0.5)
}
print("after")
for e in progress(range(2), label="outer") {
    print("outer", e)
    for b in progress(range(2), label="inner") { print("inner", e, b) }
}
EOF
if [ -n "$TFE_PYTHON3" ] && "$TFE_PYTHON3" -c 'import pty' 2>/dev/null; then
    "$TFE_PYTHON3" - "$TFE" "$tmp/print.tfe" <<'EOF' || fail "print() during a bar on a terminal"
import os, pty, re, subprocess, sys
master, slave = pty.openpty()
p = subprocess.Popen([sys.argv[1], sys.argv[2]], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
os.close(slave)
raw = b""
while True:
    try:
        chunk = os.read(master, 65536)
    except OSError:
        break
    if not chunk:
        break
    raw += chunk
p.wait(timeout=60)
text = raw.decode("utf-8")
screen, row, col = [""], 0, 0
i = 0
while i < len(text):
    if text.startswith("\x1b[K", i):
        screen[row] = screen[row][:col]; i += 3; continue
    ch = text[i]; i += 1
    if ch == "\r":
        col = 0
    elif ch == "\n":
        row += 1; col = 0
        if row == len(screen): screen.append("")
    else:
        line = screen[row].ljust(col)
        screen[row] = line[:col] + ch + line[col + 1:]; col += 1
screen = [l for l in screen if l]
bar = re.compile(r"^(train|outer|inner): +\d+%\|.{10}\| \d+/\d+ \[")
printed = [l for l in screen if not bar.match(l)]
want = [f"epoch {k} loss 0.5" for k in range(5)] + ["after", "outer 0", "inner 0 0", "inner 0 1",
        "outer 1", "inner 1 0", "inner 1 1"]
# the bars that finished are on lines of their own, after the lines printed during them
bars = [l.split(":")[0] + " " + l.split("|")[2].split()[0] for l in screen if bar.match(l)]
ok = (p.returncode == 0 and printed == want and screen[5].startswith("train: 100%|")
      and bars == ["train 5/5", "inner 2/2", "inner 2/2", "outer 2/2"])
if not ok:
    print("screen:", *screen, sep="\n  ")
    print("rc", p.returncode)
    sys.exit(1)
EOF
else
    echo "SKIP: print() during a bar (python3 with pty not found)"
fi

[ $status -eq 0 ] && echo "PASS: progress"
exit $status
