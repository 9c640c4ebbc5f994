#!/usr/bin/env python3
"""tensorboard_logs.py — tfe's event files (import summary) read back by the
tensorboard package's own reader, EventAccumulator, which needs no TensorFlow.

(a) scalars (numbers and 0-d tensors, written eagerly and from a staged
    function at every call), a histogram, a text: TensorBoard reads every
    value, step and tag, and its text plugin sees the text;
(b) the framing checked byte by byte: uint64 length, masked CRC-32C of the
    length, the Event, masked CRC-32C of the Event (a CRC-32C written here
    from the definition, checked against RFC 3720's vectors), the first
    record the file version, and a truncated or corrupted file is detected;
(c) the file name TensorBoard looks for, one file per writer, appends;
(d) errors are located: a log folder that cannot be one, a closed writer,
    NaN in a histogram, a writer made in a staged function;
(e) examples/digits_cnn.tfe logs its loss and test accuracy under TFE_LOGDIR.
Run by tests/tensorboard_logs.sh (which picks the Python and skips without the
tensorboard package); TFE is the binary."""
import glob
import os
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.util import tensor_util

TFE = os.environ["TFE"]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def run_tfe(code, expect_ok=True, env=None):
    p = subprocess.run([TFE, "-e", code], capture_output=True, text=True, timeout=120, env=env)
    if p.returncode < 0 or p.returncode > 1:
        failures.append(f"tfe crashed (status {p.returncode}) on:\n{code}\n{p.stderr}")
    elif expect_ok and p.returncode != 0:
        failures.append(f"tfe failed on:\n{code}\n{p.stderr}")
    return p


# ---- CRC-32C from its definition (reflected 0x82F63B78) ----
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# RFC 3720, B.4
check(crc32c(bytes(32)) == 0x8A9136AA, "crc32c of 32 zeros")
check(crc32c(b"\xff" * 32) == 0x62A8AB43, "crc32c of 32 0xff")
check(crc32c(bytes(range(32))) == 0x46DD794E, "crc32c of 0..31")
check(crc32c(bytes(range(31, -1, -1))) == 0x113FDB5C, "crc32c of 31..0")


class Bad(Exception):
    pass


def records(data):
    """The records of a TFRecord file, every CRC checked; Bad on a short or
    corrupt file."""
    out, i = [], 0
    while i < len(data):
        if len(data) - i < 12:
            raise Bad(f"truncated header at byte {i}")
        (n,) = struct.unpack_from("<Q", data, i)
        (lc,) = struct.unpack_from("<I", data, i + 8)
        if lc != masked(crc32c(data[i:i + 8])):
            raise Bad(f"length CRC mismatch at byte {i}")
        if len(data) - i - 12 < n + 4:
            raise Bad(f"truncated record at byte {i}")
        body = data[i + 12:i + 12 + n]
        (dc,) = struct.unpack_from("<I", data, i + 12 + n)
        if dc != masked(crc32c(body)):
            raise Bad(f"data CRC mismatch at byte {i}")
        out.append(body)
        i += 12 + n + 4
    return out


tmp = tempfile.mkdtemp(prefix="tfe-tb-", dir=os.environ.get("TMPDIR"))
logdir = os.path.join(tmp, "runs", "a")  # two missing folders: made

# ---- (a) the values, through TensorBoard's reader ----
prog = f"""
import summary
let w = summary.writer("{logdir}")
for step in range(5) {{
    w.scalar("loss", 1.0 / (step + 1), step)
}}
w.scalar("acc", tensor(0.75), 7)
w.scalar("big", 3, -2)
w.histogram("w", [0.0, 0.5, 1.0, 1.0, 2.0, -1.0], 3)
w.histogram("one", [4.0, 4.0], 1)
w.histogram("few", [0.0, 1.0, 2.0, 3.0], 2, bins=2)
w.text("note", "lr **0.01**", 4)
summary.scalars(w, {{lr: 0.5, momentum: 0.9}}, 6, prefix="opt/")
@staged
fn step_fn(x, i) {{
    let y = sum(x * x)
    w.scalar("staged", y, i)
    return y
}}
for i in range(3) {{ step_fn(tensor([1.0, 2.0]) * cast(i, float32), i) }}
w.flush()
print(w.path)
w.close()
w.close()
"""
p = run_tfe(prog)
files = sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*")))
check(len(files) == 1, f"one event file in {logdir}, found {files}")
if p.returncode == 0 and files:
    path = p.stdout.strip()
    check(path == files[0], f"w.path {path!r} is not the file {files[0]!r}")
    name = os.path.basename(files[0])
    check(re.fullmatch(r"events\.out\.tfevents\.\d{10}\.[^/]+\.\d+\.\d+", name), f"file name {name}")

    ea = event_accumulator.EventAccumulator(logdir, size_guidance={"tensors": 0, "scalars": 0, "histograms": 0})
    ea.Reload()
    tags = ea.Tags()
    check(sorted(tags["scalars"]) == ["acc", "big", "loss", "opt/lr", "opt/momentum", "staged"],
          f"scalar tags {tags['scalars']}")
    loss = ea.Scalars("loss")
    check([e.step for e in loss] == [0, 1, 2, 3, 4], f"loss steps {[e.step for e in loss]}")
    check(np.allclose([e.value for e in loss], [1.0, 0.5, 1 / 3, 0.25, 0.2], rtol=1e-6),
          f"loss values {[e.value for e in loss]}")
    check([(e.step, e.value) for e in ea.Scalars("acc")] == [(7, 0.75)], "acc")
    check([(e.step, e.value) for e in ea.Scalars("big")] == [(-2, 3.0)], "big (negative step)")
    check([(e.step, round(e.value, 6)) for e in ea.Scalars("opt/lr")] == [(6, 0.5)], "summary.scalars")
    # the staged function wrote at every call, with that call's values
    st = [(e.step, e.value) for e in ea.Scalars("staged")]
    check(st == [(0, 0.0), (1, 5.0), (2, 20.0)], f"staged scalars {st}")
    check(all(e.wall_time > 1.6e9 for e in loss), "wall_time is seconds since 1970")

    h = ea.Histograms("w")
    check(len(h) == 1 and h[0].step == 3, "histogram step")
    hv = h[0].histogram_value
    check((hv.min, hv.max, hv.num, hv.sum, hv.sum_squares) == (-1.0, 2.0, 6.0, 3.5, 7.25),
          f"histogram stats {hv}")
    check(len(hv.bucket_limit) == 30 and len(hv.bucket) == 30, "30 bins by default")
    check(sum(hv.bucket) == 6, f"bins hold every value: {list(hv.bucket)}")
    check(hv.bucket_limit[-1] == 2.0, "the last bin ends at max")
    lim = [-1.0] + list(hv.bucket_limit)
    xs = [0.0, 0.5, 1.0, 1.0, 2.0, -1.0]
    want = [sum(1 for x in xs if lim[j] <= x < lim[j + 1] or (j == 29 and x == lim[30])) for j in range(30)]
    check(list(hv.bucket) == want, f"bins {list(hv.bucket)} want {want}")
    few = ea.Histograms("few")[0].histogram_value
    check(list(few.bucket_limit) == [1.5, 3.0] and list(few.bucket) == [2.0, 2.0], f"bins=2: {few}")
    one = ea.Histograms("one")[0].histogram_value
    check(list(one.bucket) == [2.0] and list(one.bucket_limit) == [4.0], f"equal values: {one}")

    check(tags["tensors"] == ["note"], f"tensor tags {tags['tensors']}")
    t = ea.Tensors("note")
    check(len(t) == 1 and t[0].step == 4, "text step")
    if t:
        s = tensor_util.make_ndarray(t[0].tensor_proto)
        check(s.shape == () and s.item() == b"lr **0.01**", f"text value {s!r}")
    check(list(ea.PluginTagToContent("text")) == ["note"], "the text plugin sees the text")

    # ---- (b) the framing ----
    data = open(files[0], "rb").read()
    try:
        recs = records(data)
    except Bad as e:
        recs = []
        failures.append(f"framing: {e}")
    if recs:
        first = event_pb2.Event.FromString(recs[0])
        check(first.file_version == "brain.Event:2", f"first record {first}")
        check(len(recs) == 1 + 5 + 2 + 3 + 1 + 2 + 3, f"{len(recs)} records")
        # a truncated file and a flipped bit are detected
        for cut in (len(data) - 1, len(data) - 5, len(data) - 20, 7):
            try:
                records(data[:cut])
                failures.append(f"a file cut at {cut} of {len(data)} bytes passed")
            except Bad:
                pass
        bad = bytearray(data)
        bad[len(recs[0]) + 12 + 4 + 20] ^= 1
        try:
            records(bytes(bad))
            failures.append("a flipped bit passed")
        except Bad:
            pass

# ---- (c) more writers: a file each; the end of the program flushes what
# was neither flushed nor closed ----
p = run_tfe(f"""
import summary
let w = summary.writer("{logdir}")
w.scalar("second", 1.0, 0)
""")
p = run_tfe(f"""
import summary
let w = summary.writer("{logdir}/")
w.scalar("second", 2.0, 1)
""")
files = sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*")))
check(len(files) == 3, f"one file per writer: {files}")
ea = event_accumulator.EventAccumulator(logdir)
ea.Reload()
check([e.value for e in ea.Scalars("second")] == [1.0, 2.0], "written at exit without flush or close")

# ---- (e) an example logs its loss and accuracy when TFE_LOGDIR is set ----
env = dict(os.environ, TFE_QUICK="1", TFE_PROGRESS="0", TFE_LOGDIR=os.path.join(tmp, "ex"))
examples = os.path.join(os.environ["TFE_SRCDIR"], "examples")
p = subprocess.run([TFE, "digits_cnn.tfe"], cwd=examples, capture_output=True, text=True,
                   timeout=int(os.environ.get("TFE_EXAMPLE_TIMEOUT", "300")), env=env)
check(p.returncode == 0, f"examples/digits_cnn.tfe with TFE_LOGDIR failed:\n{p.stderr}")
if p.returncode == 0:
    ea = event_accumulator.EventAccumulator(os.path.join(tmp, "ex", "digits_cnn"))
    ea.Reload()
    loss = [(e.step, e.value) for e in ea.Scalars("loss/train")]
    check([s for s, _ in loss] == [1, 2, 3] and loss[2][1] < loss[0][1], f"digits_cnn loss {loss}")
    acc = [(e.step, e.value) for e in ea.Scalars("accuracy/test")]
    m = re.search(r"test accuracy: ([0-9.]+)", p.stdout)
    check(len(acc) == 1 and m and abs(acc[0][1] - float(m.group(1))) < 1e-3, f"digits_cnn accuracy {acc}")


# ---- (d) errors ----
def err(code, *want):
    p = run_tfe(code, expect_ok=False)
    if p.returncode != 1:
        failures.append(f"expected an error from:\n{code}\ngot status {p.returncode}")
        return
    for w in want:
        check(w in p.stderr, f"error of:\n{code}\nlacks {w!r}:\n{p.stderr}")


afile = os.path.join(tmp, "afile")
open(afile, "w").close()
err(f'import summary\nlet w = summary.writer("{afile}/x")', "<cmdline>:2:", "cannot use", "Not a directory")
err(f'import summary\nlet w = summary.writer("{afile}")', "<cmdline>:2:", "Not a directory")
err(f'import summary\nlet w = summary.writer("{tmp}/c")\nw.close()\nw.scalar("a", 1, 0)', "<cmdline>:4:", "closed")
err(f'import summary\nlet w = summary.writer("{tmp}/c")\nw.histogram("h", [1.0, nan], 0)', "<cmdline>:3:", "nan")
err(f'import summary\nlet w = summary.writer("{tmp}/c")\nw.scalar("a", "x", 0)', "<cmdline>:3:", "value must be")
err(f'import summary\nlet w = summary.writer("{tmp}/c")\nw.scalar("a", 1.0, 0.5)', "<cmdline>:3:", "step must be an int")
# a one-element tensor or a variable: the message names the conversion
err(f'import summary\nlet w = summary.writer("{tmp}/c")\nw.scalar("a", tensor([3.5]), 0)', "<cmdline>:3:",
    "got a tensor of shape (1,) (x.item() is its number)")
err(f'import summary\nlet w = summary.writer("{tmp}/c")\nw.scalar("a", variable(2.5), 0)', "<cmdline>:3:",
    "got a variable (write v.value)")
err(f'import summary\n@staged\nfn f(x) {{ let w = summary.writer("{tmp}/d")\n return x }}\nf(1.0)', "<cmdline>:3:", "outside")

if failures:
    print("\n".join(failures))
    print(f"tensorboard: {len(failures)} failures (files in {tmp})")
    sys.exit(1)
import shutil
shutil.rmtree(tmp)
print("tensorboard: tfe's event files read back by tensorboard's EventAccumulator")
