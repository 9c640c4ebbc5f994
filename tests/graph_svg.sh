#!/bin/sh
# graph_svg.sh — graph(f, x).svg(path) and t.graph().svg(path) draw through
# Graphviz's dot (interp/graphviz.c): without dot the call is a located
# error naming the Debian package graphviz (checked with TFE_DOT naming a
# program that is not there); with dot each file is an SVG picture (skipped,
# 77, when dot is not installed).
: "${TFE:?TFE is not set (run through make check)}"
d=$(mktemp -d "${TMPDIR:-/tmp}/tfe-svg.XXXXXX") || exit 99
trap 'rm -rf "$d"' EXIT
cat >"$d/p.tfe" <<'TFE'
@staged
fn f(x) {
    let y = exp(x) * 2.0
    return sum(tanh(y) + x)
}
graph(f, tensor([1.0, 2.0])).svg(getenv("OUT") + "/g.svg")
let w = variable(tensor([1.0, -2.0]), name="w")
with tape(draw=true) as t { let y = sum(w * w) }
t.gradient(y, w)
t.graph().svg(getenv("OUT") + "/t.svg")
print("drawn")
TFE
fail=0
err=$(OUT=$d TFE_DOT=/nonexistent/dot $TFE_TEST_WRAPPER "$TFE" "$d/p.tfe" 2>&1 >/dev/null)
case $err in
*"p.tfe:6:"*"graphviz"*) ;;
*) echo "graph_svg: without dot, expected a located error naming graphviz, got: $err"; fail=1 ;;
esac
err=$(OUT=$d/missing/folder $TFE_TEST_WRAPPER "$TFE" "$d/p.tfe" 2>&1 >/dev/null)
if command -v dot >/dev/null 2>&1; then
    case $err in
    *"p.tfe:6:"*"could not write"*) ;;
    *) echo "graph_svg: an SVG path in a missing folder: expected dot's error, got: $err"; fail=1 ;;
    esac
    out=$(OUT=$d $TFE_TEST_WRAPPER "$TFE" "$d/p.tfe") || { echo "graph_svg: the program failed"; fail=1; }
    [ "$out" = drawn ] || { echo "graph_svg: printed '$out'"; fail=1; }
    for f in g t; do
        grep -q "<svg" "$d/$f.svg" 2>/dev/null || { echo "graph_svg: $f.svg is not an SVG picture"; fail=1; }
    done
    grep -q "tanh" "$d/g.svg" && grep -q "grad" "$d/t.svg" || { echo "graph_svg: the pictures lack their labels"; fail=1; }
    [ $fail = 0 ] && echo "graph_svg: graph and tape pictures drawn by dot; a located error without it"
    exit $fail
fi
[ $fail = 0 ] || exit 1
echo "graph_svg: Graphviz's dot is not installed (apt-get install graphviz); the SVG part is skipped"
exit 77
