#!/bin/sh
# tests/atomic_save.sh — killing tfe with SIGKILL in the middle of save()
# leaves the previous checkpoint intact (docs/builtins.md: temp file + fsync +
# rename). A tfe process rewrites one file over and over with a 24 MB model
# whose every element is the generation number; it is killed at varied
# moments, and after each kill the file must load and be one whole
# generation (all elements equal, matching the small tensor saved with it).
dir=$(mktemp -d "${TMPDIR:-/tmp}/atomic_save.XXXXXX") || exit 99
trap 'rm -rf "$dir"' EXIT
ck="$dir/model.safetensors"
cat >"$dir/first.tfe" <<'TFE'
save(argv[0], {big: zeros((6000000,)), gen: zeros((1,))})
TFE
cat >"$dir/writer.tfe" <<'TFE'
let g = 1.0
while true {
    let m = {big: ones((6000000,)) * g, gen: tensor([g])}
    save(argv[0], m)
    g += 1.0
}
TFE
cat >"$dir/check.tfe" <<'TFE'
let m = load(argv[0])
let g = m.gen[0]
assert(all(m.big == g), "a checkpoint mixes two generations")
print(int(g))
TFE
"$TFE" "$dir/first.tfe" "$ck" || { echo "FAIL: the first save failed"; exit 1; }
status=0
kills=0
maxgen=0
for delay in 0.3 0.45 0.6 0.75 0.9 1.1; do
    "$TFE" "$dir/writer.tfe" "$ck" >/dev/null 2>&1 &
    pid=$!
    sleep "$delay"
    kill -9 "$pid" 2>/dev/null && kills=$((kills + 1))
    wait "$pid" 2>/dev/null
    if ! gen=$("$TFE" "$dir/check.tfe" "$ck" 2>&1); then
        echo "FAIL: after SIGKILL at ${delay}s the checkpoint does not load whole:"
        echo "$gen"
        status=1
    else
        echo "ok: killed at ${delay}s, the file holds generation $gen"
        [ "$gen" -gt "$maxgen" ] && maxgen=$gen
    fi
done
# the writer must have got somewhere, or nothing was tested
[ "$kills" -gt 0 ] && [ "$maxgen" -gt 0 ] || { echo "FAIL: the writer never completed a save before it was killed"; status=1; }
exit $status
