#!/usr/bin/env python3
"""stage_property.py — a property test of staged control flow (stage/: cond
and while nodes, their symbolic tracing, tapes and variables inside them),
run by `make check` via stage_property.sh.

It generates N random tfe programs (default 25, fixed seed) and runs each
four ways:

    tfe prog.tfe                 staged, graphs optimized (the default)
    tfe --no-optimize prog.tfe   staged, graphs run as traced
    tfe --eager prog.tfe         @staged functions run as plain functions
    tfe --stage-all prog.tfe     every function staged

and compares their standard output. A program defines a few @staged
functions f(x, y, n) (x and y float32 tensors of shape (3,) or (2, 3), n an
int) and, for each, one or two variables of its own. A body declares
loop-carried tensors and gradient accumulators, then runs random statements:

  * `while i < n { ... i += 1 }`, `for k in range(n) { ... }` (n traced: a
    graph loop), `while max(abs(a)) > 0.3 { a = a * 0.5 ... }` (a loop on
    data), `if sum(E) > 0.0 { ... } else { ... }` (a cond), nested one level
    (a loop in a loop, an if in a loop, a loop in an if);
  * in them: updates of carried tensors by elementwise math, matmul with
    literal matrices, reductions, reads of the variables;
  * `with tape() as t { t.watch(w); let l = sum(E) }` then
    `g = g + t.gradient(l, w)` for a watched argument or carried tensor, or
    for a variable, inside and outside the control flow (a tape around a
    whole loop too);
  * variable updates: `v.assign(E)`, `v.assign_add(E)`, and SGD steps
    `v.assign_sub(lr * tanh(t.gradient(l, v)))`.

Optimizer bait (all but --classic, which generates the programs of the
feature set before it, seed for seed): a cached call under a tape outside it
runs its optimized graph where it calls @host code or assigns a variable,
and there the optimizer's rewrites (graph/opt_*.c) can make two values eager
code computes apart one tensor. So programs define `@host fn hcount()` (a
counter, printed with the variables) and `@host fn hval(t)` (reads and
returns a tensor), called at the top level of half the functions, those
that take no gradient inside (a @host call inside a traced if or loop runs
it at trace time; one before a tape made in the function that reads a
variable is a located error); some functions have ifs only (no
loop), so an outer tape may take them; expressions repeat earlier ones (cse)
and wrap values in identities (x * 1.0, x / 1.0, x - 0.0, x + -0.0, 1.0 * x,
reshape and cast to the same shape and dtype, squeeze(expand_dims(x, 0), 0),
transpose(transpose(x)), x.T.T, a reshape of a reshape: opt_algebra.c), use
constants of literals only (opt_fold.c) and dead values (`let d0 = ...`,
opt_dce.c); carried values start as the same expression as an earlier one
(two tanh(v)), and end on another carried value or an argument (b = acc,
sometimes through an identity); functions return, after the carried values,
arguments passed through, identities of them, repeated expressions and a
carried value twice; x and y are sometimes one tensor (f(a, a, n)); and the
outer tape's target weights each result by a literal array, some results
twice, so a tape that took two results for one tensor (or one for two) adds
their gradients in another order than eager code (the class of seed 240395,
found in 3,000 programs by the old generator; with stage/grad.c's
traced_same made to return true, 12 of seeds 1..300 differ by it here,
with --avoid-known: 14, 62, 81, 98, 173, 204, 211, 219, 233, 263, 282, 295).

Each function is called 3 times with other values and other n (n = 0 too):
the first call traces, the later ones run the cached graph. Some calls are
made under an outer tape, and the gradient of the results with respect to x
and the variables is printed. After every call the results (`value f0:`),
the gradients computed inside (`grad f0:`) and the variables (`vars f0:`)
are printed.

Rules:
  * any stderr output or a nonzero exit status in any mode is a failure;
  * forward values must print the same text in every mode, except where a
    gradient was fed into them (an SGD step: then `gvalue`/`gvars`);
  * gradients (`grad`, `tape`) and values fed by them (`gvalue`, `gvars`)
    are compared with a tolerance, |a - b| <= 1e-5 * max(|a|, |b|, largest
    |number| of that print) + 1e-4 (--grad-rtol, --grad-atol). Staged
    gradients add their contributions in eager order and agree bit for bit
    (--grad-rtol 0 --grad-atol 0 compares bit for bit, a zero's sign
    included; seeds 5000..5999 all agree so);
  * but a gradient print that is all zeros in one mode and not in another
    always fails (that was the bug of a tape inside a staged loop: a
    silently zero gradient, an SGD loop that trained nothing).

Excluded on purpose (documented limits, docs/staging.md section 14): an
outer tape around a call of a function that takes a gradient inside a loop,
or around a loop (a second-order gradient through a loop on a traced tensor
is an error when staged, not eagerly); a variable write in a loop inside
a tape's block (with the tape made in the function, a gradient through a
staged loop that assigns a variable it reads is a located error).

Environment: $TFE (the binary), $TFE_SRCDIR, $TFE_TEST_WRAPPER (optional
prefix). Options: -n N (programs), --seed S, -j N (parallel programs),
--keep (keep the work folder), -v (print every failing program in full),
--show (print the generated programs and exit), --grad-rtol R,
--grad-atol A, --classic (the feature set before the optimizer bait),
--avoid-known (leave out the patterns of known open bugs: AVOID_KNOWN).
"""
import argparse
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from opt_property import NUM, add_common_args, binary_src, close, diff, drive, literal_array, run_modes, sections  # noqa: E402

SHAPES = [(3,), (2, 3)]
# --avoid-known: do not generate the patterns of known, reported bugs (for
# looking for others). It leaves out a carried value ending on another or
# on an argument (b = acc, b = y) in a traced if or loop of a function that
# takes a gradient inside, whose tape then watches one and uses the other
# (eager code's one tensor, two to the trace): a class since fixed (such
# calls run eagerly, docs/staging.md section 11), kept to compare runs.
AVOID_KNOWN = False
# --classic: the feature set before the optimizer bait below (same programs
# for the same seeds as before it was added)
CLASSIC = False
UNARY = ["tanh", "sin", "cos", "sigmoid", "relu", "abs", "neg", "exp",
         "softplus", "gelu"]
BINARY = ["+", "-", "*", "/", "maximum", "minimum"]


def shape_src(shape):
    if len(shape) == 1:
        return "(%d,)" % shape[0]
    return "(" + ", ".join(str(d) for d in shape) + ")"


class Fn:
    """One staged function under construction."""

    def __init__(self, rng, name):
        self.rng = rng
        self.name = name
        self.xs = rng.choice(SHAPES)
        self.ys = rng.choice(SHAPES)
        self.vars = [("%s_v%d" % (name, k), rng.choice(SHAPES))
                     for k in range(rng.choice([1, 1, 2]))]
        self.carried = []           # [(name, shape)]
        self.accs = []              # [(name, shape)] gradient accumulators
        self.ntape = 0
        self.in_tape_block = False   # generating a control inside a tape's block
        self.nloop = 0
        self.has_loop = False
        self.tape_in_loop = False   # a gradient taken inside a loop
        self.tape_around_loop = False
        self.sgd = False            # a gradient fed into a variable
        self.var_write_in_loop = False
        self.lines = []
        # the optimizer bait (not under --classic): @host calls at the top
        # level (a cached call under a tape then runs the optimized graph),
        # repeated subexpressions, algebraic identities, constants that
        # fold, dead values, outputs passed through or returned twice
        self.new = not CLASSIC
        self.ctl = 0                # enclosing traced ifs and loops
        self.in_tape = False        # generating a tape's block
        self.pool = {}              # shape -> expressions made so far
        self.ndead = 0
        # some functions have ifs only (no loop), so that an outer tape
        # may differentiate through their cached calls
        self.flat = self.new and rng.random() < 0.35
        # @host calls only in functions that take no gradient inside: a
        # host call may assign a variable, and a tape made later in the
        # function that reads it is then a located error (seed 21859)
        self.hosty = self.new and rng.random() < 0.5

    # ---- expressions ----------------------------------------------------

    def names(self, shape, allow_vars=True):
        env = [("x", self.xs), ("y", self.ys)] + self.carried
        if allow_vars:
            env += self.vars
        return [n for n, s in env if s == shape]

    def leaf(self, shape):
        e = self.leaf0(shape)
        r = self.rng
        if self.new and r.random() < 0.2:
            e = self.identity(e, shape)
        return e

    def identity(self, e, shape):
        """e through an op the optimizer folds away (graph/opt_algebra.c)."""
        r = self.rng
        forms = ["(%s * 1.0)", "(%s / 1.0)", "(%s - 0.0)", "(%s + -0.0)",
                 "(1.0 * %s)", "reshape(%s, " + shape_src(shape) + ")",
                 "cast(%s, float32)", "squeeze(expand_dims(%s, 0), 0)"]
        if len(shape) == 2:
            forms += ["transpose(transpose(%s))", "%s.T.T",
                      "reshape(reshape(%s, (3, 2)), (2, 3))"]
        return r.choice(forms) % e

    def const(self, shape):
        """A value of literals only (folded to a constant)."""
        r = self.rng
        a = literal_array(r, shape, -1.0, 1.0)
        return r.choice([
            "tanh(%s)" % a, "(%s * %s + 0.5)" % (a, literal_array(r, shape, -1.0, 1.0)),
            "(%s * sum(%s))" % (a, literal_array(r, (3,), -1.0, 1.0)),
            "relu(%s)" % a])

    def host_ok(self):
        # not inside a traced if or loop (the host call would make it run
        # at trace time), nor in a tape's block made in the function (a
        # host call may assign a variable the tape reads before and after
        # it: a located error, docs/staging.md section 11)
        return self.hosty and self.ctl == 0 and not self.in_tape

    def leaf0(self, shape):
        r = self.rng
        if self.new:
            k = r.random()
            if k < 0.08:
                return self.const(shape)
            pool = [e for e in self.pool.get(shape, [])
                    if self.host_ok() or "hval" not in e]
            if k < 0.16 and pool:
                return r.choice(pool)   # work for cse
            if k < 0.2 and self.host_ok():
                return "hval(%s)" % self.expr(shape, 0)
        same = self.names(shape)
        if same and r.random() < 0.75:
            return r.choice(same)
        other = (3,) if shape == (2, 3) else (2, 3)
        if r.random() < 0.3 or not self.names(other):
            return literal_array(r, shape, -1.0, 1.0)
        src = r.choice(self.names(other))
        if shape == (3,):
            return r.choice([
                "sum(%s, axis=0)" % src, "mean(%s, axis=0)" % src,
                "(%s @ %s)" % (literal_array(r, (2,), -1, 1), src)])
        return r.choice([
            "(%s + zeros((2, 3)))" % src,
            "(%s * %s)" % (src, literal_array(r, (2, 3), -1, 1))])

    def expr(self, shape, depth):
        e = self.expr0(shape, depth)
        if self.new and depth > 0:
            self.pool.setdefault(shape, []).append(e)
        return e

    def expr0(self, shape, depth):
        r = self.rng
        if depth <= 0 or r.random() < 0.2:
            return self.leaf(shape)
        d = depth - 1
        kind = r.choice(["unary"] * 3 + ["binary"] * 3 + ["lit"] * 2 +
                        ["matmul", "reduce"])
        if kind == "unary":
            op = r.choice(UNARY)
            a = self.expr(shape, d)
            if op in ("exp", "softplus"):
                return "%s(tanh(%s))" % (op, a)
            if op == "neg" and r.random() < 0.5:
                return "(-%s)" % a
            return "%s(%s)" % (op, a)
        if kind == "binary":
            op = r.choice(BINARY)
            return binary_src(op, self.expr(shape, d), self.expr(shape, d))
        if kind == "lit":
            op = r.choice(["+", "-", "*"])
            lit = r.choice(["0.5", "1.5", "-0.75", "2.0", "0.25"])
            return "(%s %s %s)" % (self.expr(shape, d), op, lit)
        if kind == "matmul":
            m = literal_array(r, (3, 3), -1.0, 1.0)
            return "(%s @ %s)" % (self.expr(shape, d), m)
        # a scalar reduction broadcast back, or a keepdims reduction
        red = r.choice(["sum", "mean", "max"])
        a = self.expr(shape, d)
        if shape == (2, 3) and r.random() < 0.5:
            return "(%s - %s(%s, axis=%d, keepdims=true))" % (
                a, red, self.expr(shape, d), r.randrange(2))
        return "(%s * %s(%s))" % (a, red, self.expr(r.choice(SHAPES), d))

    def bounded(self, shape, depth):
        """An expression whose values stay small (for loop-carried updates
        and variable writes, so that loops do not blow up)."""
        e = self.expr(shape, depth)
        return self.rng.choice(["tanh(%s)", "sin(%s)", "(0.5 * tanh(%s))",
                                "sigmoid(%s)"]) % e

    def cond(self):
        r = self.rng
        e = self.expr(r.choice(SHAPES), r.randint(1, 2))
        red = r.choice(["sum", "mean", "max"])
        op = r.choice([">", "<", ">=", "<="])
        lit = r.choice(["0.0", "0.5", "-0.5", "1.0"])
        return "%s(%s) %s %s" % (red, e, op, lit)

    # ---- statements -----------------------------------------------------

    def emit(self, ind, s):
        self.lines.append("    " * ind + s)

    def update(self, ind):
        r = self.rng
        name, shape = r.choice(self.carried)
        other = [n for n in self.names(shape, allow_vars=False) if n != name]
        if self.new and other and r.random() < 0.15 and not AVOID_KNOWN:
            # one carried value ends on another or on an argument (b =
            # acc): one tensor in eager code where this ran, two where a
            # loop ran zero times; or on one the optimizer folds into it
            # (b = acc * 1.0: an if or loop that would hand on its input)
            e = r.choice(other)
            if r.random() < 0.3:
                e = self.identity(e, shape)
            self.emit(ind, "%s = %s" % (name, e))
            return
        e = self.bounded(shape, r.randint(1, 3))
        if r.random() < 0.4:
            self.emit(ind, "%s = %s * 0.5 + %s" % (name, name, e))
        else:
            self.emit(ind, "%s = %s" % (name, e))

    def var_write(self, ind, in_loop=False):
        r = self.rng
        self.var_write_in_loop |= in_loop
        v, shape = r.choice(self.vars)
        e = self.bounded(shape, r.randint(1, 2))
        k = r.random()
        if k < 0.3:
            self.emit(ind, "%s.assign(%s)" % (v, e))
        elif k < 0.6:
            self.emit(ind, "%s.assign_add(0.25 * %s)" % (v, e))
        else:
            self.emit(ind, "%s.assign_sub(0.25 * %s)" % (v, e))

    def acc_for(self, shape):
        """A gradient accumulator of shape (a new one sometimes)."""
        same = [n for n, s in self.accs if s == shape]
        if same and self.rng.random() < 0.5:
            return self.rng.choice(same)
        name = "g%d" % len(self.accs)
        self.accs.append((name, shape))
        return name

    def tape(self, ind, in_loop, depth):
        """A tape block and a gradient taken from it: into an accumulator,
        or (for a variable, sometimes) as an SGD step."""
        r = self.rng
        t = "t%d" % self.ntape
        l = "l%d" % self.ntape
        self.ntape += 1
        if in_loop:
            self.tape_in_loop = True
        kind = r.random()
        if kind < 0.45:
            w, ws = r.choice([(n, s) for n, s in self.vars])
        else:
            w, ws = r.choice([("x", self.xs), ("y", self.ys)] + self.carried)
        self.emit(ind, "with tape() as %s {" % t)
        in_tape, self.in_tape = self.in_tape, True
        if not any(w == n for n, _ in self.vars):
            self.emit(ind + 1, "%s.watch(%s)" % (t, w))
        if depth > 0 and self.rng.random() < 0.3 and not in_loop and ind <= 1:
            # a tape around a loop or a cond (not inside another one: a
            # staged trace refuses that, stage/trace_cf.c)
            self.tape_around_loop = True
            self.in_tape_block = True
            self.control(ind + 1, depth - 1, in_loop)
            self.in_tape_block = False
            # the control may rebind w to a tensor the tape never saw: the
            # gradient with respect to it would be an error (watch it
            # again). A value the control made is, to the staged trace, a
            # result of a loop or if whose other results (a carried value
            # computed from it) the target may use too: a gradient with
            # respect to it is a located error (docs/staging.md section 14,
            # seed 6495), so the gradient is taken with respect to a copy
            # made after the control, as in eager code
            if not any(w == n for n, _ in self.vars):
                wc = "%sc%d" % (w, self.ntape)
                self.emit(ind + 1, "let %s = %s * 1.0" % (wc, w))
                self.emit(ind + 1, "%s.watch(%s)" % (t, wc))
                w = wc
        e = self.expr(ws, r.randint(1, 3))
        self.emit(ind + 1, "let %s = sum(%s(%s * %s) + %s)" % (
            l, r.choice(["tanh", "sin", "sigmoid", ""]), w, e, e))
        self.emit(ind, "}")
        self.in_tape = in_tape
        if any(w == n for n, _ in self.vars) and r.random() < 0.5 and not (in_loop and self.in_tape_block):
            self.sgd = True
            self.var_write_in_loop |= in_loop
            self.emit(ind, "%s.assign_sub(%s * tanh(%s.gradient(%s, %s)))" % (
                w, r.choice(["0.1", "0.25", "0.5"]), t, l, w))
        else:
            g = self.acc_for(ws)
            self.emit(ind, "%s = %s + %s.gradient(%s, %s)" % (g, g, t, l, w))

    def simple(self, ind, in_loop, depth):
        if self.new:
            k = self.rng.random()
            if k < 0.12 and self.host_ok():
                self.emit(ind, "hcount()")
            elif k < 0.2:
                # a value nothing uses (dce) that repeats one used (cse)
                shape = self.rng.choice(SHAPES)
                self.emit(ind, "let d%d = %s" % (self.ndead, self.expr(shape, 2)))
                self.ndead += 1
        k = self.rng.random()
        if k < 0.45 and self.carried:
            self.update(ind)
        elif (k < 0.7 or (k < 0.45 and not self.carried)) and not (in_loop and self.in_tape_block):
            self.var_write(ind, in_loop)
        elif k < 0.7:
            # no variable write in a loop inside a tape's block: a gradient
            # through a staged loop that assigns a variable it reads, with
            # the tape made in the function, is a located error (a
            # documented limit, docs/staging.md section 14; seed 67392)
            if self.carried or self.hosty:
                self.update(ind)
            else:
                self.tape(ind, in_loop, depth)
        elif self.hosty:
            self.update(ind)
        else:
            self.tape(ind, in_loop, depth)

    def block(self, ind, in_loop, depth):
        for _ in range(self.rng.randint(1, 3)):
            if depth > 0 and self.rng.random() < 0.3:
                self.control(ind, depth - 1, in_loop)
            else:
                self.simple(ind, in_loop, depth)

    def control(self, ind, depth, in_loop):
        self.ctl += 1
        self.control0(ind, depth, in_loop)
        self.ctl -= 1

    def control0(self, ind, depth, in_loop):
        r = self.rng
        kind = r.choice(["while", "for", "if", "if", "shrink"])
        if self.flat:
            kind = "if"
        if kind == "if":
            self.emit(ind, "if %s {" % self.cond())
            self.block(ind + 1, in_loop, depth)
            if r.random() < 0.6:
                self.emit(ind, "} else {")
                self.block(ind + 1, in_loop, depth)
            self.emit(ind, "}")
            return
        self.has_loop = True
        k = self.nloop
        self.nloop += 1
        if kind == "while":
            self.emit(ind, "let i%d = 0" % k)
            self.emit(ind, "while i%d < n {" % k)
            self.block(ind + 1, True, depth)
            self.emit(ind + 1, "i%d += 1" % k)
            self.emit(ind, "}")
        elif kind == "for":
            self.emit(ind, "for k%d in range(n) {" % k)
            self.block(ind + 1, True, depth)
            self.emit(ind, "}")
        else:
            # a loop on data: halves a carried tensor until it is small
            # (terminates: nothing else in the body writes it)
            a, shape = r.choice(self.carried)
            self.emit(ind, "while max(abs(%s)) > 0.3 {" % a)
            self.emit(ind + 1, "%s = %s * 0.5" % (a, a))
            saved = self.carried
            self.carried = [(n, s) for n, s in saved if n != a]
            if self.carried:
                self.block(ind + 1, True, depth)
            self.carried = saved
            self.emit(ind, "}")

    def build(self):
        r = self.rng
        body = []
        self.lines = body
        inits = []
        for k in range(r.randint(1, 3)):
            shape = r.choice(SHAPES)
            if self.new and inits and r.random() < 0.3:
                # the same value as an earlier one (cse merges them)
                e, shape = r.choice(inits)
            else:
                e = self.bounded(shape, r.randint(1, 2))
            inits.append((e, shape))
            self.carried.append(("a%d" % k, shape))
            self.emit(1, "let a%d = %s" % (k, e))
        decl_at = len(body)         # accumulators are declared here
        for _ in range(r.randint(1, 3)):
            self.control(1, 1, False)
        if r.random() < 0.3:
            self.simple(1, False, 1)
        if self.hosty and r.random() < 0.5:
            self.emit(1, "hcount()")
        vals = list(self.carried)
        if self.new:
            # outputs the optimizer may make one tensor with another, or
            # with an input: x passed through or folded (x * 1.0), the
            # same value twice (cse), a carried value returned twice
            for k in range(r.choice([0, 1, 1, 2, 3])):
                shape = r.choice(SHAPES)
                names = self.names(shape)
                kind = r.random()
                if kind < 0.2 and names:
                    e = r.choice(names)
                    if any(e == v for v, _ in self.vars):
                        e = "(%s * 1.0)" % e
                elif kind < 0.45 and names:
                    e = self.identity(r.choice(names), shape)
                elif kind < 0.65 and self.pool.get(shape):
                    e = r.choice(self.pool[shape])
                elif kind < 0.8:
                    e = "tanh(%s)" % r.choice(names or ["x"])
                    e = e if names else self.expr(shape, 1)
                else:
                    e = self.expr(shape, 2)
                self.emit(1, "let o%d = %s" % (k, e))
                vals.append(("o%d" % k, shape))
            if r.random() < 0.3:
                vals.append(r.choice(vals))
        self.outs = vals
        vals = [n for n, _ in vals]
        grads = [n for n, _ in self.accs]
        decls = ["    let %s = zeros(%s)" % (n, shape_src(s))
                 for n, s in self.accs]
        body[decl_at:decl_at] = decls
        ret = "    return ((%s,), (%s))" % (
            ", ".join(vals), "".join(g + ", " for g in grads))
        head = ["@staged", "fn %s(x, y, n) {" % self.name]
        return "\n".join(head + body + [ret, "}"]), len(grads) > 0


def gen_program(seed):
    rng = random.Random(seed)
    out = ["# stage_property program, seed %d" % seed]
    if not CLASSIC:
        out += ["let hcalls = 0", "@host", "fn hcount() { hcalls = hcalls + 1 }",
                "@host", "fn hval(t) { return t * 0.5 + 0.125 }"]
    for fi in range(rng.randint(1, 3)):
        f = Fn(rng, "f%d" % fi)
        src, has_grads = f.build()
        for v, s in f.vars:
            out.append("let %s = variable(%s)" % (v, literal_array(rng, s)))
        out.append(src)
        sets = []
        for vi in range(2):
            a = "%s_x%d" % (f.name, vi)
            b = "%s_y%d" % (f.name, vi)
            out.append("let %s = %s" % (a, literal_array(rng, f.xs)))
            out.append("let %s = %s" % (b, literal_array(rng, f.ys)))
            sets.append((a, b))
        ns = rng.sample([0, 1, 2, 3], 3)
        if ns[0] == 0:
            ns[0], ns[1] = ns[1], ns[0]
        # an outer tape differentiates through the whole call: not when a
        # gradient is taken in or around a loop (second order through a
        # loop is an error when staged: a documented limit)
        can_tape = not (f.tape_in_loop or (f.has_loop and f.ntape > 0))
        # nor through a loop that assigns a variable it reads: a staged
        # backward refuses that (stage/grad.c, replay_loop)
        if f.var_write_in_loop:
            can_tape = False
        g = "g" if f.sgd else ""
        if f.new:
            # one tensor as both arguments, where the shapes agree
            if f.xs == f.ys and rng.random() < 0.2:
                sets[1] = (sets[1][0], sets[1][0])
        vnames = ", ".join(v for v, _ in f.vars)
        for ci, ((a, b), n) in enumerate(zip((sets[0], sets[1], sets[0]), ns)):
            r = "%s_r%d" % (f.name, ci)
            call = "%s(%s, %s, %d)" % (f.name, a, b, n)
            taped = can_tape and rng.random() < (0.6 if f.new else 0.4)
            if taped:
                t = "%s_T%d" % (f.name, ci)
                out.append("with tape() as %s {" % t)
                out.append("    %s.watch(%s)" % (t, a))
                out.append("    let %s = %s" % (r, call))
                if f.new:
                    # weighted, and some outputs used twice: a tape that
                    # took two outputs for one tensor (or one for two) adds
                    # their gradients in another order than eager's
                    ks = list(range(len(f.outs)))
                    ks += [rng.choice(ks) for _ in range(rng.randint(0, 2))]
                    terms = []
                    for k in ks:
                        w = literal_array(rng, f.outs[k][1], -1.5, 1.5)
                        terms.append(rng.choice(["sum(%s[0][%d] * %s)", "sum(tanh(%s[0][%d]) * %s)"]) % (r, k, w))
                    out.append("    let %s_L = %s" % (r, " + ".join(terms)))
                else:
                    out.append("    let %s_L = %s" % (r, " + ".join(
                        "sum(%s[0][%d])" % (r, k) for k in range(len(f.carried)))))
                out.append("}")
            else:
                out.append("let %s = %s" % (r, call))
            out.append('print("%svalue %s:", %s[0])' % (g, f.name, r))
            if has_grads:
                out.append('print("grad %s:", %s[1])' % (f.name, r))
            out.append('print("%svars %s:", %s)' % (g, f.name, ", ".join(
                [v + ".value" for v, _ in f.vars] + (["hcalls"] if f.new else []))))
            if taped:
                out.append('print("tape %s:", %s.gradient(%s_L, (%s, %s)))' % (
                    f.name, t, r, a, vnames))
    return "\n".join(out) + "\n"


# ---- running and comparing --------------------------------------------------------

MODES = [("optimized", []), ("no-optimize", ["--no-optimize"]),
         ("eager", ["--eager"]), ("stage-all", ["--stage-all"])]
SECTION = re.compile(r"(g?value|grad|g?vars|tape) f\d+:")


def tensors(text):
    """The top-level [...] tensors of a print, each as its text."""
    out, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "[":
            if depth == 0:
                start = i
            depth += 1
        elif c == "]":
            depth -= 1
            if depth == 0:
                out.append(text[start:i + 1])
    return out


def zero_pattern(text):
    """For each tensor of a gradient print: is it all zeros?"""
    return [all(float(v) == 0.0 for v in NUM.findall(t))
            for t in tensors(SECTION.sub("", text))]


def compare(a, b, rtol, atol):
    """None when outputs a and b agree by the rules, else a reason."""
    if a == b:
        return None
    sa, sb = sections(a, SECTION), sections(b, SECTION)
    if len(sa) != len(sb):
        return "different number of prints"
    for (ka, ta), (kb, tb) in zip(sa, sb):
        if ka != kb:
            return "different prints: %r vs %r" % (ta[:40], tb[:40])
        if ta == tb:
            continue
        if ka in ("grad", "tape") and zero_pattern(ta) != zero_pattern(tb):
            return "a gradient is all zeros in one mode only: %s vs %s" % (
                ta.strip(), tb.strip())
        if ka not in ("grad", "tape", "gvalue", "gvars"):
            return "values differ: %s vs %s" % (ta.strip(), tb.strip())
        if not close(ta, tb, rtol, atol):
            return "beyond tolerance: %s vs %s" % (ta.strip(), tb.strip())
    return None


def check_program(seed, args, workdir):
    prog = gen_program(seed)
    path = os.path.join(workdir, "stage_property_%d.tfe" % seed)
    with open(path, "w") as f:
        f.write(prog)
    res, problems = run_modes(args, path, MODES)
    for mode in ("optimized", "no-optimize", "stage-all"):
        why = compare(res["eager"], res[mode], args.grad_rtol, args.grad_atol)
        if why:
            problems.append("%s differs from --eager (%s):\n%s" % (
                mode, why, diff(res["eager"], res[mode], "eager", mode)))
    return seed, path, prog, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(ap, 25, 20260701)
    ap.add_argument("--avoid-known", action="store_true")
    ap.add_argument("--classic", action="store_true")
    args = ap.parse_args()
    global AVOID_KNOWN, CLASSIC
    AVOID_KNOWN = args.avoid_known
    CLASSIC = args.classic
    return drive("stage_property", args, gen_program, check_program)

if __name__ == "__main__":
    sys.exit(main())
