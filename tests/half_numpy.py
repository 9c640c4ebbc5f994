#!/usr/bin/env python3
"""half_numpy.py — the half types against NumPy (run by tests/half_numpy.sh).

1. Printing: every finite float16 value prints as NumPy's repr of that
   np.float16 (its own shortest round-trip digits: float16(0.1) is 0.1, not
   float32's 0.099975586), in a tensor and as a scalar. bfloat16, which NumPy
   lacks, against the same rule computed here: the shortest decimal that
   rounds (to nearest even, 8 significant bits) back to the value (the
   nearer of the two around it), written as Python's repr writes a float.
   The same rule for float32 and float64 at every power of two.
2. .npy: a float16 file written by tfe loads in NumPy with dtype '<f2' and
   the same bits; NumPy's float16 file loads in tfe as float16 with the same
   values.
Environment: $TFE (the binary). Exit status 0 when all pass, 1 otherwise.
"""
import math
import os
import subprocess
import sys
import tempfile
from decimal import ROUND_FLOOR, Decimal

import numpy as np

TFE = os.environ.get("TFE", "tfe")
ROW = 500  # values per printed row (tensors above 1000 elements are summarised)


def run(prog, cwd):
    path = os.path.join(cwd, "prog.tfe")
    with open(path, "w") as f:
        f.write(prog)
    r = subprocess.run([TFE, path], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=300)
    if r.returncode != 0:
        raise RuntimeError("tfe failed:\n" + r.stderr)
    return r.stdout


def printed_rows(out):
    """The elements of each printed 1-D row, as strings."""
    rows = []
    for line in out.splitlines():
        if line.startswith("["):
            rows.append([s.strip() for s in line.strip("[]").split(",")])
    return rows


def bf16_round(x):
    """x (a double) rounded to bfloat16: 8 significant bits, ties to even
    (normal range only; the values tested are normal)."""
    if x == 0 or not math.isfinite(x):
        return x
    m, e = math.frexp(x)
    return round(m * 256) * 2.0 ** (e - 8)  # m * 256 is exact; round() is half-even


def bf16_repr(v):
    """The shortest decimal that rounds back to v (of the two p-digit
    numbers around v, the nearer one that does), as Python writes it."""
    d = Decimal(v)
    for p in range(1, 18):
        q = Decimal(1).scaleb(d.adjusted() - (p - 1))  # the last digit's place
        lo = d.quantize(q, rounding=ROUND_FLOOR)
        # the nearer first; a tie to the even last digit (as printf rounds)
        cands = sorted([lo, lo + q], key=lambda c: (abs(c - d), int(c.scaleb(-q.adjusted())) % 2))
        for c in cands:
            if bf16_round(float(c)) == v:
                return repr(float(c))
    return repr(v)


def check_print(work):
    fails = []
    # every finite float16: exact in float32, cast to float16 in tfe
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    h = bits.view(np.float16)
    h = h[np.isfinite(h)]
    np.save(os.path.join(work, "h.npy"), h.astype(np.float32))
    nrows = (len(h) + ROW - 1) // ROW
    out = run('let h = cast(load_npy("h.npy"), float16)\n'
              f'for i in range({nrows}) {{ print(h[i * {ROW}:(i + 1) * {ROW}]) }}\n'
              'print(h[0], h[100], h[40000])\n', work)
    got = [s for row in printed_rows(out) for s in row]
    want = [repr(np.float16(v)) if not np.isnan(v) else "nan" for v in h]
    # NumPy writes the scalar's repr; tfe writes -0.0 and 0.0 the same way
    if len(got) != len(want):
        fails.append(f"float16: {len(got)} values printed, expected {len(want)}")
    else:
        bad = [(w, g) for w, g in zip(want, got) if w != g]
        if bad:
            fails.append(f"float16: {len(bad)} of {len(want)} differ from NumPy, e.g. {bad[:5]} (NumPy, tfe)")
    last = out.splitlines()[-1].split()
    want_sc = [repr(np.float16(h[i])) for i in (0, 100, 40000)]
    if last != want_sc:
        fails.append(f"float16 scalars print {last}, NumPy {want_sc}")
    # bfloat16: the upper halves of float32 bit patterns over the normal range
    rng = np.random.default_rng(7)
    hi = np.concatenate([np.arange(0x0080, 0x7F80, 7), rng.integers(0x0080, 0x7F80, 3000)]).astype(np.uint32)
    sign = rng.integers(0, 2, len(hi)).astype(np.uint32) << 15
    b = ((hi | sign) << 16).view(np.float32)
    np.save(os.path.join(work, "b.npy"), b)
    nrows = (len(b) + ROW - 1) // ROW
    out = run('let b = cast(load_npy("b.npy"), bfloat16)\n'
              f'for i in range({nrows}) {{ print(b[i * {ROW}:(i + 1) * {ROW}]) }}\n', work)
    got = [s for row in printed_rows(out) for s in row]
    want = [bf16_repr(float(v)) for v in b]
    bad = [(w, g) for w, g in zip(want, got) if w != g]
    if len(got) != len(want) or bad:
        fails.append(f"bfloat16: {len(bad)} of {len(want)} differ, e.g. {bad[:5]} (expected, tfe)")
    # the same shortest rule for float32 and float64 at powers of two, where
    # the values above are twice as far apart as those below (Python's repr
    # prints float64 2^-1019 with 16 digits; the nearest 16 do not read back)
    p2 = {"float32": np.float32(2.0) ** np.arange(-149, 128, dtype=np.float32),
          "float64": 2.0 ** np.arange(-1074, 1024, dtype=np.float64)}
    for name, v in p2.items():
        np.save(os.path.join(work, "p2.npy"), v)
        out = run('let v = load_npy("p2.npy")\nfor i in range(len(v)) { print(v[i]) }\n', work).split()
        want = [str(np.float32(x)) if name == "float32" else repr(float(x)) for x in v]
        bad = [(w, g) for w, g in zip(want, out) if w != g]
        if len(out) != len(want) or bad:
            fails.append(f"{name} powers of two: {len(bad)} of {len(want)} differ from NumPy, e.g. {bad[:5]}")
    if run('print(cast(0.1, float16), cast(0.1, bfloat16), cast([0.1, 0.2], float16))\n', work).strip() != \
            "0.1 0.1 [0.1, 0.2]":
        fails.append("cast(0.1, float16) does not print 0.1")
    return fails


def check_npy(work):
    fails = []
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    h = bits.view(np.float16).reshape(256, 256)
    # NumPy -> tfe: load, and write back what was loaded
    np.save(os.path.join(work, "from_numpy.npy"), h)
    out = run('let h = load_npy("from_numpy.npy")\nprint(dtype(h), shape(h))\nsave_npy("round_trip.npy", h)\n'
              'save_npy("one.npy", cast([0.1, -2.5, 65504.0], float16))\n', work)
    if out.strip() != "float16 (256, 256)":
        fails.append(f"NumPy's float16 file loads as {out.strip()!r}")
    back = np.load(os.path.join(work, "round_trip.npy"))
    if back.dtype != np.dtype("<f2") or back.shape != h.shape or not np.array_equal(back.view(np.uint16),
                                                                                     h.view(np.uint16)):
        fails.append(f"a float16 file read and written by tfe changed: dtype {back.dtype}, shape {back.shape}")
    one = np.load(os.path.join(work, "one.npy"))
    if one.dtype != np.float16 or not np.array_equal(one, np.array([0.1, -2.5, 65504.0], np.float16)):
        fails.append(f"tfe's float16 file loads in NumPy as {one!r}")
    return fails


def main():
    with tempfile.TemporaryDirectory(prefix="tfe-half.") as work:
        fails = check_print(work) + check_npy(work)
    for f in fails:
        print("FAIL:", f)
    print(f"half_numpy: {len(fails)} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
