"""jupyter_kernel.py — the tfe Jupyter kernel through jupyter_client
(tests/jupyter_kernel.sh): the kernelspec installed by tfe_kernel.py install,
execute (echo, stdout stream, display_data), an error cell, complete,
inspect, interrupt mid-loop with the bindings kept, restart, shutdown; then
every notebook of examples/notebooks run by nbclient with its outputs
compared to the stored ones (numbers and times masked)."""
import glob
import os
import queue
import subprocess
import sys
import tempfile
import time

from jupyter_client.manager import KernelManager

SRC = os.environ["TFE_SRCDIR"]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


tmp = tempfile.mkdtemp(prefix="tfe-jupyter-")
os.environ["JUPYTER_PATH"] = os.path.join(tmp, "share", "jupyter")
os.environ["JUPYTER_DATA_DIR"] = os.path.join(tmp, "data")
os.environ["JUPYTER_RUNTIME_DIR"] = os.path.join(tmp, "runtime")
os.environ["IPYTHONDIR"] = os.path.join(tmp, "ipython")
subprocess.run([sys.executable, os.path.join(SRC, "jupyter", "tfe_kernel.py"), "install", "--prefix", tmp,
                "--tfe", os.environ["TFE"], "--tfe-path", os.environ.get("TFE_PATH", "")],
               check=True, stdout=subprocess.DEVNULL)


def run(kc, code, timeout=30):
    """(reply content, [iopub messages]) of one execute."""
    msg_id = kc.execute(code)
    reply = kc.get_shell_msg(timeout=timeout)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=timeout)
    out = []
    while True:
        m = kc.get_iopub_msg(timeout=timeout)
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            break
        out.append(m)
    return reply["content"], out


def stream(out, name="stdout"):
    return "".join(m["content"]["text"] for m in out if m["msg_type"] == "stream" and m["content"]["name"] == name)


def result(out):
    r = [m["content"]["data"]["text/plain"] for m in out if m["msg_type"] == "execute_result"]
    return r[0] if r else None


km = KernelManager(kernel_name="tfe")
km.start_kernel()
kc = km.client()
kc.start_channels()
kc.wait_for_ready(timeout=30)

rep, out = run(kc, 'let x = 6\nprint("hello")\nx * 7')
check(rep["status"] == "ok", "execute ok: %r" % rep)
check(stream(out) == "hello\n", "stdout stream: %r" % out)
check(result(out) == "42", "execute_result: %r" % out)

rep, out = run(kc, "plot([1, 2, 3], [3, 1, 2])")
disp = [m for m in out if m["msg_type"] == "display_data"]
check(len(disp) == 1 and "<svg" in disp[0]["content"]["data"].get("image/svg+xml", ""), "display_data: %r" % out)

rep, out = run(kc, "let y = 1\nzeros((2, 2)) + zeros((3, 3))")
check(rep["status"] == "error", "error reply: %r" % rep)
errs = [m for m in out if m["msg_type"] == "error"]
check(len(errs) == 1 and "<cell:3>:2:15: error: add: shapes" in errs[0]["content"]["evalue"] and "^" in errs[0]["content"]["evalue"],
      "error message located: %r" % errs)
rep, out = run(kc, "y")
check(result(out) == "1", "the kernel survives the error: %r" % out)

rep = kc.complete("let longname_q = 1\nlongn", 24)
rep, _ = run(kc, "let longname_q = 1")
kc.complete("print(longn", 11)
c = kc.get_shell_msg(timeout=10)["content"]
check("longname_q" in c["matches"] and c["cursor_start"] == 6 and c["cursor_end"] == 11, "complete: %r" % c)

kc.inspect("zeros((2, 3))", 2)
c = kc.get_shell_msg(timeout=10)["content"]
check(c["found"] and "zeros(" in c["data"].get("text/plain", ""), "inspect: %r" % c)

kc.is_complete("fn f(a) {")
c = kc.get_shell_msg(timeout=10)["content"]
check(c["status"] == "incomplete", "is_complete: %r" % c)

# output past one 64 KiB record of tfe's: no character cut in two (each record
# was decoded alone, and the cuts came out as U+FFFD)
rep, out = run(kc, 'print("日本" * 50000)')
check(stream(out) == "日本" * 50000 + "\n", "multi-byte output across records: %d chars, %d U+FFFD" %
      (len(stream(out)), stream(out).count("\ufffd")))

# a cursor past the end (no inspect_reply came at all), and in mid-word (a
# match replaces the whole word)
kc.inspect("zeros", 99)
c = kc.get_shell_msg(timeout=10)["content"]
check(c["status"] == "ok" and c["found"], "inspect past the end: %r" % c)
kc.complete("zeros", 2)
c = kc.get_shell_msg(timeout=10)["content"]
check(c["cursor_start"] == 0 and c["cursor_end"] == 5 and "zeros" in c["matches"], "complete mid-word: %r" % c)

# tfe killed between cells: the next cell says so (it ran silently in a
# fresh interpreter, the bindings gone), and the one after runs
wrapper = km.provisioner.process.pid if getattr(km, "provisioner", None) else km.kernel.pid
kids = subprocess.run(["pgrep", "-P", str(wrapper)], capture_output=True, text=True).stdout.split()
check(len(kids) == 1, "one tfe under the kernel: %r" % kids)
if len(kids) == 1:
    rep, out = run(kc, "let keep_k = 5")
    os.kill(int(kids[0]), 9)
    time.sleep(0.5)
    rep, out = run(kc, "keep_k")
    errs = [m["content"]["evalue"] for m in out if m["msg_type"] == "error"]
    check(rep["status"] == "error" and errs and "after the last cell; this cell did not run" in errs[0],
          "a death between cells is reported: %r %r" % (rep, errs))
    rep, out = run(kc, "x = 1")
    check(rep["status"] == "error", "the fresh interpreter has no earlier bindings: %r" % rep)
    rep, out = run(kc, "let x = 6\nlet i = 0\n1 + 1")
    check(result(out) == "2", "runs after the death: %r" % out)

# interrupt a cell mid-loop: the next cell sees the bindings
msg_id = kc.execute("let i = 0\nwhile true { i = i + 1 }")
time.sleep(1.0)
km.interrupt_kernel()
reply = kc.get_shell_msg(timeout=20)
while reply["parent_header"].get("msg_id") != msg_id:
    reply = kc.get_shell_msg(timeout=20)
check(reply["content"]["status"] == "error" and reply["content"]["ename"] == "Interrupted",
      "interrupted: %r" % reply["content"])
rep, out = run(kc, "(i > 0, x)")
check(result(out) == "(true, 6)", "bindings after the interrupt: %r" % out)

km.restart_kernel(now=True)
kc.wait_for_ready(timeout=30)
rep, out = run(kc, "x")
check(rep["status"] == "error", "a restart forgets the bindings: %r" % rep)
rep, out = run(kc, "1 + 1")
check(result(out) == "2", "runs after the restart: %r" % out)
kc.stop_channels()
km.shutdown_kernel(now=False)
check(not km.is_alive(), "shutdown")

# the notebooks, run headless: sources as generated, outputs as stored
import nbformat  # noqa: E402
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(SRC, "examples", "notebooks"))
import notebooks  # noqa: E402

for name, nb in notebooks.notebooks().items():
    path = os.path.join(SRC, "examples", "notebooks", name)
    for p in notebooks.compare(nbformat.read(path, as_version=4), notebooks.execute(nb)):
        check(False, "%s: %s" % (name, p))

if failures:
    sys.exit(1)
print("jupyter kernel: all checks passed")
