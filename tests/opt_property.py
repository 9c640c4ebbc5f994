#!/usr/bin/env python3
"""opt_property.py — a property test of the graph optimizer (graph/opt*.c:
dce, fold, algebra, cse, conv, fuse), run by `make check` via opt_property.sh.

It generates N random tfe programs (default 40, fixed seed) and runs each
three ways:

    tfe prog.tfe                 staged graphs optimized (the default)
    tfe --no-optimize prog.tfe   staged graphs run exactly as traced
    tfe --eager prog.tfe         @staged functions run as plain functions

and compares their standard output. A program defines a few @staged
functions of 2-3 float32 tensor arguments whose bodies are random
expressions over the op table's elementwise and shape ops: unary (neg abs
exp log(abs(x)+1) sqrt(abs(x)) sin cos tanh sigmoid relu gelu softplus),
binary (+ - * / maximum minimum, with literals and with broadcasting between
shapes like (3, 4), (4,), (3, 1) and 0-d), reductions (sum/mean/max with
axis=0/1/none, keepdims), matmul, transpose, reshape, constants computed
from literals, repeated subexpressions (work for cse) and x * 1.0, x - 0.0,
transpose(transpose(x)) and the like (work for algebra). Some functions
start with a long chain (a static range unrolled into up to 3,000
elementwise steps, sometimes broken by a mean every few steps: fusion and
every pass must stay fast, and exact), and some hold an unused op that fails
on some argument values (an integer // or % by a sum that may round to 0,
an integer ** with a negative exponent, an index out of range): dce must not
drop it, so a program may stop with an error, which must then be the same
error after the same output in every mode. Argument values are
literal arrays in the program text. Each function is called 3 times (the
first call of a staged function runs the traced body eagerly; later calls
run the cached graph) with the same and with other values of the same
shapes, and the results are printed; for some functions gradients are
printed too, through grad(f)(...) and through a tape around the call, each
several times.

Rules (tfe prints floats as the shortest decimal that reads back to the
same value, so equal text means equal bits):
  * --no-optimize must print exactly what --eager prints (same kernels in
    the same order);
  * the optimized run must print exactly the same values of the functions
    (the fused VM claims bitwise equality with the unfused kernels; this
    held for every forward value in ~1,300 random programs);
  * its GRADIENTS ("grad f0:" and "tape f0:" sections) too, when --exact is
    given (make check gives it, through opt_property.sh). The backward of a
    cached graph is derived from the graph AS TRACED (Graph.raw in
    graph/graph.h), so its sums run in the order an eager tape's do. It was
    once derived from the optimized graph, and then cse (two equal
    subexpressions merged: their gradients added first) and fuse (an input
    used twice in a group) changed the association of the sums: last-bit
    differences in ~10% of the programs, which this test found. Without
    --exact, gradients are compared with a tolerance, |a - b| <= 1e-5 *
    max(|a|, |b|, largest |number| of that print) + 1e-4 (--grad-rtol,
    --grad-atol), for looking at other changes.
  * any stderr output or a nonzero exit status in any mode is a failure,
    except one located error that every mode stops with, after the same
    output (counted and reported as "stopped with the same error").
A failing program is written to a file (named in the message) and printed
with a diff of the outputs.

Signed zeros: a -0.0 that one mode prints as 0.0 is a real difference and
reported as such; --allow-signed-zero makes the comparison treat -0.0 and
0.0 as equal. Inputs are never exactly 0 (values in [-2, 2], |v| >= 0.05,
two decimals). (A staged backward once turned a -0.0 gradient into 0.0 by
adding zeros for a source no gradient reached; it now gives none.)

Environment: $TFE (the binary), $TFE_SRCDIR, $TFE_TEST_WRAPPER (optional
prefix). Options: -n N (programs), --seed S, -j N (parallel programs),
--keep (keep the work folder), -v (print every failing program in full),
--show (print the generated programs and exit), --tfe-flag F (an extra
flag for every run, e.g. --stage-all), --exact, --grad-rtol R,
--grad-atol A, --allow-signed-zero.
"""
import argparse
import difflib
import math
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

UNARY = ["neg", "abs", "exp", "log1", "sqrt1", "sin", "cos", "tanh",
         "sigmoid", "relu", "gelu", "softplus"]
BINARY = ["+", "-", "*", "/", "maximum", "minimum"]
LITERALS = ["1.0", "0.0", "2.5", "0.5", "-1.5", "3.0"]
# shapes the generator builds values of; (3, 4) and (4,) are the main ones
SHAPES = [(3, 4), (4,), (), (3, 1), (4, 3), (3,), (1, 4), (12,), (2, 6)]
ARG_SHAPES = [(3, 4), (4,), (), (3, 1), (4, 3), (3,)]


def size(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def shape_src(shape):
    if len(shape) == 1:
        return "(%d,)" % shape[0]
    return "(" + ", ".join(str(d) for d in shape) + ")"


def broadcast_ok(small, big):
    """small broadcasts to big (and the result is big)."""
    if len(small) > len(big):
        return False
    for s, b in zip(reversed(small), reversed(big)):
        if s != b and s != 1:
            return False
    return True


def fmt_num(x):
    s = "%.3g" % x
    if "." not in s and "e" not in s:
        s += ".0"
    return s


def binary_src(op, a, b):
    """a op b as tfe source: maximum/minimum as calls, and a divisor kept
    away from zero (abs(b) + 0.5)."""
    if op == "/":
        b = "(abs(%s) + 0.5)" % b
    if op in ("maximum", "minimum"):
        return "%s(%s, %s)" % (op, a, b)
    return "(%s %s %s)" % (a, op, b)


def literal_array(rng, shape, lo=-2.0, hi=2.0):
    """A tensor literal of shape with values that have few digits (never
    exactly 0, so there is no signed zero in the inputs)."""
    def val():
        v = 0.0
        while abs(v) < 0.05:
            v = round(rng.uniform(lo, hi), 2)
        return fmt_num(v)
    if shape == ():
        return val()

    def rec(sh):
        if len(sh) == 1:
            return "[" + ", ".join(val() for _ in range(sh[0])) + "]"
        return "[" + ", ".join(rec(sh[1:]) for _ in range(sh[0])) + "]"
    return rec(shape)


class Gen:
    """Random expressions of a given shape over the arguments of one
    function and the let-bound temporaries made so far."""

    def __init__(self, rng, env):
        self.rng = rng
        self.env = list(env)        # [(name, shape)]
        self.pool = []              # [(src, shape)] earlier subexpressions

    def leaf(self, shape):
        r = self.rng
        same = [n for n, s in self.env if s == shape]
        if same and r.random() < 0.8:
            return r.choice(same)
        k = r.random()
        if k < 0.15:
            # a constant computed from literals (fold has work)
            c = r.choice(["(2.0 * 3.0 - 1.5)", "(1.0 + 0.5)", "(4.0 / 8.0)"])
            if shape == ():
                return c
            return r.choice(["(ones(%s) * %s)" % (shape_src(shape), c),
                             "full(%s, %s)" % (shape_src(shape), c),
                             "(exp(zeros(%s)) + %s)" % (shape_src(shape), c)])
        if k < 0.25:
            return literal_array(r, shape)
        # from an argument: reshape, broadcast, reduce
        name, s = r.choice(self.env)
        if size(s) == size(shape) and s != shape:
            return "reshape(%s, %s)" % (name, shape_src(shape))
        if s == shape:
            return name
        if broadcast_ok(s, shape):
            return "(%s + zeros(%s))" % (name, shape_src(shape))
        red = r.choice(["sum", "mean", "max"])
        if shape == ():
            return "%s(%s)" % (red, name)
        return "(%s(%s) * %s)" % (red, name, literal_array(r, shape))

    def algebra(self, e):
        """Wrap e in something the algebra pass simplifies."""
        return self.rng.choice([
            "(%s * 1.0)", "(1.0 * %s)", "(%s - 0.0)", "(%s + 0.0)",
            "(%s / 1.0)", "(0.0 + %s)", "neg(neg(%s))", "(%s ** 1.0)"]) % e

    def expr(self, shape, depth):
        r = self.rng
        if self.pool and r.random() < 0.15:
            same = [src for src, s in self.pool if s == shape]
            if same:
                return r.choice(same)       # a repeated subexpression: cse
        if depth <= 0 or r.random() < 0.12:
            e = self.leaf(shape)
        else:
            e = self.compound(shape, depth)
        if r.random() < 0.1:
            e = self.algebra(e)
        if len(shape) == 2 and r.random() < 0.05:
            e = "transpose(transpose(%s))" % e
        if depth >= 1 and len(e) < 200:
            self.pool.append((e, shape))
        return e

    def compound(self, shape, depth):
        r = self.rng
        kinds = ["unary"] * 3 + ["binary"] * 4 + ["lit"] * 2 + ["reduce"] * 2
        if len(shape) == 2:
            kinds += ["transpose", "matmul", "matmul"]
        if len(shape) == 1:
            kinds += ["matmul"]
        if shape != () and any(size(s) == size(shape) and s != shape
                               for s in SHAPES):
            kinds += ["reshape"]
        kind = r.choice(kinds)
        d = depth - 1
        if kind == "unary":
            op = r.choice(UNARY)
            a = self.expr(shape, d)
            if op == "log1":
                return "log(abs(%s) + 1.0)" % a
            if op == "sqrt1":
                return "sqrt(abs(%s))" % a
            if op == "exp":
                # keep exp from overflowing: exp of a bounded value
                return "exp(%s(%s))" % (r.choice(["tanh", "sin", "cos"]), a)
            if op == "neg" and r.random() < 0.5:
                return "(-%s)" % a
            return "%s(%s)" % (op, a)
        if kind == "binary":
            op = r.choice(BINARY)
            # one operand has the full shape, the other may broadcast
            small = [s for s in SHAPES if broadcast_ok(s, shape)]
            s2 = r.choice(small)
            a, b = self.expr(shape, d), self.expr(s2, d)
            if r.random() < 0.5:
                a, b = b, a
            return binary_src(op, a, b)
        if kind == "lit":
            op = r.choice(BINARY)
            lit = r.choice(LITERALS)
            a = self.expr(shape, d)
            if op == "/":
                lit = r.choice(["1.0", "2.5", "0.5", "-4.0"])
            if op in ("maximum", "minimum"):
                return "%s(%s, %s)" % (op, a, lit)
            if r.random() < 0.5 and op != "/":
                return "(%s %s %s)" % (lit, op, a)
            return "(%s %s %s)" % (a, op, lit)
        if kind == "reduce":
            red = r.choice(["sum", "mean", "max"])
            if shape == ():
                src = r.choice([(3, 4), (4,), (3,), (4, 3)])
                a = self.expr(src, d)
                if r.random() < 0.5 or len(src) != 1:
                    return "%s(%s)" % (red, a)
                return "%s(%s, axis=0)" % (red, a)
            if len(shape) == 1:
                n = shape[0]
                opts = [((k, n), 0) for k in (3, 4, 2)] + \
                       [((n, k), 1) for k in (3, 4, 2)]
                src, ax = r.choice(opts)
                return "%s(%s, axis=%d)" % (red, self.expr(src, d), ax)
            if len(shape) == 2 and 1 in shape:
                if shape[0] == 1:
                    src, ax = (r.choice([2, 3, 4]), shape[1]), 0
                else:
                    src, ax = (shape[0], r.choice([2, 3, 4])), 1
                return "%s(%s, axis=%d, keepdims=true)" % (
                    red, self.expr(src, d), ax)
            # a 2-d result: reduce with keepdims and broadcast back
            ax = r.randrange(2)
            rs = (1, shape[1]) if ax == 0 else (shape[0], 1)
            a = self.expr(shape, d)
            return "(%s - %s(%s, axis=%d, keepdims=true))" % (
                a, red, a if r.random() < 0.5 else self.expr(shape, d), ax)
        if kind == "transpose":
            return "transpose(%s)" % self.expr((shape[1], shape[0]), d)
        if kind == "reshape":
            src = r.choice([s for s in SHAPES
                            if size(s) == size(shape) and s != shape])
            return "reshape(%s, %s)" % (self.expr(src, d), shape_src(shape))
        if kind == "matmul":
            k = r.choice([2, 3, 4])
            if len(shape) == 2:
                a = self.expr((shape[0], k), d)
                b = self.expr((k, shape[1]), d)
            elif r.random() < 0.5:
                a = self.expr((shape[0], k), d)
                b = self.expr((k,), d)
            else:
                a = self.expr((k,), d)
                b = self.expr((k, shape[0]), d)
            return "(%s @ %s)" % (a, b)
        raise AssertionError(kind)


def chain_src(xr, name):
    """A long chain over argument name: a static range the trace unrolls
    into hundreds of elementwise steps (fuse, dce and cse must stay fast and
    exact on them), sometimes broken every few steps by an op fusion stops
    at (a mean that reads the value twice)."""
    n = xr.choice([20, 200, 1000, 1000, 3000])
    step = xr.choice(["%s = %s * 0.999 + 0.001",
                      "%s = tanh(%s) * 1.5 - 0.01",
                      "%s = %s - 0.002 * sin(%s)"]).replace("%s", name)
    lines = ["    for i in range(%d) {" % n, "        " + step]
    if xr.random() < 0.4:
        k = xr.choice([7, 50])
        lines.append("        if i %% %d == 0 { %s = %s - 0.5 * mean(%s) }" % (k, name, name, name))
    lines.append("    }")
    return lines


def failing_src(xr, names, shapes, k):
    """An unused op that fails on some values (and so must not be dropped:
    an eager run stops there with an error): an integer // or % by a number
    from the arguments that is sometimes 0, an integer ** with a sometimes
    negative exponent, or an index sometimes out of range. Which of the
    calls fails, if any, depends on the argument values."""
    x, y = names[0], names[-1]
    s = "sum(%s)" % y
    which = xr.choice(["floordiv", "mod", "pow", "index"])
    if which in ("floordiv", "mod"):
        op = "//" if which == "floordiv" else "%"
        e = "cast(%s * 0.0 + 7.0, int32) %s cast(abs(%s) * 4.0, int32)" % (x, op, s)
    elif which == "pow":
        e = "cast(%s * 0.0 + 2.0, int32) ** cast(%s + 2.0, int32)" % (x, s)
    else:
        e = "reshape(%s, (%d,))[cast(abs(%s), int32)]" % (x, size(shapes[0]), s)
    return "    let dead%d = %s" % (k, e)


def gen_function(rng, fname, xr=None):
    """Returns (source, arg shapes, returns a tensor). xr: a second random
    stream for the additions (long chains, unused ops that can fail), so
    that without them a seed makes the program it always made."""
    nargs = rng.choice([2, 2, 3])
    shapes = [rng.choice(ARG_SHAPES) for _ in range(nargs)]
    if all(s == () for s in shapes):
        shapes[0] = (3, 4)
    names = ["x", "y", "z"][:nargs]
    g = Gen(rng, zip(names, shapes))
    lines = ["@staged", "fn %s(%s) {" % (fname, ", ".join(names))]
    if xr and xr.random() < 0.15:
        lines += chain_src(xr, xr.choice(names))
    fails = xr is not None and xr.random() < 0.15
    for i in range(rng.randint(1, 3)):
        shape = rng.choice(SHAPES)
        e = g.expr(shape, rng.randint(2, 4))
        lines.append("    let t%d = %s" % (i, e))
        g.env.append(("t%d" % i, shape))
        if fails and i == 0:
            lines.append(failing_src(xr, names, shapes, i))
    nret = rng.choice([1, 1, 2])
    outs = []
    for _ in range(nret):
        outs.append(g.expr(rng.choice(SHAPES), rng.randint(2, 4)))
    if nret == 1:
        lines.append("    return %s" % outs[0])
    else:
        lines.append("    return (%s)" % ", ".join(outs))
    lines.append("}")
    return "\n".join(lines), shapes, nret == 1


def gen_program(seed):
    rng = random.Random(seed)
    xr = random.Random(seed * 1000003 + 17)
    out = ["# opt_property program, seed %d" % seed]
    calls = []
    for fi in range(rng.randint(2, 4)):
        fname = "f%d" % fi
        src, shapes, single = gen_function(rng, fname, xr)
        out.append(src)
        sets = []
        for vi in range(2):
            names = []
            for ai, s in enumerate(shapes):
                n = "%s_%s%d" % (fname, "abc"[vi], ai)
                out.append("let %s = %s" % (n, literal_array(rng, s)))
                names.append(n)
            sets.append(", ".join(names))
        a, b = sets
        for args in (a, b, a):
            calls.append('print("value %s:", %s(%s))' % (fname, fname, args))
        if single and rng.random() < 0.6:
            argn = rng.choice(["", ", argnums=1", ", argnums=(0, 1)"])
            for args in (a, b, a):
                calls.append('print("grad %s:", grad(%s%s)(%s))' % (
                    fname, fname, argn, args))
        if rng.random() < 0.5:
            for i, args in enumerate((a, b, a)):
                first = args.split(", ")[0]
                ws = "(" + ", ".join(args.split(", ")[:2]) + ")" \
                    if rng.random() < 0.3 else first
                y = "y%d_%d" % (fi, i)
                t = "t%d_%d" % (fi, i)
                res = y if single else "%s[0]" % y
                calls.append("with tape() as %s {" % t)
                for w in ws.strip("()").split(", "):
                    calls.append("    %s.watch(%s)" % (t, w))
                calls.append("    let %s = %s(%s)" % (y, fname, args))
                # the target is computed inside the block: a sum after it
                # is not recorded (a located error, not zeros)
                calls.append("    let s%s = sum(%s)" % (y, res))
                calls.append("}")
                calls.append('print("tape %s:", %s.gradient(s%s, %s))' % (
                    fname, t, y, ws))
    out.extend(calls)
    return "\n".join(out) + "\n"


# ---- running and comparing --------------------------------------------------------

STOPPED = []  # seeds whose program stopped with the same error in every mode

MODES = [("optimized", []), ("no-optimize", ["--no-optimize"]),
         ("eager", ["--eager"])]


def run_tfe(cmd, path):
    try:
        p = subprocess.run(cmd + [path], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
        return p.returncode, p.stdout.decode("utf-8", "replace"), \
            p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        return -1, "", "timed out after 60 s"


def normalize(text, allow_signed_zero):
    if allow_signed_zero:
        text = re.sub(r"-0\.0(?![0-9])", " 0.0", text)
        text = re.sub(r" +", " ", text)
    return text


NUM = re.compile(r"-?(?:nan|inf|\d+\.\d*(?:e[-+]?\d+)?|\d+e[-+]?\d+|\d+)")


SECTION = re.compile(r"(value|grad|tape) f\d+:")


def sections(text, pattern=SECTION):
    """Splits output into the sections the prints start (by default "value
    f0:", "grad f0:", "tape f0:"), each [kind, text]."""
    out = []
    for line in text.splitlines(True):
        m = pattern.match(line)
        if m or not out:
            out.append([m.group(1) if m else "", line])
        else:
            out[-1][1] += line
    return out


def close(a, b, rtol, atol):
    """Same text up to the numbers (and spacing); numbers within rtol of
    each other, relative to the largest magnitude in the section (a
    gradient is a sum of terms, so its rounding error scales with them)."""
    na, nb = NUM.findall(a), NUM.findall(b)
    if len(na) != len(nb) or re.sub(r"\s+", "", NUM.sub("#", a)) != \
            re.sub(r"\s+", "", NUM.sub("#", b)):
        return False
    fa, fb = [float(x) for x in na], [float(x) for x in nb]
    scale = max([abs(x) for x in fa + fb if x == x and abs(x) != float("inf")]
                or [0.0])
    for x, y in zip(fa, fb):
        if x != x or y != y or abs(x) == float("inf") or abs(y) == float("inf"):
            if not (x != x and y != y) and x != y:
                return False
        elif abs(x - y) > rtol * max(abs(x), abs(y), scale) + atol:
            return False
        elif rtol == 0 and atol == 0 and math.copysign(1.0, x) != math.copysign(1.0, y):
            return False  # bit for bit: a zero's sign too (-0.0 is not 0.0)
    return True


def equal_output(a, b, grad_rtol, grad_atol):
    """a == b, except that gradient sections may differ within the
    tolerance (none when both are 0)."""
    if a == b:
        return True
    if grad_rtol <= 0 and grad_atol <= 0:
        return False
    sa, sb = sections(a), sections(b)
    if len(sa) != len(sb):
        return False
    for (ka, ta), (kb, tb) in zip(sa, sb):
        if ka != kb:
            return False
        if ta != tb and not (ka in ("grad", "tape") and close(ta, tb, grad_rtol, grad_atol)):
            return False
    return True


def diff(a, b, na, nb):
    return "".join(difflib.unified_diff(
        a.splitlines(True), b.splitlines(True), na, nb, n=1))


def run_modes(args, path, modes, extra_flags=(), status=None):
    """Run the program at path once per (mode, flags) of modes: its stdout by
    mode, and a problem for every run with stderr output or a nonzero exit.
    status: a dict that gets (exit status, stderr) by mode."""
    res, problems = {}, []
    for mode, flags in modes:
        cmd = args.wrapper + [args.tfe] + list(extra_flags) + flags
        rc, out, err = run_tfe(cmd, path)
        res[mode] = out
        if status is not None:
            status[mode] = (rc, err)
        if rc != 0 or err:
            problems.append("%s: exit status %d, stderr:\n%s" % (
                " ".join(shlex.quote(c) for c in cmd + [path]), rc,
                err.rstrip()))
    return res, problems


def add_common_args(ap, n, seed):
    """The options both property tests take."""
    ap.add_argument("-n", type=int, default=n)
    ap.add_argument("--seed", type=int, default=seed)
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("-v", action="store_true")
    ap.add_argument("--show", action="store_true")
    ap.add_argument("--grad-rtol", type=float, default=1e-5)
    ap.add_argument("--grad-atol", type=float, default=1e-4)


def check_program(seed, args, workdir):
    prog = gen_program(seed)
    path = os.path.join(workdir, "opt_property_%d.tfe" % seed)
    with open(path, "w") as f:
        f.write(prog)
    status = {}
    res, problems = run_modes(args, path, MODES, args.tfe_flags, status)
    # an unused op that fails on the values (failing_src) stops every mode
    # with the same located error, after the same output: that is a pass
    errs = set(status.values())
    stopped = len(errs) == 1 and next(iter(errs))[0] == 1 and \
        re.search(r"^\S+:\d+:\d+: error: ", next(iter(errs))[1], re.M)
    if stopped:
        problems = []
        STOPPED.append(seed)
    nz = {m: normalize(o, args.allow_signed_zero) for m, o in res.items()}
    if nz["no-optimize"] != nz["eager"]:
        problems.append("--no-optimize differs from --eager:\n" + diff(
            res["eager"], res["no-optimize"], "eager", "no-optimize"))
    if not equal_output(nz["no-optimize"], nz["optimized"], args.grad_rtol,
                        args.grad_atol):
        problems.append("optimized differs from --no-optimize:\n" + diff(
            res["no-optimize"], res["optimized"], "no-optimize", "optimized"))
    return seed, path, prog, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(ap, 40, 20260601)
    ap.add_argument("--allow-signed-zero", action="store_true")
    ap.add_argument("--exact", action="store_true",
                    help="compare gradients bitwise too (--grad-rtol 0 --grad-atol 0)")
    ap.add_argument("--tfe-flag", action="append", default=[],
                    dest="tfe_flags")
    args = ap.parse_args()
    if args.exact:
        args.grad_rtol = args.grad_atol = 0.0
    return drive("opt_property", args, gen_program, check_program)


def drive(name, args, gen_program, check_program):
    """The common driver of the property tests (this one,
    stage_property.py and stage_mix.py): args.seeds (a list, when a test
    has that option) or args.n seeds from args.seed; --show prints the
    programs; otherwise each seed's
    program is checked (check_program(seed, args, workdir) returns (seed,
    path, program, problems)), failures are printed, and the exit status is
    1 when any failed."""
    seeds = getattr(args, "seeds", None) or \
        [args.seed + i for i in range(args.n)]
    if args.show:
        for s in seeds:
            sys.stdout.write(gen_program(s) + "\n")
        return 0
    args.tfe = os.environ.get("TFE")
    if not args.tfe:
        print("%s: $TFE is not set (run through make check)" % name)
        return 2
    args.wrapper = shlex.split(os.environ.get("TFE_TEST_WRAPPER", ""))
    workdir = tempfile.mkdtemp(prefix="tfe_%s." % name)
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=max(1, args.j)) as ex:
        results = list(ex.map(lambda s: check_program(s, args, workdir), seeds))
    failed = [r for r in results if r[3]]
    keep = args.keep
    for i, (seed, path, prog, problems) in enumerate(failed):
        keep = True
        print("FAIL: program seed %d (%s)" % (seed, path))
        if args.v or i < 3:
            print(prog)
        for p in problems:
            print(p)
        print()
    print("%s: %d programs, %d failed (seeds %s, %.1f s)" % (
        name, len(results), len(failed),
        "%d..%d" % (seeds[0], seeds[-1]) if seeds == list(
            range(seeds[0], seeds[-1] + 1)) else "listed",
        time.time() - t0))
    if STOPPED:
        print("%s: %d programs stopped with the same error in every mode" % (name, len(STOPPED)))
    if keep:
        print("%s: programs kept in %s" % (name, workdir))
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
