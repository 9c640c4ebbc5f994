#!/bin/sh
# check_layers.sh — the include layers of the C sources (docs/internals.md,
# "Layers"): every `#include "dir/file.h"` of a .c/.h/.y/.re/.cu file may name
# only its own folder or a folder its layer may use; a new include that goes
# up fails. Known violations are allowed below, each to be removed.
#   tests/check_layers.sh          check (make check runs it)
#   tests/check_layers.sh --dot    print the folder include graph as Graphviz dot
# The source tree is $TFE_SRCDIR (set by make check), else this script's parent.
srcdir="${TFE_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}"
mode="${1:-check}"

# Layers, bottom first. dist/ (the process group: MPI, rank, size, collectives
# on bytes) sits just above util/, so that tensor kernels, the graph executor
# and the interpreter can all reach it. A folder's layer names the layers it may include
# (its own included). The front end (lexer/ and parser/, which include each
# other) uses only util/; the interpreter evaluates its AST. gpu/ is a
# backend of tensor/'s device layer. graph/ (the graph IR, optimizer, planner
# and executor) knows tensors, not the interpreter: what it needs of the
# language comes through the functions registered in graph/host.h. stage/
# (the tracer) works on interpreter values and is one layer with interp/:
# each includes the other's headers, and each function is declared once, by
# the side that defines it. graph/ and stage/ are device-blind. Programs (the
# tfe binary's main is interp/main.c; fuzz/, bench/, tests/unit/) are on top.
layer_of() {
    case "$1" in
    util) echo util ;;
    dist) echo dist ;;
    tensor) echo tensor ;;
    gpu) echo gpu ;;
    lexer | parser) echo front ;;
    graph) echo graph ;;
    stage | interp) echo interp ;;
    fuzz | bench | tests/unit) echo program ;;
    *) echo unknown ;;
    esac
}
may_use() {
    case "$1" in
    util) echo "util" ;;
    dist) echo "util dist" ;;
    tensor) echo "util dist tensor" ;;
    gpu) echo "util dist tensor gpu" ;;
    front) echo "util front" ;;
    graph) echo "util dist tensor graph" ;;
    interp) echo "util dist tensor gpu front graph interp" ;;
    program) echo "util dist tensor gpu front graph interp program" ;;
    esac
}

# Known violations (file, included header), each to be removed: none.
allow="
"

cd "$srcdir" || exit 1
# "file included" for every quoted include naming a folder; not inside
# hidden folders (bench/setup.sh's venv, bench/.venv, holds packages' C
# headers)
edges=$(find util dist tensor gpu lexer parser graph stage interp fuzz bench tests/unit \
            -name '.?*' -prune -o \
            -type f \( -name '*.c' -o -name '*.h' -o -name '*.y' -o -name '*.re' -o -name '*.cu' \) -print \
            2>/dev/null | LC_ALL=C sort |
        while read -r f; do
            sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\/[^"]*\)".*/\1/p' "$f" |
                while read -r inc; do echo "$f $inc"; done
        done | LC_ALL=C sort -u)

dot() {
    echo "digraph layers {"
    echo "  rankdir=BT; node [shape=box];"
    echo "$edges" | while read -r f inc; do
        [ -n "$f" ] || continue
        a=$(dirname "$f"); b=$(dirname "$inc")
        [ "$a" = "$b" ] && continue
        if echo "$allow" | grep -qx "$f $inc"; then echo "  \"$a\" -> \"$b\" [style=dashed, label=\"to be removed\"];"
        else echo "  \"$a\" -> \"$b\";"; fi
    done | LC_ALL=C sort -u
    echo "}"
}
if [ "$mode" = "--dot" ]; then dot; exit 0; fi

bad=0
known=0
used=""
tmp=$(echo "$edges" | while read -r f inc; do
    [ -n "$f" ] || continue
    from=$(layer_of "$(dirname "$f")"); to=$(layer_of "$(dirname "$inc")")
    case " $(may_use "$from") " in *" $to "*) continue ;; esac
    if echo "$allow" | grep -qx "$f $inc"; then echo "KNOWN $f $inc"
    else echo "BAD $f includes $inc ($from may not use $to)"; fi
done)
bad=$(echo "$tmp" | grep -c '^BAD' || true)
known=$(echo "$tmp" | grep -c '^KNOWN' || true)
echo "$tmp" | grep '^BAD' | sed 's/^BAD /check_layers: /'
nallow=$(echo "$allow" | grep -c .)
# an allowlist entry no longer needed is only reported: delete it
echo "$allow" | while read -r f inc; do
    [ -n "$f" ] || continue
    echo "$tmp" | grep -qx "KNOWN $f $inc" || echo "check_layers: note: '$f $inc' is allowed but gone; delete it from the list"
done
nedges=$(echo "$edges" | while read -r f inc; do
    [ -n "$f" ] || continue
    a=$(dirname "$f"); b=$(dirname "$inc"); [ "$a" != "$b" ] && echo "$a $b"
done | LC_ALL=C sort -u | grep -c . || true)
echo "check_layers: $nedges include edges between folders; $known known violations allowed ($nallow on the list, to be removed); $bad new"
# tensor/ holds two layers: the base (tensor, dtype, alloc, device, print,
# threads, shapes, copies) that backends build on, and the op layer (dispatch, infer,
# kernels, tape, rules). gpu/ and the base's files may include only the
# base's headers (the op table's data included).
base_headers="tensor/tensor.h tensor/base.h tensor/ops.h tensor/ops.def tensor/ops_nn.def tensor/elem.def tensor/device.h tensor/fused.h tensor/blas.h util/xalloc.h util/profile.h"
base_files="tensor/tensor.c tensor/dtype.c tensor/alloc.c tensor/device.c tensor/device.h tensor/print.c tensor/thread.c tensor/shape.c tensor/copy.c tensor/base.h tensor/tensor.h tensor/ops.h"
tmp2=$(echo "$edges" | while read -r f inc; do
    [ -n "$f" ] || continue
    case "$f" in gpu/*) ;; *) case " $base_files " in *" $f "*) ;; *) continue ;; esac ;; esac
    case "$inc" in tensor/*) ;; *) continue ;; esac
    case " $base_headers " in *" $inc "*) continue ;; esac
    echo "BAD $f includes $inc (tensor/'s op layer; use tensor/base.h)"
done)
echo "$tmp2" | grep '^BAD' | sed 's/^BAD /check_layers: /'
bad=$((bad + $(echo "$tmp2" | grep -c '^BAD' || true)))
# the picture in docs/internals.md is this graph
if [ -f docs/internals.md ]; then
    want=$(dot)
    have=$(sed -n '/^```dot$/,/^```$/p' docs/internals.md | sed '1d;$d')
    if [ "$want" != "$have" ]; then
        echo "check_layers: docs/internals.md's dot picture is not tests/check_layers.sh --dot: paste it in"
        bad=$((bad + 1))
    fi
fi
[ "$bad" -eq 0 ]
