#!/usr/bin/env python3
"""stage_mix.py — a property test of staging mixed with everything around
it: tapes and grad() outside staged calls over several batch sizes (shape
relaxation), variables changed between calls and read in traced regions
under tapes, random draws, @host functions and the outside bindings they
touch, lists and records, ops that fail on values, and long elementwise
chains. Run by `make check` via stage_mix.sh (a fast slice); the driver
(seeds, -j, --show, --keep, -v) is tests/opt_property.py's.

A program is made of 1 to 3 independent scenes (each its own functions,
variables and bindings, named sK_...), after `seed(S)`, and ends with a
draw outside every staged call (`print("value end:", rand((2,)))`), so the
global random stream is compared too. The scenes:

  relax   a staged function of x (batch dim n) and a weight, called for
          batch sizes like 3, 2, 6, 1 under an outer tape, through
          grad(f) / grad(fn (z) => f(z, w)), or in an eager SGD loop over
          ragged batches for two epochs (a variable updated between calls);
  var     a variable read inside a traced if / for range(n) / while under
          a tape inside the staged function (or grad() of a helper inside
          it, or an outer tape), with v.assign(...) between calls;
  rand    rand/randn/randint/normal/uniform/shuffle/choice before, inside
          and after a traced if / loop,
          sometimes under a tape (inside or outside);
  host    @host functions that update a binding the body also assigns, read
          a binding the body assigned, push to an outside list whose len()
          the body reads, return a value an outer tape differentiates, push
          to a list the body made, rewrite a record the body made;
  cont    lists and records made in the body, passed in, returned, returned
          twice ((ys, ys): one list mutated, the other's len printed),
          passed-in ones returned and then mutated;
  fail    integer // and % by zero, integer ** with a negative exponent,
          gather and indexing out of range, unused (where dead-code
          elimination could drop them), used, or inside a traced if, with
          values that fail only on a later (cached) call;
  chain   a static `for i in range(K)` unrolled into K (up to thousands)
          elementwise steps, called with relaxed batch sizes, sometimes
          under a tape, sometimes with an operand whose shape stops
          broadcasting on a later call (an error inside a fused group).

A scene that can fail (fail, or chain's broadcast error) is always the
last one of its program.

Each program runs in four modes (default optimized, --no-optimize, --eager,
--stage-all) and every mode must agree with --eager:
  * the exit status and stderr must be the same text (errors by exact
    message, line, caret and traceback), after dropping the --stage-all
    "runs eagerly" notes and the retrace warning (run-mode chatter, not
    results);
  * prints labelled `value sK:` must be the same text, bit for bit;
  * prints labelled `grad sK:` (gradients) and `gvalue sK:` (values a
    gradient fed, e.g. weights after SGD steps) within GRAD_TOL: |a - b| <=
    GRAD_TOL * max(|a|, |b|, largest |number| of that print) + 10 *
    GRAD_TOL. Set GRAD_TOL = 0.0 (or pass --exact) to require them bit for
    bit too (a zero's sign included); a gradient all zeros in one mode only always fails;
  * an error in every mode of a program with no scene that can fail is a
    failure too (a generator or language bug);
  * a run past --timeout seconds (default 30) is a failure (a pass that is
    not near-linear shows up as one, on a long chain).

Environment: $TFE, $TFE_SRCDIR, $TFE_TEST_WRAPPER (optional prefix).
Options: the driver's (-n, --seed, -j, --keep, -v, --show, --grad-rtol,
--grad-atol), --seeds a,b,c (listed programs instead of -n/--seed),
--exact, --timeout T, --scenes a,b (only these kinds), --max-chain K
(longest chain; the programs are otherwise the same), --avoid-known
(leave out the patterns of the known, reported differences, to look for
other ones). make check runs a listed slice (stage_mix.sh).
"""
import argparse
import os
import random
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from opt_property import NUM, add_common_args, close, diff, drive, fmt_num, literal_array, sections  # noqa: E402

# The tolerance for gradients (and values fed by them), relative to the
# largest number of the print; 0.0 compares them bit for bit.
GRAD_TOL = 1e-5

SCENES = ["relax", "var", "rand", "host", "cont", "fail", "chain", "misc"]
FAILING = ("fail",)                 # scenes that can end the program
# --avoid-known: leave out the patterns of the known, reported classes
# (each named where it is left out), to look for other ones
OPTS = {"max_chain": 3000, "scenes": SCENES, "avoid_known": False}

UNARY = ["tanh", "sin", "cos", "sigmoid", "relu", "abs", "gelu", "softplus"]


def lit(rng, shape, lo=-1.0, hi=1.0):
    return literal_array(rng, shape, lo, hi)


def ew(rng, names, depth):
    """A random elementwise expression over names (which broadcast to one
    another): no shape is read, so it fits every batch size."""
    if depth <= 0 or rng.random() < 0.2:
        if rng.random() < 0.85:
            return rng.choice(names)
        return fmt_num(round(rng.uniform(-1.5, 1.5), 2) or 0.5)
    d = depth - 1
    k = rng.random()
    if k < 0.35:
        op = rng.choice(UNARY)
        a = ew(rng, names, d)
        if op == "softplus":
            return "softplus(tanh(%s))" % a
        return "%s(%s)" % (op, a)
    if k < 0.75:
        op = rng.choice(["+", "-", "*", "*", "/", "maximum", "minimum"])
        a, b = ew(rng, names, d), ew(rng, names, d)
        if op == "/":
            return "(%s / (abs(%s) + 0.5))" % (a, b)
        if op in ("maximum", "minimum"):
            return "%s(%s, %s)" % (op, a, b)
        return "(%s %s %s)" % (a, op, b)
    if k < 0.9:
        op = rng.choice(["+", "-", "*"])
        c = rng.choice(["0.5", "1.5", "-0.75", "2.0", "0.25"])
        return "(%s %s %s)" % (ew(rng, names, d), op, c)
    # a scalar reduction broadcast back
    red = rng.choice(["sum", "mean", "max"])
    return "(%s * tanh(%s(%s)))" % (ew(rng, names, d), red, ew(rng, names, d))


def outside_reductions(e):
    """e without the arguments of its sum/mean/max calls (what is left
    keeps the shape of the names in it)."""
    out, i = [], 0
    while i < len(e):
        m = re.match(r"(sum|mean|max)\(", e[i:])
        if m and (i == 0 or not (e[i - 1].isalnum() or e[i - 1] == "_")):
            depth, j = 0, i + len(m.group(1))
            while True:
                depth += {"(": 1, ")": -1}.get(e[j], 0)
                j += 1
                if depth == 0:
                    break
            out.append("R")
            i = j
        else:
            out.append(e[i])
            i += 1
    return "".join(out)


def bounded(rng, names, depth, keep=None):
    """A bounded elementwise expression; with keep, one that reads that
    name, so it has its shape (a branch that changed a binding's rank
    would make the if run at trace time, another path)."""
    e = ew(rng, names, depth)
    if keep and not re.search(r"\b%s\b" % re.escape(keep),
                              outside_reductions(e)):
        e = "(%s + %s)" % (e, keep)
    return rng.choice(["tanh(%s)", "sin(%s)", "(0.5 * tanh(%s))",
                       "sigmoid(%s)"]) % e


def reduce_src(rng, e):
    return rng.choice(["mean(%s)", "sum(%s)", "mean(%s * %s)"]).replace(
        "%s", e)


class Prog:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.lines = []
        self.can_fail = False

    def emit(self, *lines):
        self.lines.extend(lines)


def batch_sizes(rng):
    sizes = rng.sample([1, 2, 3, 4, 5, 6], rng.randint(3, 4))
    if rng.random() < 0.3:
        sizes.append(rng.choice(sizes))
    return sizes


def data(rng, n, feat):
    return lit(rng, (n, feat) if feat else (n,), -2.0, 2.0)


# ---- scenes -----------------------------------------------------------------


def scene_relax(P, k, last):
    """Class: a relaxed trace's cached backward reused for another size."""
    r = P.rng
    s = "s%d" % k
    feat = r.choice([0, 3])
    wshape = (3,) if feat else ()
    use_var = r.random() < 0.5
    w = "%s_w" % s
    if use_var:
        P.emit("let %s = variable(%s)" % (w, lit(r, wshape)))
    else:
        P.emit("let %s = %s" % (w, lit(r, wshape)))
    wv = w + ".value" if use_var else w
    body = bounded(r, ["x", "w"], r.randint(1, 3))
    if not re.search(r"\bx\b", outside_reductions(body)):
        body = "(%s * x)" % body        # x's shape (a matmul follows)
    if not re.search(r"\bw\b", body):
        # the gradient is taken with respect to w: a tape that never read
        # the variable w stands for is an error (docs/autodiff.md)
        body = "(%s * w)" % body
    red = reduce_src(r, "h")
    mm = feat and r.random() < 0.3
    P.emit("@staged", "fn %s_f(x, w) {" % s,
           "    let h = %s" % body)
    if mm:
        P.emit("    h = h @ %s" % lit(r, (3, 3)))
    P.emit("    return %s" % red, "}")
    if r.random() < 0.3:
        # a staged caller: the callee is inlined into it
        P.emit("@staged", "fn %s_g(x, w) { return %s_f(x * 0.5, w) + 1.0 }"
               % (s, s))
        f = "%s_g" % s
    else:
        f = "%s_f" % s
    sizes = batch_sizes(r)
    how = r.choice(["tape", "tape", "grad", "grad_lambda", "sgd"])
    P.lines.insert(0, "# %s: relax %s sizes=%s%s%s%s" % (
        s, how, sizes, " variable" if use_var else "", " matmul" if mm else "",
        " inlined" if f.endswith("_g") else ""))
    if how == "sgd":
        if not use_var:
            P.emit("let %s_v = variable(%s)" % (s, w))
            wv, w = "%s_v.value" % s, "%s_v" % s
        if OPTS["avoid_known"]:
            sizes = [sizes[0]] * len(sizes)
        batches = ", ".join(data(r, n, feat) for n in sizes)
        if r.random() < 0.5:
            # a model record of variables passed in, two parameters
            m = "%s_m" % s
            P.emit("let %s = {w: %s, b: variable(0.25)}" % (m, w),
                   "@staged",
                   "fn %s_loss(x, m) { return %s(x, m.w) + m.b * m.b }" % (s, f),
                   "for %s_ep in range(2) {" % s,
                   "    for xb in (%s,) {" % batches,
                   "        with tape() as t { let l = %s_loss(xb, %s) }" % (s, m),
                   "        let gs = t.gradient(l, (%s.w, %s.b))" % (m, m),
                   "        %s.w.assign_sub(0.1 * gs[0])" % m,
                   "        %s.b.assign_sub(0.1 * gs[1])" % m,
                   '        print("gvalue %s:", l)' % s,
                   "    }",
                   "}",
                   'print("gvalue %s:", %s.w.value, %s.b.value)' % (s, m, m))
            return
        P.emit("for %s_ep in range(2) {" % s,
               "    for xb in (%s,) {" % batches,
               "        with tape() as t { let l = %s(xb, %s) }" % (f, w),
               "        %s.assign_sub(0.1 * t.gradient(l, %s))" % (w, w),
               '        print("gvalue %s:", l)' % s,
               "    }",
               "}",
               'print("gvalue %s:", %s)' % (s, wv))
        return
    for n in sizes:
        if OPTS["avoid_known"]:
            n = sizes[0]        # a relaxed trace's backward (known)
        x = data(r, n, feat)
        P.emit("let %s_x = %s" % (s, x))
        if how == "tape":
            src = r.choice(["%s_x" % s, "(%s_x, %s)" % (s, w)])
            P.emit("with tape() as t {")
            if not use_var:
                P.emit("    t.watch(%s)" % w)
            P.emit("    t.watch(%s_x)" % s,
                   "    let y = %s(%s_x, %s)" % (f, s, w),
                   "}",
                   'print("value %s:", %d, y)' % (s, n),
                   'print("grad %s:", t.gradient(y, %s))' % (s, src))
        elif how == "grad":
            if use_var:
                P.emit('print("grad %s:", %d, grad(%s)(%s_x, %s.value))'
                       % (s, n, f, s, w))
            else:
                an = r.choice(["", ", argnums=1", ", argnums=(0, 1)"])
                P.emit('print("grad %s:", %d, grad(%s%s)(%s_x, %s))'
                       % (s, n, f, an, s, w))
        else:
            P.emit('print("grad %s:", %d, grad(fn (z) => %s(z, %s) * 2.0)(%s_x))'
                   % (s, n, f, w, s))
        if r.random() < 0.3:
            P.emit('print("value %s:", %s(%s_x, %s))' % (s, f, s, w))


def region(r, names, var):
    """A traced if / for / while over the carried `a` reading names
    (a variable's value among them): its lines, indented one level."""
    kind = r.choice(["if", "if", "for", "while"])
    e = bounded(r, names + ["a"], r.randint(1, 2), keep="a")
    out = []
    if kind == "if":
        c = r.choice(["sum(x)", "sum(%s)" % var, "mean(a)"])
        out.append("    if %s > %s {" % (c, r.choice(["0.0", "0.5", "-0.5"])))
        out.append("        a = %s" % e)
        if r.random() < 0.7:
            out.append("    } else {")
            out.append("        a = %s" % bounded(r, names + ["a"], 1, keep="a"))
        out.append("    }")
    elif kind == "for":
        out.append("    for k in range(n) {")
        out.append("        a = a * 0.5 + %s" % e)
        out.append("    }")
    else:
        out.append("    let i = 0")
        out.append("    while i < n {")
        out.append("        a = %s" % e)
        out.append("        i += 1")
        out.append("    }")
    return out


def scene_var(P, k, last):
    """Class: a variable's trace-time value baked into a backward."""
    r = P.rng
    s = "s%d" % k
    shape = r.choice([(3,), (2, 3)])
    v = "%s_v" % s
    P.emit("let %s = variable(%s)" % (v, lit(r, shape)))
    vv = v + ".value"
    how = r.choice(["tape", "tape", "grad", "outer"])
    if OPTS["avoid_known"]:
        how = "outer"           # a variable baked into a backward (known)
    names = ["x", v]
    pre = []
    if r.random() < 0.2:
        # the body changes the variable before the region (seed 5272)
        pre.append("    %s.assign_sub(0.25 * %s)" % (v, bounded(r, ["x"], 1)))
    if how == "grad":
        # the variable read only inside the region, or before it too
        P.emit("fn %s_h(x, n) {" % s, "    let a = x" +
               (" * %s" % v if r.random() < 0.4 else ""))
        P.lines += region(r, names, v)
        P.emit("    return sum(a * %s)" % v, "}",
               "@staged", "fn %s_f(x, n) {" % s)
        P.lines += pre
        P.emit("    let d = grad(fn (z) => %s_h(z, n))(x)" % s,
               "    return (d, %s)" % vv, "}")
    elif how == "tape":
        P.emit("@staged", "fn %s_f(x, n) {" % s)
        P.lines += pre
        P.emit("    let a = x", "    with tape() as t {", "        t.watch(x)")
        P.lines += ["    " + ln for ln in region(r, names, v)]
        P.emit("        let l = sum(a * %s)" % v, "    }",
               "    return (a, t.gradient(l, %s))" % r.choice(
                   ["x", v, "(x, %s)" % v]), "}")
    else:
        P.emit("@staged", "fn %s_f(x, n) {" % s)
        P.lines += pre
        P.emit("    let a = x * %s" % v)
        P.lines += region(r, names, v)
        P.emit("    return sum(a * %s)" % v, "}")
    kinds = [ln.split()[0] for ln in P.lines
             if ln.strip().split(" ")[0] in ("if", "for", "while")]
    P.lines.insert(0, "# %s: var %s %s%s" % (
        s, how, "/".join(kinds), " assign-in-body" if pre else ""))
    xs = [lit(r, shape, -2.0, 2.0) for _ in range(2)]
    for ci in range(r.randint(3, 4)):
        x = r.choice(xs)
        n = r.choice([0, 1, 2, 3]) if ci else r.choice([1, 2])
        if ci and r.random() < 0.7 and not (OPTS["avoid_known"] and pre):
            P.emit("%s.%s(%s)" % (v, r.choice(["assign", "assign", "assign_add"]),
                                 lit(r, shape)))
        if how == "outer":
            P.emit("let %s_x%d = %s" % (s, ci, x),
                   "with tape() as t {", "    t.watch(%s_x%d)" % (s, ci),
                   "    let y = %s_f(%s_x%d, %d)" % (s, s, ci, n), "}",
                   'print("value %s:", y)' % s,
                   'print("grad %s:", t.gradient(y, (%s_x%d, %s)))' % (s, s, ci, v))
        else:
            P.emit("let %s_r = %s_f(%s, %d)" % (s, s, x, n))
            if how == "tape":
                P.emit('print("value %s:", %s_r[0])' % (s, s),
                       'print("grad %s:", %s_r[1])' % (s, s))
            else:
                P.emit('print("grad %s:", %s_r[0])' % (s, s),
                       'print("value %s:", %s_r[1])' % (s, s))
        P.emit('print("value %s:", %s)' % (s, vv))


def scene_rand(P, k, last):
    """Class: random draws before, inside and after traced regions."""
    r = P.rng
    s = "s%d" % k
    shape = r.choice([(3,), (2, 3)])
    sh = "(3,)" if shape == (3,) else "(2, 3)"

    def draw():
        return r.choice(["rand(%s)" % sh, "randn(%s)" % sh,
                         "(rand(()) * 0.5)", "cast(randint(0, 5, shape=%s), float32)" % sh,
                         "normal(0.5, 2.0, %s)" % sh, "uniform(-1.0, 1.0, %s)" % sh,
                         "shuffle(rand(%s))" % sh, "cast(choice(6, %s, replace=false), float32)" % sh,
                         "cast(choice(3, %s, p=[0.2, 0.5, 0.3]), float32)" % sh])
    tape_in = r.random() < 0.15 and not OPTS["avoid_known"]
    # a tape outside, around draws in a region, is refused (known)
    outer = not tape_in and r.random() < 0.3 and not OPTS["avoid_known"]
    P.emit("# %s: rand%s" % (s, " tape-inside" if tape_in else
                             " outer-tape" if outer else ""))
    P.emit("@staged", "fn %s_f(x, n) {" % s)
    P.emit("    let a = x" + (" + %s" % draw() if r.random() < 0.6 else ""))
    ind = "    "
    if tape_in:
        P.emit("    with tape() as t {", "        t.watch(x)")
        ind = "        "
    # two regions that draw: the second draws after the first (known)
    for _ in range(1 if OPTS["avoid_known"] else r.randint(1, 2)):
        kind = r.choice(["if", "for", "while"])
        if kind == "if":
            P.emit(ind + "if sum(%s) > %s {" % (r.choice(["x", "a"]),
                                                r.choice(["0.0", "0.5"])),
                   ind + "    a = a * 0.5 + %s" % draw())
            if r.random() < 0.6:
                P.emit(ind + "} else {",
                       ind + "    a = %s" % r.choice(["a - %s" % draw(), "tanh(a)"]))
            P.emit(ind + "}")
        elif kind == "for":
            P.emit(ind + "for k in range(n) {",
                   ind + "    a = a * 0.5 + %s" % draw(), ind + "}")
        else:
            P.emit(ind + "let i = 0", ind + "while i < n {",
                   ind + "    a = tanh(a) + %s" % draw(), ind + "    i += 1",
                   ind + "}")
        if r.random() < 0.7 and not OPTS["avoid_known"]:
            # a draw after a region that drew (known when repeated)
            P.emit(ind + "a = a + %s" % draw())
    if tape_in:
        P.emit("        let l = sum(a * a)", "    }",
               "    return (a, t.gradient(l, x))", "}")
    else:
        after = r.random() < 0.5 and not OPTS["avoid_known"]
        P.emit("    return a" + (" + %s" % draw() if after else ""), "}")
    xs = [lit(r, shape, -2.0, 2.0) for _ in range(2)]
    for ci in range(r.randint(3, 4)):
        n = r.choice([0, 1, 2, 3]) if ci else r.choice([1, 2])
        x = r.choice(xs)
        if outer:
            P.emit("let %s_x = %s" % (s, x),
                   "with tape() as t {", "    t.watch(%s_x)" % s,
                   "    let y = %s_f(%s_x, %d)" % (s, s, n),
                   "    let l = sum(y * y)", "}",
                   'print("value %s:", y)' % s,
                   'print("grad %s:", t.gradient(l, %s_x))' % (s, s))
        elif tape_in:
            P.emit("let %s_r = %s_f(%s, %d)" % (s, s, x, n),
                   'print("value %s:", %s_r[0])' % (s, s),
                   'print("grad %s:", %s_r[1])' % (s, s))
        else:
            P.emit('print("value %s:", %s_f(%s, %d))' % (s, s, x, n))
        if r.random() < 0.3:
            P.emit('print("value %s:", rand(()))' % s)


def scene_host(P, k, last):
    """Classes: @host calls and outside bindings out of sync; gradients
    through host calls; host calls on lists and records the body made."""
    r = P.rng
    s = "s%d" % k
    parts = ["update", "stale", "sees", "len", "gradh", "blist", "brec",
             "log", "pure"]
    if OPTS["avoid_known"]:
        parts = ["log", "pure"]  # the others show known classes
    parts = r.sample(parts, r.randint(1, min(3, len(parts))))
    outer = "gradh" in parts
    if outer and "stale" in parts and "update" in parts:
        # a gradient through a binding that the body assigns and a @host
        # call changed is a documented located error (docs/staging.md
        # section 14); seed 96254
        parts.remove("update")
    P.emit("# %s: host %s" % (s, " ".join(sorted(parts))))
    P.emit("let %s_c = 0.0" % s, "let %s_m = 0.0" % s,
           "let %s_log = list()" % s)
    hosts, body = [], []
    if "update" in parts or "stale" in parts:
        # updates a binding (the body assigns it too, with "update")
        P.emit("@host", "fn %s_bump(v) {" % s,
               "    %s_c = %s_c + 1.0" % (s, s),
               "    %s_log.push(float(sum(v)))" % s, "}")
        if "update" in parts and r.random() < 0.5:
            body.append("%s_c = %s_c + sum(x)" % (s, s))
        body.append("%s_bump(x)" % s)
        if "update" in parts:
            body.append("%s_c = %s_c + 0.5" % (s, s))
        if "stale" in parts:
            body.append("a = a * %s_c" % s)
    if "sees" in parts:
        P.emit("@host", "fn %s_peek() { return %s_m * 2.0 + 1.0 }" % (s, s))
        body.append("%s_m = sum(x) + %s_m" % (s, s))
        body.append("a = a + %s_peek()" % s)
    if "len" in parts:
        P.emit("@host", "fn %s_note(v) { %s_log.push(float(mean(v))) }" % (s, s))
        body.append("%s_note(a)" % s)
        body.append("a = a + len(%s_log)" % s)
    if "gradh" in parts:
        P.emit("@host", "fn %s_sq(v) { return %s }" % (
            s, r.choice(["v * v", "sin(v) * 2.0", "tanh(v) + v"])))
        body.append("a = a + %s_sq(x)" % s)
    if "log" in parts:
        # only logs: the body never reads what the host changed
        P.emit("@host", "fn %s_rec(v) { %s_log.push(float(sum(v))) }" % (s, s))
        body.append("%s_rec(a * 2.0)" % s)
    if "pure" in parts:
        P.emit("@host", "fn %s_pick(v) { return [0.5, -1.5, 2.5][int(sum(v) > 0.0)] }"
               % s)
        body.append("a = a * %s_pick(x)" % s)
    if "blist" in parts:
        P.emit("@host", "fn %s_fill(ys, v) { ys.push(v * 2.0) }" % s)
        body.append("let ys = list(x)")
        body.append("%s_fill(ys, a)" % s)
        body.append("a = a + ys[len(ys) - 1]")
    if "brec" in parts:
        P.emit("@host", "fn %s_set(q, v) { q.f = q.f * 3.0 + v }" % s)
        body.append("let q = {f: x}")
        body.append("%s_set(q, a)" % s)
        body.append("a = a + q.f")
    P.emit("@staged", "fn %s_f(x) {" % s, "    let a = %s" % bounded(r, ["x"], 1))
    P.lines += ["    " + b for b in body]
    P.emit("    return a", "}")
    shape = r.choice([(3,), (2, 3)])
    xs = [lit(r, shape, -2.0, 2.0) for _ in range(2)]
    for ci in range(r.randint(3, 4)):
        x = r.choice(xs)
        if outer and r.random() < 0.7:
            P.emit("let %s_x = %s" % (s, x),
                   "with tape() as t {", "    t.watch(%s_x)" % s,
                   "    let y = sum(%s_f(%s_x))" % (s, s), "}",
                   'print("value %s:", y)' % s,
                   'print("grad %s:", t.gradient(y, %s_x))' % (s, s))
        else:
            P.emit('print("value %s:", %s_f(%s))' % (s, s, x))
        P.emit('print("value %s:", %s_c, %s_m, %s_log)' % (s, s, s, s))


def scene_cont(P, k, last):
    """Lists and records: made in the body, passed in, returned, returned
    twice (aliasing)."""
    r = P.rng
    s = "s%d" % k
    rets = ["(ys, ys)", "(ys, q)", "q", "ys", "(ys, ys, q)", "(xs, p)",
            "ys[0]", "(q, q)", "(ys[0], q.v, q)"]
    if OPTS["avoid_known"]:
        rets = ["(ys, q)", "q", "ys", "ys[0]", "(ys[0], q.v, q)"]  # aliasing
    ret = r.choice(rets)
    P.emit("# %s: cont return %s" % (s, ret))
    P.emit("@staged", "fn %s_f(x, xs, p) {" % s, "    let ys = list()",
           "    for e in xs { ys.push(%s) }" % bounded(r, ["e", "x", "p.w"], 1),
           "    ys.push(x * p.w + p.b)")
    if r.random() < 0.5:
        P.emit("    ys[0] = ys[0] + %s" % bounded(r, ["x"], 1))
    P.emit("    let q = {s: sum(x), v: ys[0] + p.b}")
    if r.random() < 0.4:
        P.emit("    q.s = q.s + %s" % reduce_src(r, "ys[len(ys) - 1]"))
    P.emit("    return %s" % ret, "}")
    nx = r.choice([1, 2])
    for ci in range(3):
        x = lit(r, (3,))
        m = nx if ci < 2 or r.random() < 0.5 else nx + 1
        xl = "list(%s)" % ", ".join(lit(r, (3,)) for _ in range(m))
        p = "{w: %s, b: %s}" % (lit(r, (3,)), lit(r, (3,)))
        P.emit("let %s_xs = %s" % (s, xl), "let %s_p = %s" % (s, p),
               "let %s_o = %s_f(%s, %s_xs, %s_p)" % (s, s, x, s, s),
               'print("value %s:", %s_o)' % (s, s))
        if ret in ("(ys, ys)", "(ys, ys, q)"):
            P.emit("%s_o[0].push(1.0)" % s,
                   'print("value %s:", len(%s_o[1]))' % (s, s))
        elif ret == "(q, q)":
            P.emit("%s_o[0].s = 0.0" % s, 'print("value %s:", %s_o[1].s)' % (s, s))
        elif ret == "(xs, p)":
            P.emit("%s_o[0].push(1.0)" % s, "%s_o[1].w = 0.0" % s,
                   'print("value %s:", len(%s_xs), %s_p)' % (s, s, s))


FAIL_KINDS = ["floordiv", "mod", "pow", "gather", "index"]


def scene_fail(P, k, last):
    """Class: dead-code elimination dropping ops that fail on values."""
    r = P.rng
    s = "s%d" % k
    P.can_fail = True
    kind = r.choice(FAIL_KINDS)
    where = r.choice(["unused", "unused", "used", "if"])
    if OPTS["avoid_known"]:
        where = "used"          # dead-code elimination (known)
    if kind in ("floordiv", "mod", "pow"):
        op = {"floordiv": "//", "mod": "%", "pow": "**"}[kind]
        e = "a %s b" % op
        good = lambda: "[%s]" % ", ".join(str(r.randint(1, 5)) for _ in range(3))  # noqa
        if kind == "pow":
            bad = "[2, -1, 1]"
        else:
            bad = "[1, 0, 2]"
    elif kind == "gather":
        e = "gather(x, b)"
        good = lambda: "[%s]" % ", ".join(str(r.randint(0, 2)) for _ in range(2))  # noqa
        bad = r.choice(["[0, 3]", "[5, 1]", "[-4, 0]"])
    else:
        e = "x[b]"
        good = lambda: str(r.randint(0, 2))  # noqa
        bad = r.choice(["3", "7", "-4"])
    P.emit("# %s: fail %s %s" % (s, kind, where))
    P.emit("@staged", "fn %s_f(a, x, b) {" % s)
    if where == "unused":
        P.emit("    let u = %s" % e, "    return x * 2.0 + sum(a)")
    elif where == "used":
        P.emit("    let u = %s" % e, "    return (x * 2.0, u)")
    else:
        P.emit("    let y = x", "    if sum(x) > -100.0 {",
               "        let u = %s" % e, "        y = y + 1.0", "    }",
               "    return y")
    P.emit("}")
    calls = [good() for _ in range(r.randint(2, 3))]
    calls.insert(r.randint(1 if r.random() < 0.85 else 0, len(calls)), bad)
    for b in calls:
        a = "[%s]" % ", ".join(str(r.randint(-6, 9)) for _ in range(3))
        P.emit('print("value %s:", %s_f(%s, %s, %s))' % (
            s, s, a, lit(r, (3,)), b))


CHAIN_OPS = ["a * 0.75 + 0.25", "tanh(a) * 1.5", "sin(a) + 0.125",
             "a - 0.125 * a * a", "sigmoid(a) - 0.5", "maximum(a, -0.5)",
             "abs(a) * 0.875", "a * 0.5 + cos(a) * 0.25", "a + y * 0.0625",
             "minimum(a, y + 1.0)"]


def scene_chain(P, k, last):
    """Classes: a pass superlinear in chain length; error text from fused
    groups."""
    r = P.rng
    s = "s%d" % k
    big = r.random() < 0.08
    K = r.choice([1000, 1500, 2000, 2500, 3000] if big else
                 [10, 30, 60, 100, 200, 400])
    K = min(K, OPTS["max_chain"], 2000 if OPTS["avoid_known"] else 10 ** 9)
    ops = r.sample(CHAIN_OPS, r.randint(1, 3))
    taped = K <= 200 and r.random() < 0.3
    bad = last and r.random() < 0.3 and any("y" in o for o in ops) and \
        not OPTS["avoid_known"]
    P.emit("# %s: chain K=%d%s%s" % (s, K, " taped" if taped else "",
                                     " bad-broadcast" if bad else ""))
    P.emit("@staged", "fn %s_f(x, y) {" % s, "    let a = x",
           "    for i in range(%d) {" % K)
    if len(ops) > 1 and r.random() < 0.5:
        P.emit("        if i %% 2 == 0 { a = %s } else { a = %s }" % (ops[0], ops[1]))
        ops = ops[2:]
    for o in ops:
        P.emit("        a = %s" % o)
    P.emit("    }", "    return %s" % r.choice(["a", "sum(a)", "mean(a * x)"]),
           "}")
    sizes = batch_sizes(r)
    if taped and OPTS["avoid_known"]:
        sizes = [sizes[0]] * len(sizes)
    ysame = r.random() < 0.5 or bad       # y of x's shape, or of one row
    for i, n in enumerate(sizes):
        x = lit(r, (n, 3))
        ny = n
        if bad and i == len(sizes) - 1:
            ny = n + 1
            P.can_fail = True
        y = lit(r, (ny, 3)) if ysame else lit(r, (3,))
        if taped:
            P.emit("let %s_x = %s" % (s, x), "with tape() as t {",
                   "    t.watch(%s_x)" % s,
                   "    let z = sum(%s_f(%s_x, %s))" % (s, s, y), "}",
                   'print("value %s:", z)' % s,
                   'print("grad %s:", t.gradient(z, %s_x))' % (s, s))
        else:
            P.emit('print("value %s:", %d, %s_f(%s, %s))' % (s, n, s, x, y))


def scene_misc(P, k, last):
    """Other staging rules: an early return, prints in traced regions,
    an outside binding changed between calls, dropout, a loop on data, a
    staged function staged twice (a staged caller and a direct call)."""
    r = P.rng
    s = "s%d" % k
    parts = r.sample(["early", "print", "glob", "dropout", "shrink", "where",
                      "closure", "hess"], r.randint(1, 3))
    if "shrink" in parts and "hess" in parts:
        # second order through a loop: a documented error when staged
        parts.remove("shrink")
    P.emit("# %s: misc %s" % (s, " ".join(sorted(parts))))
    P.emit("let %s_g = %s" % (s, lit(r, (3,))))
    body = ["let a = %s" % bounded(r, ["x"], 2, keep="x")]
    if "glob" in parts:
        body.append("a = a * %s_g" % s)
        body += ["if sum(a) > 0.0 { a = a + %s_g } else { a = tanh(a - %s_g) }"
                 % (s, s)]
    if "print" in parts:
        body.append('if mean(x) > 0.0 { print("value %s: pos", sum(a)) } else '
                    '{ print("value %s: neg", max(a)) }' % (s, s))
    if "dropout" in parts:
        body.append("a = dropout(a, 0.5)")
    if "shrink" in parts:
        body.append("while max(abs(a)) > 0.3 { a = a * 0.5 }")
    if "where" in parts:
        body.append("a = where(a > 0.0, a * 2.0, a - 1.0)")
    if "early" in parts:
        body.append("if sum(x) > 0.5 { return a * 3.0 }")
        body.append("a = a + 1.0")
    P.emit("@staged", "fn %s_f(x) {" % s)
    P.lines += ["    " + b for b in body]
    P.emit("    return a", "}")
    outer = r.random() < 0.4 and not ("dropout" in parts and r.random() < 0.5)
    if r.random() < 0.3:
        P.emit("@staged", "fn %s_h(x) { return %s_f(x) * 2.0 }" % (s, s))
    else:
        P.emit("fn %s_h(x) { return %s_f(x) * 2.0 }" % (s, s))
    for ci in range(r.randint(3, 4)):
        x = lit(r, (3,), -1.5, 1.5)
        fn = r.choice(["%s_f" % s, "%s_h" % s])
        if ci and "glob" in parts and r.random() < 0.7:
            P.emit("%s_g = %s" % (s, lit(r, (3,))))
        if outer:
            P.emit("let %s_x = %s" % (s, x), "with tape() as t {",
                   "    t.watch(%s_x)" % s, "    let y = %s(%s_x)" % (fn, s),
                   "    let l = sum(y * y)", "}",
                   'print("value %s:", y)' % s,
                   'print("grad %s:", t.gradient(l, %s_x))' % (s, s))
        else:
            P.emit('print("value %s:", %s(%s))' % (s, fn, x))
        if "hess" in parts:
            P.emit('print("grad %s:", grad(grad(fn (z) => sum(%s(z * %s))))(%s))'
                   % (s, fn, lit(r, (3,)), fmt_num(round(r.uniform(-1, 1), 2) or 0.5)))
    if "closure" in parts:
        # a staged closure over a local that changes between its calls
        P.emit("fn %s_run() {" % s, "    let c = %s" % lit(r, (3,)),
               "    let g = staged(fn (x) => %s)" % bounded(r, ["x", "c"], 2, keep="x"))
        for ci in range(3):
            if ci:
                P.emit("    c = %s" % r.choice([lit(r, (3,)), "c * 0.5", "tanh(c) + 0.25"]))
            P.emit('    print("value %s:", g(%s))' % (s, lit(r, (3,))))
        P.emit("}", "%s_run()" % s)


SCENE_FNS = {"relax": scene_relax, "var": scene_var, "rand": scene_rand,
             "host": scene_host, "cont": scene_cont, "fail": scene_fail,
             "chain": scene_chain, "misc": scene_misc}


def gen_scenes(seed):
    """The program of seed in parts: (head lines, [(kind, lines)] one per
    scene, tail lines, whether it can fail). Scenes are independent but
    for the random stream, so each can also run alone (for reducing)."""
    P = Prog(seed)
    r = P.rng
    kinds = [r.choice(OPTS["scenes"]) for _ in range(r.randint(1, 3))]
    # a scene that can fail goes last
    fails = [x for x in kinds if x in FAILING]
    kinds = [x for x in kinds if x not in FAILING] + fails[:1]
    head = ["# stage_mix program, seed %d: %s" % (seed, " ".join(kinds)),
            "seed(%d)" % r.randint(0, 99)]
    parts = []
    for i, kind in enumerate(kinds):
        P.lines = []
        SCENE_FNS[kind](P, i, i == len(kinds) - 1)
        parts.append((kind, P.lines))
    tail = ['print("value end:", rand((2,)))']
    return head, parts, tail, P.can_fail


def gen_program(seed):
    head, parts, tail, can_fail = gen_scenes(seed)
    lines = head + [ln for _, ls in parts for ln in ls] + tail
    return "\n".join(lines) + "\n", can_fail


# ---- running and comparing --------------------------------------------------------

MODES = [("optimized", []), ("no-optimize", ["--no-optimize"]),
         ("eager", ["--eager"]), ("stage-all", ["--stage-all"])]
SECTION = re.compile(r"(g?value|grad) (s\d+|end):")
CHATTER = re.compile(
    r"^tfe: --stage-all: .*\n|"
    r"^tfe: warning: staged function .* was traced \d+ times.*\n"
    r"(?:  traced from: .*\n|  .*: .* -> .*\n|  the arguments are alike.*\n"
    r"|  no argument changed as described here.*\n)*",
    re.M)


def run(cmd, path, timeout):
    try:
        p = subprocess.run(cmd + [path], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout)
        return p.returncode, p.stdout.decode("utf-8", "replace"), \
            p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        return "timeout", "", "timed out after %g s" % timeout


def zero_pattern(text):
    return [float(v) == 0.0 for v in NUM.findall(SECTION.sub("", text))]


def compare(a, b, rtol, atol):
    """None when stdouts a and b agree by the rules, else a reason."""
    if a == b:
        return None
    sa, sb = sections(a, SECTION), sections(b, SECTION)
    for (ka, ta), (kb, tb) in zip(sa, sb):
        if ta == tb:
            continue
        if ka != kb:
            return "different prints: %r vs %r" % (ta[:50], tb[:50])
        if ka == "grad" and zero_pattern(ta) != zero_pattern(tb) and \
                (all(zero_pattern(ta)) or all(zero_pattern(tb))):
            return "a gradient is all zeros in one mode only"
        if ka not in ("grad", "gvalue"):
            return "values differ: %s" % ta.split(":")[0]
        if not close(ta, tb, rtol, atol):
            return "beyond tolerance: %s" % ta.split(":")[0]
    if len(sa) != len(sb):
        return "different number of prints"
    return None


def check_program(seed, args, workdir):
    prog, can_fail = gen_program(seed)
    path = os.path.join(workdir, "stage_mix_%d.tfe" % seed)
    return seed, path, prog, check_source(prog, can_fail, path, args)


def run_all_modes(prog, path, args, modes=None):
    """Writes prog to path and runs it in every mode: {mode: (status,
    stdout, stderr without the run-mode chatter)} and the timeouts and
    crashes found (a list of problems)."""
    with open(path, "w") as f:
        f.write(prog)
    res, problems = {}, []
    for mode, flags in modes or MODES:
        cmd = args.wrapper + [args.tfe] + flags
        rc, out, err = run(cmd, path, args.timeout)
        res[mode] = (rc, out, CHATTER.sub("", err))
        if rc == "timeout":
            problems.append("%s: timed out after %g s" % (
                " ".join(shlex.quote(c) for c in cmd + [path]), args.timeout))
        elif rc < 0 or rc > 1:
            problems.append("%s: crashed (exit status %d):\n%s" % (
                " ".join(shlex.quote(c) for c in cmd + [path]), rc, err.rstrip()))
    return res, problems


def check_source(prog, can_fail, path, args):
    """Writes prog to path, runs it in every mode: the problems found."""
    res, problems = run_all_modes(prog, path, args)
    erc, eout, eerr = res["eager"]
    if erc != 0 and not can_fail and erc != "timeout":
        problems.append("--eager fails in a program that should not:\n" + eerr)
    for mode in ("optimized", "no-optimize", "stage-all"):
        rc, out, err = res[mode]
        if rc == "timeout" or erc == "timeout":
            continue
        why = compare(eout, out, args.grad_rtol, args.grad_atol)
        if why:
            problems.append("%s differs from --eager (%s):\n%s" % (
                mode, why, diff(eout, out, "eager", mode)))
        if (rc, err) != (erc, eerr):
            problems.append("%s: exit status/stderr differ from --eager "
                            "(%s vs %s):\n%s" % (mode, rc, erc,
                                                 diff(eerr, err, "eager", mode)))
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(ap, 30, 20260801)
    ap.set_defaults(grad_rtol=GRAD_TOL, grad_atol=10 * GRAD_TOL)
    ap.add_argument("--exact", action="store_true",
                    help="compare gradients bit for bit too")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--scenes", default=",".join(SCENES))
    ap.add_argument("--max-chain", type=int, default=OPTS["max_chain"])
    ap.add_argument("--avoid-known", action="store_true")
    ap.add_argument("--seeds", help="a comma-separated list of seeds "
                    "(instead of -n and --seed)")
    args = ap.parse_args()
    if args.exact:
        args.grad_rtol = args.grad_atol = 0.0
    OPTS["scenes"] = [x for x in args.scenes.split(",") if x]
    bad = [x for x in OPTS["scenes"] if x not in SCENES]
    if bad or not OPTS["scenes"]:
        ap.error("--scenes: choose from %s" % ",".join(SCENES))
    OPTS["max_chain"] = args.max_chain
    OPTS["avoid_known"] = args.avoid_known
    if args.seeds:
        args.seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    return drive("stage_mix", args, lambda s: gen_program(s)[0], check_program)


if __name__ == "__main__":
    sys.exit(main())
