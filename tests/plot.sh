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
# scatter, hist, imshow, log axes and the legend beside the plot area
cat >"$tmp/charts.tfe" <<'EOF'
let xs = arange(1, 41)
let ys = 10.0 ** (arange(40) / 10.0 - 2)
ys[5] = 0.0            # no place on a log axis: the line breaks there
plot(xs, [ys, 2.0 * ys], "logy.svg", yscale="log", labels=("a much longer label", "b"))
scatter([0.5, 3, 40, 900, 7], [1, 2, 3, 4, 5], "logx.svg", xscale="log", groups=[0, 1, 1, 2, 0],
        labels=("zero", "one", "two"))
scatter([1, 2, 3], [4, -5, 6], "sc.svg", xlabel="x", ylabel="y")
let h = (arange(300) * 7 % 23) / 4.0
hist(h, "hist.svg", bins=7, title="h")
hist(reshape(h, (3, 100)), "histlog.svg", bins=12, yscale="log")
let im = cast(reshape(arange(24), (2, 3, 4)), float32)
im[0, 1] = 5.0         # a row of one gray: a single run
imshow(im, "grid.svg", labels=list("a", "b"), title="two")
imshow(im[1], "one.svg", cmap="gray_r")
imshow(reshape(arange(64), (4, 4, 4)), "cols.svg", cols=3, labels=arange(4))
print("done")
EOF
for mode in "" --eager --stage-all; do
    rm -f "$tmp"/*.svg
    out=$(cd "$tmp" && $TFE_TEST_WRAPPER "$TFE" $mode charts.tfe 2>"$tmp/err" </dev/null)
    rc=$?
    grep -v '^tfe: --stage-all: ' "$tmp/err" >"$tmp/err2"
    if [ $rc -ne 0 ] || [ "$out" != done ] || [ -s "$tmp/err2" ]; then
        echo "FAIL [$mode]: charts.tfe: status $rc, stdout '$out', stderr:"; cat "$tmp/err2"; status=1; continue
    fi
    if ! "$TFE_PYTHON3" - "$tmp" <<'EOF'; then
import math, os, sys, xml.etree.ElementTree as ET
d = sys.argv[1]
NS = "{http://www.w3.org/2000/svg}"
bad = []

def load(name):
    return ET.parse(os.path.join(d, name)).getroot()

def by_class(root, tag, cls):
    return [e for e in root.iter(NS + tag) if e.get("class") == cls]

def area(root):
    r = by_class(root, "rect", "plotarea")[0]
    x, y, w, h = (float(r.get(k)) for k in ("x", "y", "width", "height"))
    return x, y, x + w, y + h

def ticks(root, cls):
    """(value, pixel) of each labelled tick of g.cls"""
    g = by_class(root, "g", cls)[0]
    lines, texts = list(g.iter(NS + "line")), list(g.iter(NS + "text"))
    key = "x1" if cls == "xticks" else "y1"
    return [(float("".join(t.itertext())), float(l.get(key))) for l, t in zip(lines, texts)]

def linear(name, pairs, what, tol=0.02):
    """pixel = a + b * value for every (value, pixel)"""
    (v0, p0), (v1, p1) = min(pairs), max(pairs)
    if v1 == v0:
        bad.append(f"{name}: {what}: one value only"); return None
    b = (p1 - p0) / (v1 - v0)
    a = p0 - b * v0
    for v, p in pairs:
        if abs(a + b * v - p) > tol:
            bad.append(f"{name}: {what}: value {v} at pixel {p}, expected {a + b * v:.2f}"); break
    return a, b

def legend_outside(name, root, labels):
    x0, y0, x1, y1 = area(root)
    frames = by_class(root, "rect", "legendframe")
    texts = ["".join(t.itertext()) for g in by_class(root, "g", "legend") for t in g.iter(NS + "text")]
    if texts != labels:
        bad.append(f"{name}: legend {texts}, expected {labels}")
    if labels and (len(frames) != 1 or float(frames[0].get("x")) < x1):
        bad.append(f"{name}: the legend box is not right of the plot area")
    if labels and float(frames[0].get("x")) + float(frames[0].get("width")) > float(root.get("width")):
        bad.append(f"{name}: the legend box runs off the picture")

def points_inside(name, root, pts):
    x0, y0, x1, y1 = area(root)
    for x, y in pts:
        if not (x0 - 0.01 <= x <= x1 + 0.01 and y0 - 0.01 <= y <= y1 + 0.01):
            bad.append(f"{name}: point ({x}, {y}) outside the plot area"); break

def path_points(p):
    toks = p.get("d").replace("M", " M ").replace("L", " L ").split()
    return [(float(toks[i + 1]), float(toks[i + 2]), toks[i]) for i in range(0, len(toks), 3)]

# logy.svg: y ticks are powers of ten, evenly spaced in log10; points too
root = load("logy.svg")
yt = ticks(root, "yticks")
if any(abs(math.log10(v) - round(math.log10(v))) > 1e-9 for v, _ in yt) or len(yt) < 3:
    bad.append(f"logy.svg: y ticks {yt} are not powers of ten")
ab = linear("logy.svg", [(math.log10(v), p) for v, p in yt], "log y ticks")
ys = [10 ** (k / 10 - 2) for k in range(40)]
ys[5] = 0.0
series = by_class(root, "path", "series")
if len(series) != 2:
    bad.append(f"logy.svg: {len(series)} series")
elif ab:
    pts = path_points(series[0])
    if len(pts) != 39 or [m for _, _, m in pts].count("M") != 2:
        bad.append(f"logy.svg: the 0 does not break the line into two runs ({len(pts)} points)")
    want = [(k + 1, y) for k, y in enumerate(ys) if y > 0]
    for (px, py, _), (x, y) in zip(pts, want):
        if abs(ab[0] + ab[1] * math.log10(y) - py) > 0.02:
            bad.append(f"logy.svg: y {y} at pixel {py}, expected {ab[0] + ab[1] * math.log10(y):.2f}"); break
    lo = min(v for v, _ in yt); hi = max(v for v, _ in yt)
    if lo > min(y for y in ys if y > 0) or hi < 2 * max(ys):
        bad.append(f"logy.svg: y ticks {lo}..{hi} do not cover the data")
    points_inside("logy.svg", root, [(x, y) for s in series for x, y, _ in path_points(s)])
if not by_class(root, "g", "yminor"):
    bad.append("logy.svg: no minor grid lines on a five-decade log axis")
legend_outside("logy.svg", root, ["a much longer label", "b"])

# logx.svg: scatter on a log x axis, three groups in three colours
root = load("logx.svg")
xt = ticks(root, "xticks")
ab = linear("logx.svg", [(math.log10(v), p) for v, p in xt], "log x ticks")
groups = by_class(root, "g", "points")
circles = [[(float(c.get("cx")), float(c.get("cy"))) for c in g.iter(NS + "circle")] for g in groups]
if [len(c) for c in circles] != [2, 2, 1] or len({g.get("fill") for g in groups}) != 3:
    bad.append(f"logx.svg: points per group {[len(c) for c in circles]}, expected [2, 2, 1] in 3 colours")
elif ab:
    data = {0: [(0.5, 1), (7, 5)], 1: [(3, 2), (40, 3)], 2: [(900, 4)]}
    for g, pts in data.items():
        for (x, _), (cx, _) in zip(pts, circles[g]):
            if abs(ab[0] + ab[1] * math.log10(x) - cx) > 0.02:
                bad.append(f"logx.svg: x {x} at pixel {cx}"); break
    linear("logx.svg", [(y, cy) for g in data for (_, y), (_, cy) in zip(data[g], circles[g])], "y of points")
    points_inside("logx.svg", root, [p for c in circles for p in c])
legend_outside("logx.svg", root, ["zero", "one", "two"])

# sc.svg: linear scatter, no legend, labels
root = load("sc.svg")
circles = [(float(c.get("cx")), float(c.get("cy"))) for c in root.iter(NS + "circle")]
if len(circles) != 3 or by_class(root, "rect", "legendframe"):
    bad.append(f"sc.svg: {len(circles)} points (3 expected), or a legend without labels")
else:
    linear("sc.svg", list(zip([1, 2, 3], [c[0] for c in circles])), "x of points")
    linear("sc.svg", list(zip([4, -5, 6], [c[1] for c in circles])), "y of points")
texts = {t.get("class"): "".join(t.itertext()) for t in root.iter(NS + "text") if t.get("class")}
if texts.get("xlabel") != "x" or texts.get("ylabel") != "y":
    bad.append(f"sc.svg: labels {texts}")

# hist.svg / histlog.svg: numpy.histogram's counts, bars side by side
h = [(k * 7 % 23) / 4.0 for k in range(300)]
def histogram(v, bins):
    lo, hi = min(v), max(v)
    edges = [lo + (hi - lo) * i / bins for i in range(bins)] + [hi]
    counts = [0] * bins
    for x in v:
        i = bins - 1 if x == hi else max(i for i in range(bins) if edges[i] <= x)
        counts[i] += 1
    return counts, edges
try:
    import numpy
except ImportError:
    numpy = None
for name, bins, log in (("hist.svg", 7, False), ("histlog.svg", 12, True)):
    root = load(name)
    want, edges = histogram(h, bins)
    if numpy is not None and list(numpy.histogram(h, bins)[0]) != want:
        bad.append(f"{name}: the test's histogram differs from numpy's")
    bars = by_class(root, "rect", "bar")
    got = [int(b.get("data-count")) for b in bars]
    if got != want:
        bad.append(f"{name}: counts {got}, expected {want}"); continue
    xs = [float(b.get("x")) for b in bars]
    ws = [float(b.get("width")) for b in bars]
    if any(abs(xs[i] + ws[i] - xs[i + 1]) > 0.02 for i in range(bins - 1)):
        bad.append(f"{name}: bars do not touch")
    linear(name, list(zip(edges, xs + [xs[-1] + ws[-1]])), "bar edges")
    tops = [(c, float(b.get("y"))) for c, b in zip(got, bars) if c > 0]
    bottom = {round(float(b.get("y")) + float(b.get("height")), 2) for b in bars}
    if len(bottom) != 1:
        bad.append(f"{name}: bars stand on different baselines {bottom}")
    linear(name, [(math.log10(c) if log else c, y) for c, y in tops], "bar tops")
    if not log:
        yt = ticks(root, "yticks")
        if min(v for v, _ in yt) != 0 or max(v for v, _ in yt) < max(want):
            bad.append(f"{name}: y ticks {yt} do not run from 0 over the counts")

# grid.svg / one.svg / cols.svg: images as runs of gray
def images(name):
    root = load(name)
    out = []
    for g in by_class(root, "g", "image"):
        h_, w_ = map(int, g.get("data-shape").split())
        px = [[None] * w_ for _ in range(h_)]
        for r in g.iter(NS + "rect"):
            x, y, w = int(r.get("x")), int(r.get("y")), int(r.get("width"))
            for c in range(x, x + w):
                if px[y][c] is not None:
                    bad.append(f"{name}: pixel ({y}, {c}) drawn twice")
                px[y][c] = int(r.get("fill")[1:3], 16)
        out.append(px)
    caps = ["".join(t.itertext()) for t in by_class(root, "text", "caption")]
    return root, out, caps
im = [[[4 * r + c + 12 * n for c in range(4)] for r in range(3)] for n in range(2)]
im[0][1] = [5.0] * 4
def gray(v, lo=0, hi=23):
    return math.floor(255 * (v - lo) / (hi - lo) + 0.5)
root, imgs, caps = images("grid.svg")
if imgs != [[[gray(v) for v in row] for row in img] for img in im]:
    bad.append(f"grid.svg: pixels {imgs}")
if caps != ["a", "b"]:
    bad.append(f"grid.svg: captions {caps}")
if len(by_class(root, "g", "image")[0]) != 3 * 4 - 3:
    bad.append("grid.svg: the row of one gray is not one run")
root, imgs, caps = images("one.svg")
if imgs != [[[255 - gray(v, 12, 23) for v in row] for row in im[1]]] or caps:
    bad.append(f"one.svg: pixels {imgs} (gray_r, scaled to its own range 12..23)")
root, imgs, caps = images("cols.svg")
pos = [tuple(map(float, g.get("transform").split(")")[0].split("(")[1].split())) for g in by_class(root, "g", "image")]
if len(imgs) != 4 or caps != ["0", "1", "2", "3"] or len({y for _, y in pos}) != 2 or len({x for x, _ in pos}) != 3:
    bad.append(f"cols.svg: {len(imgs)} images at {pos}, captions {caps}: not 3 columns and 2 rows")
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
EOF
        echo "FAIL [$mode]: the chart files"
        status=1
    fi
done

# PNG: a real PNG (signature, IHDR size of the SVG, pixels decoded with
# zlib) when tfe was built with librsvg; a located error naming the missing
# library otherwise, and no file. Run without the test wrapper and without
# LeakSanitizer: fontconfig and pango, which librsvg loads, keep caches that
# valgrind and LSan count as lost, none of them tfe's.
cat >"$tmp/png.tfe" <<'EOF'
let steps = arange(1, 51)
plot(steps, [3.0 / steps, 1.0 / steps], "chart.svg", labels=("train", "val"), yscale="log")
plot(steps, [3.0 / steps, 1.0 / steps], "chart.png", labels=("train", "val"), yscale="log")
imshow([[0.0, 1.0], [2.0, 3.0]], "digit.svg")
imshow([[0.0, 1.0], [2.0, 3.0]], "digit.PNG")
print("done")
EOF
rm -f "$tmp"/*.svg "$tmp"/*.png "$tmp"/*.PNG
out=$(cd "$tmp" && ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" "$TFE" png.tfe 2>"$tmp/err" </dev/null)
rc=$?
if grep -q 'built without librsvg' "$tmp/err"; then
    grep -q "^png.tfe:3:1: error: plot(): cannot write the PNG 'chart.png': this tfe was built without librsvg" "$tmp/err" ||
        { echo "FAIL: the error without librsvg:"; cat "$tmp/err"; status=1; }
    [ $rc -eq 1 ] && [ ! -e "$tmp/chart.png" ] || { echo "FAIL: status $rc, or a chart.png without librsvg"; status=1; }
    echo "SKIP: PNG output (tfe built without librsvg)"
elif [ $rc -ne 0 ] || [ "$out" != done ] || [ -s "$tmp/err" ]; then
    echo "FAIL: png.tfe: status $rc, stdout '$out', stderr:"; cat "$tmp/err"; status=1
elif ! "$TFE_PYTHON3" - "$tmp" <<'EOF'; then
import os, struct, sys, zlib, xml.etree.ElementTree as ET
d = sys.argv[1]
bad = []

def png(name):
    """(width, height, rows of (r, g, b)) of an 8-bit RGB or RGBA PNG"""
    data = open(os.path.join(d, name), "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        bad.append(f"{name}: no PNG signature ({data[:8]!r})"); return None
    pos, idat, w = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if zlib.crc32(kind + body) != struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0]:
            bad.append(f"{name}: bad CRC in {kind}"); return None
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    if w is None or depth != 8 or ctype not in (2, 6) or interlace:
        bad.append(f"{name}: not an 8-bit RGB(A) non-interlaced PNG"); return None
    bpp = 3 if ctype == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            p = a + b - c
            pred = (0, a, b, (a + b) // 2,
                    a if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c) else b if abs(p - b) <= abs(p - c) else c)[f]
            line[i] = (line[i] + pred) & 255
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return w, h, rows

def svg_size(name):
    root = ET.parse(os.path.join(d, name)).getroot()
    return int(root.get("width")), int(root.get("height"))

img = png("chart.png")
if img:
    w, h, rows = img
    if (w, h) != svg_size("chart.svg"):
        bad.append(f"chart.png: {w}x{h}, the SVG is {svg_size('chart.svg')}")
    px = [p for r in rows for p in r]
    white = sum(p == (255, 255, 255) for p in px)
    # the series colours (#1f77b4, #ff7f0e), antialiased: near them
    near = lambda p, q: sum(abs(a - b) for a, b in zip(p, q)) < 60
    blue = sum(near(p, (0x1f, 0x77, 0xb4)) for p in px)
    orange = sum(near(p, (0xff, 0x7f, 0x0e)) for p in px)
    if white < len(px) // 2 or blue < 200 or orange < 200:
        bad.append(f"chart.png: {white} white, {blue} blue, {orange} orange pixels of {len(px)}")
img = png("digit.PNG")
if img:
    w, h, rows = img
    if (w, h) != svg_size("digit.svg"):
        bad.append(f"digit.PNG: {w}x{h}, the SVG is {svg_size('digit.svg')}")
    # 2x2 pixels of 140 screen pixels each, 8 from the top left corner
    for r in range(2):
        for c in range(2):
            want = round(255 * (2 * r + c) / 3)
            got = rows[8 + 140 * r + 70][8 + 140 * c + 70]
            if any(abs(v - want) > 1 for v in got):
                bad.append(f"digit.PNG: pixel ({r}, {c}) is {got}, expected gray {want}")
    if rows[2][2] != (255, 255, 255):
        bad.append(f"digit.PNG: the margin is {rows[2][2]}, not white")
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
EOF
    echo "FAIL: the PNG files"
    status=1
fi

[ $status -eq 0 ] && echo "PASS: plot"
exit $status
