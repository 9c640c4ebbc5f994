#!/usr/bin/env python3
"""gpu_equiv.py — the backend-equivalence test: every op that
tensor/ops.def marks F_GPU runs on the CPU and on gpu:0 with the same inputs,
and the results must agree within NumPy-style tolerances
(|cpu - gpu| <= atol + rtol * |gpu|, NaNs in the same places); for the
differentiable ones, so must the gradients. The cases are generated from the
op table: an F_GPU op with no case generator here fails the test (backward ops
that are not builtins are covered by their forward op's gradient cases).

Usage: gpu_equiv.py [--device NAME] [--keep FILE]
  --device NAME  the device to compare against cpu:0 (default gpu:0; the test
                 skips, exit 77, when devices() lists no gpu). --device cpu:0
                 checks the test itself on a machine without a GPU.
  --keep FILE    write the generated tfe program to FILE.
Environment: TFE (the binary), TFE_SRCDIR (the source tree), as make check sets.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

TOL_EW = (1e-5, 1e-6)     # transcendental functions: CUDA's libm is within a few ulp
TOL_ACC = (1e-4, 1e-4)    # sums in another order: reductions, softmax, matmul, gradients
TOL_EXACT = (0.0, 0.0)    # casts: both sides round to nearest even
# half-precision GEMMs: float32 sums in another order may round to the
# neighbouring half value (bfloat16 keeps 8 significant bits, float16 11)
TOL_HALF = {"bfloat16": (8e-3, 1e-3), "float16": (1e-3, 1e-4)}


def table(srcdir, path="tensor/ops.def"):
    """(name, flags) of every op of ops.def and the .def files it includes."""
    ops = []
    with open(os.path.join(srcdir, path), encoding="utf-8") as fh:
        for line in fh:
            inc = re.match(r'\s*#include\s+"(tensor/\w+\.def)"', line)
            if inc:
                ops += table(srcdir, inc.group(1))
                continue
            m = re.match(r'\s*OP\(\s*\w+\s*,\s*"([^"]+)"\s*,\s*-?\d+\s*,\s*-?\d+\s*,\s*([^,]+),', line)
            if m:
                ops.append((m.group(1), set(f.strip() for f in m.group(2).split("|"))))
    return ops


UNARY_POS = {"log", "log1p", "sqrt", "rsqrt"}
COMPARE = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"}
BINARY = {"add", "sub", "mul", "div", "floordiv", "mod", "pow", "maximum", "minimum"} | COMPARE
REDUCE = {"sum", "mean", "max", "min"}
# backward ops that are not builtins: the gradients of these differentiable
# ops run them, so a gradient case of the forward op covers them
COVERED_BY_GRAD = {"conv2d_backprop_input": "conv2d", "conv2d_backprop_filter": "conv2d",
                   "max_pool2d_grad": "max_pool2d", "avg_pool2d_grad": "avg_pool2d",
                   "relu_grad": "relu"}


def cases_for(name, flags):
    """(label, expression over $a $b $c, inputs [(shape, kind, view)], tol, grad?)"""
    diff = "F_NODIFF" not in flags
    out = []
    if "F_UNARY" in flags:
        kind = "pos" if name in UNARY_POS else "any"
        for shape, view in (((3, 4), ""), ((4, 3), "T"), ((2, 3, 5), "")):
            out.append((f"{name} {shape}{' .T' if view else ''}", f"{name}($a)", [(shape, kind, view)], TOL_EW, diff))
    elif name in ("copy", "stop_gradient"):
        # copy is not a builtin of its own: x.T + 0 copies; stop_gradient is
        out.append((f"{name} (4, 3) .T", "stop_gradient($a)" if name == "stop_gradient" else "$a * 1.0",
                    [((4, 3), "any", "T")], TOL_EW, False))
    elif name in BINARY:
        ka = "pos" if name == "pow" else "half" if name in COMPARE else "any"
        kb = "pos" if name in ("floordiv", "mod", "div", "pow") else "half" if name in COMPARE else "any"
        expr = f"{name}($a, $b)"
        for sa, sb, va in (((3, 4), (3, 4), ""), ((3, 4), (4,), ""), ((2, 1, 4), (3, 1), ""),
                           ((4, 3), (3, 4), "T")):
            out.append((f"{name} {sa}{' .T' if va else ''} {sb}", expr, [(sa, ka, va), (sb, kb, "")], TOL_EW, diff))
        out.append((f"{name} (3, 4) 2.5", f"{name}($a, 2.5)", [((3, 4), ka, "")], TOL_EW, diff))
        out.append((f"{name} 2 (3, 4)", f"{name}(2, $a)", [((3, 4), kb, "")], TOL_EW, diff))
    elif name == "where":
        out.append(("where (3, 4)", "where($a > 0, $b, $c)", [((3, 4), "any", ""), ((3, 4), "any", ""),
                                                             ((4,), "any", "")], TOL_EW, False))
        out.append(("where scalar", "where($a > 0, $b, 0.5)", [((3, 4), "any", ""), ((3, 4), "any", "")], TOL_EW, False))
    elif name in REDUCE:
        for shape, axis, view in (((2, 3, 4), "", ""), ((2, 3, 4), ", axis=0", ""), ((2, 3, 4), ", axis=(0, 2)", ""),
                                  ((2, 3, 4), ", axis=1, keepdims=true", ""), ((5, 7), ", axis=1", "T"),
                                  ((40, 2000), ", axis=0", ""), ((64, 1000), ", axis=1", ""), ((100000,), "", "")):
            out.append((f"{name} {shape}{' .T' if view else ''}{axis}", f"{name}($a{axis})", [(shape, "any", view)],
                        TOL_ACC, diff))
    elif name in ("softmax", "log_softmax"):
        for shape, axis, view in (((3, 5), "", ""), ((3, 5), ", axis=0", ""), ((2, 3, 4), ", axis=1", ""),
                                  ((5, 3), "", "T"), ((4, 1000), "", "")):
            out.append((f"{name} {shape}{' .T' if view else ''}{axis}", f"{name}($a{axis})", [(shape, "any", view)],
                        TOL_ACC, diff))
    elif name == "cast":
        for to in ("bfloat16", "float16"):
            out.append((f"cast (3, 4) {to}", f'cast($a, "{to}")', [((3, 4), "any", "")], TOL_EXACT, False))
            out.append((f"cast (4, 3) .T {to}", f'cast($a, "{to}")', [((4, 3), "any", "T")], TOL_EXACT, False))
            # there and back on the device; differentiable in float32
            out.append((f"cast (2, 3, 5) {to} float32", f'cast(cast($a * 1000.0, "{to}"), "float32")',
                        [((2, 3, 5), "any", "")], TOL_EXACT, diff))
        out.append(("cast float16 bfloat16", 'cast(cast($a, "float16"), "bfloat16")', [((3, 4), "any", "")],
                    TOL_EXACT, False))
    elif name == "matmul":
        for sa, sb, va, vb in (((3, 4), (4, 5), "", ""), ((4,), (4, 5), "", ""), ((3, 4), (4,), "", ""),
                               ((4,), (4,), "", ""), ((2, 3, 4), (4, 5), "", ""), ((2, 3, 4), (2, 4, 5), "", ""),
                               ((4, 3), (4, 5), "T", ""), ((3, 4), (5, 4), "", "T"), ((2, 1, 3, 4), (5, 4, 2), "", ""),
                               ((3, 0), (0, 2), "", ""), ((128, 256), (256, 64), "", "")):
            out.append((f"matmul {sa}{' .T' if va else ''} {sb}{' .T' if vb else ''}", "matmul($a, $b)",
                        [(sa, "any", va), (sb, "any", vb)], TOL_ACC, diff))
        # tensor-core GEMMs (cublasGemmEx) against the CPU's float32-accumulated
        # reference; the float32 result makes the gradients comparable too
        for dt, tol in TOL_HALF.items():
            for sa, sb, va, vb in (((3, 4), (4, 5), "", ""), ((2, 3, 4), (2, 4, 5), "", ""),
                                   ((4, 3), (4, 5), "T", ""), ((128, 256), (256, 64), "", "")):
                out.append((f"matmul {dt} {sa}{' .T' if va else ''} {sb}{' .T' if vb else ''}",
                            f'cast(matmul(cast($a, "{dt}"), cast($b, "{dt}")), "float32")',
                            [(sa, "any", va), (sb, "any", vb)], tol, diff))
    elif name == "conv2d":
        # x NHWC, w HWIO; cuDNN takes symmetric padding only: "same" with an
        # even total pad runs on the GPU, the last case falls back to the CPU
        for sx, sw, vx, vw, args in (((2, 6, 6, 3), (3, 3, 3, 4), "", "", ""),
                                     ((2, 5, 5, 3), (3, 3, 3, 4), "", "", ', padding="same"'),
                                     ((2, 8, 8, 3), (3, 3, 3, 5), "", "", ", stride=2"),
                                     ((2, 7, 7, 3), (3, 3, 3, 5), "", "", ', stride=2, padding="same"'),
                                     ((2, 7, 7, 2), (3, 3, 2, 3), "", "", ', dilation=2, padding="same"'),
                                     ((1, 8, 9, 4), (2, 3, 4, 3), "", "", ", stride=(1, 2), dilation=(2, 1)"),
                                     ((2, 4, 4, 8), (1, 1, 8, 4), "", "", ""),
                                     ((3, 6, 6, 2), (4, 3, 3, 3), "T", "T", ', padding="same"'),
                                     ((4, 16, 16, 8), (3, 3, 8, 16), "", "", ', padding="same"'),
                                     ((1, 6, 6, 2), (2, 2, 2, 3), "", "", ', padding="same"')):
            opts = args.replace('"', "").lstrip(", ")
            label = f"conv2d {sx}{' .T' if vx else ''} {sw}{' .T' if vw else ''} {opts}".rstrip()
            out.append((label, f"conv2d($a, $b{args})", [(sx, "any", vx), (sw, "any", vw)], TOL_ACC, diff))
    elif name in ("max_pool2d", "avg_pool2d"):
        # the CPU's max_pool2d_grad sends dy to a window's first maximum, cuDNN
        # may not: these inputs have no ties. The last case (asymmetric "same")
        # falls back to the CPU.
        for shape, view, args in (((2, 6, 6, 3), "", "2"), ((2, 5, 5, 3), "", '3, stride=1, padding="same"'),
                                  ((1, 7, 7, 2), "", '3, stride=2, padding="same"'), ((2, 7, 5, 3), "", "(3, 2)"),
                                  ((3, 6, 6, 2), "T", '3, stride=1, padding="same"'),
                                  ((4, 16, 16, 8), "", "2"),
                                  ((1, 5, 5, 2), "", '2, stride=1, padding="same"')):
            opts = args.replace('"', "")
            label = f"{name} {shape}{' .T' if view else ''} {opts}"
            out.append((label, f"{name}($a, {args})", [(shape, "any", view)], TOL_ACC, diff))
    return out


def input_text(var, shape, kind, idx):
    n = 1
    for s in shape:
        n *= s
    base = f"sin(arange({n}.0) * 1.37 + {idx}.5) * 3.0"
    if kind == "pos":
        base = f"abs({base}) + 0.25"
    elif kind == "half":
        base = f"round({base} * 2.0) / 2.0"
    shp = "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
    return f"let {var} = reshape({base}, {shp})"


def program(ops, dev):
    lines = [
        "# generated by tests/gpu_equiv.py",
        "fn excess(a, b, rtol, atol) {",
        "    let x = cast(a, \"float64\")",
        "    let y = cast(b, \"float64\")",
        "    let e = where(logical_and(isnan(x), isnan(y)), 0.0, abs(x - y) - (atol + rtol * abs(y)))",
        "    if x.size == 0 { return 0.0 }",
        "    return float(max(where(isnan(e), 1.0, e)))",
        "}",
        "fn check(label, a, b, rtol, atol) {",
        f"    if b.device != \"{dev}\" {{ print(\"FAIL\", label, \"result on\", b.device); return nil }}",
        "    let c = to(b, \"cpu\")",
        "    if str(a.shape) != str(c.shape) { print(\"FAIL\", label, \"shape\", a.shape, c.shape); return nil }",
        "    if a.dtype != c.dtype { print(\"FAIL\", label, \"dtype\", a.dtype, c.dtype); return nil }",
        "    let e = excess(a, c, rtol, atol)",
        "    if e > 0 { print(\"FAIL\", label, \"off by\", e, \"past the tolerance\") } else { print(\"OK\", label) }",
        "}",
    ]
    missing, k, grad_cased = [], 0, set()
    for name, flags in ops:
        if "F_GPU" not in flags:
            continue
        cs = cases_for(name, flags)
        if not cs:
            missing.append(name)
        if any(c[4] and c[2] for c in cs):
            grad_cased.add(name)
        for label, expr, ins, (rtol, atol), diff in cs:
            k += 1
            vars_cpu, vars_gpu = [], []
            for j, (shape, kind, view) in enumerate(ins):
                v = f"i{k}_{j}"
                lines.append(input_text(v, shape, kind, k * 3 + j))
                lines.append(f"let g{v} = to({v}, \"{dev}\")")
                vars_cpu.append(f"{v}.T" if view else v)
                vars_gpu.append(f"g{v}.T" if view else f"g{v}")
            def fill(e, vs):
                for name_, v in zip("abc", vs):
                    e = e.replace("$" + name_, v)
                return e
            lines.append(f"check({label!r}, {fill(expr, vars_cpu)}, {fill(expr, vars_gpu)}, {rtol}, {atol})"
                         .replace("'", '"'))
            if diff and ins:
                # gradients of sum(op(..) * w) with respect to every tensor input
                params = ", ".join("pqr"[j] for j in range(len(ins)))
                body = fill(expr, list("pqr"[:len(ins)]))
                argn = "(" + ", ".join(str(j) for j in range(len(ins))) + ("," if len(ins) == 1 else "") + ")"
                lines.append(f"fn f{k}({params}) {{ let y = {body}; return sum(y * cos(cast(reshape(arange(float(y.size)), y.shape), y.dtype))) }}")
                lines.append(f"let gc{k} = grad(f{k}, argnums={argn})({', '.join(vars_cpu)})")
                lines.append(f"let gg{k} = grad(f{k}, argnums={argn})({', '.join(vars_gpu)})")
                for j in range(len(ins)):
                    lines.append(f"check({('grad ' + label + ' d' + 'abc'[j])!r}, gc{k}[{j}], gg{k}[{j}], {TOL_ACC[0]}, {TOL_ACC[1]})"
                                 .replace("'", '"'))
    missing = [n for n in missing if COVERED_BY_GRAD.get(n) not in grad_cased]
    return "\n".join(lines) + "\n", missing


def main():
    args = sys.argv[1:]
    dev, keep = "gpu:0", None
    while args:
        a = args.pop(0)
        if a == "--device":
            dev = args.pop(0)
        elif a == "--keep":
            keep = args.pop(0)
        else:
            print(__doc__)
            return 2
    tfe, srcdir = os.environ.get("TFE"), os.environ.get("TFE_SRCDIR")
    if not tfe or not srcdir:
        print("gpu_equiv: TFE and TFE_SRCDIR must be set (run through make check)")
        return 99
    devs = subprocess.run([tfe, "-e", "print(devices())"], capture_output=True, text=True)
    if devs.returncode != 0 or devs.stderr:
        print("gpu_equiv: devices() failed:", devs.stdout, devs.stderr)
        return 1
    if f'"{dev}"' not in devs.stdout:
        print(f"gpu_equiv: no {dev} here ({devs.stdout.strip()}); skipping")
        return 77
    text, missing = program(table(srcdir), dev)
    path = keep or os.path.join(tempfile.mkdtemp(prefix="gpu_equiv."), "equiv.tfe")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    r = subprocess.run([tfe, path], capture_output=True, text=True)
    if not keep:
        shutil.rmtree(os.path.dirname(path))
    ok = sum(1 for l in r.stdout.splitlines() if l.startswith("OK "))
    fails = [l for l in r.stdout.splitlines() if not l.startswith("OK ")]
    for l in fails:
        print(l)
    if r.returncode != 0 or r.stderr:
        print(f"gpu_equiv: tfe exited {r.returncode}:\n{r.stderr}")
    for name in missing:
        print(f"FAIL {name}: F_GPU in ops.def but tests/gpu_equiv.py has no case for it")
    print(f"gpu_equiv ({dev} vs cpu:0): {ok} checks agree, {len(fails)} differ")
    return 0 if not fails and not missing and r.returncode == 0 and not r.stderr and ok else 1


if __name__ == "__main__":
    sys.exit(main())
