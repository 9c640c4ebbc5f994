#!/usr/bin/env python3
"""repl_pty.py — drives tfe's REPL through a pseudo-terminal, as a person would.

Usage: repl_pty.py [TFE]   (default: $TFE). Exits 0 when every step passes,
1 naming the step that failed (with the tail of what the terminal showed),
77 (skip) where no pseudo-terminal can be opened.
Every read has a timeout, and a global alarm ends the test, so it never hangs.
"""
import os
import pty
import select
import signal
import sys
import tempfile
import time

STEP_TIMEOUT = 15.0   # seconds to wait for one expected output
TOTAL_TIMEOUT = 180   # seconds for the whole test


class Failure(Exception):
    pass


class Session:
    """One tfe process on a pty; output is kept with '\\r' removed."""

    def __init__(self, exe, home, step, args=(), extra_env=None):
        self.step = step
        self.out = ""
        self.pos = 0
        env = dict(os.environ)
        env.update(TERM="dumb", INPUTRC="/dev/null", LC_ALL="C.UTF-8",
                   COLUMNS="200", LINES="50")
        if home is None:
            env.pop("HOME", None)
        else:
            env["HOME"] = home
        env.update(extra_env or {})
        pid, fd = pty.fork()
        if pid == 0:
            try:
                os.execve(exe, [exe] + list(args), env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.status = None
        try:
            import fcntl
            import struct
            import termios
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        except OSError:
            pass

    def _read(self, timeout):
        """Read what is available within timeout; False at end of output."""
        r, _, _ = select.select([self.fd], [], [], timeout)
        if not r:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        if not data:
            return False
        self.out += data.decode("utf-8", "replace").replace("\r", "")
        return True

    def expect(self, text, what, timeout=STEP_TIMEOUT):
        """Wait until `text` appears after the last match; move past it."""
        deadline = time.monotonic() + timeout
        while True:
            i = self.out.find(text, self.pos)
            if i >= 0:
                self.pos = i + len(text)
                return
            left = deadline - time.monotonic()
            if left <= 0:
                self.fail(what, "timed out after %.0fs waiting for %r" % (timeout, text))
            if not self._read(min(left, 0.5)) and self.out.find(text, self.pos) < 0:
                self.fail(what, "the REPL ended before showing %r" % text)

    def send(self, s):
        os.write(self.fd, s.encode())

    def line(self, s):
        """Type a line and press Enter."""
        self.send(s + "\r")

    def drain(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if not self._read(end - time.monotonic()):
                break

    def wait_exit(self, what, timeout=STEP_TIMEOUT):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, st = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                if os.WIFEXITED(st):
                    self.status = os.WEXITSTATUS(st)
                else:
                    self.status = -os.WTERMSIG(st)
                self.drain(0.2)
                return self.status
            self._read(0.1)
        self.fail(what, "did not exit within %.0fs" % timeout)

    def fail(self, what, why):
        raise Failure("step '%s' (%s): %s\n--- terminal output (tail) ---\n%s\n---"
                      % (self.step, what, why, self.out[-1500:]))

    def close(self):
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
        try:
            os.close(self.fd)
        except OSError:
            pass


PROMPT = ">>> "
MORE = "... "


def value_of(s, entry, expected, step):
    """Enter an expression and check the echoed value on its own line."""
    s.step = step
    s.line(entry)
    s.expect("\n" + expected + "\n", "echo of %r should be %r" % (entry, expected))
    s.expect(PROMPT, "prompt after %r" % entry)



def type_block(s, lines):
    """Type an entry line by line: a '...' prompt after each but the last."""
    for l in lines[:-1]:
        s.line(l)
        s.expect(MORE, "continuation after %r" % l)
    s.line(lines[-1])


def interrupt(s, statement):
    """Start a statement that runs until stopped, press Ctrl-C, and wait for
    the 'interrupted' error and a fresh prompt. On a loaded machine the
    statement may not have started when the first Ctrl-C arrives (it would
    only discard the finished entry): press it again, as a person would."""
    s.line(statement)
    s.drain(0.5)
    for attempt in range(10):
        s.send("\x03")
        try:
            s.expect("interrupted", "an 'interrupted' error", timeout=2.0)
            break
        except Failure:
            if attempt == 9:
                raise
    s.expect(PROMPT, "prompt after Ctrl-C")

def session_one(exe, home):
    s = Session(exe, home, "start")
    try:
        s.expect("tfe ", "banner")
        s.expect(PROMPT, "first prompt")

        value_of(s, "1 + 2", "3", "echo a value")

        s.step = "multi-line function"
        s.line("fn add3(a,")
        s.expect(MORE, "continuation after 'fn add3(a,'")
        s.line("        b) {")
        s.expect(MORE, "continuation inside the body")
        s.line("  return a + b + 3")
        s.expect(MORE, "continuation before '}'")
        s.line("}")
        s.expect(PROMPT, "prompt after the function")
        value_of(s, "add3(1, 2)", "6", "multi-line function")

        s.step = "multi-line record"
        s.line("let r = {a: 1,")
        s.expect(MORE, "continuation inside a record literal")
        s.line("         b: 20}")
        s.expect(PROMPT, "prompt after the record")
        value_of(s, "r.b", "20", "multi-line record")

        s.step = "error keeps bindings"
        s.line("let keep = 41")
        s.expect(PROMPT, "prompt after let")
        s.line("undefined_name_zz + 1")
        s.expect("error", "an error message for an undefined name")
        s.expect(PROMPT, "prompt after the error")
        value_of(s, "keep + 1", "42", "error keeps bindings")

        s.step = "Ctrl-C stops a running statement"
        interrupt(s, "while true { }")
        value_of(s, "keep", "41", "bindings survive Ctrl-C")

        s.step = "Ctrl-C stops a staged call (a graph while loop)"
        s.line("@staged fn spin(x) { while x > 0.0 { x = x + 1.0 }; return x }")
        s.expect(PROMPT, "prompt after the definition")
        interrupt(s, "spin(1.0)")
        value_of(s, "keep", "41", "bindings survive Ctrl-C in a staged call")
        value_of(s, "spin(-1.0)", "-1.0", "the staged function still works")

        s.step = "Ctrl-C stops a statement busy in kernels"
        s.line("let big = ones((2000000,))")
        s.expect(PROMPT, "prompt after let")
        interrupt(s, "for i in range(1000000) { big = exp(big * 0.0) }")
        value_of(s, "sum(big)", "2000000.0", "a tensor binding survives Ctrl-C")

        # one matmul of 68.7G multiply-adds: about a minute in the int32
        # kernel here, so only the GEMM's row slices (tensor/kernels_linalg.c)
        # let Ctrl-C return within the helper's retries
        s.step = "Ctrl-C stops a single long matmul"
        s.line('let sq = ones((4096, 4096), dtype="int32")')
        s.expect(PROMPT, "prompt after let")
        interrupt(s, "matmul(sq, sq)")
        value_of(s, "sq.shape", "(4096, 4096)", "the operand survives Ctrl-C in a matmul")

        s.step = "Ctrl-C discards a multi-line entry"
        s.line("let zz = (1 +")
        s.expect(MORE, "continuation")
        s.send("\x03")
        s.expect(PROMPT, "fresh prompt after Ctrl-C")
        value_of(s, "1 + 1", "2", "entry after a discarded one")
        s.line("zz")
        s.expect("error", "zz must not exist (the entry was discarded)")
        s.expect(PROMPT, "prompt")

        s.step = "Ctrl-C discards a half-typed line"
        s.send("garbage_text")
        s.drain(0.2)
        s.send("\x03")
        s.expect(PROMPT, "fresh prompt after Ctrl-C")
        value_of(s, "1 + 4", "5", "line after a discarded one")

        s.step = ":help"
        s.line(":help")
        s.expect(":quit", "the help text lists :quit")
        s.expect(PROMPT, "prompt after :help")

        s.step = "tab completion of a name"
        s.line("let completion_target_xyz = 7")
        s.expect(PROMPT, "prompt after let")
        s.send("completion_tar\t")
        s.drain(0.3)
        s.send("\r")
        s.expect("\n7\n", "completed name evaluates to 7")
        s.expect(PROMPT, "prompt")

        s.step = "tab completion of a field"
        s.line("let rec_q = {alpha_field: 5}")
        s.expect(PROMPT, "prompt after let")
        s.send("rec_q.alp\t")
        s.drain(0.3)
        s.send("\r")
        s.expect("\n5\n", "completed field evaluates to 5")
        s.expect(PROMPT, "prompt")

        s.step = "bare tuples, conditional expressions and f-strings"
        s.line("let tup_a, tup_b = 1, 2")
        s.expect(PROMPT, "prompt after let of a bare tuple")
        s.line("tup_a, tup_b = tup_b, tup_a")
        s.expect(PROMPT, "prompt after the swap")
        value_of(s, "tup_a, tup_b", "(2, 1)", "a bare tuple echoes as a tuple")
        value_of(s, '"big" if tup_a > tup_b else "small"', '"big"', "a conditional expression")
        value_of(s, 'f"{tup_a}-{tup_b:>3}"', '"2-  1"', "an f-string")
        s.line('f"{tup_a}')
        s.expect(MORE, "continuation inside an open f-string")
        s.line('"')
        s.expect("\n\"2\\n\"\n", "the f-string spanning two lines")
        s.expect(PROMPT, "prompt after the f-string")

        value_of(s, "100 + 23", "123", "last entry before :quit")
        s.step = ":quit"
        s.line(":quit")
        st = s.wait_exit("exit after :quit")
        if st != 0:
            s.fail("exit status", "exit status %r after :quit, expected 0" % st)
    finally:
        s.close()

    hist = os.path.join(home, ".tfe_history")
    if not os.path.exists(hist):
        raise Failure("step 'history': %s was not written after :quit" % hist)
    text = open(hist, encoding="utf-8", errors="replace").read()
    if "let keep = 41" not in text or "100 + 23" not in text:
        raise Failure("step 'history': %s lacks the session's lines:\n%s" % (hist, text))


def session_two(exe, home):
    """History is read back (Ctrl-P recalls it); Ctrl-D exits with status 0."""
    s = Session(exe, home, "history recall")
    try:
        s.expect(PROMPT, "first prompt")
        # the last two history lines are "100 + 23" and ":quit"
        s.send("\x10")
        s.drain(0.2)
        s.send("\x10")
        s.drain(0.2)
        s.send("\r")
        s.expect("\n123\n", "Ctrl-P Ctrl-P recalls '100 + 23' from the history file")
        s.expect(PROMPT, "prompt")
        s.step = "Ctrl-D"
        s.send("\x04")
        st = s.wait_exit("exit at EOF")
        if st != 0:
            s.fail("exit status", "exit status %r at EOF, expected 0" % st)
    finally:
        s.close()
    text = open(os.path.join(home, ".tfe_history"), encoding="utf-8").read()
    if text.count("100 + 23") != 2:
        raise Failure("step 'history append': expected '100 + 23' twice in the history "
                      "file after two sessions:\n" + text)


def session_no_home(exe):
    """No HOME and an unwritable HOME: the REPL works, no error at exit."""
    for home in (None, "/nonexistent/tfe-test-home"):
        s = Session(exe, home, "HOME=%s" % home)
        try:
            s.expect(PROMPT, "first prompt")
            value_of(s, "2 + 2", "4", "HOME=%s" % home)
            s.line(":q")
            st = s.wait_exit("exit after :q")
            if st != 0:
                s.fail("exit status", "exit status %r after :q, expected 0" % st)
            if "rror" in s.out:
                s.fail("no history error", "an error was shown")
        finally:
            s.close()


# --- help, echo, entry numbers, if/else, completion, Ctrl-C, :reload, history of whole entries

def reference_help(name):
    """What help(name) must print for a name whose row in docs/reference.md
    starts with `name(`: the row itself, backticks dropped (one source)."""
    ref = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "reference.md")
    for row in open(ref, encoding="utf-8"):
        if row.startswith("| `" + name + "("):
            cells = [c.strip() for c in row.strip().strip("|").split(" | ")]
            sig = cells[0].split("`")[1]
            return "%s\n    %s\n    example: %s\n" % (sig, cells[1].replace("`", ""),
                                                      cells[2].replace("`", ""))
    raise Failure("step 'help': no row for %s( in docs/reference.md" % name)


def session_learners(exe, home):
    s = Session(exe, home, "banner")
    try:
        s.expect("for the manual\n", "the banner says where the manual is")
        s.expect(PROMPT, "first prompt")

        s.step = "entry numbers in errors"
        s.line("fn bad(x) {")
        s.expect(MORE, "continuation")
        s.line("  return x[5]")
        s.expect(MORE, "continuation")
        s.line("}")
        s.expect(PROMPT, "prompt after the function")
        s.line("bad(ones(2))")
        s.expect("<repl:1>:2:10: error: index 5", "the error names entry 1, line 2")
        s.expect("in bad called from <repl:2>:1:1\n", "the traceback names entry 2")
        s.expect(PROMPT, "prompt after the error")

        s.step = "help(name) from docs/reference.md"
        s.line("help(zeros)")
        s.expect("\n" + reference_help("zeros"), "help(zeros) shows its reference row")
        s.expect(PROMPT, "prompt")
        s.line(":help nn.dense")
        s.expect("\n" + reference_help("nn.dense"), ":help nn.dense shows its reference row")
        s.expect(PROMPT, "prompt")
        s.line('help("zeross")')
        s.expect("\nno help for 'zeross' (did you mean 'zeros'?)", "unknown name: the closest one")
        s.expect(PROMPT, "prompt")
        s.line(":help")
        s.expect("\nReductions:\n  sum, mean, prod,", "the topics list the sections")
        s.expect("\nREPL commands", "and the commands")
        s.expect(PROMPT, "prompt")

        s.step = "help(value)"
        s.line("help(ones((2, 3)))")
        s.expect("\na float32 tensor of shape (2, 3) on ", "a tensor's dtype, shape, device")
        s.expect(PROMPT, "prompt")
        s.line("help({a: 1})")
        s.expect("\na record with 1 field:\n  a: 1\n", "a record's fields")
        s.expect(PROMPT, "prompt")

        s.step = "help of an int tensor, and a PyTorch habit"
        s.line("help(arange(3))")
        s.expect("\nan int64 tensor of shape (3,) on ", "'an' before int64")
        s.expect(PROMPT, "prompt")
        s.line("ones(2).unsqueeze(0)")
        s.expect("tensor has no field 'unsqueeze' (tfe writes x.expand_dims(axis))", "the tfe spelling")
        s.expect(PROMPT, "prompt")
        s.line("for i in range(3):")
        s.expect("not ':' and indentation)", "a Python block colon is an error at once, not a '...' line")
        s.expect(PROMPT, "prompt")

        s.step = "echo of functions and variables"
        s.line("fn f2(x, yo_bump=1) { return x + yo_bump }")
        s.expect(PROMPT, "prompt")
        value_of(s, "f2", "<fn f2(x, yo_bump=1)>", "a function echoes its signature")
        s.line('let w = variable(0.5, name="w")')
        s.expect(PROMPT, "prompt")
        value_of(s, "w", "<variable w float32 () = 0.5>", "a variable echoes its value")

        s.step = "} then else on the next line"
        s.line("if 1 > 2 {")
        s.expect(MORE, "continuation")
        s.line('  print("then")')
        s.expect(MORE, "continuation")
        s.line("}")
        s.expect(MORE, "after '}' of an if the REPL waits for an else")
        s.line("else {")
        s.expect(MORE, "continuation")
        s.line('  print("else")')
        s.expect(MORE, "continuation")
        s.line("}")
        s.expect("\nelse\n", "the else branch ran")
        s.expect(PROMPT, "prompt")
        type_block(s, ['if 1 > 2 { print("then") }', "# a comment keeps the wait for else", 'else { print("else 2") }'])
        s.expect("\nelse 2\n", "a comment line between '}' and else")
        s.expect(PROMPT, "prompt")
        s.line('if true { print("one") }')
        s.expect(MORE, "an if waits a line")
        s.line("")
        s.expect("\none\n", "an empty line runs it")
        s.expect(PROMPT, "prompt")
        s.line('if true { print("two") }')
        s.expect(MORE, "an if waits a line")
        s.line('print("three")')
        s.expect("\ntwo\nthree\n", "another statement runs the if, then itself")
        s.expect(PROMPT, "prompt")

        s.step = "blocks whose lines start with names"
        # (the else check freed the value of a NEWLINE token, the next
        # line's first name, and again when that name came: a double free)
        type_block(s, ["fn blk(x) {", "  let a = x + 1", "  print(a)", "  a = a * 2", "  return a", "}"])
        s.expect(PROMPT, "prompt")
        s.line("blk(1)")
        s.expect("\n2\n4\n", "the function defined over five lines runs")
        s.expect(PROMPT, "prompt")
        s.line("let wn = 0")
        s.expect(PROMPT, "prompt")
        type_block(s, ["while wn < 2 {", "  wn += 1", "  print(wn)", "}"])
        s.expect("\n1\n2\n", "the while block runs")
        s.expect(PROMPT, "prompt")

        s.step = "a decorator waits for its fn, and for nothing else"
        s.line("@staged let y = 1")
        s.expect("followed by a 'fn' declaration", "the error at once, no '...' prompt")
        s.expect(PROMPT, "prompt")
        type_block(s, ["@staged", "print(3)"])
        s.expect("followed by a 'fn' declaration", "the error after the next line")
        s.expect(PROMPT, "prompt")
        type_block(s, ["@staged", "fn inc(x) { return x + 1 }"])
        s.expect(PROMPT, "prompt")
        value_of(s, "inc(1)", "2", "the decorated function")

        s.step = "completion of tensor fields and keyword arguments"
        s.line("let tz = ones((2, 3))")
        s.expect(PROMPT, "prompt")
        s.send("tz.nd\t")
        s.drain(0.3)
        s.send("\r")
        s.expect("\n2\n", "tz.nd<Tab> completes to tz.ndim")
        s.expect(PROMPT, "prompt")
        s.send("zeros((2,), dt\t")
        s.drain(0.3)
        s.send("int32)\r")
        s.expect("\n[0, 0]\n", "zeros((2,), dt<Tab> completes to dtype=")
        s.expect(PROMPT, "prompt")
        s.send("f2(1, yo_\t")
        s.drain(0.3)
        s.send("5)\r")
        s.expect("\n6\n", "f2(1, yo_<Tab> completes to yo_bump= (a tfe function's parameter)")
        s.expect(PROMPT, "prompt")
        s.send("w.val\t")
        s.drain(0.3)
        s.send("\r")
        s.expect("\n0.5\n", "w.val<Tab> completes to w.value (a variable)")
        s.expect(PROMPT, "prompt")

        s.step = "Ctrl-C leaves a clean prompt"
        start = len(s.out)
        interrupt(s, "while true { }")
        # up to the error (a second Ctrl-C of interrupt() may land on the
        # next prompt, which then shows ^C as a discarded line does)
        if "^C" in s.out[start:s.out.find("error: interrupted", start)]:
            s.fail("no ^C", "the terminal shows ^C in front of the error")
        s.send("half_typed")
        s.drain(0.2)
        s.send("\x03")
        s.expect("half_typed^C\n" + PROMPT, "a new line and a fresh prompt")
        value_of(s, "tz.ndim", "2", "state kept after Ctrl-C")

        s.step = ":reload"
        mod = os.path.join(home, "learnmod.tfe")
        with open(mod, "w") as f:
            f.write("fn version() { return 1 }\n")
        s.line('import "%s" as learnmod' % mod)
        s.expect(PROMPT, "prompt")
        value_of(s, "learnmod.version()", "1", "the module as first written")
        with open(mod, "w") as f:
            f.write("fn version() { return 2 }\n")
        s.line(":reload learnmod")
        s.expect(PROMPT, "prompt after :reload")
        value_of(s, "learnmod.version()", "2", "the module as edited")
        s.step = ":reload after a reload that failed"
        with open(mod, "w") as f:
            f.write("fn version() { return 2 + }\n")
        s.line(":reload learnmod")
        s.expect("expected expression", "the edit's syntax error")
        s.expect(PROMPT, "prompt")
        value_of(s, "learnmod.version()", "2", "the module as it was, still bound")
        with open(mod, "w") as f:
            f.write("fn version() { return 22 }\n")
        s.line(":reload learnmod")
        s.expect(PROMPT, "prompt after :reload")
        value_of(s, "learnmod.version()", "22", "a second :reload, after the fix, reads the file again")
        with open(mod, "w") as f:
            f.write("fn version() { return 2 }\n")
        s.line(":reload learnmod")
        s.expect(PROMPT, "prompt after :reload")
        s.step = "import of an edited module"
        s.line('import "%s" as learnmod' % mod)
        s.expect(PROMPT, "prompt")
        value_of(s, "learnmod.version()", "2", "an unchanged module is not imported again")
        with open(mod, "w") as f:
            f.write("fn version() { return 3 }\n")
        s.line('import "%s" as learnmod' % mod)
        s.expect(PROMPT, "prompt")
        value_of(s, "learnmod.version()", "3", "import after an edit gives the edited module")

        s.step = ":history"
        s.line(":history")
        s.expect("\n[1] fn bad(x) {\n      return x[5]\n    }\n[2] bad(ones(2))\n", "numbered entries")
        s.expect(PROMPT, "prompt")

        s.step = "a let that failed binds nothing"
        # (its name stayed declared: assigning it was accepted)
        s.line('let failed_let = 1 + "a"')
        s.expect("unsupported operand types", "the let's error")
        s.expect(PROMPT, "prompt")
        s.line("failed_let = 3")
        s.expect("assignment to undeclared name 'failed_let'", "the name was never bound")
        s.expect(PROMPT, "prompt")
        s.line("let failed_let = 4")
        s.expect(PROMPT, "prompt")
        value_of(s, "failed_let + 1", "5", "a later let binds it")

        s.step = "Tab at the start of a line indents"
        # (pasted code indented with tabs opened completion, whose
        # "Display all possibilities?" question ate the next characters)
        start = len(s.out)
        type_block(s, ["fn tabbed(x) {", "\t\treturn x * 2", "}"])
        s.expect(PROMPT, "prompt")
        value_of(s, "tabbed(4)", "8", "the function typed with a tab")
        if "possibilities" in s.out[start:] or "\x07" in s.out[start:]:
            s.fail("no completion", "Tab at the start of a line opened completion")

        s.step = "commands at a continuation prompt"
        # (they were code: a person stuck in a block could not :q)
        type_block(s, ["for i in range(1) {", ":help relu"])
        s.expect("relu(x)\n", "the help at a continuation prompt")
        s.expect(MORE, "the entry still waits")
        type_block(s, ["print(707)", "}"])
        s.expect("\n707\n", "the entry, finished after the command, runs")
        s.expect(PROMPT, "prompt")

        s.step = "a multi-line entry as the last one"
        s.line("fn twice(a) {")
        s.expect(MORE, "continuation")
        s.line("  return a * 2")
        s.expect(MORE, "continuation")
        s.line("}")
        s.expect(PROMPT, "prompt")
        s.step = ":q in an unfinished entry"
        type_block(s, ["fn unfinished(a) {", ":q"])
        if s.wait_exit("exit after :q in an unfinished entry") != 0:
            s.fail("exit status", "exit status %r after :q, expected 0" % s.status)
    finally:
        s.close()
    text = open(os.path.join(home, ".tfe_history"), encoding="utf-8").read()
    if "\nfn twice(a) {\n  return a * 2\n}\n" not in text:
        raise Failure("step 'history of entries': the function is not one item:\n" + text)

    s = Session(exe, home, "Up recalls a whole entry")
    try:
        s.expect(PROMPT, "first prompt")
        s.send("\x10")  # :q
        s.drain(0.2)
        s.send("\x10")  # the function, all three lines
        s.drain(0.2)
        s.send("\r")
        s.expect(PROMPT, "prompt after the recalled function")
        value_of(s, "twice(21)", "42", "the recalled function was defined")
        s.line(":q")
        s.wait_exit("exit after :q")
    finally:
        s.close()


BREAKPOINTS = """fn inner(a, b) {
    let c = a * b
    breakpoint()
    return c + 1.0
}
@staged
fn st(x) {
    let y = x * 2.0
    breakpoint()
    return y
}
print(inner(tensor([1.0, 2.0]), 3.0))
for i in range(3) { print(st(tensor([1.0]) * cast(i + 1, float32))) }
print("end")
"""
BP = "(breakpoint) "


def session_breakpoint(exe, home):
    """breakpoint() in a program run from a file: a prompt that reads the
    frame's bindings, :bt, :continue; in a staged function it stops at every
    call with that call's values (the first call traces, the others run the
    graph); :quit ends the program with an error at the breakpoint;
    TFE_BREAKPOINT=0 makes it a no-op."""
    path = os.path.join(home, "bp.tfe")
    with open(path, "w") as f:
        f.write(BREAKPOINTS)
    s = Session(exe, home, "breakpoint prompt", args=[path])
    try:
        s.expect("breakpoint at %s:3 in inner; bindings: a, b, c" % path, "the breakpoint's header")
        s.expect(BP, "the breakpoint's prompt")
        s.step = "the frame's bindings are readable"
        s.line("c")
        s.expect("\n[3.0, 6.0]\n", "the local c")
        s.expect(BP, "prompt after c")
        s.line("let z = a + c")
        s.expect(BP, "prompt after let")
        s.line("z * b")
        s.expect("\n[12.0, 24.0]\n", "a, b and c in an expression")
        s.expect(BP, "prompt after z")
        s.step = ":bt"
        s.line(":bt")
        s.expect("  at %s:3:5\n  in inner called from %s:12:7\n" % (path, path), "the backtrace")
        s.expect(BP, "prompt after :bt")
        s.step = "an error at the prompt keeps it open"
        s.line("undefined_zz")
        s.expect("<breakpoint:", "the entry's error")
        s.expect(BP, "prompt after the error")
        s.step = ":continue"
        s.line(":continue")
        s.expect("\n[4.0, 7.0]\n", "the function went on")
        for call, y in ((1, "[2.0]"), (2, "[4.0]"), (3, "[6.0]")):
            s.step = "staged call %d stops with its values" % call
            s.expect("breakpoint at %s:9 in st; bindings: x, y" % path, "the staged breakpoint")
            s.expect(BP, "the prompt in the staged function")
            s.line("y")
            s.expect("\n%s\n" % y, "this call's y")
            s.expect(BP, "prompt after y")
            if call < 3:
                s.line(":c")
                s.expect("\n%s\n" % y, "the staged call returned")
        s.step = ":quit"
        s.line(":quit")
        s.expect("%s:9:5: error: breakpoint(): stopped here (:quit)" % path, "the error of :quit")
        if s.wait_exit("exit after :quit") != 1:
            s.fail("exit status", "expected 1, got %s" % s.status)
        if "end" in s.out[s.pos:]:
            s.fail(":quit", "the program went on")
    finally:
        s.close()
    s = Session(exe, home, "TFE_BREAKPOINT=0", args=[path], extra_env={"TFE_BREAKPOINT": "0"})
    try:
        s.expect("[4.0, 7.0]\n[2.0]\n[4.0]\n[6.0]\nend\n", "the program without stopping")
        if s.wait_exit("exit") != 0:
            s.fail("exit status", "expected 0, got %s" % s.status)
    finally:
        s.close()


def main():
    exe = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("TFE")
    if not exe or not os.access(exe, os.X_OK):
        print("repl_pty: no executable tfe (pass it or set $TFE): %r" % exe)
        return 1

    try:
        master, slave = pty.openpty()
        os.close(master)
        os.close(slave)
    except OSError as e:
        print("repl_pty: cannot open a pseudo-terminal (%s); skipping" % e)
        return 77

    def on_alarm(signum, frame):
        raise Failure("the whole test took longer than %ds" % TOTAL_TIMEOUT)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(TOTAL_TIMEOUT)
    with tempfile.TemporaryDirectory(prefix="tfe-repl-") as home:
        try:
            session_one(exe, home)
            session_two(exe, home)
            session_no_home(exe)
            session_breakpoint(exe, home)
            with tempfile.TemporaryDirectory(prefix="tfe-repl-") as home2:
                session_learners(exe, home2)
        except Failure as e:
            print("repl_pty: FAIL: %s" % e)
            return 1
    print("repl_pty: all steps passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
