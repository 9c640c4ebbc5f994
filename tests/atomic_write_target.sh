#!/bin/sh
# tests/atomic_write_target.sh — the atomic writer (temp file, fsync, rename:
# write_text, save_npy, save, export, plot, a profile's save) writes where open(path, "w")
# would, and keeps what a plain write keeps (docs/builtins.md, write_text):
#  - a file it replaces keeps its permissions (a 0600 file became 0644);
#  - a symlink stays a link and its target gets the new contents (the
#    rename replaced the link with a regular file), a relative, chained or
#    dangling link too;
#  - a new file gets 0666 less the umask, as open() gives;
#  - a loop of links is an error that names the path.
dir=$(mktemp -d "${TMPDIR:-/tmp}/atomic_target.XXXXXX") || exit 99
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 99
status=0
fail() { echo "FAIL: $*"; status=1; }
mode() { stat -c %a "$1"; }

# permissions of the file replaced, by three of the writers
echo old >p.txt
chmod 600 p.txt
"$TFE" -e 'write_text("p.txt", "new")' || fail "write_text failed"
[ "$(mode p.txt)" = 600 ] || fail "write_text made a 0600 file $(mode p.txt)"
[ "$(cat p.txt)" = new ] || fail "write_text did not write p.txt"
"$TFE" -e 'save_npy("p.npy", ones((2,)))' && chmod 640 p.npy &&
    "$TFE" -e 'save_npy("p.npy", zeros((3,)))' || fail "save_npy failed"
[ "$(mode p.npy)" = 640 ] || fail "save_npy made a 0640 file $(mode p.npy)"
"$TFE" -e 'save("m.safetensors", {w: ones((2,))})' && chmod 604 m.safetensors &&
    "$TFE" -e 'save("m.safetensors", {w: zeros((2,))})' || fail "save failed"
[ "$(mode m.safetensors)" = 604 ] || fail "save made a 0604 file $(mode m.safetensors)"
# the profiler's trace (util/profile.c had a writer of its own)
echo old >t.json
chmod 600 t.json
"$TFE" -e 'with profile() as p { sum(ones((4,))) }
p.save("t.json")' || fail "profile save failed"
[ "$(mode t.json)" = 600 ] || fail "the profiler's save made a 0600 file $(mode t.json)"
grep -q traceEvents t.json || fail "the profiler's save did not write t.json"

# a new file: the umask's default
(umask 022 && "$TFE" -e 'write_text("n1.txt", "x")') || fail "write_text of a new file failed"
[ "$(mode n1.txt)" = 644 ] || fail "a new file under umask 022 is $(mode n1.txt), not 644"
(umask 077 && "$TFE" -e 'write_text("n2.txt", "x")') || fail "write_text of a new file failed"
[ "$(mode n2.txt)" = 600 ] || fail "a new file under umask 077 is $(mode n2.txt), not 600"

# symlinks: relative, in another folder, chained, dangling
mkdir sub
echo old >sub/target.txt
chmod 640 sub/target.txt
ln -s sub/target.txt link.txt
ln -s link.txt link2.txt
"$TFE" -e 'write_text("link2.txt", "through links")' || fail "write_text through a chain of links failed"
[ -L link.txt ] && [ -L link2.txt ] || fail "writing through a symlink replaced the link with a file"
[ "$(cat sub/target.txt)" = "through links" ] || fail "the link's target was not written: $(cat sub/target.txt)"
[ "$(mode sub/target.txt)" = 640 ] || fail "the link's target lost its mode: $(mode sub/target.txt)"
ln -s target.txt sub/rel.txt # relative to the link's own folder
"$TFE" -e 'save_npy("sub/rel.txt", ones((1,)))' || fail "save_npy through sub/rel.txt failed"
[ -L sub/rel.txt ] || fail "save_npy replaced the link sub/rel.txt"
head -c 6 sub/target.txt | grep -q NUMPY || fail "save_npy through sub/rel.txt did not write sub/target.txt"
ln -s sub/new.txt dangling.txt
"$TFE" -e 'write_text("dangling.txt", "made")' || fail "write_text through a dangling link failed"
[ -L dangling.txt ] && [ "$(cat sub/new.txt)" = made ] || fail "a dangling link's target was not created"
ls sub | grep -q tmp && fail "a temp file was left behind: $(ls sub)"

# a loop of links: an error naming the path, nothing written
ln -s loop1 loop2
ln -s loop2 loop1
out=$("$TFE" -e 'write_text("loop1", "x")' 2>&1) && fail "writing through a loop of links succeeded"
echo "$out" | grep -q "cannot write 'loop1': Too many levels of symbolic links" ||
    fail "a loop of links: $out"

[ $status = 0 ] && echo "ok: modes kept, links followed"
exit $status
