"""tfe_kernel.py — the Jupyter kernel for tfe: a thin ipykernel wrapper that
drives one `tfe --kernel` process (the interpreter, alive across cells) over
its line protocol (docs/notebooks.md).

  python3 tfe_kernel.py -f CONNECTION_FILE        run the kernel (kernel.json does)
  python3 tfe_kernel.py install [--user] [--prefix DIR] [--tfe PATH] [--tfe-path DIRS]
                                                  install the kernelspec "tfe"

The tfe binary is $TFE (else `tfe` on PATH); its module path $TFE_PATH.
Interrupt (interrupt_mode "signal"): Jupyter sends SIGINT to this process,
which passes it on to tfe, whose running cell stops as at Ctrl-C in the REPL.
"""
import base64
import codecs
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

KERNEL_NAME = "tfe"


class Child:
    """One `tfe --kernel` process and its framed replies."""

    def __init__(self, tfe):
        # its own session: a SIGINT to our process group (Jupyter's interrupt)
        # reaches us only, and we pass exactly one on
        self.proc = subprocess.Popen([tfe, "--kernel"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     start_new_session=True)
        kind, _, data = self.record()
        if kind != "ready":
            raise RuntimeError("tfe --kernel did not start: %r" % data)
        self.version = data.decode("utf-8", "replace")

    def record(self):
        """(kind, arg, bytes); ("eof", "", b"") when tfe has gone."""
        head = self.proc.stdout.readline()
        if not head.endswith(b"\n"):
            return "eof", "", b""
        words = head.decode().split()
        n = int(words[-1])
        data = self.proc.stdout.read(n) if n else b""
        return words[0], " ".join(words[1:-1]), data

    def send(self, verb, text):
        data = text.encode("utf-8")
        self.proc.stdin.write(b"%s %d\n" % (verb.encode(), len(data)) + data)
        self.proc.stdin.flush()

    def interrupt(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=2)
            except Exception:
                self.proc.kill()
                self.proc.wait()


def _word_at(code, pos):
    """The name (with dots) around the cursor, for inspect."""
    b = pos
    while b > 0 and re.match(r"[\w.]", code[b - 1]):
        b -= 1
    e = pos
    while e < len(code) and re.match(r"\w", code[e]):
        e += 1
    return code[b:e].strip(".")


def make_kernel_class():
    from ipykernel.kernelbase import Kernel

    class TfeKernel(Kernel):
        implementation = "tfe"
        implementation_version = "0.1"
        language = "tfe"
        language_version = "0.1"
        language_info = {"name": "tfe", "mimetype": "text/x-tfe", "file_extension": ".tfe",
                         "codemirror_mode": "rust", "pygments_lexer": "rust"}
        banner = "tfe — a small array language for ML"

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.tfe = os.environ.get("TFE") or shutil.which("tfe") or "tfe"
            self.child = Child(self.tfe)
            self.banner = self.child.version
            self._catch_sigint()

        def _catch_sigint(self):
            try:
                signal.signal(signal.SIGINT, lambda s, f: self.child.interrupt())
            except ValueError:  # not the main thread: the handler set before stays
                pass

        # ipykernel makes SIGINT raise KeyboardInterrupt while a request runs;
        # ours passes it on to tfe instead, so the reply stream stays whole
        def pre_handler_hook(self):
            self._catch_sigint()

        def post_handler_hook(self):
            pass

        def _stream(self, name, data, final=False):
            # one decoder per stream and cell: tfe frames its output in
            # records of at most 64 KiB, which may cut a character in two
            dec = self._decoders.setdefault(name, codecs.getincrementaldecoder("utf-8")("replace"))
            text = dec.decode(data, final)
            if text and not self.silent:
                self.send_response(self.iopub_socket, "stream", {"name": name, "text": text})

        @staticmethod
        def _mime_data(mime, data):
            # binary formats travel as base64 in Jupyter's JSON
            if mime.startswith("image/") and not mime.endswith("+xml"):
                return base64.b64encode(data).decode("ascii")
            return data.decode("utf-8", "replace")

        def do_execute(self, code, silent, store_history=True, user_expressions=None, allow_stdin=False,
                       **kwargs):
            self.silent = silent
            self._catch_sigint()
            self._decoders = {}
            status = self.child.proc.poll()
            if status is not None:
                # it died between cells (killed, out of memory): this cell
                # says so rather than run without the bindings it expects
                self.child = Child(self.tfe)
                return self._error("tfe exited (status %s) after the last cell; this cell did not run: the earlier "
                                   "bindings are gone, and the next cell runs in a fresh interpreter\n" % status,
                                   silent)
            self.child.send("exec", code)
            error = None
            # a display or a result in all its formats ("display+", "result+"
            # records add formats), sent once a record of another kind comes
            pending = {}

            def flush():
                if pending and not silent:
                    msg_type, bundle = pending["type"], pending["data"]
                    bundle.setdefault("text/plain", "<a picture>")
                    content = {"data": bundle, "metadata": {}}
                    if msg_type == "execute_result":
                        content["execution_count"] = self.execution_count
                    self.send_response(self.iopub_socket, msg_type, content)
                pending.clear()
            while True:
                kind, arg, data = self.child.record()
                if kind in ("display+", "result+") and pending:
                    pending["data"][arg] = self._mime_data(arg, data)
                    continue
                flush()
                if kind == "display":
                    pending.update(type="display_data", data={arg: self._mime_data(arg, data)})
                elif kind == "result":
                    pending.update(type="execute_result", data={"text/plain": data.decode("utf-8", "replace")})
                elif kind == "out":
                    self._stream("stdout", data)
                elif kind == "err":
                    self._stream("stderr", data)
                elif kind == "error":
                    error = data.decode("utf-8", "replace")
                elif kind == "done":
                    for name in list(self._decoders):
                        self._stream(name, b"", final=True)
                    break
                elif kind == "eof":
                    for name in list(self._decoders):
                        self._stream(name, b"", final=True)
                    error = "tfe exited (status %s); the next cell starts a fresh interpreter\n" % (
                        self.child.proc.wait())
                    break
            if error is None:
                return {"status": "ok", "execution_count": self.execution_count, "payload": [],
                        "user_expressions": {}}
            return self._error(error, silent)

        def _error(self, error, silent):
            lines = error.rstrip("\n").split("\n")
            first = lines[0]
            ename = "Interrupted" if first.endswith("error: interrupted") else "Error"
            content = {"ename": ename, "evalue": error.rstrip("\n"), "traceback": lines}
            if not silent:
                self.send_response(self.iopub_socket, "error", content)
            content.update(status="error", execution_count=self.execution_count)
            return content

        def _ask(self, verb, text, want):
            if self.child.proc.poll() is not None:
                return b""
            self.child.send(verb, text)
            out = b""
            while True:
                kind, _, data = self.child.record()
                if kind == want:
                    out = data
                elif kind in ("done", "eof"):
                    return out

        def do_complete(self, code, cursor_pos):
            cursor_pos = max(0, min(cursor_pos, len(code)))  # a client may send one past the end
            before = code[:cursor_pos]
            data = self._ask("complete", before, "matches").decode("utf-8", "replace")
            lines = data.split("\n")
            word = lines[0] if lines else ""
            matches = [m for m in lines[1:] if m]
            # a match replaces the whole word, the part after the cursor too
            end = cursor_pos
            while end < len(code) and re.match(r"\w", code[end]):
                end += 1
            return {"status": "ok", "matches": matches, "cursor_start": cursor_pos - len(word),
                    "cursor_end": end, "metadata": {}}

        def do_inspect(self, code, cursor_pos, detail_level=0, omit_sections=()):
            cursor_pos = max(0, min(cursor_pos, len(code)))  # past the end: no reply at all, once
            name = _word_at(code, cursor_pos)
            text = self._ask("inspect", name, "help").decode("utf-8", "replace") if name else ""
            found = bool(text) and not text.startswith("no help for")
            return {"status": "ok", "found": found, "data": {"text/plain": text} if found else {},
                    "metadata": {}}

        def do_is_complete(self, code):
            st = self._ask("check", code, "status").decode() or "unknown"
            return {"status": st, "indent": "    "} if st == "incomplete" else {"status": st}

        def do_shutdown(self, restart):
            self.child.close()
            if restart:
                self.child = Child(self.tfe)
            return {"status": "ok", "restart": restart}

    return TfeKernel


def install(argv):
    import argparse
    from jupyter_client.kernelspec import KernelSpecManager
    ap = argparse.ArgumentParser(prog="tfe_kernel.py install")
    ap.add_argument("--user", action="store_true", help="into ~/.local/share/jupyter")
    ap.add_argument("--prefix", help="into PREFIX/share/jupyter (a virtual environment)")
    ap.add_argument("--tfe", default=shutil.which("tfe") or "tfe", help="the tfe binary")
    ap.add_argument("--tfe-path", default=os.environ.get("TFE_PATH", ""), help="TFE_PATH for the kernel")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(os.path.abspath(__file__), os.path.join(d, "tfe_kernel.py"))
        spec = {"argv": [sys.executable, "{resource_dir}/tfe_kernel.py", "-f", "{connection_file}"],
                "display_name": "tfe", "language": "tfe", "interrupt_mode": "signal",
                "env": {"TFE": os.path.abspath(a.tfe)}}
        if a.tfe_path:
            spec["env"]["TFE_PATH"] = a.tfe_path
        with open(os.path.join(d, "kernel.json"), "w") as f:
            json.dump(spec, f, indent=1)
        dest = KernelSpecManager().install_kernel_spec(d, KERNEL_NAME, user=a.user, prefix=a.prefix)
    # {resource_dir} is new in jupyter_client 7.4; older ones get the path itself
    kj = os.path.join(dest, "kernel.json")
    with open(kj) as f:
        spec = json.load(f)
    spec["argv"][1] = os.path.join(dest, "tfe_kernel.py")
    with open(kj, "w") as f:
        json.dump(spec, f, indent=1)
    print("installed the kernelspec 'tfe' in %s" % dest)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "install":
        install(sys.argv[2:])
        return
    from ipykernel.kernelapp import IPKernelApp
    IPKernelApp.launch_instance(kernel_class=make_kernel_class())


if __name__ == "__main__":
    main()
