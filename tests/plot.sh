#!/bin/sh
# tests/plot.sh — plot(xs, ys, path, ...) writes an SVG that an XML parser
# reads, with one path per series whose points map the data linearly onto
# the axes, ticks that cover the data, the title, axis labels and legend; the
# write is atomic (no temp file left). Also in a staged function, where plot
# is an effect that runs at every call. Needs python3 (skipped without).
if [ -z "$TFE_PYTHON3" ] || ! "$TFE_PYTHON3" -c 'import xml.etree.ElementTree' 2>/dev/null; then
    echo "SKIP: python3 not found"
    exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/plot.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
status=0

cat >"$tmp/plot.tfe" <<'EOF'
let steps = arange(1, 21)
let loss = 2.0 / steps
plot(steps, loss, "one.svg", title="loss <train> & co", xlabel="step", ylabel="loss")
plot(nil, list(list(3, 1, 2), [0.5, 0.25, 4.0]), "two.svg", labels=("a", "b"))
plot(linspace(-1, 1, 5), [[1.0, 0.0, 0.0 / 0.0, 0.0, 1.0], [-3, -2, -1, 0, 1]], "rows.svg")
plot((0, 1), (7, 7), "flat.svg")
@staged
fn step(i) {
    plot(nil, [i, i * 2, i * 3], "staged.svg")
    return i + 1
}
let i = 1
while i < 4 { i = step(i) }
print("done")
EOF
for mode in "" --eager --stage-all; do
    rm -f "$tmp"/*.svg
    out=$(cd "$tmp" && $TFE_TEST_WRAPPER "$TFE" $mode plot.tfe 2>"$tmp/err" </dev/null)
    rc=$?
    grep -v '^tfe: --stage-all: ' "$tmp/err" >"$tmp/err2"
    if [ $rc -ne 0 ] || [ "$out" != done ] || [ -s "$tmp/err2" ]; then
        echo "FAIL [$mode]: plot.tfe: status $rc, stdout '$out', stderr:"; cat "$tmp/err2"; status=1; continue
    fi
    # shellcheck disable=SC2086
    if ! "$TFE_PYTHON3" - "$tmp" <<'EOF'; then
import math, os, sys, xml.etree.ElementTree as ET
d = sys.argv[1]
NS = "{http://www.w3.org/2000/svg}"
bad = []

def check(name, xs, series, title=None, xlabel=None, ylabel=None, labels=None):
    root = ET.parse(os.path.join(d, name)).getroot()
    if root.tag != NS + "svg":
        bad.append(f"{name}: root is {root.tag}")
        return
    paths = [p for p in root.iter(NS + "path") if p.get("class") == "series"]
    if len(paths) != len(series):
        bad.append(f"{name}: {len(paths)} series paths, expected {len(series)}")
        return
    texts = {t.get("class"): "".join(t.itertext()) for t in root.iter(NS + "text") if t.get("class")}
    for cls, want in (("title", title), ("xlabel", xlabel), ("ylabel", ylabel)):
        if texts.get(cls) != want:
            bad.append(f"{name}: {cls} {texts.get(cls)!r}, expected {want!r}")
    legend = ["".join(t.itertext()) for g in root.iter(NS + "g") if g.get("class") == "legend"
              for t in g.iter(NS + "text")]
    if legend != (labels or []):
        bad.append(f"{name}: legend {legend}, expected {labels}")
    # tick labels: increasing numbers that cover the finite data
    finite = [(x, y) for ys in series for x, y in zip(xs, ys) if math.isfinite(y)]
    for cls, vals in (("xticks", [x for x, _ in finite]), ("yticks", [y for _, y in finite])):
        g = [g for g in root.iter(NS + "g") if g.get("class") == cls][0]
        ticks = [float("".join(t.itertext())) for t in g.iter(NS + "text")]
        if len(ticks) < 2 or ticks != sorted(ticks) or ticks[0] > min(vals) + 1e-9 or ticks[-1] < max(vals) - 1e-9:
            bad.append(f"{name}: {cls} {ticks} do not cover {min(vals)}..{max(vals)}")
    # points: pixel = a + b * value on each axis, the same a, b for every series
    pts, data = [], []
    for p, ys in zip(paths, series):
        toks = p.get("d").replace("M", " M ").replace("L", " L ").split()
        i, segs = 0, 0
        while i < len(toks):
            segs += toks[i] == "M"
            pts.append((float(toks[i + 1]), float(toks[i + 2])))
            i += 3
        want_segs = 0
        prev = False
        for y in ys:
            if math.isfinite(y) and not prev:
                want_segs += 1
            prev = math.isfinite(y)
        if segs != want_segs:
            bad.append(f"{name}: {segs} pen-down runs, expected {want_segs}")
        data += [(x, y) for x, y in zip(xs, ys) if math.isfinite(y)]
    if len(pts) != len(data):
        bad.append(f"{name}: {len(pts)} points, expected {len(data)}")
        return
    for axis in (0, 1):
        v = [q[axis] for q in data]
        px = [q[axis] for q in pts]
        lo, hi = min(v), max(v)
        if hi == lo:
            if max(px) - min(px) > 0.01:
                bad.append(f"{name}: equal values on axis {axis} at different pixels")
            continue
        b = (px[v.index(hi)] - px[v.index(lo)]) / (hi - lo)
        a = px[v.index(lo)] - b * lo
        if (axis == 0 and b <= 0) or (axis == 1 and b >= 0):
            bad.append(f"{name}: axis {axis} runs the wrong way")
        for vi, pi in zip(v, px):
            if abs(a + b * vi - pi) > 0.02:
                bad.append(f"{name}: axis {axis}: value {vi} at pixel {pi}, expected {a + b * vi:.2f}")
                break

steps = list(range(1, 21))
check("one.svg", steps, [[2.0 / s for s in steps]], title="loss <train> & co", xlabel="step", ylabel="loss")
check("two.svg", [0, 1, 2], [[3, 1, 2], [0.5, 0.25, 4.0]], labels=["a", "b"])
check("rows.svg", [-1, -0.5, 0, 0.5, 1], [[1, 0, float("nan"), 0, 1], [-3, -2, -1, 0, 1]])
check("flat.svg", [0, 1], [[7, 7]])
check("staged.svg", [0, 1, 2], [[3, 6, 9]])  # the last call's, i = 3
left = [f for f in os.listdir(d) if ".tmp." in f]
if left:
    bad.append(f"temp files left: {left}")
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
EOF
        echo "FAIL [$mode]: the SVG files"
        status=1
    fi
done
[ $status -eq 0 ] && echo "PASS: plot"
exit $status
