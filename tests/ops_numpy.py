#!/usr/bin/env python3
"""ops_numpy.py — the NumPy-oracle op test (run by `make check` via ops_numpy.sh).

Every op of the op table (tensor/ops.def + tensor/ops_nn.def, parsed here) has
cases over dtypes and shapes: scalar, empty, broadcasting, non-contiguous views
(transpose/slicing) and >100K elements (the threaded paths). Cases are batched
into tfe programs that read their inputs with load_npy (or use exact literals)
and write results with save_npy; the results are compared with NumPy under
per-op tolerances (exact for int/bool results and for ops that must be exact).
An op with no case is a failure, so a new op cannot land without a test.

Environment: $TFE (the binary), $TFE_SRCDIR (the source tree),
$TFE_TEST_WRAPPER (optional prefix, e.g. valgrind).
Options: -k SUBSTR (only ops whose name contains SUBSTR), --keep (keep the
work folder), --list (print the cases), -j N (programs run at once), -v (print
every failing program), --tfe-flag F (pass F to tfe, e.g. --stage-all; also
$TFE_OPS_FLAGS). A failing batch program is rerun one case per program, so
each failure names its case and prints a program that reproduces it.
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
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np

F32, F64, I32, I64, BOOL = np.float32, np.float64, np.int32, np.int64, np.bool_
FLOATS = (F32, F64)
INTS = (I32, I64)
ORDER = [np.dtype(BOOL), np.dtype(I32), np.dtype(I64), np.dtype(F32), np.dtype(F64)]
DTNAME = {np.dtype(BOOL): "bool", np.dtype(I32): "int32", np.dtype(I64): "int64",
          np.dtype(F32): "float32", np.dtype(F64): "float64"}
BATCH = 40          # cases per program
MAX_PROGRAMS_SHOWN = 40  # failing programs printed in full (-v: all)
BIG = (300, 400)    # 120,000 elements: above every threading threshold

rng = np.random.default_rng(20240601)


def promote(*dts):
    """tfe's promotion (docs/language.md "Values") for non-weak operands: the larger in
    bool < int32 < int64 < float32 < float64."""
    return max((np.dtype(d) for d in dts), key=ORDER.index).type


def floatify(dt):
    """int/bool -> float32 (exp, mean, /, ...)."""
    return dt if np.dtype(dt).kind == "f" else F32


# ---- inputs ---------------------------------------------------------------------

_BIG_CACHE = {}


def arr(shape, dt, kind="normal"):
    """Random test data. kinds: normal, pos (> 0), small (ints in [-3, 3]),
    nz (no zeros), unit ((-1, 1)), pow2 (+-{0.25, 0.5, 2, 4}: exact division).
    Large arrays are made once per (shape, dtype, kind) and shared by cases
    (read-only), which saves time and disk."""
    shape = tuple(shape)
    dt = np.dtype(dt)
    if math.prod(shape) >= 100000:
        key = (shape, dt, kind)
        if key not in _BIG_CACHE:
            _BIG_CACHE[key] = _arr(shape, dt, kind)
            _BIG_CACHE[key].flags.writeable = False
        return _BIG_CACHE[key]
    return _arr(shape, dt, kind)


def _arr(shape, dt, kind):
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if kind == "small":
        v = rng.integers(-3, 4, shape).astype(np.float64)
    elif kind == "nz":
        v = rng.integers(1, 6, shape) * rng.choice([-1, 1], shape)
        v = v.astype(np.float64)
        if dt.kind == "f":
            v = v + rng.choice([0.0, 0.5], shape) * np.sign(v)
    elif kind == "pow2":
        v = rng.choice([0.25, 0.5, 2.0, 4.0], shape) * rng.choice([-1, 1], shape)
    elif kind == "pos":
        v = np.abs(rng.standard_normal(shape)) * 2 + 0.1
        if dt.kind != "f":
            v = np.ceil(v)
    elif kind == "unit":
        v = rng.uniform(-0.95, 0.95, shape)
    else:
        v = rng.standard_normal(shape) * 3
        if dt.kind != "f":
            v = np.round(v * 3)
    return v.astype(dt)


class View:
    """An input that reaches the op as a non-contiguous view: the array is saved
    as `base` and the program applies `tfe` (e.g. "transpose($)") to it; NumPy
    applies `npf` to base."""

    def __init__(self, base, tfe, npf):
        self.base, self.tfe, self.npf = base, tfe, npf

    def value(self):
        return self.npf(self.base)


def T(a):
    """Transposed view: the test holds a.T, the file holds a."""
    return View(np.ascontiguousarray(a), "transpose($)", lambda b: b.T)


def S(a):
    """Every other row: the file holds a, the op sees a[::2]."""
    return View(np.ascontiguousarray(a), "$[::2]", lambda b: b[::2])


def tview(shape, dt, kind="normal"):
    """Non-contiguous input of the given shape (transpose of the reversed shape)."""
    return T(arr(tuple(reversed(shape)), dt, kind))


def sview(shape, dt, kind="normal"):
    """Non-contiguous input of the given shape (every other row of a taller array)."""
    return S(arr((shape[0] * 2,) + tuple(shape[1:]), dt, kind))


def value_of(x):
    return x.value() if isinstance(x, View) else np.asarray(x)


# ---- cases ----------------------------------------------------------------------

class Case:
    """One test: `pre` statements and output expressions written with $name
    for inputs/temporaries; `ref(**inputs)` gives the expected array(s), or
    `check(outputs, inputs)` returns an error string (random ops); `error`:
    the program must fail with this text in stderr."""

    def __init__(self, op, outs, ins=None, ref=None, tol=None, pre=(), check=None, error=None,
                 needs=None, label=None):
        self.op = op
        self.outs = [outs] if isinstance(outs, str) else list(outs)
        self.ins = dict(ins or {})
        self.ref = ref
        self.tol = tol
        self.pre = list(pre)
        self.check = check
        self.error = error
        self.needs = needs
        self.label = label or self.outs[0]
        self.id = None
        self.expected = None

    def describe(self):
        shapes = ", ".join(f"{k}: {DTNAME.get(value_of(v).dtype, value_of(v).dtype)}"
                           f"{tuple(value_of(v).shape)}{' view' if isinstance(v, View) else ''}"
                           for k, v in self.ins.items())
        return f"{self.op}: {self.label}" + (f" [{shapes}]" if shapes else "")


CASES = []


def case(op, outs, ins=None, ref=None, **kw):
    c = Case(op, outs, ins, ref, **kw)
    CASES.append(c)
    return c


def tol_for(dt, kind="default"):
    """(rtol, atol, scaled) for a float result dtype; None means exact. With
    scaled, atol is multiplied by the largest |expected| value (sums and
    products of many terms, whose error follows the size of the terms)."""
    dt = np.dtype(dt)
    if dt.kind != "f":
        return None
    if kind == "exact":
        return None
    f32 = dt == np.float32
    if kind == "transc":     # libm-class functions
        return (2e-6, 1e-6, False) if f32 else (1e-13, 1e-15, False)
    if kind == "sum":        # reductions / products of many terms (atol is scaled in compare())
        return (1e-5, 1e-5, True) if f32 else (1e-12, 1e-12, True)
    if kind == "loose":
        return (1e-4, 1e-5, True) if f32 else (1e-10, 1e-12, True)
    return (1e-6, 1e-7, False) if f32 else (1e-14, 1e-15, False)


# ---- creation -------------------------------------------------------------------

def creation_cases():
    for dt in (F32, F64, I32, I64, BOOL):
        n = DTNAME[np.dtype(dt)]
        case("full", f'full((2, 3), 1, dtype="{n}")', ref=lambda dt=dt: np.full((2, 3), 1, dt))
        case("full", f'zeros((4, 0, 2), dtype="{n}")', ref=lambda dt=dt: np.zeros((4, 0, 2), dt))
        case("full", f'ones((), dtype="{n}")', ref=lambda dt=dt: np.ones((), dt))
    case("full", "full((3,), 2.5)", ref=lambda: np.full((3,), 2.5, F32))
    case("full", "full((2, 2), 7)", ref=lambda: np.full((2, 2), 7, I64))
    case("full", "full((2, 2), true)", ref=lambda: np.full((2, 2), True))
    case("full", "zeros(BIG)".replace("BIG", str(BIG)), ref=lambda: np.zeros(BIG, F32))
    case("full", 'ones(BIG, dtype="float64")'.replace("BIG", str(BIG)), ref=lambda: np.ones(BIG, F64))
    case("full", "zeros_like($a)", {"a": arr((3, 2), I32)}, lambda a: np.zeros_like(a))
    case("full", "ones_like($a)", {"a": tview((3, 2), F64)}, lambda a: np.ones_like(a))

    case("arange", "arange(5)", ref=lambda: np.arange(5, dtype=I64))
    case("arange", "arange(2, 11, 3)", ref=lambda: np.arange(2, 11, 3, dtype=I64))
    case("arange", "arange(10, 0, -3)", ref=lambda: np.arange(10, 0, -3, dtype=I64))
    case("arange", "arange(0)", ref=lambda: np.arange(0, dtype=I64))
    case("arange", "arange(5, 2)", ref=lambda: np.arange(5, 2, dtype=I64))
    case("arange", "arange(0.0, 1.0, 0.25)", ref=lambda: np.arange(0, 1, 0.25, dtype=F32))
    case("arange", 'arange(3, dtype="float64")', ref=lambda: np.arange(3, dtype=F64))
    case("arange", 'arange(1, 4, dtype="int32")', ref=lambda: np.arange(1, 4, dtype=I32))
    case("arange", "arange(150000)", ref=lambda: np.arange(150000, dtype=I64))

    case("linspace", "linspace(0.0, 1.0, 5)", ref=lambda: np.linspace(0, 1, 5, dtype=F32))
    case("linspace", "linspace(-2, 3, num=11)", ref=lambda: np.linspace(-2, 3, 11).astype(F32))
    case("linspace", 'linspace(0, 1, 7, dtype="float64")', ref=lambda: np.linspace(0, 1, 7),
         tol=(1e-15, 1e-15, False))
    case("linspace", "linspace(1, 2, 1)", ref=lambda: np.linspace(1, 2, 1).astype(F32))
    case("linspace", "linspace(1, 2, 0)", ref=lambda: np.linspace(1, 2, 0).astype(F32))
    case("linspace", 'linspace(0, 1, 120001, dtype="float64")',
         ref=lambda: np.linspace(0, 1, 120001), tol=(1e-15, 1e-15, False))

    case("eye", "eye(3)", ref=lambda: np.eye(3, dtype=F32))
    case("eye", "eye(2, 4)", ref=lambda: np.eye(2, 4, dtype=F32))
    case("eye", 'eye(4, 3, dtype="int64")', ref=lambda: np.eye(4, 3, dtype=I64))
    case("eye", 'eye(0, dtype="bool")', ref=lambda: np.eye(0, dtype=BOOL))
    case("eye", "eye(400)", ref=lambda: np.eye(400, dtype=F32))


# ---- elementwise ----------------------------------------------------------------

def erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x) if x.size else x.astype(np.float64)


def _sigmoid(x):
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


# name -> (numpy function on float64/ints, result rule, input kind, dtypes, tolerance kind)
#   result: "same" keeps the dtype, "float" int -> float32, "bool"
UNARY = {
    "neg": (lambda x: -x, "same", "normal", (F32, F64, I32, I64), "exact"),
    "abs": (np.abs, "same", "normal", (F32, F64, I32, I64), "exact"),
    "sign": (np.sign, "same", "normal", (F32, F64, I32, I64), "exact"),
    "exp": (np.exp, "float", "normal", (F32, F64, I32, I64), "transc"),
    "log": (np.log, "float", "pos", (F32, F64, I32, I64), "transc"),
    "log1p": (np.log1p, "float", "pos", (F32, F64, I64), "transc"),
    "sqrt": (np.sqrt, "float", "pos", (F32, F64, I32, I64), "transc"),
    "rsqrt": (lambda x: 1 / np.sqrt(x), "float", "pos", (F32, F64, I64), "transc"),
    "sin": (np.sin, "float", "normal", (F32, F64, I32), "transc"),
    "cos": (np.cos, "float", "normal", (F32, F64, I64), "transc"),
    "tanh": (np.tanh, "float", "normal", (F32, F64, I32), "transc"),
    "sigmoid": (_sigmoid, "float", "normal", (F32, F64, I64), "transc"),
    "relu": (lambda x: np.maximum(x, 0), "same", "normal", (F32, F64, I32, I64), "exact"),
    "gelu": (lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2))), "float", "normal", (F32, F64, I64),
             "transc"),
    "softplus": (lambda x: np.logaddexp(0, x), "float", "normal", (F32, F64, I32), "transc"),
    "floor": (np.floor, "same", "normal", (F32, F64, I32, I64), "exact"),
    "ceil": (np.ceil, "same", "normal", (F32, F64, I32, I64), "exact"),
    "round": (np.rint, "same", "normal", (F32, F64, I32, I64), "exact"),
    "isnan": (np.isnan, "bool", "normal", (F32, F64, I32, I64), "exact"),
    "isfinite": (np.isfinite, "bool", "normal", (F32, F64, I32, I64), "exact"),
    "logical_not": (lambda x: x == 0, "bool", "normal", (BOOL, F32, I64), "exact"),
}
SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 0.5, 1.5, 2.5, -2.5, -0.5, 3.7, -3.7,
                    1e-30, 80.0, -80.0])


def unary_ref(fn, rule, dt):
    def ref(x):
        if rule == "bool":
            return np.asarray(fn(x), dtype=BOOL)
        out_dt = dt if rule == "same" or np.dtype(dt).kind == "f" else F32
        with np.errstate(all="ignore"):
            y = fn(x.astype(np.float64) if np.dtype(dt).kind == "f" or rule == "float" else x)
        return np.asarray(y).astype(out_dt)
    return ref


def unary_cases():
    shapes = [(), (0,), (7,), (3, 4), (2, 3, 4)]
    for name, (fn, rule, kind, dts, tk) in UNARY.items():
        for dt in dts:
            out_dt = BOOL if rule == "bool" else dt if rule == "same" else floatify(dt)
            tol = None if tk == "exact" else tol_for(out_dt, tk)
            ref = unary_ref(fn, rule, dt)
            for shp in shapes:
                case(name, f"{name}($x)", {"x": arr(shp, dt, kind)}, ref, tol=tol)
            case(name, f"{name}($x)", {"x": tview((4, 5), dt, kind)}, ref, tol=tol)
            case(name, f"{name}($x)", {"x": sview((3, 5), dt, kind)}, ref, tol=tol)
            if dt in (F32, I64, BOOL):
                case(name, f"{name}($x)", {"x": arr(BIG, dt, kind)}, ref, tol=tol)
                case(name, f"{name}($x)", {"x": tview(BIG, dt, kind)}, ref, tol=tol)
            special = (tk == "exact" and name != "relu") or name in ("isnan", "isfinite", "exp", "tanh", "sigmoid")
            if np.dtype(dt).kind == "f" and special:
                case(name, f"{name}($x)", {"x": SPECIAL.astype(dt)}, ref, tol=tol, label=f"{name}(special values)")
    # the operator form and a weak literal
    case("neg", "-$x", {"x": arr((3, 4), F32)}, lambda x: -x)
    case("neg", "-$x", {"x": tview((3, 4), I32)}, lambda x: -x)
    case("neg", "-(2.5)", ref=lambda: np.array(-2.5, F32))
    case("exp", "exp(1)", ref=lambda: np.exp(np.float32(1)), tol=tol_for(F32, "transc"))


# binary op: (function name, operator or None, numpy function, result rule)
BINARY = {
    "add": ("+", np.add, "promote"),
    "sub": ("-", np.subtract, "promote"),
    "mul": ("*", np.multiply, "promote"),
    "div": ("/", np.true_divide, "div"),
    "floordiv": ("//", np.floor_divide, "promote"),
    "mod": ("%", np.mod, "promote"),
    "pow": ("**", np.power, "promote"),
    "maximum": (None, np.maximum, "promote"),
    "minimum": (None, np.minimum, "promote"),
    "equal": ("==", np.equal, "bool"),
    "not_equal": ("!=", np.not_equal, "bool"),
    "less": ("<", np.less, "bool"),
    "less_equal": ("<=", np.less_equal, "bool"),
    "greater": (">", np.greater, "bool"),
    "greater_equal": (">=", np.greater_equal, "bool"),
    "logical_and": (None, np.logical_and, "bool"),
    "logical_or": (None, np.logical_or, "bool"),
}


def binary_ref(name, fn, rule):
    def ref(a, b, out_dt):
        if rule == "bool" and name.startswith("logical"):
            return fn(a != 0, b != 0)
        common = promote(a.dtype, b.dtype)
        if rule == "div":
            common = floatify(common)
        a2, b2 = a.astype(common), b.astype(common)
        with np.errstate(all="ignore"):
            if name == "pow" and np.dtype(common).kind == "f":
                y = np.power(a2.astype(np.float64), b2.astype(np.float64))
            else:
                y = fn(a2, b2)
        return np.asarray(y).astype(out_dt)
    return ref


def binary_kinds(name, dt):
    """Input kinds (a, b) that keep the op exact and well defined."""
    isf = np.dtype(dt).kind == "f"
    if name in ("floordiv", "mod"):
        return ("normal", "pow2") if isf else ("normal", "nz")
    if name == "pow":
        return ("pos", "normal") if isf else ("small_pos", "small_pos")
    if name == "div":
        return ("normal", "nz")
    if name.startswith(("equal", "not_equal", "less", "greater")):
        return ("small", "small")
    return ("normal", "normal")


def gen(shape, dt, kind):
    if kind == "small_pos":
        return np.abs(arr(shape, dt, "small")).astype(dt)
    return arr(shape, dt, kind)


def binary_cases():
    shape_pairs = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((), (5,)), ((), ()),
                   ((0, 3), (3,)), ((2, 1, 3), (4, 1))]
    for name, (sym, fn, rule) in BINARY.items():
        ref = binary_ref(name, fn, rule)
        dts = (F32, F64, I32, I64)
        if name in ("add", "mul", "maximum", "minimum", "logical_and", "logical_or", "equal",
                    "not_equal"):
            dts = dts + (BOOL,)
        for i, dt in enumerate(dts):
            ka, kb = binary_kinds(name, dt)
            out_dt = BOOL if rule == "bool" else floatify(dt) if rule == "div" else dt
            tk = "exact" if rule == "bool" or name in ("add", "sub", "mul", "maximum", "minimum",
                                                      "floordiv", "mod") else "transc"
            tol = tol_for(out_dt, tk) if tk != "exact" else None
            for j, (sa, sb) in enumerate(shape_pairs):
                use_op = sym is not None and (i + j) % 2 == 0
                expr = f"$a {sym} $b" if use_op else f"{name}($a, $b)"
                case(name, expr, {"a": gen(sa, dt, ka), "b": gen(sb, dt, kb)},
                     lambda a, b, o=out_dt, ref=ref: ref(a, b, o), tol=tol)
            case(name, f"{name}($a, $b)", {"a": T(gen((4, 5), dt, ka)), "b": gen((4,), dt, kb)},
                 lambda a, b, o=out_dt, ref=ref: ref(a, b, o), tol=tol)
            case(name, f"{name}($a, $b)", {"a": S(gen((6, 4), dt, ka)), "b": T(gen((4, 3), dt, kb))},
                 lambda a, b, o=out_dt, ref=ref: ref(a, b, o), tol=tol)
            if dt in (F32, I64):
                case(name, f"{name}($a, $b)", {"a": gen(BIG, dt, ka), "b": gen(BIG[1:], dt, kb)},
                     lambda a, b, o=out_dt, ref=ref: ref(a, b, o), tol=tol)
                case(name, f"{name}($a, $b)", {"a": T(gen(BIG, dt, ka)), "b": gen(BIG[::-1], dt, kb)},
                     lambda a, b, o=out_dt, ref=ref: ref(a, b, o), tol=tol)
        # mixed dtypes follow the promotion order
        for da, db in ((I32, I64), (I64, F32), (F32, F64), (I32, F64), (BOOL, I32)):
            if rule != "bool" and BOOL in (da, db) and name not in ("add", "mul", "maximum", "minimum"):
                continue
            if name == "pow" and np.dtype(promote(da, db)).kind != "f":
                ins = {"a": gen((3, 4), da, "small_pos"), "b": gen((4,), db, "small_pos")}
            else:
                ka, kb = binary_kinds(name, promote(da, db))
                ins = {"a": gen((3, 4), da, ka if ka != "pow2" else "normal"), "b": gen((4,), db, kb)}
            out_dt = BOOL if rule == "bool" else floatify(promote(da, db)) if rule == "div" else promote(da, db)
            tk = "exact" if rule == "bool" or name in ("add", "sub", "mul", "maximum", "minimum", "floordiv", "mod") else "transc"
            tol = tol_for(out_dt, tk) if tk != "exact" else None
            if name in ("floordiv", "mod") and np.dtype(out_dt).kind == "f":
                tol = tol_for(out_dt, "transc")
            case(name, f"{name}($a, $b)", ins, lambda a, b, o=out_dt, ref=ref: ref(a, b, o), tol=tol,
                 label=f"{name}({DTNAME[np.dtype(da)]}, {DTNAME[np.dtype(db)]})")
    # weak literals take the other operand's dtype (docs/language.md "Values")
    x32 = arr((2, 3), F32)
    case("mul", "$x * 2", {"x": x32}, lambda x: x * F32(2))
    case("add", "$i + 1", {"i": arr((4,), I32)}, lambda i: i + I32(1))
    case("mul", "$i * 0.5", {"i": arr((4,), I64)}, lambda i: (i * 0.5).astype(F32))
    case("sub", "1 - $x", {"x": arr((3,), F64)}, lambda x: 1 - x)
    case("div", "$i / 2", {"i": arr((5,), I32)}, lambda i: (i / 2).astype(F32))
    case("pow", "$x ** 2", {"x": arr((5,), F32)}, lambda x: x * x, tol=tol_for(F32))
    case("less", "$x < 0.5", {"x": arr((5,), F64)}, lambda x: x < 0.5)
    case("add", "2 + 3", ref=lambda: np.array(5, I64))
    case("div", "7 / 2", ref=lambda: np.array(3.5, F32))
    case("floordiv", "-7 // 2", ref=lambda: np.array(-4, I64))
    case("mod", "-7 % 3", ref=lambda: np.array(2, I64))
    case("mod", "7 % -3", ref=lambda: np.array(-2, I64))
    case("add", "[1, 2, 3] + [[10], [20]]", ref=lambda: np.array([[11, 12, 13], [21, 22, 23]], I64))
    case("div", "$a / $b", {"a": np.array([1.0, -1.0, 0.0, 2.0], F32), "b": np.array([0.0, 0.0, 0.0, -0.0], F32)},
         lambda a, b: np.true_divide(a, b), label="division by zero")
    case("floordiv", "$a // $b", {"a": arr((5,), I64), "b": np.zeros(5, I64)},
         error="floordiv: integer division by zero", label="integer division by zero is an error")


def ternary_cases():
    for dt in (F32, F64, I32, I64, BOOL):
        ref = lambda c, a, b: np.where(c, a, b)
        case("where", "where($c, $a, $b)", {"c": arr((3, 4), BOOL), "a": arr((3, 4), dt), "b": arr((3, 4), dt)}, ref)
        case("where", "where($c, $a, $b)", {"c": arr((3, 1), BOOL), "a": arr((4,), dt), "b": arr((), dt)}, ref)
        case("where", "where($c, $a, $b)", {"c": tview((4, 3), BOOL), "a": sview((4, 3), dt), "b": arr((0, 1, 3), dt)}, ref)
    case("where", "where($c, $a, $b)", {"c": arr(BIG, BOOL), "a": arr(BIG, F32), "b": tview(BIG, F32)},
         lambda c, a, b: np.where(c, a, b))
    case("where", "where($c, $a, $b)", {"c": arr((5,), BOOL), "a": arr((5,), I32), "b": arr((5,), F64)},
         lambda c, a, b: np.where(c, a, b).astype(F64))
    case("where", "where($c, $a, 0)", {"c": arr((5,), BOOL), "a": arr((5,), F32)},
         lambda c, a: np.where(c, a, F32(0)))
    case("where", "where($x > 0, $x, 0.0)", {"x": arr((2, 3), F64)}, lambda x: np.where(x > 0, x, 0.0))
    for dt in (F32, F64, I32, I64):
        case("clip", "clip($x, -1, 2)", {"x": arr((4, 5), dt)},
             lambda x, dt=dt: np.clip(x, dt(-1), dt(2)).astype(dt))
        case("clip", "clip($x, $lo, $hi)", {"x": tview((3, 4), dt), "lo": -arr((4,), dt, "pos"), "hi": arr((3, 1), dt, "pos")},
             lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi))
    case("clip", "clip($x, -0.5, 0.5)", {"x": arr(BIG, F32)}, lambda x: np.clip(x, F32(-0.5), F32(0.5)))
    case("clip", "clip($x, 0, nil)", {"x": arr((6,), F64)}, lambda x: np.maximum(x, 0.0))
    case("clip", "clip($x, nil, 1)", {"x": arr((6,), I32)}, lambda x: np.minimum(x, I32(1)))


def cast_cases():
    src = {F32: arr((3, 5), F32), F64: arr((3, 5), F64), I32: arr((3, 5), I32), I64: arr((3, 5), I64),
           BOOL: arr((3, 5), BOOL)}
    for s, x in src.items():
        for d in (F32, F64, I32, I64, BOOL):
            case("cast", f'cast($x, "{DTNAME[np.dtype(d)]}")', {"x": x}, lambda x, d=d: x.astype(d),
                 label=f"cast {DTNAME[np.dtype(s)]} -> {DTNAME[np.dtype(d)]}")
    case("cast", 'cast($x, "int32")', {"x": np.array([2.9, -2.9, 0.5, -0.5, 1e9], F64)},
         lambda x: np.trunc(x).astype(I32), label="cast truncates toward zero")
    case("cast", 'cast($x, "bool")', {"x": np.array([0.0, -0.0, 1e-30, np.inf], F32)}, lambda x: x != 0)
    case("cast", 'cast($x, "int64")', {"x": tview(BIG, F32)}, lambda x: x.astype(I64))
    case("cast", 'cast($x, "float64")', {"x": arr((), I32)}, lambda x: x.astype(F64))
    case("cast", 'cast($x, "float32")', {"x": arr((0, 4), F64)}, lambda x: x.astype(F32))
    for dt in (F32, I64, BOOL):
        case("stop_gradient", "stop_gradient($x)", {"x": arr((3, 4), dt)}, lambda x: x)
        case("stop_gradient", "stop_gradient($x)", {"x": tview((3, 4), dt)}, lambda x: x)
    case("stop_gradient", "stop_gradient($x)", {"x": arr((), F64)}, lambda x: x)
    # copy: tensor() of a weak literal commits it (a copy); of a view, a copy
    case("copy", "tensor(2)", ref=lambda: np.array(2, I64))
    case("copy", "tensor(2.5) * $x", {"x": arr((3,), F64)}, lambda x: (F32(2.5) * x).astype(F64))
    case("copy", "tensor($x)", {"x": tview((3, 4), F32)}, lambda x: x)
    case("copy", 'tensor($x, dtype="float64")', {"x": arr((2, 2), I32)}, lambda x: x.astype(F64))


# ---- reductions -----------------------------------------------------------------

REDUCE = {
    # name: (numpy function(x, axis, keepdims), result rule, dtypes, tolerance kind)
    "sum": (lambda x, axis, keepdims: np.sum(x, axis=axis, keepdims=keepdims), "sum", (F32, F64, I32, I64, BOOL), "sum"),
    "mean": (lambda x, axis, keepdims: np.mean(x, axis=axis, keepdims=keepdims), "float", (F32, F64, I32, I64), "sum"),
    "prod": (lambda x, axis, keepdims: np.prod(x, axis=axis, keepdims=keepdims), "sum", (F32, F64, I32, I64), "sum"),
    "max": (lambda x, axis, keepdims: np.max(x, axis=axis, keepdims=keepdims), "keep", (F32, F64, I32, I64, BOOL), "exact"),
    "min": (lambda x, axis, keepdims: np.min(x, axis=axis, keepdims=keepdims), "keep", (F32, F64, I32, I64, BOOL), "exact"),
    "any": (lambda x, axis, keepdims: np.any(x, axis=axis, keepdims=keepdims), "bool", (BOOL, F32, I64), "exact"),
    "all": (lambda x, axis, keepdims: np.all(x, axis=axis, keepdims=keepdims), "bool", (BOOL, F32, I64), "exact"),
    "logsumexp": (lambda x, axis, keepdims: _logsumexp(x, axis, keepdims), "float", (F32, F64, I64), "transc"),
    "var": (lambda x, axis, keepdims: np.var(x, axis=axis, keepdims=keepdims), "float", (F32, F64, I32), "sum"),
    "std": (lambda x, axis, keepdims: np.std(x, axis=axis, keepdims=keepdims), "float", (F32, F64, I64), "sum"),
}


def _logsumexp(x, axis, keepdims):
    m = np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    y = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return y if keepdims else np.squeeze(y, axis=axis) if axis is not None else y.reshape(())


def reduce_out_dtype(rule, dt):
    dt = np.dtype(dt)
    if rule == "sum":
        return I64 if dt in (np.dtype(BOOL), np.dtype(I32)) else dt.type
    if rule == "float":
        return floatify(dt.type)
    if rule == "bool":
        return BOOL
    return dt.type


def reduce_ref(name, fn, rule, dt, axis, keepdims):
    out_dt = reduce_out_dtype(rule, dt)

    def ref(x):
        ax = tuple(axis) if isinstance(axis, list) else axis
        xx = x.astype(np.float64) if np.dtype(out_dt).kind == "f" else x.astype(out_dt) if rule == "sum" else x
        with np.errstate(all="ignore"):
            return np.asarray(fn(xx, ax, keepdims)).astype(out_dt)
    return ref


def axis_text(axis):
    if axis is None:
        return ""
    if isinstance(axis, list):
        return ", axis=(" + ", ".join(map(str, axis)) + ("," if len(axis) == 1 else "") + ")"
    return f", axis={axis}"


def reduce_cases():
    configs = [((3, 4), None, False), ((3, 4), 0, False), ((3, 4), 1, True), ((2, 3, 4), -1, False),
               ((2, 3, 4), [0, 2], False), ((2, 3, 4), [0, 2], True), ((), None, False), ((5,), 0, True),
               ((4, 0), 1, False)]
    for name, (fn, rule, dts, tk) in REDUCE.items():
        for dt in dts:
            kind = "small" if name == "prod" else "normal"
            out_dt = reduce_out_dtype(rule, dt)
            tol = tol_for(out_dt, tk) if tk != "exact" else None
            for shp, axis, kd in configs:
                if shp == (4, 0) and name in ("max", "min"):
                    continue
                expr = f"{name}($x{axis_text(axis)}{', keepdims=true' if kd else ''})"
                case(name, expr, {"x": arr(shp, dt, kind)}, reduce_ref(name, fn, rule, dt, axis, kd), tol=tol)
            case(name, f"{name}($x, axis=0)", {"x": tview((4, 5, 3), dt, kind)},
                 reduce_ref(name, fn, rule, dt, 0, False), tol=tol)
            case(name, f"{name}($x, axis=1)", {"x": sview((4, 5), dt, kind)},
                 reduce_ref(name, fn, rule, dt, 1, False), tol=tol)
            if dt in (F32, I64, BOOL) and name != "prod":
                for axis in (None, 0, 1):
                    case(name, f"{name}($x{axis_text(axis)})", {"x": arr(BIG, dt)},
                         reduce_ref(name, fn, rule, dt, axis, False), tol=tol)
                case(name, f"{name}($x, axis=0)", {"x": tview(BIG, dt)},
                     reduce_ref(name, fn, rule, dt, 0, False), tol=tol)
        if name in ("var", "std"):
            npf = np.var if name == "var" else np.std
            case(name, f"{name}($x, axis=1, ddof=1)", {"x": arr((4, 6), F64)},
                 lambda x, npf=npf: npf(x, axis=1, ddof=1), tol=tol_for(F64, "sum"))
    case("max", "max($x)", {"x": arr((0,), F32)}, error="max: cannot reduce over an empty axis", label="max of an empty tensor is an error")
    case("sum", "sum($x, axis=2)", {"x": arr((2, 3), F32)}, error="sum: axis 2 is out of range",
         label="sum axis out of range")
    for name, npf in (("argmax", np.argmax), ("argmin", np.argmin)):
        for dt in (F32, F64, I32, I64):
            case(name, f"{name}($x)", {"x": arr((3, 4), dt)}, lambda x, npf=npf: np.asarray(npf(x), I64))
            case(name, f"{name}($x, axis=0)", {"x": arr((3, 4), dt, "small")},
                 lambda x, npf=npf: npf(x, axis=0).astype(I64), label=f"{name} with ties (first wins)")
            case(name, f"{name}($x, axis=-1)", {"x": tview((5, 4, 3), dt)}, lambda x, npf=npf: npf(x, axis=-1).astype(I64))
            case(name, f"{name}($x, axis=1, keepdims=true)", {"x": arr((3, 4), dt)},
                 lambda x, npf=npf: npf(x, axis=1, keepdims=True).astype(I64))
        case(name, f"{name}($x, axis=1)", {"x": arr(BIG, F32)}, lambda x, npf=npf: npf(x, axis=1).astype(I64))
        case(name, f"{name}($x)", {"x": arr(BIG, F32)}, lambda x, npf=npf: np.asarray(npf(x), I64))
        case(name, f"{name}($x, axis=0)", {"x": arr((5,), BOOL)}, lambda x, npf=npf: np.asarray(npf(x), I64))

    def softmax(x, axis):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    for name in ("softmax", "log_softmax"):
        for dt in (F32, F64):
            for shp, axis in (((3, 5), None), ((3, 5), 0), ((2, 3, 4), 1), ((4,), None), ((0, 3), None)):
                ax = -1 if axis is None else axis

                def ref(x, ax=ax, name=name, dt=dt):
                    s = softmax(x.astype(np.float64), ax) if x.size else x.astype(np.float64)
                    return (np.log(s) if name == "log_softmax" else s).astype(dt)
                txt = "" if axis is None else f", axis={axis}"
                case(name, f"{name}($x{txt})", {"x": arr(shp, dt)}, ref, tol=tol_for(dt, "transc"))
            case(name, f"{name}($x, axis=0)", {"x": tview((6, 5), dt)},
                 lambda x, name=name, dt=dt: (np.log(softmax(x.astype(np.float64), 0)) if name == "log_softmax"
                                              else softmax(x.astype(np.float64), 0)).astype(dt),
                 tol=tol_for(dt, "transc"))
        case(name, f"{name}($x)", {"x": arr(BIG, F32) * 10},
             lambda x, name=name: (np.log(softmax(x.astype(np.float64), -1)) if name == "log_softmax"
                                   else softmax(x.astype(np.float64), -1)).astype(F32),
             tol=tol_for(F32, "transc"))
        case(name, f"{name}($x)", {"x": arr((3,), I64)},
             lambda x, name=name: (np.log(softmax(x.astype(np.float64), -1)) if name == "log_softmax"
                                   else softmax(x.astype(np.float64), -1)).astype(F32),
             tol=tol_for(F32, "transc"), label=f"{name} of int64 gives float32")


# ---- linear algebra -------------------------------------------------------------

def matmul_cases():
    pairs = [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
             ((2, 1, 3, 4), (5, 4, 6)), ((0, 3), (3, 4)), ((3, 0), (0, 4)), ((1, 1), (1, 1))]
    for dt in (F32, F64, I32, I64):
        for i, (sa, sb) in enumerate(pairs):
            expr = "$a @ $b" if i % 2 == 0 else "matmul($a, $b)"
            kind = "small" if np.dtype(dt).kind != "f" else "normal"
            case("matmul", expr, {"a": arr(sa, dt, kind), "b": arr(sb, dt, kind)},
                 lambda a, b, dt=dt: np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(dt)
                 if np.dtype(dt).kind == "f" else np.matmul(a, b), tol=tol_for(dt, "sum"))
        case("matmul", "$a @ $b", {"a": tview((3, 4), dt, "small"), "b": sview((4, 2), dt, "small")},
             lambda a, b, dt=dt: np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(dt),
             tol=tol_for(dt, "sum"))
    for dt in (F32, F64):
        case("matmul", "$a @ $b", {"a": arr((300, 200), dt), "b": T(arr((300, 200), dt))},
             lambda a, b, dt=dt: np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(dt),
             tol=tol_for(dt, "sum"))
        case("matmul", "$a @ $b", {"a": arr((8, 40, 30), dt), "b": arr((8, 30, 50), dt)},
             lambda a, b, dt=dt: np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(dt),
             tol=tol_for(dt, "sum"))
    case("matmul", "$a @ $b", {"a": arr((2, 3), I32, "small"), "b": arr((3, 2), F32)},
         lambda a, b: np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(F32), tol=tol_for(F32, "sum"),
         label="matmul(int32, float32) -> float32")
    case("matmul", "$a @ $b", {"a": arr((2, 3), F32), "b": arr((4, 2), F32)}, error="matmul: shapes (2, 3) and (4, 2) are not aligned",
         label="matmul shape mismatch")


# ---- shape ops ------------------------------------------------------------------

def shape_cases():
    for dt in (F32, I64, BOOL, I32, F64):
        case("reshape", "reshape($x, (4, 3))", {"x": arr((3, 4), dt)}, lambda x: x.reshape(4, 3))
        case("reshape", "reshape($x, (2, -1))", {"x": tview((3, 4), dt)}, lambda x: x.reshape(2, -1))
        case("reshape", "reshape($x, ())", {"x": arr((1, 1), dt)}, lambda x: x.reshape(()))
        case("reshape", "reshape($x, (0, 5))", {"x": arr((5, 0), dt)}, lambda x: x.reshape(0, 5))
        case("transpose", "transpose($x)", {"x": arr((2, 3, 4), dt)}, lambda x: x.T)
        case("transpose", "transpose($x, (1, 0, 2))", {"x": arr((2, 3, 4), dt)}, lambda x: x.transpose(1, 0, 2))
        case("transpose", "$x.T", {"x": sview((4, 3), dt)}, lambda x: x.T)
        case("expand_dims", "expand_dims($x, 0)", {"x": arr((3, 4), dt)}, lambda x: x[None])
        case("expand_dims", "expand_dims($x, -1)", {"x": tview((3, 4), dt)}, lambda x: x[..., None])
        case("squeeze", "squeeze($x)", {"x": arr((1, 3, 1, 4), dt)}, lambda x: x.squeeze())
        case("squeeze", "squeeze($x, axis=2)", {"x": arr((1, 3, 1, 4), dt)}, lambda x: x.squeeze(2))
        case("broadcast_to", "broadcast_to($x, (2, 3, 4))", {"x": arr((3, 1), dt)}, lambda x: np.broadcast_to(x, (2, 3, 4)))
        case("slice", "$x[1:3]", {"x": arr((5, 4), dt)}, lambda x: x[1:3])
        case("slice", "$x[::2, 1]", {"x": arr((5, 4), dt)}, lambda x: x[::2, 1])
        case("slice", "$x[..., -1]", {"x": tview((2, 3, 4), dt)}, lambda x: x[..., -1])
        case("slice", "$x[:, ::-1]", {"x": arr((3, 4), dt)}, lambda x: x[:, ::-1])
        case("slice", "$x[-2:, 1:100:3]", {"x": arr((4, 7), dt)}, lambda x: x[-2:, 1:100:3])
        case("slice", "$x[2:2]", {"x": arr((4,), dt)}, lambda x: x[2:2])
        case("slice", "$x[1, 2]", {"x": arr((3, 4), dt)}, lambda x: x[1, 2])
        case("set_slice", "$y", {"x": arr((5, 4), dt), "v": arr((2, 4), dt)}, lambda x, v: _setitem(x, np.s_[1:3], v),
             pre=["let $y = $x", "$y[1:3] = $v"], label="y[1:3] = v")
        case("set_slice", "$y", {"x": tview((4, 5), dt), "v": arr((), dt)}, lambda x, v: _setitem(x, np.s_[:, ::2], v),
             pre=["let $y = $x", "$y[:, ::2] = $v"], label="y[:, ::2] = scalar")
        case("set_slice", "$y", {"x": arr((3, 4), dt), "v": arr((4,), dt)}, lambda x, v: _setitem(x, np.s_[-1], v),
             pre=["let $y = $x", "$y[-1] = $v"], label="y[-1] = row")
        case("concat", "concat(($a, $b), axis=0)", {"a": arr((2, 3), dt), "b": arr((4, 3), dt)},
             lambda a, b: np.concatenate([a, b], 0))
        case("concat", "concat(($a, $b, $c), axis=1)", {"a": tview((2, 3), dt), "b": arr((2, 0), dt), "c": arr((2, 1), dt)},
             lambda a, b, c: np.concatenate([a, b, c], 1))
        case("concat", "concat(($a,), axis=-1)", {"a": arr((3,), dt)}, lambda a: a.copy())
        case("stack", "stack(($a, $b))", {"a": arr((2, 3), dt), "b": tview((2, 3), dt)}, lambda a, b: np.stack([a, b]))
        case("stack", "stack(($a, $b, $a), axis=-1)", {"a": arr((2,), dt), "b": arr((2,), dt)},
             lambda a, b: np.stack([a, b, a], -1))
        case("stack", "stack(($a, $b))", {"a": arr((), dt), "b": arr((), dt)}, lambda a, b: np.stack([a, b]))
        case("split", ["$p", "$q", "$r"], {"x": arr((6, 4), dt)}, lambda x: np.split(x, 3),
             pre=["let ($p, $q, $r) = split($x, 3)"], label="split(x, 3)")
        case("split", ["$p", "$q"], {"x": tview((3, 5), dt)}, lambda x: np.split(x, [2], axis=1),
             pre=["let ($p, $q) = split($x, (2, 3), axis=1)"], label="split(x, (2, 3), axis=1)")
        case("split", ["$p", "$q"], {"x": arr((4,), dt)}, lambda x: [x[:0], x],
             pre=["let ($p, $q) = split($x, (0, -1))"], label="split(x, (0, -1))")
        case("tile", "tile($x, (2, 3))", {"x": arr((2, 3), dt)}, lambda x: np.tile(x, (2, 3)))
        case("tile", "tile($x, (2, 1, 2))", {"x": tview((3, 2), dt)}, lambda x: np.tile(x, (2, 1, 2)))
        case("tile", "tile($x, (0,))", {"x": arr((3,), dt)}, lambda x: np.tile(x, (0,)))
    big = arr(BIG, F32)
    case("reshape", "reshape($x, (-1,))", {"x": tview(BIG, F32)}, lambda x: x.reshape(-1))
    case("transpose", "transpose($x)", {"x": big}, lambda x: x.T)
    case("broadcast_to", "broadcast_to($x, (300, 400))", {"x": arr((400,), I64)}, lambda x: np.broadcast_to(x, BIG))
    case("slice", "$x[10:-10:3, ::-7]", {"x": big}, lambda x: x[10:-10:3, ::-7])
    case("set_slice", "$y", {"x": big, "v": arr((400,), F32)}, lambda x, v: _setitem(x, np.s_[::2], v),
         pre=["let $y = $x", "$y[::2] = $v"], label="big y[::2] = row")
    case("concat", "concat(($a, $b), axis=1)", {"a": big, "b": tview(BIG, F32)}, lambda a, b: np.concatenate([a, b], 1))
    case("stack", "stack(($a, $b), axis=2)", {"a": big, "b": big}, lambda a, b: np.stack([a, b], 2))
    case("split", ["$p", "$q"], {"x": tview(BIG, F32)}, lambda x: np.split(x, 2, axis=1),
         pre=["let ($p, $q) = split($x, 2, axis=1)"], label="big split")
    case("tile", "tile($x, (3, 2))", {"x": big}, lambda x: np.tile(x, (3, 2)))
    case("reshape", "reshape($x, (5, 5))", {"x": arr((3, 4), F32)}, error="reshape: cannot reshape (3, 4)", label="reshape size mismatch")


def _setitem(x, idx, v):
    y = x.copy()
    y[idx] = v
    return y


# ---- indexing -------------------------------------------------------------------

def index_cases():
    for dt in (F32, F64, I32, I64, BOOL):
        x = arr((5, 4, 3), dt)
        for axis in (0, 1, -1):
            for ishape, idt in (((3,), I64), ((2, 2), I32), ((), I64), ((0,), I64)):
                n = x.shape[axis]
                idx = rng.integers(-n, n, ishape).astype(idt)
                case("gather", f"gather($x, $i, axis={axis})", {"x": x, "i": idx},
                     lambda x, i, axis=axis: np.take(x, i, axis=axis))
        case("gather", "gather($x, $i)", {"x": tview((6, 4), dt), "i": S(np.array([5, -1, 0, 2, 3, 3], I64))},
             lambda x, i: np.take(x, i, axis=0))
        case("gather", "$x[$i]", {"x": arr((5, 3), dt), "i": np.array([4, 0, 4], I64)}, lambda x, i: x[i],
             label="x[int tensor]")
        case("gather", "$x[:, $i]", {"x": arr((5, 3), dt), "i": np.array([[2, 0], [1, 1]], I32)},
             lambda x, i: x[:, i], label="x[:, int tensor]")
    case("gather", "gather($x, $i, axis=1)", {"x": arr(BIG, F32), "i": rng.integers(0, 400, (500,))},
         lambda x, i: np.take(x, i, axis=1))
    case("gather", "gather($x, $i)", {"x": arr(BIG, F64), "i": rng.integers(-300, 300, (2, 300))},
         lambda x, i: np.take(x, i, axis=0))
    case("gather", "gather($x, $i)", {"x": arr((5,), F32), "i": np.array([1, 7])},
         error="gather: index 7 is out of range for axis 0 with size 5", label="gather out of range")
    case("gather", "gather($x, $i)", {"x": arr((5,), F32), "i": np.array([1.0])},
         error="gather: indices must be int32 or int64, got float64", label="gather float indices")

    # scatter: index assignment with an integer tensor
    for dt in (F32, F64, I32, I64, BOOL):
        case("scatter", "$y", {"x": arr((5, 3), dt), "i": np.array([4, 0, -2], I64), "v": arr((3, 3), dt)},
             lambda x, i, v: _setitem(x, i, v), pre=["let $y = $x", "$y[$i] = $v"], label="y[i] = v")
        case("scatter", "$y", {"x": tview((5, 3), dt), "i": np.array([1, 3], I32), "v": arr((), dt)},
             lambda x, i, v: _setitem(x, i, v), pre=["let $y = $x", "$y[$i] = $v"], label="y[i] = scalar")
        case("scatter", "$y", {"x": arr((4, 6), dt), "i": np.array([[5], [0]], I64), "v": arr((4, 2, 1), dt)},
             lambda x, i, v: _setitem(x, np.s_[:, i], v), pre=["let $y = $x", "$y[:, $i] = $v"],
             label="y[:, i] = v")
    case("scatter", "$y", {"x": arr(BIG, F32), "i": rng.permutation(300)[:150], "v": arr((150, 400), F32)},
         lambda x, i, v: _setitem(x, i, v), pre=["let $y = $x", "$y[$i] = $v"], label="big y[i] = v")

    # scatter_add: the gradient of gather (duplicates add); needs autodiff
    for dt in (F32, F64):
        for axis, ishape in ((0, (4,)), (1, (2, 3)), (0, ())):
            x = arr((5, 4), dt)
            n = x.shape[axis]
            i = rng.integers(-n, n, ishape)
            gshape = x.shape[:axis] + i.shape + x.shape[axis + 1:]
            w = arr(gshape, dt)

            def ref(x, i, w, axis=axis):
                g = np.zeros_like(x)
                gm = np.moveaxis(g, axis, 0)
                wm = np.moveaxis(w.reshape(x.shape[:axis] + (i.size,) + x.shape[axis + 1:]), axis, 0)
                np.add.at(gm, i.reshape(-1) % x.shape[axis], wm)
                return g
            case("scatter_add", "$t.gradient($loss, $x)", {"x": x, "i": i, "w": w}, ref,
                 pre=["with tape() as $t { $t.watch($x); let $loss = sum(gather($x, $i, axis=" + str(axis)
                      + ") * $w) }"],
                 tol=tol_for(dt, "sum"), needs="tape", label=f"gradient of gather axis={axis} (scatter_add)")

    # boolean_mask: x[mask]
    for dt in (F32, I64, BOOL, I32, F64):
        case("boolean_mask", "$x[$m]", {"x": arr((4, 3), dt), "m": arr((4,), BOOL)}, lambda x, m: x[m])
        case("boolean_mask", "$x[$m]", {"x": arr((4, 3), dt), "m": arr((4, 3), BOOL)}, lambda x, m: x[m])
        case("boolean_mask", "$x[$m]", {"x": tview((3, 5, 2), dt), "m": tview((3, 5), BOOL)}, lambda x, m: x[m])
        case("boolean_mask", "$x[$m]", {"x": arr((0, 2), dt), "m": arr((0,), BOOL)}, lambda x, m: x[m])
        case("boolean_mask", "$x[$x > 0]", {"x": arr((6,), dt)} if dt != BOOL else {"x": arr((6,), I64)},
             lambda x: x[x > 0], label="x[x > 0]")
    case("boolean_mask", "$x[$m]", {"x": arr(BIG, F32), "m": arr((300,), BOOL)}, lambda x, m: x[m])
    case("boolean_mask", "$x[$m]", {"x": arr(BIG, F64), "m": arr(BIG, BOOL)}, lambda x, m: x[m])

    for idt in (I32, I64):
        for odt in (None, F64, I32, BOOL):
            for shp in ((), (5,), (2, 3), (0,)):
                i = rng.integers(-2, 6, shp).astype(idt)
                dtxt = "" if odt is None else f', dtype="{DTNAME[np.dtype(odt)]}"'
                case("one_hot", f"one_hot($i, 4{dtxt})", {"i": i},
                     lambda i, odt=odt: (i[..., None] == np.arange(4)).astype(odt or F32))
    case("one_hot", "one_hot($i, 0)", {"i": np.array([0, 1], I64)}, lambda i: np.zeros((2, 0), F32))
    case("one_hot", "one_hot($i, 1000)", {"i": rng.integers(0, 1000, (150,))},
         lambda i: (i[:, None] == np.arange(1000)).astype(F32))
    case("one_hot", "one_hot($i, 3)", {"i": S(np.array([2, 9, 1, 9, 0, 9], I64))},
         lambda i: (i[:, None] == np.arange(3)).astype(F32))

    # several integer-tensor indices (NumPy's rules: broadcast together; in
    # place when adjacent, first otherwise), their gradient (scatter-add)
    for dt in (F32, F64, I64, BOOL):
        x = arr((5, 4, 3), dt)
        i, j = rng.integers(-5, 5, (6,)), rng.integers(-4, 4, (6,))
        case("gather", "$x[$i, $j]", {"x": x, "i": i, "j": j}, lambda x, i, j: x[i, j], label="x[i, j]")
        case("gather", "$x[$i, $j, 1]", {"x": x, "i": i[:2].reshape(2, 1), "j": j[:3].astype(I32)},
             lambda x, i, j: x[i, j, 1], label="x[i, j, 1] broadcast")
        case("gather", "$x[:, $j, $k]", {"x": x, "j": j[:4], "k": rng.integers(-3, 3, (4,))},
             lambda x, j, k: x[:, j, k], label="x[:, j, k]")
        case("gather", "$x[$i, :, $k]", {"x": tview((5, 4, 3), dt), "i": i[:3], "k": rng.integers(0, 3, (2, 1))},
             lambda x, i, k: x[i, :, k], label="x[i, :, k] (first)")
        case("gather", "$x[1, $j, nil, $k]", {"x": x, "j": j[:2], "k": rng.integers(0, 3, (2,))},
             lambda x, j, k: x[1, j, None, k], label="x[1, j, nil, k]")
    case("gather", "$x[arange(4), $l]", {"x": arr((4, 10), F32), "l": rng.integers(0, 10, (4,))},
         lambda x, l: x[np.arange(4), l], label="logp[arange(n), labels]")
    case("gather", "$x[$i, $j]", {"x": arr((3, 4), F32), "i": np.array([0, 2]), "j": np.array([1, 4])},
         error="gather: index 4 is out of range for axis 1 with size 4", label="x[i, j] out of range")
    case("gather", "$x[$i, $j]", {"x": arr((3, 4), F32), "i": np.array([0, 2]), "j": np.array([1, 2, 3])},
         error="shapes (2,) and (3,) cannot be broadcast", label="x[i, j] shapes differ")
    for dt in (F32, F64):
        x = arr((4, 5, 3), dt)
        i, j = rng.integers(-4, 4, (7,)), rng.integers(0, 5, (7,))
        w = arr((7, 3), dt)

        def ref2(x, i, j, w):
            g = np.zeros_like(x)
            np.add.at(g, (i, j), w)
            return g
        case("scatter_add", "$t.gradient($loss, $x)", {"x": x, "i": i, "j": j, "w": w}, ref2,
             pre=["with tape() as $t { $t.watch($x); let $loss = sum($x[$i, $j] * $w) }"],
             tol=tol_for(dt, "sum"), needs="tape", label="gradient of x[i, j] (scatter_add)")

    # assignment through several integer-tensor indices (and through one whose
    # result axes go first): v placed as NumPy places it, duplicates (in
    # i, j below) the last write in C order; += reads, adds and writes once
    for dt in (F32, F64, I32, I64, BOOL):
        x = arr((5, 4, 3), dt)
        i, j = np.array([3, -1, 0, 3, 2]), np.array([1, 2, 2, 1, -4])
        case("scatter", "$y", {"x": x, "i": i, "j": j, "v": arr((5, 3), dt)},
             lambda x, i, j, v: _setitem(x, (i, j), v), pre=["let $y = $x", "$y[$i, $j] = $v"],
             label="y[i, j] = v (duplicates)")
        case("scatter", "$y", {"x": tview((5, 4, 3), dt), "i": i[:2].reshape(2, 1), "j": j[:3].astype(I32),
                               "v": arr((3,), dt)},
             lambda x, i, j, v: _setitem(x, (i, j), v), pre=["let $y = $x", "$y[$i, $j] = $v"],
             label="y[i, j] = row, broadcast indices")
        case("scatter", "$y", {"x": x, "j": j[:4], "k": np.array([0, -1, 2, 1]), "v": arr((5, 1), dt)},
             lambda x, j, k, v: _setitem(x, np.s_[:, j, k], v), pre=["let $y = $x", "$y[:, $j, $k] = $v"],
             label="y[:, j, k] = v")
        case("scatter", "$y", {"x": x, "i": i[:3], "k": np.array([[2], [0]]), "v": arr((2, 3, 4), dt)},
             lambda x, i, k, v: _setitem(x, np.s_[i, :, k], v), pre=["let $y = $x", "$y[$i, :, $k] = $v"],
             label="y[i, :, k] = v (first)")
        case("scatter", "$y", {"x": x, "j": np.array([2, 0, -1]), "v": arr((3, 4), dt)},
             lambda x, j, v: _setitem(x, np.s_[1, :, j], v), pre=["let $y = $x", "$y[1, :, $j] = $v"],
             label="y[1, :, j] = v (first)")
        case("scatter", "$y", {"x": x, "j": j[:2], "k": np.array([1, 2]), "v": arr((), dt)},
             lambda x, j, k, v: _setitem(x, np.s_[2:0:-1, j, k], v), pre=["let $y = $x", "$y[2:0:-1, $j, $k] = $v"],
             label="y[2:0:-1, j, k] = scalar")
        if dt != BOOL:
            def iadd(x, i, j, v):
                y = x.copy()
                y[i, j] += v
                return y
            case("scatter", "$y", {"x": x, "i": i, "j": j, "v": arr((5, 3), dt)}, iadd,
                 pre=["let $y = $x", "$y[$i, $j] += $v"], label="y[i, j] += v (duplicates: once)")
    case("scatter", "$y", {"x": arr((4, 10), F32), "l": np.array([3, 9, 0, 3])},
         lambda x, l: _setitem(x, (np.arange(4), l), 0.0), pre=["let $y = $x", "$y[arange(4), $l] = 0.0"],
         label="y[arange(n), labels] = 0.0")
    case("scatter", "$y", {"x": arr(BIG, F32), "i": rng.integers(0, 300, (500,)), "j": rng.integers(0, 400, (500,)),
                           "v": arr((500,), F32)},
         lambda x, i, j, v: _setitem(x, (i, j), v), pre=["let $y = $x", "$y[$i, $j] = $v"], label="big y[i, j] = v")
    case("scatter", "$y", {"x": arr((3, 4), F32), "i": np.array([0, 2]), "j": np.array([1, 4]), "v": arr((2,), F32)},
         pre=["let $y = $x", "$y[$i, $j] = $v"],
         error="gather: index 4 is out of range for axis 1 with size 4", label="y[i, j] = v out of range")
    case("scatter", "$y", {"x": arr((3, 4), F32), "i": np.array([0, 2]), "j": np.array([1, 3]), "v": arr((3,), F32)},
         pre=["let $y = $x", "$y[$i, $j] = $v"],
         error="scatter: values of shape (3,) cannot be broadcast to (2,)", label="y[i, j] = v wrong shape")


# ---- neural-net ops ------------------------------------------------------------

def _tf_geom(n, k, s, d, same):
    keff = (k - 1) * d + 1
    if same:
        o = -(-n // s)
        tot = max((o - 1) * s + keff - n, 0)
        return o, tot // 2, tot - tot // 2
    return (n - keff) // s + 1, 0, 0


def conv_ref(x, w, stride=(1, 1), dilation=(1, 1), same=False):
    """Direct definition of a TensorFlow-style NHWC/HWIO convolution."""
    sh, sw = stride
    dh, dw = dilation
    kh, kw, _, co = w.shape
    oh, pt, pb = _tf_geom(x.shape[1], kh, sh, dh, same)
    ow, pl, pr = _tf_geom(x.shape[2], kw, sw, dw, same)
    xp = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    out = np.zeros((x.shape[0], oh, ow, co))
    for a in range(kh):
        for b in range(kw):
            patch = xp[:, a * dh: a * dh + (oh - 1) * sh + 1: sh, b * dw: b * dw + (ow - 1) * sw + 1: sw, :]
            out += patch @ w[a, b].astype(np.float64)
    return out.astype(x.dtype)


def pool_ref(x, size, stride, same, mx):
    kh, kw = size
    sh, sw = stride
    n, h, w, c = x.shape
    oh, pt, _ = _tf_geom(h, kh, sh, 1, same)
    ow, pl, _ = _tf_geom(w, kw, sw, 1, same)
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            h0, w0 = max(i * sh - pt, 0), max(j * sw - pl, 0)
            h1, w1 = min(i * sh - pt + kh, h), min(j * sw - pl + kw, w)
            win = x[:, h0:h1, w0:w1, :].astype(np.float64)
            out[:, i, j, :] = win.max(axis=(1, 2)) if mx else win.mean(axis=(1, 2))
    return out.astype(x.dtype)


def pair_text(p):
    return str(p[0]) if p[0] == p[1] else f"({p[0]}, {p[1]})"


def nn_cases():
    convs = [((1, 5, 5, 3), (3, 3, 3, 8), (1, 1), (1, 1), False),
             ((2, 7, 6, 2), (2, 3, 2, 4), (1, 1), (1, 1), True),
             ((2, 9, 8, 3), (3, 3, 3, 5), (2, 2), (1, 1), True),
             ((1, 9, 9, 2), (3, 2, 2, 3), (2, 3), (1, 1), False),
             ((2, 8, 8, 2), (3, 3, 2, 2), (1, 1), (2, 2), True),
             ((3, 4, 4, 5), (1, 1, 5, 6), (1, 1), (1, 1), False),
             ((0, 5, 5, 2), (3, 3, 2, 2), (1, 1), (1, 1), True),
             ((1, 1, 1, 1), (1, 1, 1, 1), (1, 1), (1, 1), False)]
    for dt in (F32, F64):
        for xs, ws, st, dl, same in convs:
            args = []
            if st != (1, 1):
                args.append(f"stride={pair_text(st)}")
            if same:
                args.append('padding="same"')
            if dl != (1, 1):
                args.append(f"dilation={pair_text(dl)}")
            extra = "".join(", " + a for a in args)
            case("conv2d", f"conv2d($x, $w{extra})", {"x": arr(xs, dt), "w": arr(ws, dt)},
                 lambda x, w, st=st, dl=dl, same=same: conv_ref(x, w, st, dl, same), tol=tol_for(dt, "sum"))
        case("conv2d", 'conv2d($x, $w, padding="same")', {"x": T(arr((3, 6, 5, 2), dt)), "w": arr((3, 3, 3, 4), dt)},
             lambda x, w: conv_ref(x, w, same=True), tol=tol_for(dt, "sum"))
    case("conv2d", 'conv2d($x, $w, stride=2, padding="same")', {"x": arr((16, 32, 32, 8), F32), "w": arr((3, 3, 8, 16), F32)},
         lambda x, w: conv_ref(x, w, (2, 2), same=True), tol=tol_for(F32, "sum"))
    case("conv2d", "conv2d($x, $w)", {"x": arr((1, 5, 5, 3), F32), "w": arr((3, 3, 4, 8), F32)},
         error="conv2d: input channels 3 do not match filter input channels 4 (input (1, 5, 5, 3), filter (3, 3, 4, 8))",
         label="conv2d channel mismatch")
    pools = [((2, 5, 5, 3), (2, 2), None, False), ((2, 5, 5, 3), (2, 2), (2, 2), True),
             ((1, 7, 4, 2), (3, 3), (1, 1), True), ((1, 7, 6, 2), (3, 2), (2, 1), True),
             ((3, 6, 6, 1), (2, 3), (1, 2), False), ((1, 1, 1, 1), (1, 1), None, False),
             ((0, 4, 4, 2), (2, 2), None, False), ((1, 5, 5, 2), (5, 5), (2, 2), True)]
    for name, mx in (("max_pool2d", True), ("avg_pool2d", False)):
        for dt in (F32, F64):
            for xs, size, stride, same in pools:
                extra = (f", stride={pair_text(stride)}" if stride else "") + (', padding="same"' if same else "")
                case(name, f"{name}($x, {pair_text(size)}{extra})", {"x": arr(xs, dt)},
                     lambda x, size=size, stride=stride, same=same, mx=mx: pool_ref(x, size, stride or size, same, mx),
                     tol=tol_for(dt, "sum") if not mx else None)
            case(name, f'{name}($x, 2, stride=1, padding="same")', {"x": T(arr((3, 5, 6, 2), dt))},
                 lambda x, mx=mx: pool_ref(x, (2, 2), (1, 1), True, mx), tol=tol_for(dt, "sum") if not mx else None)
        case(name, f'{name}($x, 3, stride=2, padding="same")', {"x": arr((8, 64, 64, 8), F32)},
             lambda x, mx=mx: pool_ref(x, (3, 3), (2, 2), True, mx), tol=tol_for(F32, "sum") if not mx else None)


# ---- backward ops of conv2d and pooling (gradients through a tape) ---------------

def conv_grads_ref(x, w, dy, stride=(1, 1), dilation=(1, 1), same=False):
    """(dx, dw) of sum(conv_ref(x, w) * dy): the adjoint of the patch sum."""
    sh, sw = stride
    dh, dw = dilation
    kh, kw, _, co = w.shape
    h, wd = x.shape[1], x.shape[2]
    oh, pt, pb = _tf_geom(h, kh, sh, dh, same)
    ow, pl, pr = _tf_geom(wd, kw, sw, dw, same)
    xp = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    g = dy.astype(np.float64)
    dxp = np.zeros_like(xp)
    dwr = np.zeros(w.shape)
    for a in range(kh):
        for b in range(kw):
            sl = (slice(None), slice(a * dh, a * dh + (oh - 1) * sh + 1, sh),
                  slice(b * dw, b * dw + (ow - 1) * sw + 1, sw), slice(None))
            dwr[a, b] = np.einsum("nijc,nijo->co", xp[sl], g)
            dxp[sl] += g @ w[a, b].astype(np.float64).T
    return dxp[:, pt:pt + h, pl:pl + wd, :].astype(x.dtype), dwr.astype(w.dtype)


def pool_windows(x, size, stride, same):
    kh, kw = size
    sh, sw = stride
    oh, pt, _ = _tf_geom(x.shape[1], kh, sh, 1, same)
    ow, pl, _ = _tf_geom(x.shape[2], kw, sw, 1, same)
    for i in range(oh):
        for j in range(ow):
            h0, w0 = max(i * sh - pt, 0), max(j * sw - pl, 0)
            h1, w1 = min(i * sh - pt + kh, x.shape[1]), min(j * sw - pl + kw, x.shape[2])
            yield i, j, h0, h1, w0, w1


def first_max(x, h0, h1, w0, w1):
    """Per (n, c): the (row, col) of the first maximum of the window (row-major)."""
    win = x[:, h0:h1, w0:w1, :].astype(np.float64)
    k = np.argmax(win.reshape(x.shape[0], -1, x.shape[3]), axis=1)
    return h0 + k // (w1 - w0), w0 + k % (w1 - w0)


def pool_grad_ref(x, dy, size, stride, same, mx):
    dx = np.zeros(x.shape)
    n_idx, c_idx = np.meshgrid(np.arange(x.shape[0]), np.arange(x.shape[3]), indexing="ij")
    for i, j, h0, h1, w0, w1 in pool_windows(x, size, stride, same):
        if mx:
            r, q = first_max(x, h0, h1, w0, w1)
            np.add.at(dx, (n_idx, r, q, c_idx), dy[:, i, j, :].astype(np.float64))
        else:
            dx[:, h0:h1, w0:w1, :] += dy[:, i, j, :][:, None, None, :] / ((h1 - h0) * (w1 - w0))
    return dx.astype(x.dtype)


def pool_select_ref(x, hv, size, stride, same):
    oh = len({i for i, *_ in pool_windows(x, size, stride, same)})
    ow = len({j for _, j, *_ in pool_windows(x, size, stride, same)})
    out = np.zeros((x.shape[0], oh, ow, x.shape[3]), x.dtype)
    n_idx, c_idx = np.meshgrid(np.arange(x.shape[0]), np.arange(x.shape[3]), indexing="ij")
    for i, j, h0, h1, w0, w1 in pool_windows(x, size, stride, same):
        r, q = first_max(x, h0, h1, w0, w1)
        out[:, i, j, :] = hv[n_idx, r, q, c_idx]
    return out


def nn_grad_cases():
    convs = [((1, 5, 5, 3), (3, 3, 3, 4), (1, 1), (1, 1), False),
             ((2, 7, 6, 2), (2, 3, 2, 3), (1, 1), (1, 1), True),
             ((2, 9, 8, 3), (3, 3, 3, 2), (2, 2), (1, 1), True),
             ((1, 9, 9, 2), (3, 2, 2, 3), (2, 3), (1, 1), False),
             ((2, 8, 8, 2), (3, 3, 2, 2), (1, 1), (2, 2), True),
             ((3, 4, 4, 5), (1, 1, 5, 6), (1, 1), (1, 1), False)]
    for dt in (F32, F64):
        for xs, ws, st, dl, same in convs:
            args = []
            if st != (1, 1):
                args.append(f"stride={pair_text(st)}")
            if same:
                args.append('padding="same"')
            if dl != (1, 1):
                args.append(f"dilation={pair_text(dl)}")
            extra = "".join(", " + a for a in args)
            x, w = arr(xs, dt), arr(ws, dt)
            dy = arr(conv_ref(x, w, st, dl, same).shape, dt)
            pre = ["with tape() as $t { $t.watch($x); $t.watch($w); let $l = sum(conv2d($x, $w" + extra + ") * $dy) }",
                   "let $g = $t.gradient($l, ($x, $w))"]
            case("conv2d_backprop_input", "$g[0]", {"x": x, "w": w, "dy": dy},
                 lambda x, w, dy, st=st, dl=dl, same=same: conv_grads_ref(x, w, dy, st, dl, same)[0],
                 pre=pre, tol=tol_for(dt, "sum"), needs="tape", label=f"gradient of conv2d{extra} w.r.t. x")
            case("conv2d_backprop_filter", "$g[1]", {"x": x, "w": w, "dy": dy},
                 lambda x, w, dy, st=st, dl=dl, same=same: conv_grads_ref(x, w, dy, st, dl, same)[1],
                 pre=pre, tol=tol_for(dt, "sum"), needs="tape", label=f"gradient of conv2d{extra} w.r.t. w")
    pools = [((2, 5, 5, 3), (2, 2), None, False), ((2, 5, 5, 3), (2, 2), (2, 2), True),
             ((1, 7, 4, 2), (3, 3), (1, 1), True), ((1, 7, 6, 2), (3, 2), (2, 1), True),
             ((3, 6, 6, 1), (2, 3), (1, 2), False), ((1, 5, 5, 2), (5, 5), (2, 2), True)]
    for dt in (F32, F64):
        for xs, size, stride, same in pools:
            extra = (f", stride={pair_text(stride)}" if stride else "") + (', padding="same"' if same else "")
            x = arr(xs, dt)
            ys = pool_ref(x, size, stride or size, same, True).shape
            dy = arr(ys, dt)
            for name, mx in (("max_pool2d", True), ("avg_pool2d", False)):
                case(name + "_grad", "$t.gradient($l, $x)", {"x": x, "dy": dy},
                     lambda x, dy, size=size, stride=stride, same=same, mx=mx:
                         pool_grad_ref(x, dy, size, stride or size, same, mx),
                     pre=[f"with tape() as $t {{ $t.watch($x); let $l = sum({name}($x, {pair_text(size)}{extra}) * $dy) }}"],
                     tol=tol_for(dt, "sum"), needs="tape", label=f"gradient of {name}({pair_text(size)}{extra})")
            # the second-order gradient through max_pool2d: d/d(dy) of sum(max_pool2d_grad(x, dy) * h)
            hv = arr(xs, dt)
            case("max_pool2d_select", "$t2.gradient($l2, $dy)", {"x": x, "dy": dy, "h": hv},
                 lambda x, dy, h, size=size, stride=stride, same=same: pool_select_ref(x, h, size, stride or size, same),
                 pre=["with tape() as $t2 { $t2.watch($dy); with tape() as $t1 { $t1.watch($x); "
                      f"let $l1 = sum(max_pool2d($x, {pair_text(size)}{extra}) * $dy) }}; "
                      "let $l2 = sum($t1.gradient($l1, $x) * $h) }"],
                 tol=tol_for(dt, "sum"), needs="tape", label=f"second-order gradient of max_pool2d({pair_text(size)}{extra})")

    # relu's gradient is the op relu_grad(dy, x): dy where x > 0, else 0 (exact);
    # the large case runs in parallel chunks
    for dt in (F32, F64):
        for xs in ((3, 4), (2, 300, 200)):
            x = arr(xs, dt).copy()
            x.flat[::7] = 0  # the kink: gradient 0 at 0
            dy = arr(xs, dt)
            case("relu_grad", "$t.gradient($l, $x)", {"x": x, "dy": dy},
                 lambda x, dy: np.where(x > 0, dy, 0).astype(dy.dtype),
                 pre=["with tape() as $t { $t.watch($x); let $l = sum(relu($x) * $dy) }"],
                 tol=None, needs="tape", label=f"gradient of relu {xs}")

    # conv2d_bias / conv2d_bias_relu: what the optimizer makes of conv2d + b
    # (+ relu) in a staged function (graph/opt_conv.c); one case a conv path
    # of tensor/kernels_nn.c (direct float32, register tiles with dilation,
    # chunked OpenBLAS with few channels, pointwise, float64 batched)
    fused = [((2, 6, 6, 3), (3, 3, 3, 8), (1, 1), (1, 1), True),
             ((2, 7, 6, 2), (2, 3, 2, 4), (1, 1), (1, 1), True),
             ((2, 9, 8, 3), (3, 3, 3, 8), (2, 2), (1, 2), False),
             ((3, 4, 4, 5), (1, 1, 5, 6), (1, 1), (1, 1), False),
             ((2, 32, 32, 8), (3, 3, 8, 8), (1, 1), (1, 1), True)]
    for dt in (F32, F64):
        for xs, ws, st, dl, same in fused:
            args = []
            if st != (1, 1):
                args.append(f"stride={pair_text(st)}")
            if same:
                args.append('padding="same"')
            if dl != (1, 1):
                args.append(f"dilation={pair_text(dl)}")
            extra = "".join(", " + a for a in args)
            for op, body in (("conv2d_bias_relu", f"relu(conv2d(x, w{extra}) + b)"),
                             ("conv2d_bias", f"b + conv2d(x, w{extra})")):
                def ref(x, w, b, st=st, dl=dl, same=same, relu=op.endswith("relu")):
                    y = conv_ref(x, w, st, dl, same) + b
                    return np.maximum(y, 0).astype(y.dtype) if relu else y
                case(op, "$f($x, $w, $b)", {"x": arr(xs, dt), "w": arr(ws, dt), "b": arr(ws[3:], dt)},
                     ref, pre=[f"let $f = staged(fn (x, w, b) {{ return {body} }})",
                               "$f($x, $w, $b)"],  # the first call traces; the second runs the graph
                     tol=tol_for(dt, "sum"),
                     label=f"staged {body}")
    # fused batch normalization over the last axis (tensor/kernels_bn.c): the
    # forward with its batch statistics, the inference form, and the gradient
    # (the op batch_norm_grad) in closed form; the large case runs by parts
    def bn_ref(x, g, b, eps):
        ax = tuple(range(x.ndim - 1))
        m = x.astype(np.float64).mean(axis=ax)
        v = x.astype(np.float64).var(axis=ax)
        y = (x - m) / np.sqrt(v + eps) * g + b
        return [y.astype(x.dtype), m.astype(x.dtype), v.astype(x.dtype)]

    def bn_grad_ref(x, g, dy, eps):
        ax = tuple(range(x.ndim - 1))
        x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
        n = x.size // x.shape[-1]
        m, v = x64.mean(axis=ax), x64.var(axis=ax)
        r = 1 / np.sqrt(v + eps)
        xh = (x64 - m) * r
        db, dg = dy64.sum(axis=ax), (dy64 * xh).sum(axis=ax)
        dx = g * r * (dy64 - db / n - xh * dg / n)
        return [dx.astype(x.dtype), dg.astype(x.dtype), db.astype(x.dtype)]

    for dt in (F32, F64):
        for xs in ((6, 3), (2, 3, 4, 5), (8, 8, 8, 64)):
            x, g, b, dy = arr(xs, dt), arr(xs[-1:], dt), arr(xs[-1:], dt), arr(xs, dt)
            tol = tol_for(dt, "sum")
            case("batch_norm_train", ["$y", "$m", "$v"], {"x": x, "g": g, "b": b},
                 lambda x, g, b: bn_ref(x, g, b, 1e-3), pre=["let ($y, $m, $v) = batch_norm_train($x, $g, $b, 0.001)"],
                 tol=tol, label=f"batch_norm_train {xs}")
            case("batch_norm_infer", "batch_norm_infer($x, $g, $b, $m, $v, eps=0.01)",
                 {"x": x, "g": g, "b": b, "m": arr(xs[-1:], dt), "v": np.abs(arr(xs[-1:], dt)) + 0.5},
                 lambda x, g, b, m, v: ((x - m) / np.sqrt(v + 0.01) * g + b).astype(x.dtype),
                 tol=tol, label=f"batch_norm_infer {xs}")
            case("batch_norm_grad", ["$g2[0]", "$g2[1]", "$g2[2]"], {"x": x, "g": g, "b": b, "dy": dy},
                 lambda x, g, b, dy: bn_grad_ref(x, g, dy, 1e-3),
                 pre=["with tape() as $t { $t.watch($x); $t.watch($g); $t.watch($b); "
                      "let $l = sum(batch_norm_train($x, $g, $b, 0.001)[0] * $dy) }",
                      "let $g2 = $t.gradient($l, ($x, $g, $b))"],
                 tol=tol, needs="tape", label=f"gradient of batch_norm_train {xs}")


# ---- random ops -----------------------------------------------------------------

def stats(outs, ins, mean, std, lo=None, hi=None, dtype=None, tol_mean=0.01, tol_std=0.01):
    for k, y in enumerate(outs):
        if dtype is not None and y.dtype != np.dtype(dtype):
            return f"output {k}: dtype {y.dtype}, expected {np.dtype(dtype)}"
        if y.size < 1000:
            return f"output {k}: only {y.size} values"
        if lo is not None and (y.min() < lo or y.max() >= hi):
            return f"output {k}: values outside [{lo}, {hi}): min {y.min()}, max {y.max()}"
        if abs(y.mean() - mean) > tol_mean or abs(y.std() - std) > tol_std:
            return f"output {k}: mean {y.mean():.5f} std {y.std():.5f}, expected {mean:.5f} {std:.5f}"
    return None


def check_repro(outs, ins):
    a, b, c = outs
    if not np.array_equal(a, b):
        return "the same seed gave different draws"
    if np.array_equal(a, c):
        return "consecutive draws were identical"
    return None


def random_cases():
    n = 100000
    for dt in (F32, F64):
        d = DTNAME[np.dtype(dt)]
        case("randn", f'randn(({n},), dtype="{d}")', pre=["seed(1)"], label=f"randn {d} statistics",
             check=lambda o, i, dt=dt: stats(o, i, 0.0, 1.0, dtype=dt, tol_mean=0.015, tol_std=0.01))
        case("rand", f'rand((400, 250), dtype="{d}")', pre=["seed(2)"], label=f"rand {d} statistics",
             check=lambda o, i, dt=dt: stats(o, i, 0.5, math.sqrt(1 / 12), 0.0, 1.0, dtype=dt, tol_mean=0.005,
                                             tol_std=0.005))
    case("randn", "randn((3, 0))", ref=lambda: np.zeros((3, 0), F32))
    case("randn", ["$a", "$b", "$c"], pre=["seed(7)", "let $a = randn((50, 40))", "seed(7)",
                                           "let $b = randn((50, 40))", "let $c = randn((50, 40))"],
         check=check_repro, label="randn reproducible after seed(7)")
    case("randn", ["$a"], pre=["seed(7)", "let $a = randn((50, 40))"],
         check=lambda o, i: None if o[0].shape == (50, 40) and o[0].dtype == F32 else f"shape {o[0].shape} {o[0].dtype}",
         label="randn shape and dtype")
    case("rand", ["$a", "$b", "$c"], pre=["seed(3)", "let $a = rand((1000,))", "seed(3)",
                                          "let $b = rand((1000,))", "let $c = rand((1000,))"],
         check=check_repro, label="rand reproducible after seed(3)")
    case("randint", f"randint(-3, 5, ({n},))", pre=["seed(4)"], label="randint statistics",
         check=lambda o, i: stats(o, i, 0.5, math.sqrt((8 ** 2 - 1) / 12), -3, 5, dtype=I64, tol_mean=0.03,
                                  tol_std=0.02) or (None if set(np.unique(o[0])) == set(range(-3, 5))
                                                    else "not every value in [-3, 5) was drawn"))
    case("randint", 'randint(0, 2, (1000,), dtype="int32")', pre=["seed(4)"], label="randint int32",
         check=lambda o, i: stats(o, i, 0.5, 0.5, 0, 2, dtype=I32, tol_mean=0.08, tol_std=0.02))
    case("randint", ["$a", "$b", "$c"], pre=["seed(9)", "let $a = randint(0, 1000, (500,))", "seed(9)",
                                             "let $b = randint(0, 1000, (500,))", "let $c = randint(0, 1000, (500,))"],
         check=check_repro, label="randint reproducible after seed(9)")
    case("randint", "randint(5, 5, (3,))", error="randint: high (5) must be greater than low (5)", label="randint with low >= high is an error")

    def check_dropout(outs, ins, rate):
        x = ins["x"]
        y = outs[0]
        if y.shape != x.shape or y.dtype != x.dtype:
            return f"shape/dtype {y.shape} {y.dtype}"
        kept = y != 0
        if abs(kept.mean() - (1 - rate)) > 0.01:
            return f"kept fraction {kept.mean():.4f}, expected {1 - rate}"
        if not np.allclose(y[kept], x[kept] / (1 - rate), rtol=1e-6):
            return "kept values are not scaled by 1/(1 - rate)"
        return None
    for dt in (F32, F64):
        x = arr(BIG, dt, "pos")
        case("dropout", "dropout($x, 0.3)", {"x": x}, check=lambda o, i: check_dropout(o, i, 0.3),
             pre=["seed(5)"], label="dropout rate 0.3")
    case("dropout", "dropout($x, 0.5)", {"x": tview((500, 300), F32, "pos")}, check=lambda o, i: check_dropout(o, i, 0.5),
         label="dropout on a view")
    case("dropout", "dropout($x, 0.0)", {"x": arr((4, 5), F32)}, lambda x: x)
    case("dropout", ["$a", "$b"], {"x": arr((1000,), F32, "pos")},
         pre=["let $a = dropout($x, 0.5, seed=3)", "let $b = dropout($x, 0.5, seed=3)"],
         check=lambda o, i: None if np.array_equal(o[0], o[1]) else "dropout(seed=3) differed between calls",
         label="dropout with a fixed seed")
    case("dropout", "dropout($x, 1.0)", {"x": arr((4,), F32)}, error="dropout: rate must be in [0, 1)",
         label="dropout rate 1 is an error")

    # randperm (permutation, shuffle, choice without replacement) and choice
    # (choice with p): exact properties, and frequencies against the
    # probabilities NumPy computes
    def check_perms(outs, ins, n, reps):
        a = outs[0]
        if a.shape != (reps, n) or a.dtype != I64:
            return f"shape/dtype {a.shape} {a.dtype}"
        if not (np.sort(a, axis=1) == np.arange(n)).all():
            return "a row is not a permutation of 0..n-1"
        counts = np.stack([(a == v).sum(axis=0) for v in range(n)])  # [value, position]
        if np.abs(counts - reps / n).max() > 6 * math.sqrt(reps / n * (1 - 1 / n)):
            return f"value/position counts far from uniform: {counts.tolist()}"
        return None
    case("randperm", "stack($l)", pre=["seed(6)", "let $l = list()", "for i in range(4000) { $l.push(permutation(5)) }"],
         check=lambda o, i: check_perms(o, i, 5, 4000), label="permutation(5) is uniform over positions")
    case("randperm", ["$a", "$b", "$c"], pre=["seed(8)", "let $a = permutation(300)", "seed(8)",
                                             "let $b = permutation(300)", "let $c = permutation(300)"],
         check=check_repro, label="permutation reproducible after seed(8)")
    case("randperm", "permutation(0)", ref=lambda: np.zeros((0,), I64))
    case("randperm", "shuffle($x)", {"x": arr((50, 3), F32)},
         check=lambda o, i: None if np.array_equal(np.sort(o[0][:, 0]), np.sort(i["x"][:, 0])) and
         {tuple(r) for r in o[0]} == {tuple(r) for r in i["x"]} else "shuffle(x) is not x's rows reordered",
         label="shuffle reorders rows")
    pr = np.array([0.1, 0.2, 0.3, 0.4])
    for dt in (F32, F64):
        case("choice", "choice(4, 200000, p=$p)", {"p": pr.astype(dt)},
             check=lambda o, i: None if np.abs(np.bincount(o[0], minlength=4) / 200000 - pr).max() < 0.005
             else f"frequencies {np.bincount(o[0], minlength=4) / 200000}, expected {pr}",
             pre=["seed(12)"], label=f"choice with p ({DTNAME[np.dtype(dt)]}) matches p")
    pw = np.array([0.6, 0.3, 0.1])
    # without replacement: P(second = j) = sum_i p_i p_j / (1 - p_i), i != j
    second = np.array([sum(pw[i] * pw[j] / (1 - pw[i]) for i in range(3) if i != j) for j in range(3)])
    case("choice", "stack($l)", {"p": pw},
         pre=["seed(13)", "let $l = list()", "for i in range(5000) { $l.push(choice(3, 2, replace=false, p=$p)) }"],
         check=lambda o, i: (None if (o[0][:, 0] != o[0][:, 1]).all() else "a value drawn twice") or
         (None if np.abs(np.bincount(o[0][:, 0], minlength=3) / 5000 - pw).max() < 0.025 and
          np.abs(np.bincount(o[0][:, 1], minlength=3) / 5000 - second).max() < 0.025
          else f"frequencies {np.bincount(o[0][:, 0], minlength=3) / 5000} {np.bincount(o[0][:, 1], minlength=3) / 5000}, "
               f"expected {pw} {second}"),
         label="choice without replacement, with p")
    case("choice", "choice(5, 3, replace=false, p=$p)", {"p": np.array([0.5, 0.0, 0.5, 0.0, 0.0])},
         error="choice: p has 2 non-zero entries, fewer than the 3 samples", label="choice: too few non-zero p")
    case("choice", "choice(2, 3, p=$p)", {"p": np.array([0.5, 0.6])},
         error="choice: probabilities do not sum to 1", label="choice: p must sum to 1")


# ---- linear algebra (tensor/kernels_lapack.c, interp/builtins_linalg.c) ---------
# outer, diag, trace, einsum and norm are built-ins composed of other ops: their
# cases carry their own names (LINALG_COMPOSITES), besides the ops of the table.

LINALG_COMPOSITES = {"outer", "diag", "trace", "einsum", "norm"}


def well_conditioned(shape, dt):
    """Random square matrices (..., n, n) with a dominant diagonal."""
    n = shape[-1]
    return (arr(shape, F64) / 3 + np.eye(n) * (n + 2)).astype(dt)


def spd(shape, dt):
    """Symmetric positive definite matrices m m^T + n I."""
    m = arr(shape, F64) / 3
    return (m @ np.swapaxes(m, -1, -2) + np.eye(shape[-1]) * shape[-1]).astype(dt)


def f64ref(fn, out_dt):
    """fn on float64 copies of the inputs, cast to out_dt."""
    return lambda **kw: np.asarray(fn(**{k: v.astype(np.float64) for k, v in kw.items()})).astype(out_dt)


def linalg_cases():
    for dt in (F32, F64, I32, I64, BOOL):
        for name, npf in (("tril", np.tril), ("triu", np.triu)):
            for shp, k in (((3, 4), 0), ((4, 3), 1), ((2, 3, 4), -1), ((3, 3), 5), ((3, 3), -5), ((0, 3), 0)):
                kt = "" if k == 0 else f", k={k}" if k > 0 else f", {k}"
                case(name, f"{name}($x{kt})", {"x": arr(shp, dt)}, lambda x, npf=npf, k=k: npf(x, k))
            case(name, f"{name}($x)", {"x": tview((4, 5), dt)}, lambda x, npf=npf: npf(x))
    case("tril", "tril($x)", {"x": arr(BIG, F32)}, lambda x: np.tril(x))
    case("tril", "tril($x)", {"x": arr((4,), F32)}, error="tril: expected a matrix (a tensor of rank >= 2), got shape (4,)",
         label="tril of a 1-D tensor is an error")

    for dt in (F32, F64):
        tol = tol_for(dt, "loose")
        for shp in ((1, 1), (3, 3), (2, 4, 4), (0, 0), (2, 0, 0), (40, 40)):
            case("inv", "inv($a)", {"a": well_conditioned(shp, dt)}, f64ref(lambda a: np.linalg.inv(a), dt), tol=tol)
            case("det", "det($a)", {"a": well_conditioned(shp, dt) / 4}, f64ref(lambda a: np.linalg.det(a), dt), tol=tol)
            case("cholesky", "cholesky($a)", {"a": spd(shp, dt)}, f64ref(lambda a: np.linalg.cholesky(a), dt), tol=tol)
        case("inv", "inv($a)", {"a": T(well_conditioned((5, 5), dt))}, f64ref(lambda a: np.linalg.inv(a), dt), tol=tol)
        case("det", "det($a)", {"a": T(arr((4, 4), dt))}, f64ref(lambda a: np.linalg.det(a), dt), tol=tol)
        case("det", "det($a)", {"a": np.array([[1, 2], [2, 4]], dt)}, lambda a, dt=dt: np.array(0, dt),
             label="det of a singular matrix is 0")
        # cholesky reads the lower triangle only
        lo = spd((4, 4), dt)
        case("cholesky", "cholesky($a)", {"a": np.tril(lo) + np.triu(arr((4, 4), dt), 1)},
             lambda a, dt=dt: np.linalg.cholesky(np.tril(a).astype(F64) + np.tril(a, -1).T.astype(F64)).astype(dt),
             tol=tol, label="cholesky reads the lower triangle")
        for sa, sb in (((3, 3), (3,)), ((3, 3), (3, 2)), ((2, 3, 3), (3,)), ((2, 3, 3), (2, 3, 1)),
                       ((3, 3), (2, 3, 2)), ((2, 1, 3, 3), (4, 3, 2)), ((0, 0), (0,)), ((3, 3), (3, 0))):
            def solve_ref(a, b):
                # NumPy 2's rule (a 1-D b is one vector) with the batches
                # broadcast by hand: NumPy 1 takes (.., n) b as vectors
                b2 = b[:, None] if b.ndim == 1 else b
                batch = np.broadcast_shapes(a.shape[:-2], b2.shape[:-2])
                x = np.linalg.solve(np.broadcast_to(a, batch + a.shape[-2:]), np.broadcast_to(b2, batch + b2.shape[-2:]))
                return x[..., 0] if b.ndim == 1 else x
            case("solve", "solve($a, $b)", {"a": well_conditioned(sa, dt), "b": arr(sb, dt)}, f64ref(solve_ref, dt), tol=tol)
        case("solve", "solve($a, $b)", {"a": T(well_conditioned((4, 4), dt)), "b": S(arr((8, 2), dt))},
             f64ref(lambda a, b: np.linalg.solve(a, b), dt), tol=tol)
    case("solve", "solve($a, $b)", {"a": well_conditioned((3, 3), F32), "b": arr((3,), F64)},
         f64ref(lambda a, b: np.linalg.solve(a, b), F64), tol=tol_for(F32, "loose"), label="solve(float32, float64) -> float64")
    case("inv", "inv($a)", {"a": np.array([[2, 1], [1, 1]], I64)}, lambda a: np.linalg.inv(a).astype(F32),
         tol=tol_for(F32, "loose"), label="inv of ints gives float32")
    case("det", "det($a)", {"a": np.array([[2, 1], [1, 3]], I32)}, lambda a: np.array(5, F32),
         tol=tol_for(F32, "loose"), label="det of ints gives float32")
    sing = np.array([[1.0, 2.0], [2.0, 4.0]])
    case("inv", "inv($a)", {"a": sing}, error="inv: matrix is singular", label="inv of a singular matrix is an error")
    case("inv", "inv($a)", {"a": np.stack([np.eye(2), sing])}, error="inv: matrix is singular (batch element 1)",
         label="inv: a singular matrix in a batch")
    case("solve", "solve($a, $b)", {"a": sing, "b": arr((2,), F64)}, error="solve: matrix is singular",
         label="solve with a singular matrix is an error")
    case("solve", "solve($a, $b)", {"a": np.eye(3), "b": arr((2,), F64)},
         error="solve: b has shape (2,); for a of shape (3, 3) it must be (3,) or (.., 3, k)", label="solve shape mismatch")
    case("cholesky", "cholesky($a)", {"a": np.array([[1.0, 2.0], [2.0, 1.0]])},
         error="cholesky: matrix is not positive definite", label="cholesky of an indefinite matrix is an error")
    case("inv", "inv($a)", {"a": arr((2, 3), F64)}, error="inv: the matrix must be square (.., n, n), got shape (2, 3)",
         label="inv of a non-square matrix is an error")

    # composites: outer, diag, trace
    for dt in (F32, F64, I32, I64):
        case("outer", "outer($a, $b)", {"a": arr((3,), dt), "b": arr((4,), dt)}, lambda a, b: np.outer(a, b))
        case("diag", "diag($x)", {"x": arr((4,), dt)}, lambda x: np.diag(x))
        case("trace", "trace($x)", {"x": arr((3, 4), dt)}, lambda x: np.asarray(np.trace(x)).astype(
            I64 if np.dtype(x.dtype).kind in "bi" else x.dtype), tol=tol_for(dt, "sum"))
    case("outer", "outer($a, $b)", {"a": arr((2, 3), F32), "b": tview((2, 2), F32)}, lambda a, b: np.outer(a, b),
         label="outer flattens its operands")
    case("outer", "outer($a, $b)", {"a": arr((), F64), "b": arr((0,), F64)}, lambda a, b: np.outer(a, b))
    case("outer", "outer($a, $b)", {"a": arr((3,), I32), "b": arr((2,), F64)}, lambda a, b: np.outer(a, b))
    for k in (1, 3, -1, -2):
        case("diag", f"diag($x, k={k})", {"x": arr((3,), F32)}, lambda x, k=k: np.diag(x, k))
    for shp in ((3, 4), (4, 3), (3, 3)):
        for k in (0, 1, -2, 5, -5):
            case("diag", f"diag($x, k={k})", {"x": arr(shp, F64)}, lambda x, k=k: np.diag(x, k))
    case("diag", "diag($x)", {"x": tview((3, 5), I64)}, lambda x: np.diag(x))
    case("diag", "diag($x)", {"x": arr((0,), F32)}, lambda x: np.diag(x))
    case("diag", "diag($x)", {"x": arr((2, 2, 2), F32)}, error="diag: x must be 1-D or 2-D, got a tensor of rank 3",
         label="diag of a 3-D tensor is an error")
    case("trace", "trace($x, offset=1)", {"x": arr((3, 3), F32)}, lambda x: np.asarray(np.trace(x, 1)).astype(F32),
         tol=tol_for(F32, "sum"))
    case("trace", "trace($x)", {"x": arr((4, 4), BOOL)}, lambda x: np.asarray(np.trace(x)).astype(I64))

    # einsum: the subset (explicit or implicit output, diagonals, sums, batches)
    specs = [
        ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij->ji", [(3, 4)]), ("ii->i", [(4, 4)]), ("ii", [(4, 4)]),
        ("ij->", [(3, 4)]), ("i,i->", [(5,)] * 2), ("i,j->ij", [(3,), (4,)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("ijk->kji", [(2, 3, 4)]), ("ij,ij->ij", [(3, 4)] * 2), ("ij,ij->i", [(3, 4)] * 2),
        ("abc,cd->abd", [(2, 3, 4), (4, 5)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("iij->j", [(3, 3, 2)]),
        ("ij,kj->ik", [(3, 4), (5, 4)]), ("bi,bi->b", [(4, 3)] * 2), ("ij,jk", [(3, 4), (4, 2)]), ("ji", [(3, 4)]),
        ("Ab,bC->AC", [(2, 3), (3, 2)]), ("ij,k->ikj", [(2, 3), (4,)]), ("i,i,i->i", [(4,)] * 3),
        ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]), ("ijk,ikl->jl", [(2, 3, 4), (2, 4, 5)]),
        ("ij,jk->", [(0, 3), (3, 2)]),
    ]
    for spec, shapes in specs:
        for dt in (F32, F64):
            ins = {f"x{i}": arr(sh, dt) for i, sh in enumerate(shapes)}
            args = ", ".join(f"$x{i}" for i in range(len(shapes)))

            def ref(spec=spec, dt=dt, **kw):
                xs = [kw[f"x{i}"].astype(F64) for i in range(len(kw))]
                return np.asarray(np.einsum(spec, *xs)).astype(dt)
            case("einsum", f'einsum("{spec}", {args})', ins, ref, tol=tol_for(dt, "sum"))
    case("einsum", 'einsum("ij,jk->ik", $a, $b)', {"a": arr((3, 4), I64), "b": arr((4, 2), I64)},
         lambda a, b: np.einsum("ij,jk->ik", a, b))
    case("einsum", 'einsum("ij,j->i", $a, $b)', {"a": tview((3, 4), F32), "b": S(arr((8,), F32))},
         lambda a, b: np.einsum("ij,j->i", a.astype(F64), b.astype(F64)).astype(F32), tol=tol_for(F32, "sum"))
    for expr, ins, err in (
            ('einsum("i...,j->ij", $a, $a)', {"a": arr((3,), F32)}, "einsum: '...' (an ellipsis) is not supported"),
            ('einsum("ij,jk->ik", $a, $a)', {"a": arr((3, 4), F32)}, "einsum: subscript 'j' has size 4 in operand 0 but 3 in operand 1"),
            ('einsum("ijk->i", $a)', {"a": arr((3, 4), F32)}, 'einsum: operand 0 has rank 2 but its subscripts "ijk" name 3 axes'),
            ('einsum("ij->ik", $a)', {"a": arr((3, 4), F32)}, "einsum: output subscript 'k' does not appear in the inputs"),
            ('einsum("ij,jk->ik", $a)', {"a": arr((3, 4), F32)}, 'einsum: "ij,jk->ik" has 2 input terms but 1 operand was given')):
        case("einsum", expr, ins, error=err, label=err)

    # norm: numpy.linalg.norm's orders
    inf = 'float("inf")'
    for dt in (F32, F64):
        tol = tol_for(dt, "sum")
        v, m = arr((7,), dt), arr((3, 4), dt)
        for ords, npo in (("", None), (", ord=1", 1), (", ord=2", 2), (f", ord={inf}", np.inf), (f", ord=-{inf}", -np.inf),
                          (", ord=0", 0), (", ord=3", 3), (", ord=0.5", 0.5)):
            case("norm", f"norm($x{ords})", {"x": v}, f64ref(lambda x, npo=npo: np.linalg.norm(x, npo), dt), tol=tol)
        for ords, npo in (("", None), (', ord="fro"', "fro"), (", ord=1", 1), (", ord=-1", -1), (f", ord={inf}", np.inf),
                          (f", ord=-{inf}", -np.inf)):
            case("norm", f"norm($x{ords})", {"x": m}, f64ref(lambda x, npo=npo: np.linalg.norm(x, npo), dt), tol=tol)
        x3 = arr((2, 3, 4), dt)
        case("norm", "norm($x)", {"x": x3}, f64ref(lambda x: np.linalg.norm(x), dt), tol=tol)
        case("norm", "norm($x, axis=1)", {"x": x3}, f64ref(lambda x: np.linalg.norm(x, axis=1), dt), tol=tol)
        case("norm", "norm($x, axis=-1, keepdims=true)", {"x": x3},
             f64ref(lambda x: np.linalg.norm(x, axis=-1, keepdims=True), dt), tol=tol)
        case("norm", "norm($x, ord=1, axis=(2, 0))", {"x": x3}, f64ref(lambda x: np.linalg.norm(x, 1, axis=(2, 0)), dt),
             tol=tol)
        case("norm", f"norm($x, ord={inf}, axis=(1, 2), keepdims=true)", {"x": x3},
             f64ref(lambda x: np.linalg.norm(x, np.inf, axis=(1, 2), keepdims=True), dt), tol=tol)
        case("norm", "norm($x, keepdims=true)", {"x": m}, f64ref(lambda x: np.linalg.norm(x, keepdims=True), dt), tol=tol)
        case("norm", "norm($x)", {"x": np.zeros((3,), dt)}, lambda x, dt=dt: np.array(0, dt))
        case("norm", "norm($x)", {"x": tview((3, 4), dt)}, f64ref(lambda x: np.linalg.norm(x), dt), tol=tol)
    case("norm", "norm($x)", {"x": arr((5,), I64)}, f64ref(lambda x: np.linalg.norm(x), F32), tol=tol_for(F32, "sum"),
         label="norm of ints gives float32")
    case("norm", "norm($x)", {"x": arr(BIG, F32)}, f64ref(lambda x: np.linalg.norm(x), F32), tol=tol_for(F32, "sum"))
    case("norm", "norm($x, ord=2)", {"x": arr((3, 3), F32)},
         error="norm: matrix norm ord=2 is not supported", label="norm: matrix ord=2 is an error")
    case("norm", 'norm($x, ord="fro", axis=0)', {"x": arr((3, 3), F32)},
         error='norm: ord "fro" is a matrix norm; it needs two axes', label="norm: fro of a vector is an error")


# ---- the op table ---------------------------------------------------------------

def table_ops(srcdir):
    names = []
    for f in ("ops.def", "ops_nn.def"):
        with open(os.path.join(srcdir, "tensor", f), encoding="utf-8") as fh:
            for line in fh:
                m = re.match(r'\s*OP\(\s*\w+\s*,\s*"([^"]+)"', line)
                if m:
                    names.append(m.group(1))
    return names


# ---- library ops: tan, erf, log2, log10, square, scans, sorting, counting, closeness ----

LIB_UNARY = {  # as UNARY
    "tan": (np.tan, "float", "normal", (F32, F64, I32), "transc"),
    "erf": (erf, "float", "normal", (F32, F64, I64), "transc"),
    "log2": (np.log2, "float", "pos", (F32, F64, I32, I64), "transc"),
    "log10": (np.log10, "float", "pos", (F32, F64, I64), "transc"),
    "square": (np.square, "same", "normal", (F32, F64, I32, I64), "exact"),
}


def _desc_argsort(x, axis):
    """Stable descending order, NaN first (NaN is the largest): the stable
    ascending order of the reversed axis, reversed."""
    n = x.shape[axis]
    r = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
    return (n - 1 - np.flip(r, axis)).astype(I64)


def _asc_argsort(x, axis):
    return np.argsort(x, axis=axis, kind="stable").astype(I64)


def _scan_ref(fn, dt, axis):
    out_dt = I64 if dt in (BOOL, I32) else dt

    def ref(x):
        with np.errstate(all="ignore"):
            return fn(x.astype(out_dt), axis=axis).astype(out_dt)
    return ref


def library_cases():
    for name, (fn, rule, kind, dts, tk) in LIB_UNARY.items():
        for dt in dts:
            out_dt = dt if rule == "same" else floatify(dt)
            tol = None if tk == "exact" else tol_for(out_dt, tk)
            ref = unary_ref(fn, rule, dt)
            for shp in ((), (0,), (7,), (3, 4)):
                case(name, f"{name}($x)", {"x": arr(shp, dt, kind)}, ref, tol=tol)
            case(name, f"{name}($x)", {"x": tview((4, 5), dt, kind)}, ref, tol=tol)
            if dt in (F32, I64):
                case(name, f"{name}($x)", {"x": arr(BIG, dt, kind)}, ref, tol=tol)
            if np.dtype(dt).kind == "f":
                case(name, f"{name}($x)", {"x": SPECIAL.astype(dt)}, ref, tol=tol, label=f"{name}(special values)")
    case("square", "square($x)", {"x": np.array([True, False])}, lambda x: x & x,
         label="square of bool is x * x, bool (NumPy: int8, which tfe has not)")
    case("square", "square($x)", {"x": np.array([70000, -3], I32)}, lambda x: np.square(x),
         label="square of int32 wraps")

    # round(x, decimals): np.round (scaled, rounded half to even, scaled back, in x's dtype)
    for dt in (F32, F64):
        for d in (0, 1, 2, 3, -1):
            case("round", f"round($x, {d})", {"x": np.concatenate([arr((3, 4), dt).ravel() * 7,
                                                                   np.array([2.675, -0.125, 0.5, 1.5, 25.0, -35.0], dt)])},
                 lambda x, d=d: np.round(x, d), label=f"round(x, {d}) {np.dtype(dt).name}")
    case("round", "round($x, 1)", {"x": np.array([14, -26, 35], I64)}, lambda x: np.round(x, 1),
         label="round of an int with decimals >= 0 is the int")

    # cumsum, cumprod (axis=nil: the flattened x, as NumPy)
    for name, fn in (("cumsum", np.cumsum), ("cumprod", np.cumprod)):
        for dt in (F32, F64, I32, I64, BOOL):
            kind = "small" if name == "cumprod" else "normal"
            for shp, axis in (((3, 4), None), ((3, 4), 0), ((3, 4), 1), ((2, 3, 4), 1), ((2, 3, 4), -1),
                              ((), None), ((0,), 0), ((4, 0), 1), ((5,), 0)):
                tol = tol_for(dt, "sum")
                case(name, f"{name}($x{axis_text(axis)})", {"x": arr(shp, dt, kind)}, _scan_ref(fn, dt, axis), tol=tol)
            case(name, f"{name}($x, axis=0)", {"x": tview((4, 3, 2), dt, kind)}, _scan_ref(fn, dt, 0),
                 tol=tol_for(dt, "sum"))
        case(name, f"{name}($x)", {"x": SPECIAL.astype(F64)}, _scan_ref(fn, F64, None), tol=tol_for(F64, "sum"),
             label=f"{name}(special values)")
    for dt in (F32, I64):
        for axis in (0, 1):
            case("cumsum", f"cumsum($x, axis={axis})", {"x": arr(BIG, dt)}, _scan_ref(np.cumsum, dt, axis),
                 tol=tol_for(dt, "sum"))
    case("cumprod", "cumprod($x, axis=1)", {"x": arr(BIG, F64, "unit")}, _scan_ref(np.cumprod, F64, 1),
         tol=tol_for(F64, "sum"))
    case("cumsum", "cumsum($x, axis=2)", {"x": arr((2, 3), F32)}, error="cumsum: axis 2 is out of range",
         label="cumsum axis out of range")

    # sort, argsort, topk: stable; NaN last ascending (first descending)
    for dt in (F32, F64, I32, I64, BOOL):
        for shp, axis in (((7,), -1), ((3, 5), -1), ((3, 5), 0), ((2, 3, 4), 1), ((0,), 0), ((3, 0), 1)):
            for kind in ("normal", "small"):
                x = arr(shp, dt, kind)
                ax = "" if axis == -1 else f", axis={axis}"
                case("argsort", f"argsort($x{ax})", {"x": x}, lambda x, axis=axis: _asc_argsort(x, axis))
                case("argsort", f"argsort($x{ax}, descending=true)", {"x": x},
                     lambda x, axis=axis: _desc_argsort(x, axis))
                case("take_along_axis", f"sort($x{ax})", {"x": x}, lambda x, axis=axis: np.sort(x, axis=axis))
                case("take_along_axis", f"sort($x{ax}, descending=true)", {"x": x},
                     lambda x, axis=axis: np.take_along_axis(x, _desc_argsort(x, axis), axis))
        x = tview((6, 4), dt, "small")
        case("argsort", "argsort($x, axis=0)", {"x": x}, lambda x: _asc_argsort(x, 0))
        for k in (0, 2, 6):
            case("argsort", "$i", {"x": x}, lambda x, k=k: _desc_argsort(x, 0)[:k],
                 pre=[f"let ($v, $i) = topk($x, {k}, axis=0)"], label=f"topk(x, {k}, axis=0)")
            case("take_along_axis", ["$v", "$i"], {"x": x},
                 lambda x, k=k: [np.take_along_axis(x, _desc_argsort(x, 0)[:k], 0), _desc_argsort(x, 0)[:k]],
                 pre=[f"let ($v, $i) = topk($x, {k}, axis=0)"], label=f"topk(x, {k}, axis=0) values and indices")
    for dt in (F32, F64):
        x = np.concatenate([SPECIAL, SPECIAL[:5]]).astype(dt)
        case("argsort", "argsort($x)", {"x": x}, lambda x: _asc_argsort(x, 0), label="argsort(special values)")
        case("argsort", "argsort($x, descending=true)", {"x": x}, lambda x: _desc_argsort(x, 0),
             label="argsort(special values, descending)")
        case("take_along_axis", "sort($x)", {"x": x}, lambda x: np.sort(x), label="sort(special values): NaN last")
    case("argsort", "argsort($x, axis=1)", {"x": arr(BIG, F32)}, lambda x: _asc_argsort(x, 1))
    case("argsort", "argsort($x, axis=0)", {"x": arr(BIG, I64, "small")}, lambda x: _asc_argsort(x, 0))
    case("take_along_axis", "sort($x, axis=0)", {"x": arr(BIG, F64)}, lambda x: np.sort(x, axis=0))
    case("argsort", "topk($x, 4)", {"x": arr((3,), F32)}, error="topk: k = 4 is out of range for an axis of size 3",
         label="topk k too large")
    # take_along_axis itself (NumPy's), negative indices wrap
    for dt in (F32, I64, BOOL):
        x = arr((4, 5, 3), dt)
        for axis in (0, 1, 2):
            ishape = list(x.shape)
            ishape[axis] = 6
            n = x.shape[axis]
            idx = rng.integers(-n, n, ishape)
            case("take_along_axis", f"take_along_axis($x, $i, {axis})", {"x": x, "i": idx},
                 lambda x, i, axis=axis: np.take_along_axis(x, i, axis))
    case("take_along_axis", "take_along_axis($x, $i, 0)", {"x": arr((3,), F32), "i": np.array([3])},
         error="take_along_axis: index 3 is out of range for axis 0 with size 3", label="take_along_axis out of range")
    # put_along_axis_add: the gradient of sort and take_along_axis (repeats add up)
    for dt in (F32, F64):
        for axis in (0, 1):
            x = arr((4, 5), dt)
            ishape = list(x.shape)
            ishape[axis] = 7
            n = x.shape[axis]
            i = rng.integers(-n, n, ishape)
            w = arr(ishape, dt)

            def ref(x, i, w, axis=axis):
                g = np.zeros_like(x)
                for pos in np.ndindex(*i.shape):
                    q = list(pos)
                    q[axis] = i[pos] % x.shape[axis]
                    g[tuple(q)] += w[pos]
                return g
            case("put_along_axis_add", "$t.gradient($loss, $x)", {"x": x, "i": i, "w": w}, ref,
                 pre=["with tape() as $t { $t.watch($x); let $loss = sum(take_along_axis($x, $i, "
                      + str(axis) + ") * $w) }"], tol=tol_for(dt, "sum"), needs="tape",
                 label=f"gradient of take_along_axis axis={axis}")
        x = arr((3, 4), dt)
        w = arr((3, 4), dt)
        case("put_along_axis_add", "$t.gradient($loss, $x)", {"x": x, "w": w},
             lambda x, w: np.take_along_axis(w, np.argsort(np.argsort(x, axis=1, kind="stable"), axis=1,
                                                           kind="stable"), 1),
             pre=["with tape() as $t { $t.watch($x); let $loss = sum(sort($x, axis=1) * $w) }"],
             tol=tol_for(dt, "sum"), needs="tape", label="gradient of sort")

    # cumprod's gradient is exact with zeros (any number of them in a line)
    def cumprod_grad(x, w):
        g = np.zeros_like(x)
        for i in range(x.shape[-1]):
            for j in range(i, x.shape[-1]):
                g[..., i] += w[..., j] * np.prod(np.delete(x[..., :j + 1], i, axis=-1), axis=-1)
        return g
    for x in (np.array([1.5, 0.0, 2.0, -0.5, 0.0, 3.0]), np.array([[0.0, 0.0, 2.0], [1.0, 2.0, 3.0]]),
              np.array([[2.0, 0.0, 0.0, 0.0]])):
        w = arr(x.shape, F64)
        case("cumprod", "$t.gradient($loss, $x)", {"x": x, "w": w}, cumprod_grad,
             pre=["with tape() as $t { $t.watch($x); let $loss = sum(cumprod($x, axis=-1) * $w) }"],
             tol=tol_for(F64, "sum"), needs="tape", label="gradient of cumprod with zeros")

    # unique (sorted; NaNs are one value, last), return_counts
    for dt in (F32, F64, I32, I64, BOOL):
        for shp in ((10,), (3, 4), (), (0,)):
            case("unique", "unique($x)", {"x": arr(shp, dt, "small")}, lambda x: np.unique(x))
            case("unique", ["$u", "$n"], {"x": arr(shp, dt, "small")},
                 lambda x: [np.unique(x), np.unique(x, return_counts=True)[1].astype(I64)],
                 pre=["let ($u, $n) = unique($x, return_counts=true)"], label="unique(x, return_counts=true)")
        case("unique", "unique($x)", {"x": tview((4, 6), dt, "small")}, lambda x: np.unique(x))
    for dt in (F32, F64):
        x = np.concatenate([SPECIAL, SPECIAL]).astype(dt)
        case("unique", ["$u", "$n"], {"x": x},
             lambda x: [np.unique(x), np.unique(x, return_counts=True)[1].astype(I64)],
             pre=["let ($u, $n) = unique($x, return_counts=true)"], label="unique(special values): one NaN")
    case("unique", "unique($x)", {"x": arr(BIG, I64, "small")}, lambda x: np.unique(x))
    case("unique", "unique($x)", {"x": arr(BIG, F32)}, lambda x: np.unique(x))

    # bincount
    for idt in (I32, I64, BOOL):
        for n in (0, 1, 12):
            xi = rng.integers(0, 6, (n,)).astype(idt)
            case("bincount", "bincount($x)", {"x": xi}, lambda x: np.bincount(x).astype(I64))
            case("bincount", "bincount($x, minlength=9)", {"x": xi}, lambda x: np.bincount(x, minlength=9).astype(I64))
            for wdt in (F32, F64, I64):
                case("bincount", "bincount($x, weights=$w)", {"x": xi, "w": arr((n,), wdt)},
                     lambda x, w, wdt=wdt: np.bincount(x, weights=w).astype(wdt if wdt != I64 else F64),
                     tol=tol_for(wdt if wdt != I64 else F64, "sum"))
    case("bincount", "bincount($x, $w, 3)", {"x": S(np.array([2, 9, 0, 9, 2, 9])), "w": np.array([1.5, 2.0, 0.25])},
         lambda x, w: np.bincount(x, w, 3))
    case("bincount", "bincount($x)", {"x": rng.integers(0, 1000, (150000,))}, lambda x: np.bincount(x).astype(I64))
    case("bincount", "bincount($x)", {"x": np.array([1, -1])},
         error="bincount: x must be non-negative, got -1 at index 1", label="bincount of a negative value")
    case("bincount", "bincount($x)", {"x": np.array([1.0])}, error="bincount: x must be a 1-D tensor of ints",
         label="bincount of floats")

    # searchsorted (NaN sorts last, as in sort)
    for dt in (F32, F64, I32, I64):
        a = np.sort(arr((9,), dt, "small"))
        for side in ("left", "right"):
            for vshape in ((), (5,), (2, 3), (0,)):
                v = arr(vshape, dt, "small")
                st = "" if side == "left" else ', side="right"'
                case("searchsorted", f"searchsorted($a, $v{st})", {"a": a, "v": v},
                     lambda a, v, side=side: np.asarray(np.searchsorted(a, v, side=side), I64))
    sp = np.sort(SPECIAL)
    for side in ("left", "right"):
        case("searchsorted", f'searchsorted($a, $v, side="{side}")', {"a": sp, "v": SPECIAL},
             lambda a, v, side=side: np.searchsorted(a, v, side=side).astype(I64), label=f"searchsorted special {side}")
    case("searchsorted", "searchsorted($a, $v)", {"a": np.array([1, 3, 5], I64), "v": arr((4,), F32)},
         lambda a, v: np.searchsorted(a.astype(F64), v.astype(F64)).astype(I64), label="searchsorted int64 a, float32 v")
    case("searchsorted", "searchsorted($a, $v)", {"a": np.sort(arr((1000,), F64)), "v": arr(BIG, F64)},
         lambda a, v: np.searchsorted(a, v).astype(I64))
    case("searchsorted", "searchsorted($a, $v)", {"a": arr((2, 2), F32), "v": arr((2,), F32)},
         error="searchsorted: sorted must be 1-D", label="searchsorted 2-D")

    # isclose, allclose (NumPy's rule and defaults)
    for dt in (F32, F64, I64):
        a = arr((4, 5), dt)
        b = (a + rng.choice([0.0, 1e-9, 1e-6, 1e-4, 1.0], a.shape) * (np.abs(a) + 1)).astype(dt)
        case("isclose", "isclose($a, $b)", {"a": a, "b": b}, lambda a, b: np.isclose(a, b))
        case("isclose", "isclose($a, $b, rtol=1e-3, atol=0.01)", {"a": a, "b": b},
             lambda a, b: np.isclose(a, b, rtol=1e-3, atol=0.01))
        case("isclose", "allclose($a, $b)", {"a": a, "b": b}, lambda a, b: np.asarray(np.allclose(a, b)))
        case("isclose", "allclose($a, $a)", {"a": a}, lambda a: np.asarray(np.allclose(a, a)))
        case("isclose", "isclose($a, $b)", {"a": a, "b": b[0]}, lambda a, b: np.isclose(a, b), label="isclose broadcast")
    s1 = np.repeat(SPECIAL, len(SPECIAL))
    s2 = np.tile(SPECIAL, len(SPECIAL))
    for eq in (False, True):
        case("isclose", f"isclose($a, $b, equal_nan={str(eq).lower()})", {"a": s1, "b": s2},
             lambda a, b, eq=eq: np.isclose(a, b, equal_nan=eq))
        case("isclose", f"allclose($a, $b, equal_nan={str(eq).lower()})",
             {"a": np.array([1.0, np.nan, np.inf]), "b": np.array([1.0, np.nan, np.inf])},
             lambda a, b, eq=eq: np.asarray(np.allclose(a, b, equal_nan=eq)))
    case("isclose", "isclose($a, 1.0)", {"a": np.array([1.0, 1.00001, 1.001], F32)},
         lambda a: np.isclose(a, F32(1.0)), label="isclose with a weak scalar")
    case("isclose", "isclose($a, $b)", {"a": arr(BIG, F32), "b": arr(BIG, F32)}, lambda a, b: np.isclose(a, b))

    # argmax/argmin and clip against NumPy at the edges: NaN (argmax/argmin
    # return the first NaN), ties (first index), keepdims on the flattened x
    for name, npf in (("argmax", np.argmax), ("argmin", np.argmin)):
        for dt in (F32, F64):
            x = np.array([1.0, np.nan, 3.0, np.nan], dt)
            case(name, f"{name}($x)", {"x": x}, lambda x, npf=npf: np.asarray(npf(x), I64), label=f"{name} with NaN")
            x = arr((3, 4), dt, "small")
            case(name, f"{name}($x, keepdims=true)", {"x": x},
                 lambda x, npf=npf: npf(x, keepdims=True).astype(I64), label=f"{name} flattened, keepdims")
        case(name, f"{name}($x, axis=1)", {"x": np.array([[2, 5, 5], [1, 1, 0]], I32)},
             lambda x, npf=npf: npf(x, axis=1).astype(I64), label=f"{name} ties: the first index")
    for dt in (F32, F64):
        case("clip", "clip($x, -1.0, 1.0)", {"x": SPECIAL.astype(dt)},
             lambda x, dt=dt: np.clip(x, dt(-1), dt(1)), label="clip(special values): NaN stays NaN")
    case("clip", "clip($x, 2, 1)", {"x": arr((5,), I64)}, lambda x: np.minimum(np.maximum(x, 2), 1),
         label="clip with lo > hi: hi (NumPy)")


# ---- running --------------------------------------------------------------------

def q(path):
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def subst(text, prefix):
    return re.sub(r"\$(\w+)", lambda m: f"{prefix}_{m.group(1)}", text)


SAVED = {}  # id(input array) -> its .npy file (shared inputs are written once)


def case_program(c, work, save=True):
    """The tfe lines of case c (its inputs written to work/ when save)."""
    p = f"c{c.id}"
    lines = [f"# case {c.id}: {c.describe()}"]
    for name, v in c.ins.items():
        base = v.base if isinstance(v, View) else np.asarray(v)
        shared = not base.flags.writeable  # the cached large arrays, alive for the whole run
        path = (shared and SAVED.get(id(base))) or os.path.join(work, f"{p}_{name}.npy")
        if save and not (shared and id(base) in SAVED):
            np.save(path, base)
            if shared:
                SAVED[id(base)] = path
        if isinstance(v, View):
            lines.append(f"let {p}_{name}_file = load_npy({q(path)})")
            lines.append(f"let {p}_{name} = " + v.tfe.replace("$", f"{p}_{name}_file"))
        else:
            lines.append(f"let {p}_{name} = load_npy({q(path)})")
    lines += [subst(s, p) for s in c.pre]
    for k, e in enumerate(c.outs):
        lines.append(f"save_npy({q(os.path.join(work, f'{p}_out{k}.npy'))}, {subst(e, p)})")
    return lines


def run_program(cmd, path, timeout):
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd + [path], capture_output=True, text=True, timeout=timeout)
        return r.returncode, r.stdout, r.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        return -1, "", f"timed out after {timeout} s", time.monotonic() - t0
    except OSError as e:
        return -1, "", f"cannot run {cmd[0]}: {e}", 0.0


def as_list(r):
    return list(r) if isinstance(r, (list, tuple)) else [r]


def compare(c, outs):
    """None if the outputs match, else a reason."""
    if c.check is not None:
        return c.check(outs, {k: value_of(v) for k, v in c.ins.items()})
    exp = c.expected
    if len(exp) != len(outs):
        return f"{len(outs)} outputs, expected {len(exp)}"
    for k, (got, want) in enumerate(zip(outs, exp)):
        want = np.asarray(want)
        tag = f"output {k}: " if len(exp) > 1 else ""
        if got.dtype != want.dtype:
            return f"{tag}dtype {got.dtype}, expected {want.dtype}"
        if got.shape != want.shape:
            return f"{tag}shape {got.shape}, expected {want.shape}"
        if got.size == 0:
            continue
        tol = c.tol if want.dtype.kind == "f" else None
        if tol is None:
            same = np.array_equal(got, want, equal_nan=want.dtype.kind == "f")
            if not same:
                bad = np.argwhere(~((got == want) | (np.isnan(got) & np.isnan(want)) if want.dtype.kind == "f"
                                    else (got == want)))
                i = tuple(bad[0]) if want.ndim else ()
                return (f"{tag}{len(bad)} of {want.size} elements differ (exact); first at {list(i)}: "
                        f"got {got[i]!r}, expected {want[i]!r}")
            continue
        rtol, atol, scaled = tol
        g, w = got.astype(np.float64), want.astype(np.float64)
        fin = np.isfinite(w)
        if not np.array_equal(np.isnan(g), np.isnan(w)) or not np.array_equal(g[np.isinf(w)], w[np.isinf(w)]):
            return f"{tag}NaN/inf positions differ"
        scale = max(1.0, float(np.max(np.abs(w[fin])))) if scaled and fin.any() else 1.0
        err = np.abs(g - w)
        okm = ~fin | (err <= atol * scale + rtol * np.abs(w))
        if not okm.all():
            bad = np.argwhere(~okm)
            i = tuple(bad[0]) if want.ndim else ()
            return (f"{tag}{len(bad)} of {want.size} elements differ beyond rtol={rtol} atol={atol}*{scale:.3g}; "
                    f"first at {list(i)}: got {got[i]!r}, expected {want[i]!r} (max error {err[~okm].max():.3g})")
    return None


def main():
    ap = argparse.ArgumentParser(description="NumPy-oracle op test for tfe")
    ap.add_argument("-k", default="", help="only ops whose name contains this")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("-j", type=int, default=min(8, os.cpu_count() or 1), help="programs run at once")
    ap.add_argument("-v", action="store_true", help="print every failing program in full")
    ap.add_argument("--tfe-flag", action="append", default=shlex.split(os.environ.get("TFE_OPS_FLAGS", "")),
                    help="pass this option to tfe (repeatable; also $TFE_OPS_FLAGS), e.g. --stage-all")
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args()

    srcdir = os.environ.get("TFE_SRCDIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    tfe = os.environ.get("TFE")
    if not tfe and not args.list:
        print("ops_numpy: TFE is not set (run through make check or export TFE=path/to/tfe)")
        return 99
    t_start = time.monotonic()
    warnings.filterwarnings("ignore", category=RuntimeWarning)  # NaN/inf refs are intended
    for gen_fn in (creation_cases, unary_cases, binary_cases, ternary_cases, cast_cases, reduce_cases,
                   matmul_cases, shape_cases, index_cases, nn_cases, nn_grad_cases, random_cases,
                   library_cases, linalg_cases):
        gen_fn()
    ops = table_ops(srcdir)
    failures = []
    covered = {c.op for c in CASES}
    unknown = sorted(covered - set(ops) - LINALG_COMPOSITES)
    missing = [op for op in ops if op not in covered]
    for op in missing:
        failures.append(f"FAIL {op}: the op has no test case in tests/ops_numpy.py (every op of the table needs one)")
    for op in unknown:
        failures.append(f"FAIL {op}: tests/ops_numpy.py has cases for an op that is not in the table")

    cases = [c for c in CASES if args.k in c.op]
    for k, c in enumerate(cases):
        c.id = k
        if c.check is None and c.error is None:
            inputs = {n: value_of(v) for n, v in c.ins.items()}
            c.expected = as_list(c.ref(**inputs))
    if args.list:
        for c in cases:
            print(f"{c.id:5d} {c.describe()}")
        print(f"{len(cases)} cases over {len({c.op for c in cases})} ops")
        return 1 if missing else 0

    cmd = shlex.split(os.environ.get("TFE_TEST_WRAPPER", "")) + [tfe] + args.tfe_flag
    work = tempfile.mkdtemp(prefix="tfe-ops-")
    try:
        # probe optional features (a build may lack autodiff)
        features = {}
        probe = os.path.join(work, "probe_tape.tfe")
        with open(probe, "w") as fh:
            fh.write("let t = tape()\n")
        features["tape"] = run_program(cmd, probe, args.timeout)[0] == 0

        skipped = [c for c in cases if c.needs and not features.get(c.needs)]
        todo = [c for c in cases if c not in skipped]
        plain = [c for c in todo if c.error is None]
        single = [c for c in todo if c.error is not None]
        batches = [plain[i:i + BATCH] for i in range(0, len(plain), BATCH)] + [[c] for c in single]
        progs = {}
        for b, batch in enumerate(batches):
            lines = []
            for c in batch:
                lines += case_program(c, work)
            path = os.path.join(work, f"batch{b}.tfe")
            with open(path, "w") as fh:
                fh.write("\n".join(lines) + "\n")
            progs[b] = path

        def run_batch(b):
            return b, run_program(cmd, progs[b], args.timeout)

        results = {}
        with ThreadPoolExecutor(max_workers=max(1, args.j)) as ex:
            for b, r in ex.map(run_batch, range(len(batches))):
                results[b] = r

        # a failed batch is rerun one case per program to find the culprits
        solo = {}
        rerun = [c for b, batch in enumerate(batches) if results[b][0] != 0 and len(batch) > 1 for c in batch]

        def run_solo(c):
            path = os.path.join(work, f"case{c.id}.tfe")
            with open(path, "w") as fh:
                fh.write("\n".join(case_program(c, work)) + "\n")
            return c.id, path, run_program(cmd, path, args.timeout)

        with ThreadPoolExecutor(max_workers=max(1, args.j)) as ex:
            for cid, path, r in ex.map(run_solo, rerun):
                solo[cid] = (path, r)

        nfail = 0
        for b, batch in enumerate(batches):
            for c in batch:
                _, (rc, out, err, _) = solo.get(c.id, (progs[b], results[b]))
                reason = None
                if c.error is not None:
                    if rc == 0:
                        reason = f"the program succeeded; expected an error containing {c.error!r}"
                    elif rc != 1 or c.error not in err:
                        reason = f"exit status {rc}; expected 1 and an error containing {c.error!r}; stderr: {err.strip()[:400]}"
                elif rc != 0:
                    reason = f"exit status {rc}: {err.strip()[:600]}"
                else:
                    try:
                        outs = [np.load(os.path.join(work, f"c{c.id}_out{k}.npy")) for k in range(len(c.outs))]
                        reason = compare(c, outs)
                    except Exception as e:  # a missing or unreadable output
                        reason = f"cannot read the output: {e}"
                if reason:
                    nfail += 1
                    if nfail > MAX_PROGRAMS_SHOWN and not args.v:
                        failures.append(f"FAIL {c.describe()}: {reason}")
                        continue
                    prog = "\n".join("    " + ln for ln in case_program(c, work, save=False))
                    failures.append(f"FAIL {c.describe()}: {reason}\n  program (inputs kept with --keep):\n{prog}")
        for line in failures:
            print(line)
        for c in skipped:
            print(f"SKIP {c.describe()}: needs {c.needs}(), which this tfe does not have yet")
        nops = len({c.op for c in cases})
        print(f"ops_numpy: {len(cases)} cases over {nops} ops ({len(ops)} in the table) in "
              f"{len(batches)} programs, {time.monotonic() - t_start:.1f} s: "
              f"{nfail} failed, {len(skipped)} skipped, {len(missing)} ops without cases")
        return 1 if failures else 0
    finally:
        if args.keep:
            print(f"ops_numpy: work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
