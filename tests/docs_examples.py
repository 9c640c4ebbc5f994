#!/usr/bin/env python3
"""docs_examples.py — every code block of the docs runs as a test.

Reads README.md and docs/*.md (or the files named on the command line) and
runs every fenced block tagged ```tfe with $TFE. The convention (written up
in docs/testing.md, "Code blocks in the docs"):

- A fence must name its language: ```tfe is a complete program, run;
  ```output and ```stderr hold what the program before them prints; every
  other tag (```sh, ```text, ```c, ...) is shown, not run. A fence with no
  tag is an error, so every new block is a decision.
- An ```output block directly after a ```tfe block (only blank lines, or
  nothing, between them) is the exact standard output. A ```stderr block
  directly after that (or directly after the program) is the exact standard
  error; then the exit status must be 1 when that text has an `error:` line,
  else 0. Without a ```stderr block, standard error must be empty and the
  status 0. A program without an ```output block may print anything on
  standard output. An ```output or ```stderr block that follows no program
  is an error of the document.
- Words after `tfe` on the fence line: `file=NAME.tfe` names the program's
  file (error messages and tracebacks show it; default `example.tfe`);
  `flags=--stage-all` (comma-separated) passes options before the file.
- Each program runs in a fresh, empty temporary folder (files it writes do
  not litter the tree), so the docs' programs show that they work from any
  folder: `data.load_iris()` finds the bundled data sets with data_dir()
  (`load_csv(data_dir() + "/iris.csv")` for a file of them). TFE_PATH is
  the stdlib, TFE_PROGRESS=0,
  stdin is /dev/null, and a run is stopped after 60 seconds.

Second, the reference check: every name the interpreter binds as a built-in
(interp_define_builtin in interp/*.c and stage/*.c, including the names the
op table tensor/ops.def generates and the registration tables) and every
top-level function of stdlib/*.tfe (as `module.name`) must appear in
docs/reference.md inside a code span, so the reference cannot fall behind.

Usage: docs_examples.py [--show] [FILE.md ...]
  --show   print each program's actual stdout/stderr instead of comparing
           (for writing a new block's expected output: check it, then paste)
Environment: TFE (the binary), TFE_SRCDIR, TFE_PATH, TFE_TEST_WRAPPER.
Exit status: 0 when everything passes, 1 otherwise.
"""

import difflib
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

FENCE_OPEN = re.compile(r'^(\s*)(`{3,}|~{3,})(.*)$')
ERROR_LINE = re.compile(r'(^|: )error: ', re.M)
TIMEOUT = 60


class Block:
    def __init__(self, path, line, indent, lang, attrs, body, end):
        self.path, self.line, self.indent = path, line, indent
        self.lang, self.attrs, self.body, self.end = lang, attrs, body, end
        self.output = None   # the ```output Block after a ```tfe block
        self.stderr = None   # the ```stderr Block

    def where(self):
        return '%s:%d' % (self.path, self.line)


def parse(path, text, problems):
    """The fenced blocks of a Markdown file, in order, with the text between
    each block and the one before it (to decide whether they are adjacent)."""
    lines = text.split('\n')
    blocks, gaps = [], []
    i, last_end = 0, 0
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).strip()
        close = re.compile(r'^\s*' + re.escape(fence[0]) + '{%d,}\\s*$' % len(fence))
        body, j = [], i + 1
        while j < len(lines) and not close.match(lines[j]):
            ln = lines[j]
            # strip the fence's own indentation (blocks inside list items)
            k = 0
            while k < indent and k < len(ln) and ln[k] == ' ':
                k += 1
            body.append(ln[k:])
            j += 1
        if j == len(lines):
            problems.append('%s:%d: code block is never closed' % (path, i + 1))
            break
        words = info.split(None, 1)
        lang = words[0] if words else ''
        attrs = {}
        if len(words) > 1:
            try:
                parts = shlex.split(words[1])
            except ValueError as e:
                parts = []
                problems.append('%s:%d: cannot read the fence line: %s' % (path, i + 1, e))
            for w in parts:
                if '=' not in w:
                    problems.append('%s:%d: fence word %r is not key=value' % (path, i + 1, w))
                    continue
                k, v = w.split('=', 1)
                attrs[k] = v
        blocks.append(Block(path, i + 1, indent, lang, attrs, body, j + 1))
        gaps.append(lines[last_end:i])
        last_end = j + 1
        i = j + 1
    return blocks, gaps


def pair(blocks, gaps, problems):
    """Attach ```output / ```stderr blocks to the ```tfe block they follow;
    return the programs. Problems of the document go to problems."""
    programs = []
    adjacent = [all(not g.strip() for g in gap) for gap in gaps]
    prev = None    # the program the next block may belong to
    for n, b in enumerate(blocks):
        if not b.lang:
            problems.append('%s: code block without a language: tag it '
                            '(```tfe, ```output, ```sh, ```text, ...)' % b.where())
            prev = None
            continue
        if b.lang == 'tfe':
            for k in b.attrs:
                if k not in ('file', 'flags'):
                    problems.append('%s: unknown fence word %r (file=, flags=)' % (b.where(), k))
            programs.append(b)
            prev = b
            continue
        if b.lang in ('output', 'stderr'):
            ok = prev is not None and adjacent[n]
            if ok and b.lang == 'output' and (prev.output or prev.stderr):
                ok = False
            if ok and b.lang == 'stderr' and prev.stderr:
                ok = False
            if not ok:
                problems.append('%s: ```%s block follows no ```tfe block (only blank '
                                'lines may come between a program and its %s)'
                                % (b.where(), b.lang, b.lang))
                prev = None
                continue
            if b.lang == 'output':
                prev.output = b
            else:
                prev.stderr = b
            continue
        prev = None
    return programs


def text_of(block):
    return ''.join(ln + '\n' for ln in block.body)


def run(prog, tfe, env, wrapper):
    tmp = tempfile.mkdtemp(prefix='tfe-docs.')
    try:
        name = prog.attrs.get('file', 'example.tfe')
        with open(os.path.join(tmp, name), 'w') as f:
            f.write(text_of(prog))
        flags = [w for w in prog.attrs.get('flags', '').split(',') if w]
        try:
            r = subprocess.run(wrapper + [tfe] + flags + [name], cwd=tmp, env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            return None, '', 'timed out after %d seconds' % TIMEOUT
        return (r.returncode, r.stdout.decode('utf-8', 'replace'),
                r.stderr.decode('utf-8', 'replace'))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def diff(expected, actual, label):
    return ''.join(difflib.unified_diff(
        expected.splitlines(True), actual.splitlines(True),
        'expected ' + label, 'actual ' + label))


def check(prog, result):
    """The failure messages of one program's run (empty when it passes)."""
    status, out, err = result
    fails = []
    if status is None:
        return [err]
    want_err = text_of(prog.stderr) if prog.stderr else ''
    want_status = 1 if ERROR_LINE.search(want_err) else 0
    if prog.output is not None and out != text_of(prog.output):
        fails.append('stdout differs from the ```output block at line %d:\n%s'
                     % (prog.output.line, diff(text_of(prog.output), out, 'stdout')))
    if err != want_err:
        if prog.stderr:
            fails.append('stderr differs from the ```stderr block at line %d:\n%s'
                         % (prog.stderr.line, diff(want_err, err, 'stderr')))
        else:
            fails.append('stderr is not empty:\n' + err)
    if status != want_status:
        fails.append('exit status %d, expected %d' % (status, want_status))
    return fails


# ---- the reference check ----------------------------------------------------

def builtin_names(srcdir):
    """Every name interp_define_builtin binds: string literals in its calls,
    the rows of registration tables ({"name", bi_...}) and the op-table
    names it registers by flag (F_UNARY, F_BINARY, F_REDUCTION)."""
    names = set()
    files = sorted(glob.glob(os.path.join(srcdir, 'interp', '*.c')) +
                   glob.glob(os.path.join(srcdir, 'stage', '*.c')))
    for path in files:
        src = open(path, encoding='utf-8').read()
        if 'interp_define_builtin(' not in src:
            continue
        names.update(re.findall(r'interp_define_builtin\(\s*\w+\s*,\s*"(\w+)"', src))
        if re.search(r'interp_define_builtin\(\s*\w+\s*,\s*table\[', src):
            names.update(re.findall(r'\{\s*"(\w+)"\s*,\s*bi_\w+', src))
        if 'tfe_ops[op].name' in src:
            ops = open(os.path.join(srcdir, 'tensor', 'ops.def'), encoding='utf-8').read()
            for m in re.finditer(r'^OP\(\s*\w+\s*,\s*"(\w+)"\s*,[^,]*,[^,]*,\s*([\w|]+)', ops, re.M):
                if re.search(r'\bF_(UNARY|BINARY|REDUCTION)\b', m.group(2)):
                    names.add(m.group(1))
    return names


def stdlib_names(srcdir):
    """module.name for every top-level `fn name` / `let name = fn` of
    stdlib/*.tfe (names starting with _ are private and left out)."""
    names = set()
    for path in sorted(glob.glob(os.path.join(srcdir, 'stdlib', '*.tfe'))):
        mod = os.path.basename(path)[:-4]
        for line in open(path, encoding='utf-8'):
            m = (re.match(r'^(?:@\w+\s+)?fn\s+([A-Za-z]\w*)', line) or
                 re.match(r'^let\s+([A-Za-z]\w*)\s*=\s*(?:@\w+\s+)?fn\b', line))
            if m:
                names.add(mod + '.' + m.group(1))
    return names


def reference_problems(srcdir):
    path = os.path.join(srcdir, 'docs', 'reference.md')
    if not os.path.exists(path):
        return ['docs/reference.md is missing'], 0
    text = open(path, encoding='utf-8').read()
    spans = ' '.join(re.findall(r'`([^`\n]+)`', text))
    problems = []
    b, s = builtin_names(srcdir), stdlib_names(srcdir)
    for name in sorted(b):
        if not re.search(r'(?<![\w.])' + re.escape(name) + r'\b', spans):
            problems.append('docs/reference.md: built-in %r is not in any `code span`' % name)
    for name in sorted(s):
        if not re.search(r'(?<![\w.])' + re.escape(name) + r'\b', spans):
            problems.append('docs/reference.md: stdlib function %r is not in any `code span`' % name)
    if len(b) < 50:   # the scan itself broke (a renamed registration function)
        problems.append('reference check: found only %d built-ins in the sources' % len(b))
    return problems, len(b) + len(s)


def main(argv):
    show = '--show' in argv
    files = [a for a in argv if a != '--show']
    tfe = os.environ.get('TFE')
    srcdir = os.environ.get('TFE_SRCDIR') or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not tfe:
        print('docs_examples: TFE is not set (run through make check, or source tests/env.sh)')
        return 99
    tfe = os.path.abspath(tfe) if os.sep in tfe else tfe
    if not files:
        files = [os.path.join(srcdir, 'README.md')] + sorted(glob.glob(os.path.join(srcdir, 'docs', '*.md')))
    env = dict(os.environ)
    env.setdefault('TFE_PATH', os.path.join(srcdir, 'stdlib'))
    env['TFE_PROGRESS'] = '0'
    env.pop('TFE_QUICK', None)
    wrapper = shlex.split(os.environ.get('TFE_TEST_WRAPPER', ''))

    problems, failed, ran, checked = [], 0, 0, 0
    for path in files:
        rel = os.path.relpath(path, srcdir)
        if rel.startswith('..'):
            rel = path
        blocks, gaps = parse(rel, open(path, encoding='utf-8').read(), problems)
        for prog in pair(blocks, gaps, problems):
            result = run(prog, tfe, env, wrapper)
            ran += 1
            if show:
                status, out, err = result
                print('==== %s (exit %s)' % (prog.where(), status))
                sys.stdout.write(out)
                if err:
                    print('---- stderr'); sys.stdout.write(err)
                continue
            fails = check(prog, result)
            if prog.output is not None or prog.stderr is not None:
                checked += 1
            if fails:
                failed += 1
                print('FAIL: %s: the ```tfe block starting here' % prog.where())
                for f in fails:
                    print('  ' + f.rstrip('\n').replace('\n', '\n  '))
    if show:
        return 0
    for p in problems:
        print('FAIL: ' + p)
    ref, nref = reference_problems(srcdir)
    for p in ref:
        print('FAIL: ' + p)
    print('docs_examples: %d programs run, %d with checked output, %d failed; '
          '%d document problems; reference: %d names, %d missing'
          % (ran, checked, failed, len(problems), nref, len(ref)))
    return 1 if failed or problems or ref else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
