#!/usr/bin/env python3
"""grad_check.py — the finite-difference gradient test (run by `make check` via
grad_check.sh).

For every differentiable op of the op table (tensor/ops.def + ops_nn.def,
parsed here: an op is differentiable when its gradient column is not
grad_none) there are cases over several shapes, broadcasting included, in
float64. Each case is a tfe function f of its float inputs,

    fn f(x, ...) { return sum(W * OP(x, ...)) }

with fixed weights W of the op's output shape (so the op's gradient is not
just a sum of ones). A tfe program computes, with a tape,

    with tape() as t { t.watch(x); ...; let y = f(x, ...) }
    t.gradient(y, (x, ...))

and also central finite differences of the SAME tfe function f,
(f(x + eps e_i) - f(x - eps e_i)) / 2 eps for every element i of every input
(inputs are tiny, so this is cheap), and saves both with save_npy; this script
compares them (float64, ~1e-6 relative). Inputs keep away from kinks (relu and
abs at 0, ties of maximum/max/clip, discontinuities of mod).

Second order, every case again: h(x, ...) = sum(V * t.gradient(f, x)) + ...
computed with a tape inside h, checked the same way (an outer tape against
finite differences of h). Gradient rules are written with ops (DESIGN.md
idea 3), so this checks that every rule is itself differentiable: nested
tapes give higher-order gradients. Second derivatives of scalar functions
with nested tapes (and grad(grad(f))) are also checked against closed forms
(x**3 -> 6x, sin -> -sin, exp, log, tanh, sigmoid, mixed partials, ...).

A differentiable op with no case is a failure, so a new op cannot land
without a gradient test. Cases are batched into programs; a failing batch is
rerun one case per program, so each failure names its case and prints a
program that reproduces it.

Environment: $TFE (the binary), $TFE_SRCDIR (the source tree),
$TFE_TEST_WRAPPER (optional prefix, e.g. valgrind).
Options: -k SUBSTR (only ops whose name contains SUBSTR), --keep (keep the
work folder), --list, -j N, -v (print every failing program), --first-order
(skip the second-order pass), --tfe-flag F (pass F to tfe, e.g. --stage-all;
also $TFE_GRAD_FLAGS), --warm (call each function once before taping it: with
--stage-all the taped call is a cached graph call, one tape entry whose
backward is the graph's backward graph), --fd-only
(check the test itself before tape() exists: runs only the finite
differences, at two step sizes, and fails where they disagree — an input too
close to a kink or a wrong case).
"""
import argparse
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

F64 = np.float64
BATCH = 25              # cases per program
MAX_PROGRAMS_SHOWN = 30
EPS = 2.0 ** -20        # FD step: a power of two, exact in every float type
RTOL = 1e-6             # |grad - fd| <= RTOL * |fd| + ATOL * max(1, max |fd|)
ATOL = 1e-6

rng = np.random.default_rng(20260601)


# ---- inputs -----------------------------------------------------------------------

def arr(shape, kind="normal"):
    """float64 test data. kinds: normal; pos (in [0.5, 2.5]); away (|x| in
    [0.3, 2], either sign: away from the kink at 0); unit ((-0.9, 0.9));
    grid (multiples of 2^-10 in (-4, 4): exact in float32, for cast);
    distinct (normal, any two values at least 0.05 apart: no ties for
    max/min/pooling)."""
    shape = tuple(shape)
    if kind == "pos":
        return rng.uniform(0.5, 2.5, shape)
    if kind == "away":
        return rng.uniform(0.3, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
    if kind == "unit":
        return rng.uniform(-0.9, 0.9, shape)
    if kind == "grid":
        return rng.integers(-4000, 4000, shape) / 1024.0
    if kind == "distinct":
        n = math.prod(shape)
        v = rng.permutation(n) * 0.37 - 0.37 * n / 2 + rng.uniform(-0.1, 0.1, n)
        return (v / max(1.0, 0.37 * n / 4)).reshape(shape) if n else v.reshape(shape)
    return rng.standard_normal(shape)


def apart(a, b, gap=0.1):
    """Redraw b until it differs from a (broadcast) by at least gap."""
    for _ in range(1000):
        if np.all(np.abs(a - b) >= gap):
            return b
        b = arr(b.shape)
    raise RuntimeError("grad_check: could not draw inputs apart")


# ---- cases ------------------------------------------------------------------------

class Case:
    """f's body is `expr` (objective: sum(W * expr)) or `body` (statements
    ending in `return`; __obj(o) is sum(W * o)). Names are $name. `wrt`: the
    float inputs f takes and the test differentiates (in order); other
    inputs (indices, conditions, constants) are globals of the program."""

    def __init__(self, op, expr=None, ins=None, wrt=None, body=None, eps=EPS, label=None,
                 nonzero=True):
        self.op = op
        self.expr = expr
        self.body = body
        self.ins = dict(ins or {})
        self.wrt = list(wrt) if wrt is not None else [k for k, v in self.ins.items()
                                                      if np.asarray(v).dtype == F64]
        self.eps = eps
        self.label = label or expr or (body[-1] if body else op)
        self.nonzero = nonzero   # the gradient must not be all zeros
        self.id = None

    def describe(self):
        shapes = ", ".join(f"{k}: {np.asarray(v).dtype}{tuple(np.asarray(v).shape)}"
                           for k, v in self.ins.items())
        return f"{self.op}: {self.label}" + (f" [{shapes}]" if shapes else "")


CASES = []


def case(op, expr=None, ins=None, **kw):
    c = Case(op, expr, ins, **kw)
    CASES.append(c)
    return c


UNARY = {  # name: input kind
    "neg": "normal", "abs": "away", "sign": "away", "exp": "normal", "log": "pos",
    "log1p": "pos", "sqrt": "pos", "rsqrt": "pos", "sin": "normal", "cos": "normal",
    "tanh": "normal", "sigmoid": "normal", "relu": "away", "gelu": "normal",
    "softplus": "normal",
}


def unary_cases():
    for name, kind in UNARY.items():
        for shp in ((), (5,), (2, 3)):
            x = arr(shp, kind)
            if name == "relu" and shp == ():
                x = np.abs(x)  # a negative scalar would give a zero gradient
            case(name, f"{name}($x)", {"x": x}, nonzero=name != "sign")
        # a non-contiguous input (a transposed view)
        case(name, f"{name}(transpose($x))", {"x": arr((3, 2), kind)}, nonzero=name != "sign")
    case("neg", "-$x", {"x": arr((2, 3))})
    case("neg", "-$x * $y", {"x": arr((2, 3)), "y": arr((3,))}, label="-x * y (unary minus in a chain)")
    # a function of a function: the chain rule through several rules
    case("tanh", "tanh(exp(sin($x)) * $y)", {"x": arr((4,)), "y": arr((4,))}, label="tanh(exp(sin(x)) * y)")
    # cast: float64 -> float32 -> float64 on a grid exact in float32, with a
    # step of 2^-10, so the finite difference is exact.
    case("cast", 'cast(cast($x, "float32"), "float64")', {"x": arr((2, 3), "grid")}, eps=2.0 ** -10)
    case("cast", 'cast($x, "float32") * 2', {"x": arr((4,), "grid")}, eps=2.0 ** -10)
    # copy: tensor() of a view is a contiguous copy
    case("copy", "tensor(transpose($x))", {"x": arr((2, 3))})
    case("copy", "tensor($x[::2]) * $x[1::2]", {"x": arr((4, 2))})


def binary_cases():
    pairs = [((2, 3), (2, 3)), ((2, 1), (1, 3)), ((2, 3), (3,)), ((), (4,)), ((2, 1, 3), (2, 1))]
    ops = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**", "mod": "%",
           "maximum": None, "minimum": None}
    for name, sym in ops.items():
        for j, (sa, sb) in enumerate(pairs):
            if name == "div":
                a, b = arr(sa), arr(sb, "away")
            elif name == "pow":
                a, b = arr(sa, "pos"), arr(sb)
            elif name == "mod":
                # a / b at least 0.1 away from an integer: away from the jumps
                for _ in range(10000):
                    a, b = arr(sa) * 3, arr(sb, "away")
                    r = a / b
                    frac = r - np.floor(r)
                    if np.all((frac > 0.1) & (frac < 0.9)):
                        break
                else:
                    raise RuntimeError("grad_check: could not draw inputs for mod")
            elif name in ("maximum", "minimum"):
                a = arr(sa)
                b = apart(a, arr(sb))
            else:
                a, b = arr(sa), arr(sb)
            expr = f"$a {sym} $b" if sym and j % 2 == 0 else f"{name}($a, $b)"
            case(name, expr, {"a": a, "b": b})
    # weak literals on either side (only the tensor is differentiated)
    case("pow", "$x ** 2", {"x": arr((5,))})
    case("pow", "$x ** 3", {"x": arr((2, 2))})
    case("pow", "2.0 ** $x", {"x": arr((4,))})
    case("pow", "$x ** 0.5", {"x": arr((3,), "pos")})
    case("mul", "$x * 2.5 + 1", {"x": arr((3,))})
    case("sub", "1 - $x", {"x": arr((3,))})
    case("div", "1 / $x", {"x": arr((3,), "away")})
    case("mul", "$x * $x", {"x": arr((4,))}, label="x * x (one input used twice)")
    case("maximum", "maximum($x, 0)", {"x": arr((6,), "away")})
    # a float32 operand (a constant) with a float64 one: the rules compute in
    # the result's dtype (pow casts its operands first: log of a float32 base
    # was float32; tests/golden/pow_grad_float64_mixed.tfe checks the exact
    # values, below this test's tolerance)
    f32 = np.float32
    case("pow", "$c ** $b", {"c": arr((2, 3), "pos").astype(f32), "b": arr((3,))}, wrt=["b"],
         label="float32 base ** float64 exponent")
    case("pow", "$a ** $c", {"a": arr((2, 3), "pos"), "c": arr((3,)).astype(f32)}, wrt=["a"],
         label="float64 base ** float32 exponent")
    case("div", "$c / $b", {"c": arr((3,)).astype(f32), "b": arr((2, 3), "away")}, wrt=["b"],
         label="float32 / float64")
    case("mod", "$a % $c", {"a": np.array([0.35, 1.3, -0.6]), "c": np.array([0.5, -0.7, 0.45], f32)},
         wrt=["a"], label="float64 % float32")
    for name in ("maximum", "minimum"):
        a = arr((2, 3))
        case(name, f"{name}($a, $c)", {"a": a, "c": apart(a, arr((3,))).astype(f32)}, wrt=["a"],
             label=f"{name}(float64, float32)")


def ternary_cases():
    for sc, sa, sb in (((2, 3), (2, 3), (2, 3)), ((2, 1), (3,), ()), ((3,), (2, 3), (2, 1))):
        c = rng.random(sc) < 0.5
        case("where", "where($c, $a, $b)", {"c": c, "a": arr(sa), "b": arr(sb)})
    case("where", "where($x > 0, $x, 0.1 * $x)", {"x": arr((6,), "away")}, label="leaky relu via where")
    # clip: x away from both bounds
    x = arr((2, 3)) * 2
    x = np.where(np.abs(x + 1) < 0.1, x + 0.3, x)
    x = np.where(np.abs(x - 1.5) < 0.1, x + 0.3, x)
    case("clip", "clip($x, -1, 1.5)", {"x": x})
    case("clip", "clip($x, 0, nil)", {"x": arr((5,), "away")})
    case("clip", "clip($x, nil, 0.5)", {"x": arr((5,), "away") + 0.5})
    lo, hi = -arr((3,), "pos"), arr((2, 1), "pos")
    x = arr((2, 3)) * 2
    for _ in range(1000):
        if np.all(np.abs(x - lo) > 0.1) and np.all(np.abs(x - hi) > 0.1):
            break
        x = arr((2, 3)) * 2
    case("clip", "clip($x, $lo, $hi)", {"x": x, "lo": lo, "hi": hi}, label="clip(x, lo, hi), tensor bounds")


def axis_text(axis):
    if axis is None:
        return ""
    if isinstance(axis, tuple):
        return ", axis=(" + ", ".join(map(str, axis)) + ("," if len(axis) == 1 else "") + ")"
    return f", axis={axis}"


def reduce_cases():
    configs = [((2, 3), None, False), ((2, 3), 0, False), ((2, 3), 1, True), ((2, 3, 2), -1, False),
               ((2, 3, 2), (0, 2), False), ((2, 3, 2), (0, 2), True), ((), None, False), ((5,), 0, True)]
    for name in ("sum", "mean", "prod", "max", "min", "logsumexp", "var", "std"):
        for shp, axis, kd in configs:
            kind = "distinct" if name in ("max", "min") else "away" if name == "prod" else "normal"
            if name in ("var", "std") and shp == ():
                continue  # var of one element: std's derivative is infinite at 0
            expr = f"{name}($x{axis_text(axis)}{', keepdims=true' if kd else ''})"
            case(name, expr, {"x": arr(shp, kind)})
        case(name, f"{name}(transpose($x), axis=0)", {"x": arr((3, 2), "distinct")})
    case("var", "var($x, axis=1, ddof=1)", {"x": arr((2, 4))})
    case("std", "std($x, ddof=1)", {"x": arr((5,))})
    case("std", "std($x, axis=0, keepdims=true)", {"x": arr((3, 2))})
    for name in ("softmax", "log_softmax"):
        for shp, axis in (((5,), None), ((2, 3), None), ((2, 3), 0), ((2, 3, 2), 1)):
            txt = "" if axis is None else f", axis={axis}"
            case(name, f"{name}($x{txt})", {"x": arr(shp)})
    # the softmax cross-entropy of the training benchmarks
    lab = np.eye(3)[rng.integers(0, 3, 4)]
    case("log_softmax", "-mean(sum($y * log_softmax($z), axis=-1))", {"z": arr((4, 3)), "y": lab},
         wrt=["z"], label="softmax cross-entropy")


def matmul_cases():
    pairs = [((3, 4), (4, 2)), ((4,), (4, 2)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 2)),
             ((2, 1, 2, 3), (3, 3, 2)), ((2, 2, 3), (2, 3, 2)), ((3,), (2, 3, 2)), ((2, 2, 3), (3,)),
             ((1, 1), (1, 1))]
    for i, (sa, sb) in enumerate(pairs):
        expr = "$a @ $b" if i % 2 == 0 else "matmul($a, $b)"
        case("matmul", expr, {"a": arr(sa), "b": arr(sb)})
    case("matmul", "transpose($a) @ $b", {"a": arr((4, 3)), "b": arr((4, 2))}, label="a.T @ b (a view)")
    case("matmul", "relu($x @ $w + $b) @ $v", {"x": arr((2, 3)), "w": arr((3, 4)), "b": arr((4,)),
                                                "v": arr((4, 2))}, label="a two-layer net")


def shape_cases():
    x23 = arr((2, 3))
    case("reshape", "reshape($x, (3, 2))", {"x": x23})
    case("reshape", "reshape($x, (-1,))", {"x": arr((2, 3))})
    case("reshape", "reshape(transpose($x), (6,))", {"x": arr((2, 3))})
    case("reshape", "reshape($x, ())", {"x": arr((1, 1))})
    case("transpose", "transpose($x)", {"x": arr((2, 3, 2))})
    case("transpose", "transpose($x, (1, 0, 2))", {"x": arr((2, 3, 2))})
    case("transpose", "$x.T", {"x": arr((2, 3))})
    case("expand_dims", "expand_dims($x, 0)", {"x": arr((2, 3))})
    case("expand_dims", "expand_dims($x, -1) * $y", {"x": arr((3,)), "y": arr((2,))})
    case("squeeze", "squeeze($x)", {"x": arr((1, 3, 1, 2))})
    case("squeeze", "squeeze($x, axis=0)", {"x": arr((1, 3))})
    case("broadcast_to", "broadcast_to($x, (2, 3, 2))", {"x": arr((3, 1))})
    case("broadcast_to", "broadcast_to($x, (4,))", {"x": arr(())})
    x43 = arr((4, 3))
    for expr in ("$x[1:3]", "$x[:, 0]", "$x[::2, 1]", "$x[..., -1]", "$x[:, ::-1]", "$x[1, 2]",
                 "$x[-2:, 1:100:2]", "$x[nil, 1]"):
        case("slice", expr, {"x": x43})
    case("set_slice", body=["let $y = $x", "$y[1:3] = $v", "return __obj($y)"],
         ins={"x": arr((4, 3)), "v": arr((2, 3))}, label="y[1:3] = v")
    case("set_slice", body=["let $y = $x", "$y[:, ::2] = $v", "return __obj($y)"],
         ins={"x": arr((3, 4)), "v": arr(())}, label="y[:, ::2] = scalar")
    case("set_slice", body=["let $y = $x", "$y[-1] = $v", "return __obj($y)"],
         ins={"x": arr((3, 4)), "v": arr((4,))}, label="y[-1] = row")
    case("set_slice", body=["let $y = $x * 2", "$y[0, 1:] = $v", "return __obj($y * $y)"],
         ins={"x": arr((2, 3)), "v": arr((1,))}, label="y[0, 1:] = v (broadcast), squared")
    case("concat", "concat(($a, $b), axis=0)", {"a": arr((2, 3)), "b": arr((1, 3))})
    case("concat", "concat(($a, $b, $c), axis=1)", {"a": arr((2, 1)), "b": arr((2, 3)), "c": arr((2, 2))})
    case("concat", "concat(($a, $a), axis=-1)", {"a": arr((3,))}, label="concat((a, a)): one input twice")
    case("stack", "stack(($a, $b))", {"a": arr((2, 3)), "b": arr((2, 3))})
    case("stack", "stack(($a, $b, $c), axis=-1)", {"a": arr((3,)), "b": arr((3,)), "c": arr((3,))})
    case("stack", "stack(($a, $b))", {"a": arr(()), "b": arr(())})
    case("stack", "[$a, $b * 2]", {"a": arr((2,)), "b": arr((2,))}, label="[a, b * 2] (a tensor literal)")
    case("split", body=["let ($p, $q, $r) = split($x, 3)", "return __obj($p) + 2 * __obj($q * $q) - __obj($r)"],
         ins={"x": arr((6, 2))}, label="split(x, 3)")
    case("split", body=["let ($p, $q) = split($x, (2, 1), axis=1)", "return __obj($p) + __obj(sin($q))"],
         ins={"x": arr((2, 3))}, label="split(x, (2, 1), axis=1)")
    case("split", body=["let ($p, $q) = split($x, 2)", "return __obj($p)"],
         ins={"x": arr((4,))}, label="split: one output unused")
    case("tile", "tile($x, (2, 3))", {"x": arr((2,))})
    case("tile", "tile($x, (2, 1, 2))", {"x": arr((3, 2))})
    case("tile", "tile($x, (1, 2))", {"x": arr((2, 2))})


def index_cases():
    x = arr((4, 3))
    case("gather", "gather($x, $i)", {"x": x, "i": np.array([3, 0, 3, -1])}, label="gather axis 0, repeats")
    case("gather", "gather($x, $i, axis=1)", {"x": arr((4, 3)), "i": np.array([[2, 0], [1, 2]])})
    case("gather", "gather($x, $i, axis=-1)", {"x": arr((2, 3, 2)), "i": np.array(1)})
    case("gather", "$x[$i]", {"x": arr((4, 3)), "i": np.array([1, 1, 2])}, label="x[int tensor]")
    case("gather", "$x[:, $i]", {"x": arr((3, 4)), "i": np.array([3, 0], np.int32)}, label="x[:, int32 tensor]")
    case("scatter", body=["let $y = $x", "$y[$i] = $v", "return __obj($y)"],
         ins={"x": arr((4, 3)), "i": np.array([3, 0]), "v": arr((2, 3))}, label="y[i] = v")
    case("scatter", body=["let $y = $x", "$y[$i] = $v", "return __obj($y)"],
         ins={"x": arr((4, 2)), "i": np.array([1, -1]), "v": arr((2,))}, label="y[i] = row (broadcast)")
    case("scatter", body=["let $y = $x", "$y[:, $i] = $v", "return __obj($y)"],
         ins={"x": arr((2, 4)), "i": np.array([2, 0]), "v": arr((2, 2))}, label="y[:, i] = v")
    # x[mask]: the selected rows' gradients go back to their positions
    case("boolean_mask", "$x[$m > 0]", {"x": arr((4, 3)), "m": np.array([1, 0, 1, 1])}, label="x[row mask]")
    case("boolean_mask", "$x[$m > 0]", {"x": arr((2, 3)), "m": np.array([[0, 1, 1], [1, 0, 0]])},
         label="x[elementwise mask]")
    case("boolean_mask", "$x[:, $m > 0]", {"x": arr((2, 3, 2)), "m": np.array([1, 0, 1])}, label="x[:, mask]")
    # scatter_add is the gradient of gather: its gradient is reached by
    # differentiating a gradient (nested tapes). g(u) = d/dX sum(gather(X, i) * u)
    # = scatter_add(0, i, u), so d/du sum(W * g(u)) = gather(W, i).
    for axis, X, i, ushape in ((0, arr((4, 2)), np.array([1, 3, 1]), (3, 2)),
                               (1, arr((2, 4)), np.array([[0, 2], [2, 2]]), (2, 2, 2))):
        case("scatter_add",
             body=["with tape() as $inner {", "    $inner.watch($X)",
                   f"    let $o = sum(gather($X, $i, axis={axis}) * $u)", "}",
                   "return __obj($inner.gradient($o, $X) * $X)"],
             ins={"X": X, "i": i, "u": arr(ushape)}, wrt=["u"],
             label=f"d/du of the gradient of gather axis={axis} (nested tapes)")
    # the backward ops of conv2d and pooling, reached by differentiating a
    # gradient: g(u) = d/dX sum(OP(X) * u) is linear in u (and in w).
    for fwd, xs, ws, us in (('conv2d($X, $w, padding="same")', (1, 3, 3, 1), (2, 2, 1, 2), (1, 3, 3, 2)),
                            ("conv2d($X, $w, stride=2)", (1, 4, 4, 2), (2, 2, 2, 1), (1, 2, 2, 1))):
        case("conv2d_backprop_input",
             body=["with tape() as $inner {", "    $inner.watch($X)", f"    let $o = sum({fwd} * $u)", "}",
                   "return __obj($inner.gradient($o, $X))"],
             ins={"X": arr(xs), "u": arr(us), "w": arr(ws)}, wrt=["u", "w"],
             label=f"d/du, d/dw of d/dx sum({fwd} * u) (nested tapes)")
        case("conv2d_backprop_filter",
             body=["with tape() as $inner {", "    $inner.watch($W)",
                   f"    let $o = sum({fwd.replace('$w', '$W')} * $u)", "}",
                   "return __obj($inner.gradient($o, $W))"],
             ins={"X": arr(xs), "u": arr(us), "W": arr(ws)}, wrt=["u", "X"],
             label=f"d/du, d/dx of d/dw sum({fwd} * u) (nested tapes)")
    for fwd, xs, us in (("max_pool2d($X, 2)", (1, 4, 4, 1), (1, 2, 2, 1)),
                        ('max_pool2d($X, 3, stride=1, padding="same")', (1, 3, 3, 1), (1, 3, 3, 1))):
        case("max_pool2d_grad",
             body=["with tape() as $inner {", "    $inner.watch($X)", f"    let $o = sum({fwd} * $u)", "}",
                   "return __obj($inner.gradient($o, $X))"],
             ins={"X": arr(xs, "distinct"), "u": arr(us)}, wrt=["u", "X"],
             label=f"d/du, d/dx of d/dx sum({fwd} * u) (nested tapes)")
        # max_pool2d_select is the adjoint of max_pool2d_grad: one level further
        case("max_pool2d_select",
             body=["with tape() as $t2 {", "    $t2.watch($U)", "    with tape() as $t1 {", "        $t1.watch($X)",
                   f"        let $o = sum({fwd} * $U)", "    }", "    let $o2 = sum($t1.gradient($o, $X) * $h)", "}",
                   "return __obj($t2.gradient($o2, $U))"],
             ins={"X": arr(xs, "distinct"), "U": arr(us), "h": arr(xs)}, wrt=["h"],
             label=f"d/dh of d/dU sum(d/dX sum({fwd} * U) * h) (three tapes)")
    # relu_grad(u, X), relu's gradient, is linear in u; reached by nested tapes
    case("relu_grad",
         body=["with tape() as $inner {", "    $inner.watch($X)", "    let $o = sum(relu($X) * $u)", "}",
               "return __obj($inner.gradient($o, $X))"],
         ins={"X": arr((3, 4), "away"), "u": arr((3, 4))}, wrt=["u"],
         label="d/du of d/dx sum(relu(x) * u) (nested tapes)")
    # fused batch norm: the forward's gradient (the op batch_norm_grad, mean's
    # and var's gradients folded in), the inference form's, and batch_norm_grad's
    # own (second derivatives, nested tapes)
    case("batch_norm_train", "batch_norm_train($x, $g, $b, 0.01)[0] * $u",
         {"x": arr((3, 2, 4)), "g": arr((4,)), "b": arr((4,)), "u": arr((3, 2, 4))}, wrt=["x", "g", "b"],
         label="y of batch_norm_train")
    case("batch_norm_train", body=["let ($y, $m, $v) = batch_norm_train($x, $g, $b, 0.01)",
                                   "return __obj($y * $u + $m * $p + $v * $q)"],
         ins={"x": arr((5, 3)), "g": arr((3,)), "b": arr((3,)), "u": arr((5, 3)), "p": arr((3,)), "q": arr((3,))},
         wrt=["x", "g", "b"], label="y, mean and var of batch_norm_train")
    case("batch_norm_infer", "batch_norm_infer($x, $g, $b, $m, $v, eps=0.01)",
         {"x": arr((3, 4)), "g": arr((4,)), "b": arr((4,)), "m": arr((4,)), "v": arr((4,), "pos")},
         label="batch_norm_infer")
    case("batch_norm_grad",
         body=["with tape() as $inner {", "    $inner.watch($x)", "    $inner.watch($g)",
               "    let ($y, $m, $v) = batch_norm_train($x, $g, $b, 0.01)",
               "    let $o = sum($y * $u + $m * $p + $v * $q)", "}",
               "let $d = $inner.gradient($o, ($x, $g))",
               "return __obj($d[0] * $h + $d[1] * $k)"],
         ins={"x": arr((4, 3)), "g": arr((3,)), "b": arr((3,)), "u": arr((4, 3)), "p": arr((3,)), "q": arr((3,)),
              "h": arr((4, 3)), "k": arr((3,))},
         wrt=["x", "g", "u", "p", "q"], label="second derivatives of batch_norm_train (nested tapes)")
    for fwd, xs, us in (("avg_pool2d($X, 2)", (1, 4, 4, 1), (1, 2, 2, 1)),
                        ('avg_pool2d($X, 3, stride=2, padding="same")', (1, 4, 4, 1), (1, 2, 2, 1))):
        case("avg_pool2d_grad",
             body=["with tape() as $inner {", "    $inner.watch($X)", f"    let $o = sum({fwd} * $u)", "}",
                   "return __obj($inner.gradient($o, $X))"],
             ins={"X": arr(xs), "u": arr(us)}, wrt=["u"],
             label=f"d/du of d/dx sum({fwd} * u) (nested tapes)")
    # conv2d_bias(_relu): conv2d + b (+ relu) in a staged function, which the
    # optimizer fuses (graph/opt_conv.c); its gradient, first and second order
    for op, body in (("conv2d_bias_relu", 'relu(conv2d(x, w, padding="same") + b)'),
                     ("conv2d_bias", "b + conv2d(x, w, stride=2)")):
        case(op, body=[f"let $g = staged(fn (x, w, b) {{ return {body} }})", "return __obj($g($x, $w, $b))"],
             ins={"x": arr((2, 4, 4, 2)), "w": arr((3, 3, 2, 3)), "b": arr((3,))}, label=f"staged {body}")
    case("dropout", "dropout($x, 0.5, seed=3)", {"x": arr((3, 4))})
    case("dropout", "dropout($x, 0.25, seed=11) * $x", {"x": arr((8,))})
    # several integer-tensor indices: one gather over the merged axes
    case("gather", "$x[$i, $j]", {"x": arr((4, 3)), "i": np.array([3, 0, 3, -1]), "j": np.array([1, 1, 2, 0])},
         label="x[i, j], repeats")
    case("gather", "$x[:, $j, $k]", {"x": arr((2, 3, 4)), "j": np.array([[0], [2]]), "k": np.array([3, -1])},
         label="x[:, j, k] broadcast")
    case("gather", "$x[$i, :, $k]", {"x": arr((3, 2, 4)), "i": np.array([2, 0]), "k": np.array([1, 1])},
         label="x[i, :, k] (advanced axes first)")
    # assignment through several integer-tensor indices: x's gradient is 0 at
    # the written positions; v's is gathered, summed over broadcast, and for
    # duplicates only the last write (C order) gets it
    case("scatter", body=["let $y = $x", "$y[$i, $j] = $v", "return __obj($y)"],
         ins={"x": arr((4, 3)), "i": np.array([3, 0, 3, -1]), "j": np.array([1, 1, 1, 0]), "v": arr((4,))},
         label="y[i, j] = v, duplicates")
    case("scatter", body=["let $y = $x * 2", "$y[:, $j, $k] = $v", "return __obj($y * $y)"],
         ins={"x": arr((2, 3, 4)), "j": np.array([[0], [2]]), "k": np.array([3, -1]), "v": arr((2, 1, 2))},
         label="y[:, j, k] = v broadcast, squared")
    case("scatter", body=["let $y = $x", "$y[$i, :, $k] = $v", "return __obj($y)"],
         ins={"x": arr((3, 2, 4)), "i": np.array([2, 0, 2]), "k": np.array([1, 3, 1]), "v": arr((2,))},
         label="y[i, :, k] = v (advanced axes first), duplicates")
    case("scatter", body=["let $y = $x", "$y[1, :, $k] = $v", "return __obj($y)"],
         ins={"x": arr((3, 2, 4)), "k": np.array([3, 0]), "v": arr((2, 2))},
         label="y[1, :, k] = v (advanced axes first)")
    case("scatter", body=["let $y = $x", "$y[$i, $j] += $v * $v", "return __obj($y)"],
         ins={"x": arr((3, 4)), "i": np.array([1, 2, 1]), "j": np.array([0, 3, 0]), "v": arr((3,))},
         label="y[i, j] += v * v, duplicates (read-modify-write)")


def nn_cases():
    for xs, ws, kw in (((1, 4, 4, 1), (2, 2, 1, 2), ""), ((2, 3, 3, 2), (2, 2, 2, 1), ', padding="same"'),
                       ((1, 4, 4, 1), (3, 3, 1, 1), ', padding="same", stride=2'),
                       ((1, 5, 5, 1), (2, 2, 1, 1), ", dilation=2"),
                       ((1, 3, 4, 2), (1, 2, 2, 2), ", stride=(1, 2)")):
        case("conv2d", f"conv2d($x, $w{kw})", {"x": arr(xs), "w": arr(ws)})
    for name in ("max_pool2d", "avg_pool2d"):
        kind = "distinct"
        case(name, f"{name}($x, 2)", {"x": arr((1, 4, 4, 1), kind)})
        case(name, f"{name}($x, 2)", {"x": arr((2, 2, 4, 2), kind)})
        case(name, f'{name}($x, 3, stride=1, padding="same")', {"x": arr((1, 3, 3, 1), kind)})
        case(name, f'{name}($x, (2, 3), stride=(1, 2), padding="same")', {"x": arr((1, 3, 4, 1), kind)})
    # a LeNet-like chain
    case("conv2d", 'sum(max_pool2d(relu(conv2d($x, $w, padding="same")), 2), axis=(1, 2))',
         {"x": arr((1, 4, 4, 1), "distinct"), "w": arr((3, 3, 1, 2))}, label="conv -> relu -> max_pool")


# ---- library ops: tan, erf, log2, log10, square, cumsum, cumprod, sort ---------------

def library_cases():
    for name, kind in (("tan", "unit"), ("erf", "normal"), ("log2", "pos"), ("log10", "pos"),
                       ("square", "normal")):
        for shp in ((), (5,), (2, 3)):
            case(name, f"{name}($x)", {"x": arr(shp, kind)})
        case(name, f"{name}(transpose($x))", {"x": arr((3, 2), kind)})
    for name, kind in (("cumsum", "normal"), ("cumprod", "away")):
        for shp, axis in (((5,), None), ((2, 3), 0), ((2, 3), 1), ((2, 3, 2), -1), ((3, 2), None)):
            case(name, f"{name}($x{axis_text(axis)})", {"x": arr(shp, kind)})
        case(name, f"{name}(transpose($x), axis=0)", {"x": arr((3, 2), kind)})
    # cumprod with a zero in a line: exact (first and second order), as the
    # true gradient is a product of the other elements
    case("cumprod", "cumprod($x)", {"x": np.array([1.3, -0.7, 0.0, 1.1, -1.4])}, label="cumprod, one zero")
    case("cumprod", "cumprod($x, axis=1)", {"x": np.array([[0.0, 1.2, -0.8], [1.5, 0.9, 0.0]])},
         label="cumprod, a zero first and last")
    case("cumsum", "cumsum($x * $x, axis=0) * cumsum($x, axis=1)", {"x": arr((2, 3))}, label="cumsum chain")
    # sort, topk: each value's gradient goes back to its element (distinct inputs: no ties)
    case("take_along_axis", "sort($x)", {"x": arr((5,), "distinct")})
    case("take_along_axis", "sort($x, axis=0, descending=true)", {"x": arr((3, 2), "distinct")})
    case("take_along_axis", "topk($x, 2)[0]", {"x": arr((2, 4), "distinct")}, label="topk(x, 2) values")
    case("take_along_axis", "take_along_axis($x, $i, 1)", {"x": arr((2, 3)), "i": np.array([[2, 2, 0, -1], [1, 0, 0, 1]])},
         label="take_along_axis, repeated indices")
    # put_along_axis_add is the gradient of take_along_axis: reached by
    # differentiating a gradient, g(u) = d/dX sum(take_along_axis(X, i) * u)
    case("put_along_axis_add",
         body=["with tape() as $inner {", "    $inner.watch($X)",
               "    let $o = sum(take_along_axis($X, $i, 0) * $u)", "}",
               "return __obj($inner.gradient($o, $X) * $X)"],
         ins={"X": arr((3, 2)), "i": np.array([[2, 0], [2, 1], [0, 0], [1, 2]]), "u": arr((4, 2))}, wrt=["u"],
         label="d/du of the gradient of take_along_axis (nested tapes)")
    x5, u5 = arr((5,)), arr((5,), "unit")
    SECOND.append(("tan -> 2 tan (1 + tan^2)", "tan($x)", {"x": u5}, "x", "x",
                   lambda x: 2 * np.tan(x) * (1 + np.tan(x) ** 2)))
    SECOND.append(("erf -> -4x/sqrt(pi) exp(-x^2)", "erf($x)", {"x": x5}, "x", "x",
                   lambda x: -4 * x / math.sqrt(math.pi) * np.exp(-x * x)))
    SECOND.append(("square -> 2", "square($x)", {"x": x5}, "x", "x", lambda x: np.full_like(x, 2.0)))


# ---- linear algebra (tensor/kernels_lapack.c, interp/builtins_linalg.c) ------------
# outer, diag, trace, einsum and norm are built-ins composed of other ops (whose
# rules they check again); their cases carry their own names.

LINALG_COMPOSITES = {"outer", "diag", "trace", "einsum", "norm"}


def well_conditioned(shape):
    return arr(shape) / 3 + np.eye(shape[-1]) * (shape[-1] + 1)


def linalg_cases():
    for name in ("tril", "triu"):
        case(name, f"{name}($x)", {"x": arr((3, 4))})
        case(name, f"{name}($x, k=1)", {"x": arr((2, 3, 3))})
        case(name, f"{name}($x, -1)", {"x": arr((4, 3))})
    case("inv", "inv($a)", {"a": well_conditioned((3, 3))})
    case("inv", "inv($a)", {"a": well_conditioned((2, 3, 3))})
    case("inv", "inv(transpose($a)) @ $b", {"a": well_conditioned((2, 2)), "b": arr((2, 3))})
    case("det", "det($a)", {"a": well_conditioned((3, 3)) / 3})
    case("det", "det($a)", {"a": well_conditioned((2, 3, 3)) / 3})
    case("det", "det($a) * $a", {"a": arr((2, 2)) + np.eye(2) * 2}, label="det(a) * a")
    for sa, sb in (((3, 3), (3,)), ((3, 3), (3, 2)), ((2, 3, 3), (3,)), ((3, 3), (2, 3, 2)), ((2, 1, 2, 2), (3, 2, 1))):
        case("solve", "solve($a, $b)", {"a": well_conditioned(sa), "b": arr(sb)})
    # cholesky reads only the lower triangle; its gradient is the symmetric one,
    # so the input is made symmetric first (a symmetric perturbation)
    eye = 'eye({n}, dtype="float64")'
    case("cholesky", f"cholesky(($a + transpose($a)) / 2 + 3 * {eye.format(n=3)})", {"a": arr((3, 3))},
         label="cholesky(sym(a) + 3I)")
    case("cholesky", f"cholesky($a @ transpose($a, (0, 2, 1)) + {eye.format(n=2)})", {"a": arr((2, 2, 2))},
         label="cholesky(a a^T + I), batched")
    # composites
    case("outer", "outer($a, $b)", {"a": arr((3,)), "b": arr((2,))})
    case("outer", "outer($a, $b)", {"a": arr((2, 2)), "b": arr(())})
    case("diag", "diag($x)", {"x": arr((3,))})
    case("diag", "diag($x, k=-1)", {"x": arr((2,))})
    case("diag", "diag($x)", {"x": arr((3, 4))})
    case("diag", "diag($x, k=1)", {"x": arr((4, 3))})
    case("trace", "trace($x)", {"x": arr((3, 3))})
    case("trace", "trace($x @ $x)", {"x": arr((2, 2))})
    for spec, shapes in (("ij,jk->ik", [(2, 3), (3, 2)]), ("ii->i", [(3, 3)]), ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
                         ("ij->", [(2, 3)]), ("i,j->ij", [(2,), (3,)]), ("ij,jk,kl->il", [(2, 2), (2, 3), (3, 2)]),
                         ("ij,ij->i", [(2, 3), (2, 3)]), ("ijk->kij", [(2, 3, 2)])):
        ins = {f"x{i}": arr(sh) for i, sh in enumerate(shapes)}
        case("einsum", f'einsum("{spec}", ' + ", ".join(f"$x{i}" for i in range(len(shapes))) + ")", ins)
    case("norm", "norm($x)", {"x": arr((4,))})
    case("norm", "norm($x, axis=1)", {"x": arr((2, 3))})
    case("norm", "norm($x, ord=1)", {"x": arr((4,), "away")})
    case("norm", 'norm($x, ord=float("inf"))', {"x": arr((5,), "distinct")})
    case("norm", "norm($x, ord=3)", {"x": arr((4,), "away")})
    case("norm", 'norm($x, ord="fro")', {"x": arr((2, 3))})
    case("norm", "norm($x, ord=1)", {"x": arr((3, 3), "distinct")}, label="norm(x, ord=1) of a matrix")


# second derivatives: (label, expr, inputs, inner source, outer source, closed form)
def _phi(x):
    return np.exp(-x * x / 2) / math.sqrt(2 * math.pi)


def _sig(x):
    return 1 / (1 + np.exp(-x))


SECOND = []


# ---- collectives (tensor/ops_dist.def): one process, rank 0 of 1 ----------------
# Each rule is the identity on the upstream gradient with one rank, made of
# the collectives themselves (and a mask, a slice); the two-rank checks are
# tests/golden_mpi/grads.tfe. The natives are called directly (no import).

def dist_cases():
    case("allreduce", '_dist_allreduce($x * $x, "sum") * $x', {"x": arr((2, 3))}, label="allreduce sum")
    case("allreduce", 'sin(_dist_allreduce($x, "mean"))', {"x": arr((3,))}, label="allreduce mean")
    case("allreduce", '_dist_allreduce($x * $x, "max") + _dist_allreduce($x, "min")', {"x": arr((2, 2))},
         label="allreduce max, min")
    case("allreduce", '_dist_allreduce(($x, $x * $x), "sum")[1]', {"x": arr((3,))},
         label="allreduce of a tuple (packed)")
    case("broadcast", '_dist_broadcast($x, 0) * $x', {"x": arr((2, 2))})
    case("allgather", '_dist_allgather($x * $x)', {"x": arr((2, 3))})
    case("allgather", '_dist_allgather(sum($x)) * 2.0', {"x": arr((3,))}, label="allgather of a 0-d tensor")


def second_cases():
    x5 = arr((5,))
    p5 = arr((5,), "pos")
    add = SECOND.append
    add(("x ** 3 -> 6x", "$x ** 3", {"x": x5}, "x", "x", lambda x: 6 * x))
    add(("x * x * x -> 6x", "$x * $x * $x", {"x": x5}, "x", "x", lambda x: 6 * x))
    add(("sin -> -sin", "sin($x)", {"x": x5}, "x", "x", lambda x: -np.sin(x)))
    add(("cos -> -cos", "cos($x)", {"x": x5}, "x", "x", lambda x: -np.cos(x)))
    add(("exp -> exp", "exp($x)", {"x": x5}, "x", "x", lambda x: np.exp(x)))
    add(("log -> -1/x^2", "log($x)", {"x": p5}, "x", "x", lambda x: -1 / x ** 2))
    add(("sqrt -> -x^-1.5/4", "sqrt($x)", {"x": p5}, "x", "x", lambda x: -0.25 * x ** -1.5))
    add(("1/x -> 2/x^3", "1 / $x", {"x": p5}, "x", "x", lambda x: 2 / x ** 3))
    add(("tanh -> -2 tanh (1 - tanh^2)", "tanh($x)", {"x": x5}, "x", "x",
         lambda x: -2 * np.tanh(x) * (1 - np.tanh(x) ** 2)))
    add(("sigmoid -> s (1 - s) (1 - 2 s)", "sigmoid($x)", {"x": x5}, "x", "x",
         lambda x: _sig(x) * (1 - _sig(x)) * (1 - 2 * _sig(x))))
    add(("softplus -> s (1 - s)", "softplus($x)", {"x": x5}, "x", "x", lambda x: _sig(x) * (1 - _sig(x))))
    add(("gelu -> phi (2 - x^2)", "gelu($x)", {"x": x5}, "x", "x", lambda x: _phi(x) * (2 - x * x)))
    add(("x ** 2.5 -> 3.75 x^0.5", "$x ** 2.5", {"x": p5}, "x", "x", lambda x: 3.75 * x ** 0.5))
    add(("sum(x)^2 -> 2n (summed rows of 2 * ones)", "sum($x) ** 2", {"x": x5}, "x", "x",
         lambda x: np.full_like(x, 2.0 * x.size)))
    # mixed partials d/dy (d/dx f)
    xs, ys = arr(()), arr(())
    add(("x * y -> 1", "$x * $y", {"x": xs, "y": ys}, "x", "y", lambda x, y: np.float64(1.0)))
    add(("x^2 y^3 -> 6 x y^2", "$x ** 2 * $y ** 3", {"x": xs, "y": ys}, "x", "y",
         lambda x, y: 6 * x * y * y))
    add(("sin(x y) -> cos(xy) - xy sin(xy)", "sin($x * $y)", {"x": xs, "y": ys}, "x", "y",
         lambda x, y: np.cos(x * y) - x * y * np.sin(x * y)))
    x3, y3 = arr((3,)), arr((3,))
    add(("exp(x y) -> exp(xy) (1 + xy), elementwise", "exp($x * $y)", {"x": x3, "y": y3}, "x", "y",
         lambda x, y: np.exp(x * y) * (1 + x * y)))
    # through matmul and a reduction: f = sum(tanh(A @ x)); the outer gradient
    # of the gradient vector sums the Hessian's rows: H @ 1, H = A^T diag(t'') A
    A = arr((4, 3))

    def hess_rows(x, A):
        t = np.tanh(A @ x)
        return A.T @ np.diag(-2 * t * (1 - t * t)) @ A @ np.ones(x.shape[0])
    add(("sum(tanh(A @ x)) -> A^T diag(tanh'') A 1", "sum(tanh($A @ $x))", {"x": arr((3,)), "A": A},
         "x", "x", hess_rows))
    # log_softmax: d2/dz2 of sum(y * log_softmax(z)) summed over rows: -(diag(p) - p p^T) 1 * sum(y) = 0
    # is trivial; use sum(w * softmax(z)) instead: Hessian rows summed
    w4 = arr((4,))

    def softmax_hrows(z, w):
        p = np.exp(z - z.max())
        p /= p.sum()
        # f = w . p; grad g = p * (w - w.p); H_ij = d g_i / d z_j
        J = np.diag(p) - np.outer(p, p)       # dp/dz
        wp = w @ p
        H = J * (w - wp)[:, None] - np.outer(p, J.T @ w)
        return H.sum(axis=0)
    add(("sum(w * softmax(z)) -> Hessian, columns summed", "sum($w * softmax($z))", {"z": arr((4,)), "w": w4},
         "z", "z", softmax_hrows))


def second_grad_cases():
    """grad(grad(f)) and a third derivative through three nested tapes."""
    return [
        ("grad(grad(sin)) -> -sin", "grad(grad(fn (v) => sin(v)))($x)", {"x": arr(())}, lambda x: -np.sin(x)),
        ("grad(grad(x -> x ** 4)) -> 12 x^2", "grad(grad(fn (v) => v ** 4))($x)", {"x": arr(())},
         lambda x: 12 * x * x),
        ("grad(grad(grad(x -> x ** 4))) -> 24 x", "grad(grad(grad(fn (v) => v ** 4)))($x)", {"x": arr(())},
         lambda x: 24 * x),
        ("grad(grad(tanh)), elementwise", "grad(grad(fn (v) => tanh(v)))($x)", {"x": arr((4,))},
         lambda x: -2 * np.tanh(x) * (1 - np.tanh(x) ** 2)),
    ]


# ---- the op table -----------------------------------------------------------------

def table_ops(srcdir):
    """[(name, gradient rule)] from the op table."""
    ops = []
    for f in ("ops.def", "ops_nn.def", "ops_dist.def"):
        with open(os.path.join(srcdir, "tensor", f), encoding="utf-8") as fh:
            for line in fh:
                line = re.sub(r"/\*.*?\*/", "", line)
                m = re.match(r'\s*OP\(\s*\w+\s*,\s*"([^"]+)"\s*,(.*)\)', line)
                if m:
                    cols = [s.strip() for s in m.group(2).split(",")]
                    ops.append((m.group(1), cols[-1].rstrip(")").strip()))
    return ops


# ---- programs ---------------------------------------------------------------------

PRELUDE = """\
# grad_check helpers: fixed weights of an output's shape, the objective, and
# central finite differences of g at x (every element, step eps)
fn __wt(o) {
    return reshape(cos(cast(arange(size(o)), "float64") * 1.7 + 0.3), shape(o))
}
fn __obj(o) {
    return sum(__wt(o) * o)
}
fn __fd(g, x, eps) {
    let n = size(x)
    let flat = zeros((n,), dtype="float64")
    let i = 0
    while i < n {
        let e = reshape(one_hot(i, n, dtype="float64"), shape(x)) * eps
        flat[i] = (g(x + e) - g(x - e)) / (2 * eps)
        i += 1
    }
    return reshape(flat, shape(x))
}
"""


def q(path):
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def subst(text, prefix):
    return re.sub(r"\$(\w+)", lambda m: f"{prefix}_{m.group(1)}", text)


def fnum(v):
    return repr(float(v))


def load_lines(p, ins, work, save):
    lines = []
    for name, v in ins.items():
        path = os.path.join(work, f"{p}_{name}.npy")
        if save:
            np.save(path, np.asarray(v))
        lines.append(f"let {p}_{name} = load_npy({q(path)})")
    return lines


def case_program(c, work, fd_only=False, save=True, order=1, warm=False):
    """The tfe lines of case c (its inputs written to work/ when save). With
    order 2 the function checked is h = sum(V * gradient of f) (a tape inside
    h), whose gradient needs the gradient of every rule f's ops used."""
    p = f"c{c.id}" if order == 1 else f"d{c.id}"
    lines = [f"# case {c.id}{' (second order)' if order == 2 else ''}: {c.describe()}"]
    lines += load_lines(p, c.ins, work, save)
    params = ", ".join(f"{p}_{n}" for n in c.wrt)
    if c.body is not None:
        body = [subst(s, p) for s in c.body]
    else:
        body = [f"return __obj({subst(c.expr, p)})"]
    lines.append(f"fn {p}__f({params}) {{")
    lines += ["    " + s for s in body]
    lines.append("}")
    srcs = "(" + ", ".join(f"{p}_{n}" for n in c.wrt) + ("," if len(c.wrt) == 1 else "") + ")"
    f = f"{p}__f"
    if order == 2:
        f = f"{p}__h"
        lines += [f"fn {f}({params}) {{", f"    with tape() as {p}__tt {{"]
        lines += [f"        {p}__tt.watch({p}_{n})" for n in c.wrt]
        lines += [f"        let {p}__yy = {p}__f({params})", "    }",
                  f"    let {p}__gg = {p}__tt.gradient({p}__yy, {srcs})",
                  "    return " + " + ".join(f"__obj({p}__gg[{k}])" for k in range(len(c.wrt))), "}"]
    out = lambda tag, k: q(os.path.join(work, f"{p}_{tag}{k}.npy"))  # noqa: E731
    if warm:  # a first call outside the tape: under staging the taped call runs the cached graph
        lines.append(f"{f}({params})")
    if not fd_only:
        lines.append(f"with tape() as {p}__t {{")
        lines += [f"    {p}__t.watch({p}_{n})" for n in c.wrt]
        lines.append(f"    let {p}__y = {f}({params})")
        lines.append("}")
        lines.append(f"let {p}__g = {p}__t.gradient({p}__y, {srcs})")
        for k in range(len(c.wrt)):
            lines.append(f"save_npy({out('g', k)}, {p}__g[{k}])")
    steps = [c.eps] + ([c.eps * 16] if fd_only else [])
    for k, n in enumerate(c.wrt):
        call = ", ".join("v" if m == n else f"{p}_{m}" for m in c.wrt)
        for s, eps in enumerate(steps):
            tag = "fd" if s == 0 else "fdb"
            lines.append(f"save_npy({out(tag, k)}, __fd(fn (v) => {f}({call}), {p}_{n}, {fnum(eps)}))")
    return lines


def second_program(k, s, work, save=True):
    label, expr, ins, inner, outer, _ = s
    p = f"s{k}"
    lines = [f"# second derivative {k}: {label}"] + load_lines(p, ins, work, save)
    lines += [f"with tape() as {p}__t2 {{", f"    {p}__t2.watch({p}_{outer})",
              f"    with tape() as {p}__t1 {{", f"        {p}__t1.watch({p}_{inner})"]
    if outer != inner:
        lines.append(f"        {p}__t1.watch({p}_{outer})")
    lines += [f"        let {p}__y = {subst(expr, p)}", "    }",
              f"    let {p}__g = {p}__t1.gradient({p}__y, {p}_{inner})", "}",
              f"save_npy({q(os.path.join(work, f'{p}_out.npy'))}, {p}__t2.gradient({p}__g, {p}_{outer}))"]
    return lines


def grad_grad_program(k, s, work, save=True):
    label, expr, ins, _ = s
    p = f"h{k}"
    lines = [f"# {label}"] + load_lines(p, ins, work, save)
    lines.append(f"save_npy({q(os.path.join(work, f'{p}_out.npy'))}, {subst(expr, p)})")
    return lines


def run_program(cmd, path, timeout):
    try:
        r = subprocess.run(cmd + [path], capture_output=True, text=True, timeout=timeout)
        return r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired:
        return -1, "", f"timed out after {timeout} s"
    except OSError as e:
        return -1, "", f"cannot run {cmd[0]}: {e}"


WORST = [0.0, ""]  # the largest error / tolerance of a passing comparison, and where


def close(got, want, rtol=RTOL, atol=ATOL, where=""):
    """None if got matches want, else a reason."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if got.size == 0:
        return None
    if not np.all(np.isfinite(got)):
        return f"non-finite values: {got.ravel()[~np.isfinite(got.ravel())][:4]}"
    scale = max(1.0, float(np.max(np.abs(want))))
    err = np.abs(got - want)
    tol = rtol * np.abs(want) + atol * scale
    bad = err > tol
    ratio = float(np.max(err / tol))
    if ratio > WORST[0] and not bad.any():
        WORST[:] = [ratio, where]
    if bad.any():
        i = tuple(np.argwhere(bad)[0]) if want.ndim else ()
        return (f"{int(bad.sum())} of {want.size} elements differ beyond rtol={rtol} atol={atol}*{scale:.3g}; "
                f"first at {list(i)}: got {got[i]!r}, expected {want[i]!r} (max error {err.max():.3g})")
    return None


def check_case(c, work, fd_only, order=1):
    p = f"c{c.id}" if order == 1 else f"d{c.id}"
    for k, n in enumerate(c.wrt):
        fd = np.load(os.path.join(work, f"{p}_fd{k}.npy"))
        x = np.asarray(c.ins[n])
        if fd.shape != x.shape:
            return f"finite differences for {n} have shape {fd.shape}, expected {x.shape} (a test bug)"
        if fd_only:
            fdb = np.load(os.path.join(work, f"{p}_fdb{k}.npy"))
            why = close(fd, fdb, 1e-5, 1e-6)
            if why:
                return f"input {n}: finite differences at two step sizes disagree (a kink?): {why}"
        else:
            g = np.load(os.path.join(work, f"{p}_g{k}.npy"))
            why = close(g, fd, where=f"{c.describe()} w.r.t. {n}")
            if why:
                return f"gradient w.r.t. {n} vs finite differences: {why}"
        if c.nonzero and order == 1 and not np.any(fd != 0) and k == 0:
            return f"finite differences w.r.t. {n} are all zero: the case does not test the gradient (a test bug)"
    return None


def main():
    ap = argparse.ArgumentParser(description="finite-difference gradient test for tfe")
    ap.add_argument("-k", default="", help="only ops whose name contains this")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("-j", type=int, default=min(4, os.cpu_count() or 1), help="programs run at once")
    ap.add_argument("-v", action="store_true", help="print every failing program in full")
    ap.add_argument("--fd-only", action="store_true",
                    help="check the finite differences only (no tape): two step sizes must agree")
    ap.add_argument("--tfe-flag", action="append", default=shlex.split(os.environ.get("TFE_GRAD_FLAGS", "")),
                    help="pass this option to tfe (repeatable; also $TFE_GRAD_FLAGS), e.g. --stage-all")
    ap.add_argument("--first-order", action="store_true",
                    help="skip the second-order pass over the cases (h = sum(V * gradient of f))")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--warm", action="store_true",
                    help="call each function once before taping it (with --tfe-flag=--stage-all the "
                         "taped call then runs the cached graph, and its gradient is the graph's backward)")
    args = ap.parse_args()

    srcdir = os.environ.get("TFE_SRCDIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    tfe = os.environ.get("TFE")
    if not tfe and not args.list:
        print("grad_check: TFE is not set (run through make check or export TFE=path/to/tfe)")
        return 99
    t_start = time.monotonic()
    for gen_fn in (unary_cases, binary_cases, ternary_cases, reduce_cases, matmul_cases, shape_cases,
                   index_cases, nn_cases, second_cases, library_cases, linalg_cases, dist_cases):
        gen_fn()
    table = table_ops(srcdir)
    diff_ops = [name for name, rule in table if rule != "grad_none"]
    failures = []
    covered = {c.op for c in CASES}
    missing = [op for op in diff_ops if op not in covered]
    unknown = sorted(covered - {name for name, _ in table} - LINALG_COMPOSITES)
    nodiff = sorted(covered & {name for name, rule in table if rule == "grad_none"})
    for op in missing:
        failures.append(f"FAIL {op}: the differentiable op has no case in tests/grad_check.py "
                        "(every op with a gradient rule needs one)")
    for op in unknown:
        failures.append(f"FAIL {op}: tests/grad_check.py has cases for an op that is not in the table")
    for op in nodiff:
        failures.append(f"FAIL {op}: tests/grad_check.py has cases for an op marked grad_none")

    cases = [c for c in CASES if args.k in c.op]
    for k, c in enumerate(cases):
        c.id = k
    seconds = [s for s in SECOND if not args.k] if not args.fd_only else []
    grad_grads = second_grad_cases() if not args.k and not args.fd_only else []
    if args.list:
        for c in cases:
            print(f"{c.id:5d} {c.describe()}")
        for s in seconds:
            print(f"      second derivative: {s[0]}")
        for s in grad_grads:
            print(f"      {s[0]}")
        print(f"{len(cases)} cases over {len({c.op for c in cases})} ops, "
              f"{len(seconds) + len(grad_grads)} second-derivative checks")
        return 1 if missing else 0

    cmd = shlex.split(os.environ.get("TFE_TEST_WRAPPER", "")) + [tfe] + args.tfe_flag
    work = tempfile.mkdtemp(prefix="tfe-grad-")
    try:
        # units: ("case", c) | ("second", k, s) | ("gg", k, s); batched into programs
        units = [("case", c) for c in cases] + [("second", k, s) for k, s in enumerate(seconds)] + \
                [("gg", k, s) for k, s in enumerate(grad_grads)]
        if not args.first_order and not args.fd_only:
            units += [("case2", c) for c in cases]

        def unit_lines(u, save=True):
            if u[0] in ("case", "case2"):
                return case_program(u[1], work, args.fd_only, save, 2 if u[0] == "case2" else 1, args.warm)
            if u[0] == "second":
                return second_program(u[1], u[2], work, save)
            return grad_grad_program(u[1], u[2], work, save)

        def unit_name(u):
            if u[0] == "case":
                return u[1].describe()
            if u[0] == "case2":
                return "second order: " + u[1].describe()
            return f"second derivative: {u[2][0]}"

        batches = [units[i:i + BATCH] for i in range(0, len(units), BATCH)]
        progs = []
        for b, batch in enumerate(batches):
            lines = [PRELUDE]
            for u in batch:
                lines += unit_lines(u)
            path = os.path.join(work, f"batch{b}.tfe")
            with open(path, "w") as fh:
                fh.write("\n".join(lines) + "\n")
            progs.append(path)

        with ThreadPoolExecutor(max_workers=max(1, args.j)) as ex:
            results = list(ex.map(lambda p: run_program(cmd, p, args.timeout), progs))

        rerun = [(b, i) for b, batch in enumerate(batches) if results[b][0] != 0 and len(batch) > 1
                 for i in range(len(batch))]

        def run_solo(bi):
            b, i = bi
            path = os.path.join(work, f"solo{b}_{i}.tfe")
            with open(path, "w") as fh:
                fh.write(PRELUDE + "\n" + "\n".join(unit_lines(batches[b][i], save=False)) + "\n")
            return bi, path, run_program(cmd, path, args.timeout)

        solo = {}
        with ThreadPoolExecutor(max_workers=max(1, args.j)) as ex:
            for bi, path, r in ex.map(run_solo, rerun):
                solo[bi] = (path, r)

        nfail = 0
        for b, batch in enumerate(batches):
            for i, u in enumerate(batch):
                path, (rc, out, err) = solo.get((b, i), (progs[b], results[b]))
                reason = None
                if rc != 0:
                    reason = f"exit status {rc}: {err.strip()[:600]}"
                else:
                    try:
                        if u[0] in ("case", "case2"):
                            reason = check_case(u[1], work, args.fd_only, 2 if u[0] == "case2" else 1)
                        else:
                            tag = "s" if u[0] == "second" else "h"
                            got = np.load(os.path.join(work, f"{tag}{u[1]}_out.npy"))
                            ins = u[2][2]
                            want = np.asarray(u[2][-1](**ins), dtype=F64)
                            reason = close(got, want, 1e-9, 1e-10, where=unit_name(u))
                    except Exception as e:  # a missing or unreadable output
                        reason = f"cannot read the output: {e}"
                if reason:
                    nfail += 1
                    if nfail > MAX_PROGRAMS_SHOWN and not args.v:
                        failures.append(f"FAIL {unit_name(u)}: {reason}")
                        continue
                    prog = "\n".join("    " + ln for ln in unit_lines(u, save=False))
                    failures.append(f"FAIL {unit_name(u)}: {reason}\n  program (with the helpers of "
                                    f"PRELUDE; inputs kept with --keep):\n{prog}")
        for line in failures:
            print(line)
        print(f"grad_check: {len(cases)} cases over {len({c.op for c in cases})} ops "
              f"({len(diff_ops)} differentiable in the table), {len(seconds) + len(grad_grads)} "
              f"second-derivative checks{' (finite differences only)' if args.fd_only else ''}, "
              f"{len(batches)} programs, {time.monotonic() - t_start:.1f} s: {nfail} failed, "
              f"{len(missing)} ops without cases")
        if WORST[1]:
            print(f"grad_check: largest error of a passing check: {WORST[0]:.2g} of its tolerance ({WORST[1]})")
        return 1 if failures else 0
    finally:
        if args.keep:
            print(f"grad_check: work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
