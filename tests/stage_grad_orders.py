#!/usr/bin/env python3
"""stage_grad_orders.py — a property test of second, third and fourth
order gradients through cached staged calls whose graphs have traced `if`s,
run by `make check` via stage_grad_orders.sh (a fast slice); the driver
(seeds, -j, --show, --keep, -v) is tests/opt_property.py's.

A program defines one @staged function f(x, y, s, t) (x and y float32
tensors of shape (3,), s and t numbers +1.0 or -1.0) and a driver d that
takes a gradient of order 2, 3 or 4 through f, then calls d 4 to 8 times
with other s, t (so the conditions alternate between calls), sometimes
other x, and sometimes a variable changed in between: the first call of
each kind traces, the later ones run the cached graph (and its cached
backward graphs). f's body:

  * `let a = ...` from x (and y), sometimes `* w` (w a variable) or through
    `hv(a)`, a @host function with a value (the gradient runs it again
    under a tape of its own);
  * one or two `if`s, plain or nested one or two levels in either branch,
    whose branches update `a` by tanh/sin/sigmoid/exp, products with x or
    y, reads of the variable w (`a * w`), and @host calls with a value;
  * conditions from an argument (`s > 0.0`), traced data (`sum(a) >
    0.0`), a variable (`sum(w) * s > 0.0`, w flipped between calls), a
    random draw (`sum(rand((3,))) > 1.5`, after `seed(S)` at the top) and a
    @host call (`hs(s) > 0.0`);
  * a target reading a, x and y (`sum(tanh(a) * x)`, ...).

The driver d takes its gradient one of three ways:
  tape    nested tapes, `with tape() as tK { tK.watch(x) ...`, each order's
          target `sum(tK.gradient(prev, x) * x)` (with two sources, x and y
          or x and the variable w, `gradient(prev, [x, y])` and the sum of
          both products), the outermost's gradient returned;
  tape_y  the same, each target adding `y * prev` (the call's result and
          the lower order: the backward and the forward reach one value);
  grad    `grad(grad(grad(f)))` in the form g1 = fn (u) => f(u, y, s, t),
          gK = fn (u) => sum(grad(gK-1)(u) * u), or of two arguments,
          `grad(g, argnums=(0, 1))` with gK(u, v) the sum of both products.
Every call prints the forward value (tape styles) and the gradients with
9 significant digits (float32 bits apart), labelled `d K:`.

Each program runs in four modes (default optimized, --no-optimize,
--eager, --stage-all) and each must print --eager's output exactly (the
gradients bit for bit), with the same exit status and stderr (after
dropping --stage-all's "runs eagerly" notes and the retrace warning); an
error in --eager is a generator bug and fails too.

Left out on purpose (a documented located error, docs/staging.md section
14 and docs/language.md "Values used at trace time"): a @host call in the
branch of an `if` whose condition comes from a variable, a random draw or a
host call, or reads `a` after `a` read the variable or a host call's value
or went through an `if` on such a condition (the call makes the `if` run
at trace time, and a value from those cannot be read at trace time:
staging fails with an error there). Nothing else is left out: the classes
this test found (docs/staging.md section 14, the third and fourth orders'
paragraphs: none of seeds 1..2000 differs now) are generated, and the make
check slice lists seeds that pass (stage_grad_orders.sh names the others).

Environment: $TFE, $TFE_SRCDIR, $TFE_TEST_WRAPPER (optional prefix).
Options: the driver's (-n, --seed, -j, --keep, -v, --show), --seeds a,b,c
(listed programs instead of -n/--seed), --timeout T.
"""
import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from opt_property import add_common_args, diff, drive  # noqa: E402
from stage_mix import run_all_modes  # noqa: E402

COND_KINDS = ["arg", "arg", "data", "var", "rand", "host"]
# conditions whose value a trace cannot read: an `if` on one may hold no
# @host call in its branches (a located error when staged)
OPAQUE = ("var", "rand", "host")


def num(r, lo=-1.5, hi=1.5):
    return "%.3f" % r.uniform(lo, hi)


def vec(r, lo=-1.5, hi=1.5):
    return "[%s]" % ", ".join(num(r, lo, hi) for _ in range(3))


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        self.kinds = []
        # a has read the variable or a @host call's value: a condition on
        # it is one a trace cannot read either
        self.opaque_a = False

    def cond(self, host_ok):
        """(condition source, whether a @host call may sit in its branches)."""
        r = self.r
        # a host call in a branch of an if on a value a trace cannot read
        # (host_ok false) is the located error left out: an if on a host
        # call is one too
        k = r.choice([c for c in COND_KINDS if host_ok or c != "host"])
        self.kinds.append(k)
        src = {"arg": r.choice(["s > 0.0", "t > 0.0", "s * t > 0.0"]),
               "data": r.choice(["sum(a) > 0.0", "sum(a * x) > 0.0",
                                 "max(a) > 0.5"]),
               "var": r.choice(["sum(w) * s > 0.0", "sum(w * a) > 0.0"]),
               "rand": r.choice(["sum(rand((3,))) > 1.5", "rand(()) > 0.5",
                                 "sum(randn((3,)) * a) > 0.0"]),
               "host": r.choice(["hs(s) > 0.0", "hs(t) * s > 0.0"])}[k]
        opaque = k in OPAQUE or (k == "data" and self.opaque_a)
        # after an if on such a value, a depends on it too
        self.opaque_a |= opaque
        return src, host_ok and not opaque

    def op(self, host_ok):
        r = self.r
        ops = ["a * 2.0", "a * 3.0", "tanh(a)", "sin(a)", "sigmoid(a) * 2.0",
               "a * a", "exp(a * 0.3)", "tanh(a) * x", "sin(a * x)",
               "a * 0.5 + x", "tanh(a * y)", "a * y + x", "sin(a * w)",
               "a * w", "tanh(a) * w + x"]
        if host_ok:
            ops += ["hv(a)", "hv(a) * x"]
        e = r.choice(ops)
        self.opaque_a |= "w" in e or "hv" in e
        return "a = " + e

    def nested(self, ind, depth, host_ok, force=False):
        """Statements: one update, or an if whose branches hold updates
        and (in one branch or the other) an if nested deeper (an if for
        sure with force)."""
        r = self.r
        if depth == 0 or (r.random() < 0.3 and not force):
            return [ind + self.op(host_ok)]
        c, inner_ok = self.cond(host_ok)
        deep = r.random() < 0.5
        first = self.nested(ind + "    ", depth - 1, inner_ok) if deep \
            else [ind + "    " + self.op(inner_ok)]
        second = self.nested(ind + "    ", depth - 1, inner_ok) if not deep or r.random() < 0.3 \
            else [ind + "    " + self.op(inner_ok)]
        if r.random() < 0.3 and deep:
            # an if with no else branch
            return [ind + "if %s {" % c] + first + [ind + "}"]
        return [ind + "if %s {" % c] + first + [ind + "} else {"] + second + [ind + "}"]

    def program(self, seed):
        r = self.r
        order = r.choice([2, 3, 3, 4])
        style = r.choice(["tape", "tape_y", "grad"])
        two = r.choice(["x", "x", "xy", "xw"]) if style != "grad" \
            else r.choice(["x", "xy"])
        init = r.choice(["sin(x)", "tanh(x)", "x * 1.5", "sin(x) * x",
                         "sin(x) * y", "tanh(x + y)", "sin(x * w)",
                         "hv(x)", "hv(sin(x)) * y"])
        self.opaque_a = "w" in init or "hv" in init
        body = self.nested("    ", 2, True, force=True)
        if r.random() < 0.35:
            body += self.nested("    ", 1, True)
        if r.random() < 0.2:
            body.append("    a = a + hv(a) * 0.5")
        tgt = r.choice(["sum(tanh(a) * x)", "sum(sin(a) * x)",
                        "sum(a * a * x)", "sum(tanh(a))",
                        "sum(sigmoid(a) * x * y)", "sum(sin(a) * y) + sum(a * w)"])
        p = ["# (header)", "seed(%d)" % r.randint(0, 99),
             "fn show(tag, v) {", "    let line = tag",
             "    for e in v { for q in flatten(e) { line = line + format(\" {:.9g}\", q) } }",
             "    print(line)", "}",
             "fn mix(gs, u, v) { return sum(gs[0] * v) + sum(gs[1] * u) }",
             "let w = variable(%s)" % vec(r, -1.0, 1.0),
             "@host", "fn hv(a) { return %s }" % r.choice(
                 ["sin(a) * a", "tanh(a) + a * 0.5", "a * a * 0.5"]),
             "@host", "fn hs(s) { return s * %s }" % r.choice(["0.5", "-1.0"]),
             "@staged", "fn f(x, y, s, t) {", "    let a = " + init]
        p += body
        p += ["    return " + tgt, "}"]
        p += self.driver(order, style, two)
        x0, x1, y0 = vec(r), vec(r), vec(r)
        p += ["let x0 = %s" % x0, "let x1 = %s" % x1, "let y = %s" % y0]
        for ci in range(r.randint(4, 8)):
            s, t = r.choice(["1.0", "-1.0"]), r.choice(["1.0", "-1.0"])
            x = "x0" if ci == 0 or r.random() < 0.7 else "x1"
            p.append('show("d %d:", d(%s, y, %s, %s))' % (ci, x, s, t))
            if r.random() < 0.3:
                p.append("w.assign(w * %s)" % r.choice(["-1.0", "0.5", "-0.75"]))
        p.append('show("end:", (w.value, rand((2,))))')
        p[0] = "# stage_grad_orders program, seed %d: order %d, %s, sources %s, conds %s" % (
            seed, order, style, two, " ".join(self.kinds))
        return "\n".join(p) + "\n"

    def driver(self, order, style, two):
        if style == "grad":
            if two == "x":
                lines = ["fn d(x, y, s, t) {",
                         "    let g1 = fn (u) => f(u, y, s, t)"]
                for k in range(2, order + 1):
                    lines.append("    let g%d = fn (u) => sum(grad(g%d)(u) * u)" % (k, k - 1))
                lines += ["    return (grad(g%d)(x),)" % order, "}"]
                return lines
            lines = ["fn d(x, y, s, t) {",
                     "    let g1 = fn (u, v) => f(u, v, s, t)"]
            for k in range(2, order + 1):
                lines.append("    let g%d = fn (u, v) => mix(grad(g%d, argnums=(0, 1))(u, v), u, v)"
                             % (k, k - 1))
            lines += ["    return grad(g%d, argnums=(0, 1))(x, y)" % order, "}"]
            return lines
        src = {"x": "x", "xy": "[x, y]", "xw": "[x, w]"}[two]
        other = {"xy": "y", "xw": "w"}.get(two)
        lines = ["fn d(x, y, s, t) {", "    let r = 0.0"]
        ind = "    "
        for k in range(order, 0, -1):
            lines.append("%swith tape() as t%d {" % (ind, k))
            ind += "    "
            lines.append("%st%d.watch(x)" % (ind, k))
            if two == "xy":
                lines.append("%st%d.watch(y)" % (ind, k))
        lines.append("%slet y0 = f(x, y, s, t)" % ind)
        lines.append("%sr = y0" % ind)
        prev = "y0"
        for k in range(1, order):
            ind = ind[:-4]
            lines.append("%s}" % ind)
            g = "t%d.gradient(%s, %s)" % (k, prev, src)
            if other:
                e = "mix(%s, x, %s)" % (g, other)
            else:
                e = "sum(%s * x)" % g
            if style == "tape_y":
                e += " + y0 * %s" % prev
            lines.append("%slet z%d = %s" % (ind, k, e))
            prev = "z%d" % k
        ind = ind[:-4]
        lines.append("%s}" % ind)
        res = "t%d.gradient(%s, %s)" % (order, prev, src)
        if other:
            lines += ["    let gs = " + res, "    return (r, gs[0], gs[1])"]
        else:
            lines.append("    return (r, %s)" % res)
        lines.append("}")
        return lines


def gen_program(seed):
    return Gen(seed).program(seed)


MODES = [("optimized", []), ("no-optimize", ["--no-optimize"]),
         ("eager", ["--eager"]), ("stage-all", ["--stage-all"])]


def check_program(seed, args, workdir):
    prog = gen_program(seed)
    path = os.path.join(workdir, "stage_grad_orders_%d.tfe" % seed)
    res, problems = run_all_modes(prog, path, args, MODES)
    erc, eout, eerr = res["eager"]
    if erc != 0 and erc != "timeout":
        problems.append("--eager fails (a generator bug):\n" + eerr)
    for mode in ("optimized", "no-optimize", "stage-all"):
        rc, out, err = res[mode]
        if rc == "timeout" or erc == "timeout":
            continue
        if out != eout:
            problems.append("%s differs from --eager:\n%s" % (
                mode, diff(eout, out, "eager", mode)))
        if (rc, err) != (erc, eerr):
            problems.append("%s: exit status/stderr differ from --eager "
                            "(%s vs %s):\n%s" % (mode, rc, erc,
                                                 diff(eerr, err, "eager", mode)))
    return seed, path, prog, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(ap, 30, 20261201)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--seeds", help="a comma-separated list of seeds "
                    "(instead of -n and --seed)")
    args = ap.parse_args()
    if args.seeds:
        args.seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    return drive("stage_grad_orders", args, gen_program, check_program)


if __name__ == "__main__":
    sys.exit(main())
