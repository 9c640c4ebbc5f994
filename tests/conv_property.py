#!/usr/bin/env python3
"""conv_property.py — a property test of staged convolutional nets (the
planner's conv+batch-norm joins and its arena, graph/plan.c), run by
`make check` via conv_property.sh.

It generates N random small nets (default 100, fixed seed) in tfe and runs
each program three ways:

    tfe prog.tfe                 staged graphs optimized and planned
    tfe --no-optimize prog.tfe   staged graphs run as traced
    tfe --eager prog.tfe         @staged functions run as plain functions

and requires the same standard output, byte for byte (tfe prints floats as
the shortest decimal that reads back to the same value, so equal text
means equal bits). A net is a chain of layers over NHWC activations:
conv2d (1x1 or 3x3, stride 1 or 2, "same" or "valid", dilation 1 or 2),
then often a batch norm (batch statistics in the training step, given ones
in inference) and relu, sometimes a residual add of an earlier activation
of the same shape (the conv's own input among them: a value that is an
input of both the conv and the add joined to it once went on the arena's
free list twice, and two live values shared a block), either operand order
(relu(bn + h), relu(h + bn)), sometimes a max or average pool. Each program
prints an inference function's output (float32 or float64) and, for a
training step traced whole (a tape, its gradients of every filter, gamma
and beta, SGD updates of the variables), the loss and every gradient of
three steps, then every parameter.

With the arena bug put back (graph/plan.c's duplicate check within one
node only) 6 of the default 100 programs fail (the plan's own check,
check_arena, stops them with an internal error); 100 programs run in
about 4 seconds on 2 cores.

Environment: $TFE (the binary), $TFE_TEST_WRAPPER (optional prefix).
Options: -n N (programs), --seed S, -j N (parallel programs), --keep
(keep the work folder), --show (print the generated programs and exit).
"""
import argparse
import difflib
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

MODES = [[], ["--no-optimize"], ["--eager"]]


def conv_out(n, k, stride, padding, dilation):
    """The output size of one spatial axis (TensorFlow's definition)."""
    if padding == "same":
        return (n + stride - 1) // stride
    span = dilation * (k - 1) + 1
    return (n - span) // stride + 1 if n >= span else 0


def gen_net(rng):
    """A random net: (parameter lines, layer lines of net(p, x, train), the
    names of the filters, gammas and betas, input shape)."""
    batch = rng.choice([2, 3])
    size = rng.choice([5, 6, 7, 9])
    ch = rng.choice([1, 2, 3, 4])
    params, body, trained = [], [], []
    # activations so far: name -> shape (h, w, c), for residual adds
    acts = {"x": (size, size, ch)}
    cur, shape = "x", (size, size, ch)
    nlayers = rng.randint(2, 5)
    for i in range(nlayers):
        h, w, c = shape
        k = rng.choice([1, 3, 3])
        stride = rng.choice([1, 1, 1, 2])
        padding = rng.choice(["same", "same", "valid"])
        dilation = rng.choice([1, 1, 2]) if stride == 1 and k == 3 else 1
        # keep the channel count for residual adds most of the time
        cout = c if rng.random() < 0.7 else rng.choice([2, 3, 4, 5, 8])
        oh = conv_out(h, k, stride, padding, dilation)
        ow = conv_out(w, k, stride, padding, dilation)
        if oh < 1 or ow < 1:
            padding, dilation = "same", 1
            oh, ow = conv_out(h, k, stride, "same", 1), conv_out(w, k, stride, "same", 1)
        scale = 1.0 / (k * k * c) ** 0.5
        params.append("c%d: variable(cast(randn((%d, %d, %d, %d)) * %.4f, DT))" % (i, k, k, c, cout, scale))
        trained.append("c%d" % i)
        args = ["stride=%d" % stride] if stride != 1 else []
        if padding != "valid":
            args.append('padding="%s"' % padding)
        if dilation != 1:
            args.append("dilation=%d" % dilation)
        expr = "conv2d(%s, p.c%d%s)" % (cur, i, "".join(", " + a for a in args))
        if rng.random() < 0.8:  # a batch norm
            params.append("g%d: variable(cast(randn((%d,)) * 0.5 + 1.0, DT))" % (i, cout))
            params.append("b%d: variable(cast(randn((%d,)) * 0.2, DT))" % (i, cout))
            params.append("m%d: cast(randn((%d,)) * 0.1, DT)" % (i, cout))
            params.append("v%d: cast(rand((%d,)) + 0.5, DT)" % (i, cout))
            trained += ["g%d" % i, "b%d" % i]
            eps = rng.choice(["1e-3", "1e-5"])
            expr = ("(batch_norm_train(%s, p.g%d, p.b%d, %s)[0] if train else "
                    "batch_norm_infer(%s, p.g%d, p.b%d, p.m%d, p.v%d, %s))"
                    % (expr, i, i, eps, expr, i, i, i, i, eps))
        nshape = (oh, ow, cout)
        same = [a for a, s in acts.items() if s == nshape]
        if same and rng.random() < 0.7:  # a residual add, either order
            # the conv's own input half the time it can be (the arena bug)
            other = cur if cur in same and rng.random() < 0.5 else rng.choice(same)
            expr = "%s + %s" % ((expr, other) if rng.random() < 0.5 else (other, expr))
        if rng.random() < 0.75:
            expr = "relu(%s)" % expr
        name = "a%d" % i
        body.append("    let %s = %s" % (name, expr))
        cur, shape = name, nshape
        acts[name] = shape
        if rng.random() < 0.2 and shape[0] >= 2 and shape[1] >= 2:  # a pool
            pool = rng.choice(["max_pool2d", "avg_pool2d"])
            pname = "q%d" % i
            body.append("    let %s = %s(%s, 2)" % (pname, pool, cur))
            cur, shape = pname, (shape[0] // 2, shape[1] // 2, shape[2])
            acts[pname] = shape
    body.append("    return %s" % cur)
    return params, body, trained, (batch, size, size, ch)


def gen_program(rng, index):
    params, body, trained, xshape = gen_net(rng)
    dt = rng.choice(["float32", "float32", "float64"])
    lines = ["# conv_property program %d" % index, "seed(%d)" % rng.randint(1, 10 ** 6),
             "let DT = %s" % dt, "let p = {"]
    lines += ["    %s," % s for s in params]
    lines += ["}", "fn net(p, x, train) {"] + body + ["}"]
    lines += ["let x = cast(randn((%s)), DT)" % ", ".join(str(d) for d in xshape),
              "@staged",
              "fn infer(p, x) { return net(p, x, false) }",
              "@staged",
              "fn step(p, x, lr) {",
              "    with tape() as t {",
              "        let out = net(p, x, true)",
              "        let loss = mean(out * out) + mean(out)",
              "    }",
              "    let gs = t.gradient(loss, [%s])" % ", ".join("p.%s" % n for n in trained)]
    for j, n in enumerate(trained):
        lines.append("    p.%s.assign_sub(lr * gs[%d])" % (n, j))
    lines += ["    return (loss, gs)",
              "}",
              "for i in range(3) { print(\"infer\", i, infer(p, x)) }",
              "for i in range(3) {",
              "    let r = step(p, x, 0.05)",
              "    print(\"step\", i, \"loss\", r[0])",
              "    for g in r[1] { print(g) }",
              "}",
              "for k in p { print(k, p[k]) }"]
    return "\n".join(lines) + "\n"


def run(cmd, timeout=120):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired:
        return -1, "", "timed out after %ds" % timeout


def check(tfe, path):
    """None when every mode prints the same and exits 0; else a report."""
    outs = []
    for flags in MODES:
        rc, out, err = run(tfe + flags + [path])
        if rc != 0 or err:
            return "%s %s: exit %s\n%s" % (" ".join(flags) or "(default)", path, rc, err[-2000:])
        outs.append(out)
    for flags, out in zip(MODES[1:], outs[1:]):
        if out != outs[0]:
            diff = "".join(difflib.unified_diff(outs[0].splitlines(True), out.splitlines(True),
                                                "staged", " ".join(flags), n=1))
            return "%s: staged and %s differ:\n%s" % (path, " ".join(flags), diff[:4000])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=100)
    ap.add_argument("--seed", type=int, default=20261204)
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--show", action="store_true")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    progs = [gen_program(rng, i) for i in range(a.n)]
    if a.show:
        print("\n".join(progs))
        return 0
    tfe = shlex.split(os.environ.get("TFE_TEST_WRAPPER", "")) + [os.environ.get("TFE", "./tfe")]
    work = tempfile.mkdtemp(prefix="tfe-conv-property-")
    paths = []
    for i, src in enumerate(progs):
        path = os.path.join(work, "conv%03d.tfe" % i)
        with open(path, "w") as f:
            f.write(src)
        paths.append(path)
    with ThreadPoolExecutor(max_workers=max(1, a.j)) as ex:
        reports = list(ex.map(lambda p: check(tfe, p), paths))
    bad = [r for r in reports if r]
    for r in bad:
        print("conv_property: FAIL: " + r)
    if bad:
        print("conv_property: %d of %d programs failed (kept in %s)" % (len(bad), len(paths), work))
        return 1
    if not a.keep:
        shutil.rmtree(work)
    print("conv_property: %d programs, staged == --no-optimize == --eager, bit for bit" % len(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
