#!/usr/bin/env python3
"""safetensors_interop.py — tfe's checkpoints against Python's safetensors.

(a) tfe save() -> safetensors.numpy.load_file, compared with NumPy values;
(b) safetensors.numpy.save_file -> tfe load() and restore(), written back by
    tfe and compared byte for byte (float16 and bfloat16 included: tfe keeps
    their bits);
(c) corrupt and hostile files: each is a located error naming the file, never
    a crash.
Run by tests/safetensors_interop.sh (which picks the Python and skips without
safetensors); TFE is the binary."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
from safetensors.numpy import load_file, save_file

TFE = os.environ["TFE"]
failures = []


def run_tfe(code, expect_ok=True):
    p = subprocess.run([TFE, "-e", code], capture_output=True, text=True, timeout=60)
    if p.returncode < 0 or p.returncode > 1:
        failures.append(f"tfe crashed (status {p.returncode}) on:\n{code}\n{p.stderr}")
    elif expect_ok and p.returncode != 0:
        failures.append(f"tfe failed on:\n{code}\n{p.stderr}")
    return p


def check(cond, what):
    if not cond:
        failures.append(what)


def tfe_literal(a):
    """A tfe expression for the NumPy array a (values exact in float32)."""
    body = json.dumps(a.tolist()).replace("true", "true").replace("false", "false")
    if a.dtype == np.bool_:
        return body
    if a.dtype == np.float32:
        return body
    return f'cast({body}, "{ {np.dtype("float64"): "float64", np.dtype("int32"): "int32", np.dtype("int64"): "int64"}[a.dtype] }")'


def raw_file(path, header, data=b"", hlen=None, pad=True):
    """A safetensors file written by hand (header: a dict or raw bytes)."""
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h) if hlen is None else hlen) + h + data)


def main():
    tmp = tempfile.mkdtemp(prefix="tfe-st-")
    try:
        part_a(tmp)
        part_b(tmp)
        part_c(tmp)
    finally:
        shutil.rmtree(tmp)
    for f in failures:
        print("FAIL:", f)
    print(f"safetensors_interop: {len(failures)} failure(s)")
    return 1 if failures else 0


def part_a(tmp):
    rng = np.random.default_rng(7)
    want = {
        "layers.0.w": (rng.integers(-64, 64, (3, 4)) / 8).astype(np.float32),
        "layers.0.b": (rng.integers(-64, 64, (4,)) / 8).astype(np.float64),
        "layers.1.w": rng.integers(-1000, 1000, (2, 2, 2)).astype(np.int32),
        "layers.1.steps": np.array(2**40 + 5, dtype=np.int64),
        "mask": np.array([True, False, True, True]),
        "empty": np.zeros((0, 3), np.float32),
        "pair.0": np.array([1.5], np.float32),
        "pair.1": np.array([-2.5], np.float32),
    }
    L = {k: tfe_literal(v) for k, v in want.items()}
    path = os.path.join(tmp, "a.safetensors")
    code = f"""
let m = {{layers: list({{w: variable({L["layers.0.w"]}), b: variable({L["layers.0.b"]})}},
                      {{w: variable({L["layers.1.w"]}), steps: variable({L["layers.1.steps"]} + 0, trainable=false)}}),
         mask: {L["mask"]}, empty: zeros((0, 3)), pair: (variable({L["pair.0"]}), variable({L["pair.1"]})),
         name: "not saved", rate: 0.5}}
m["odd \\"key\\" é"] = variable([7.0])
save("{path}", m)
"""
    want['odd "key" é'] = np.array([7.0], np.float32)
    if run_tfe(code).returncode:
        return
    got = load_file(path)
    check(sorted(got) == sorted(want), f"(a) names: {sorted(got)} != {sorted(want)}")
    for k, v in want.items():
        g = got.get(k)
        check(g is not None and g.dtype == v.dtype and g.shape == v.shape and np.array_equal(g, v),
              f"(a) {k}: got {g!r}, want {v!r}")
    # header details: 8-aligned data, metadata, data packed in order
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    check(n % 8 == 0, f"(a) header length {n} is not a multiple of 8")
    check(hdr.get("__metadata__") == {"format": "tfe"}, f"(a) metadata {hdr.get('__metadata__')}")


def part_b(tmp):
    rng = np.random.default_rng(11)
    src = {
        "enc.0.w": rng.standard_normal((3, 5)).astype(np.float32),
        "enc.1.w": rng.standard_normal((5,)).astype(np.float64),
        "enc.1.idx": rng.integers(-2**40, 2**40, (4,)).astype(np.int64),
        "head.bits": rng.integers(0, 2, (2, 3)).astype(bool),
        "head.n": np.array(3, np.int32),
        "half": rng.standard_normal((2, 2)).astype(np.float16),
    }
    p_in = os.path.join(tmp, "b_in.safetensors")
    save_file(src, p_in, metadata={"source": "numpy"})
    # bfloat16 needs a hand-written file: NumPy has no such dtype
    bf = rng.integers(0, 2**16, (3,), dtype=np.uint16)
    p_bf = os.path.join(tmp, "b_bf16.safetensors")
    raw_file(p_bf, {"x": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}}, bf.tobytes())

    p_load = os.path.join(tmp, "b_load.safetensors")
    p_rest = os.path.join(tmp, "b_restore.safetensors")
    p_bf2 = os.path.join(tmp, "b_bf16_2.safetensors")
    code = f"""
let d = load("{p_in}")
print(d.enc[0].w.shape, d.enc[1].idx.dtype, d.head.n, d.half.dtype)
save("{p_load}", d)
let m = {{enc: list({{w: variable(zeros((3, 5)))}}, {{w: variable(zeros(5, dtype="float64")), idx: variable(zeros(4, dtype="int64"))}}),
         head: {{bits: variable(zeros((2, 3)) > 0.0), n: variable(cast(0, "int32"))}},
         half: d.half}}
restore("{p_in}", m)
save("{p_rest}", m)
save("{p_bf2}", load("{p_bf}"))
let f = load("{p_in}", flat=true)
print(f["enc.1.w"].dtype)
"""
    p = run_tfe(code)
    if p.returncode:
        return
    check(p.stdout == "(3, 5) int64 3 float16\nfloat64\n", f"(b) tfe printed {p.stdout!r}")
    for name in (p_load, p_rest):
        got = load_file(name)
        check(sorted(got) == sorted(src), f"(b) {os.path.basename(name)} names {sorted(got)}")
        for k, v in src.items():
            g = got.get(k)
            check(g is not None and g.dtype == v.dtype and g.shape == v.shape and g.tobytes() == v.tobytes(),
                  f"(b) {os.path.basename(name)} {k}: got {g!r}, want {v!r}")
    with open(p_bf2, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    check(hdr["x"] == {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]} and data == bf.tobytes(),
          f"(b) bfloat16 round trip: {hdr}, {data!r}")


def part_c(tmp):
    F32x4 = {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}
    cases = [
        # (name, writer, expected message fragment)
        ("empty", lambda p: open(p, "wb").close(), "too short for the header length"),
        ("short", lambda p: open(p, "wb").write(b"\x10\0\0"), "too short for the header length"),
        ("hlen_huge", lambda p: raw_file(p, {"w": F32x4}, bytes(16), hlen=2**63), "header length"),
        ("hlen_past_end", lambda p: raw_file(p, {"w": F32x4}, bytes(16), hlen=4096), "header length 4096"),
        ("not_json", lambda p: raw_file(p, b'{"w" {}}'), "bad header JSON at byte 5: expected ':'"),
        ("not_object", lambda p: raw_file(p, b"[1, 2]"), "expected '{'"),
        ("trailing", lambda p: raw_file(p, b"{} x", pad=False), "text after the header object"),
        ("unterminated", lambda p: raw_file(p, b'{"w', pad=False), "unterminated string"),
        ("bad_escape", lambda p: raw_file(p, b'{"w\\q": 1}'), "unknown escape"),
        ("nul_name", lambda p: raw_file(p, b'{"w\\u0000": 1}'), "\\u0000 in a string"),
        ("lone_surrogate", lambda p: raw_file(p, b'{"\\ud800": 1}'), "unpaired surrogate"),
        ("unknown_dtype", lambda p: raw_file(p, {"w": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}}, bytes(2)),
         "tensor 'w' has dtype 'F8_E4M3', which tfe does not have"),
        ("unknown_field", lambda p: raw_file(p, {"w": dict(F32x4, extra=1)}, bytes(16)), "unknown field 'extra'"),
        ("no_offsets", lambda p: raw_file(p, {"w": {"dtype": "F32", "shape": [4]}}, bytes(16)), "has no data_offsets"),
        ("past_end", lambda p: raw_file(p, {"w": F32x4}, bytes(8)), "past the end of the data (8 bytes)"),
        ("size_mismatch", lambda p: raw_file(p, {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}, bytes(16)),
         "needs 16 bytes"),
        ("reversed", lambda p: raw_file(p, {"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}}, bytes(16)),
         "data_offsets [8, 0]"),
        ("overlap", lambda p: raw_file(p, {"a": F32x4, "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, bytes(16)),
         "overlap"),
        ("duplicate", lambda p: raw_file(p, b'{"w": %s, "w": %s}' % (json.dumps(F32x4).encode(), json.dumps(F32x4).encode()), bytes(16)),
         "the name 'w' appears twice"),
        ("absurd_shape", lambda p: raw_file(p, {"w": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 16]}}, bytes(16)),
         "impossible shape"),
        ("rank_9", lambda p: raw_file(p, {"w": {"dtype": "F32", "shape": [1] * 9, "data_offsets": [0, 4]}}, bytes(4)),
         "more than 8 dimensions"),
        ("negative", lambda p: raw_file(p, b'{"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}', bytes(4)),
         "expected a non-negative integer"),
        ("float_dim", lambda p: raw_file(p, b'{"w": {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}}', bytes(4)),
         "expected an integer"),
        ("huge_int", lambda p: raw_file(p, b'{"w": {"dtype": "F32", "shape": [99999999999999999999999], "data_offsets": [0, 4]}}', bytes(4)),
         "integer too large"),
        ("bad_metadata", lambda p: raw_file(p, {"__metadata__": {"a": 1}}), "bad header JSON"),
        ("clash", lambda p: raw_file(p, {"a": F32x4, "a.b": {"dtype": "F32", "shape": [0], "data_offsets": [16, 16]}}, bytes(16)),
         "the names 'a' and 'a.b' clash"),
    ]
    for name, write, frag in cases:
        path = os.path.join(tmp, name + ".safetensors")
        write(path)
        p = run_tfe(f'print(load("{path}"))', expect_ok=False)
        check(p.returncode == 1, f"(c) {name}: status {p.returncode}, stdout {p.stdout!r}")
        check(p.stderr.startswith(f"<cmdline>:1:7: error: load(): '{path}'") and frag in p.stderr,
              f"(c) {name}: stderr {p.stderr!r} lacks {frag!r}")
    # flat=true loads the file whose names clash when nested
    path = os.path.join(tmp, "clash.safetensors")
    p = run_tfe(f'let d = load("{path}", flat=true)\nprint(d["a"].shape, d["a.b"].shape)')
    check(p.stdout == "(4,) (0,)\n", f"(c) flat load printed {p.stdout!r}")
    # a directory, and restore() reading the same corrupt file
    p = run_tfe(f'load("{tmp}")', expect_ok=False)
    check(p.returncode == 1 and "is not a regular file" in p.stderr, f"(c) directory: {p.stderr!r}")
    path = os.path.join(tmp, "past_end.safetensors")
    p = run_tfe(f'restore("{path}", {{w: variable(zeros(4))}})', expect_ok=False)
    check(p.returncode == 1 and "restore(): '" in p.stderr and "past the end" in p.stderr, f"(c) restore: {p.stderr!r}")


if __name__ == "__main__":
    sys.exit(main())
