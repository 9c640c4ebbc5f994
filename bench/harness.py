"""bench/harness.py — runs the rows of bench/rows.py and tabulates tfe against
its peers (ratios tfe time / peer time); started by bench/run.sh.

Standard library only, so it runs on /usr/bin/python3 with no venv.
"""
import datetime
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from rows import PEERS, ROWS

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
MISSING_EXIT = 3  # benchlib.MISSING_EXIT


def usage(status):
    print("usage: bench/run.sh [--quick] [--rounds N] [--list] [-v] [ROWS...]\n"
          "  --quick  fewer repeats (a smoke run, noisier figures)\n"
          "  --rounds N  run each row's sides N times, alternating (tfe, peers, tfe,\n"
          "           peers, ...), a side's figure the median of all its batches\n"
          "  --list   list the rows and exit\n"
          "  -v       show every program's output\n"
          "env: TFE=./tfe  BENCH_THREADS=nproc  BENCH_PYTHON=bench/.venv/bin/python\n"
          "     BENCH_TIMEOUT=900 (seconds per process)  BENCH_ROUNDS=1 (as --rounds)", file=sys.stderr)
    sys.exit(status)


def parse_args(argv):
    opts = {"quick": False, "verbose": False, "rows": [],
            "rounds": os.environ.get("BENCH_ROUNDS", "1")}
    args = iter(argv)
    for a in args:
        if a == "--rounds" or a.startswith("--rounds="):
            opts["rounds"] = a.split("=", 1)[1] if "=" in a else next(args, "")
        elif a == "--quick":
            opts["quick"] = True
        elif a in ("-v", "--verbose"):
            opts["verbose"] = True
        elif a == "--list":
            for r in ROWS:
                print(f"{r.name:<10} issue {r.issue}  {r.what}")
            sys.exit(0)
        elif a in ("-h", "--help"):
            usage(0)
        elif a.startswith("-"):
            usage(2)
        else:
            opts["rows"].append(a)
    known = {r.name for r in ROWS}
    bad = [r for r in opts["rows"] if r not in known]
    if bad:
        print(f"run.sh: unknown row(s) {', '.join(bad)}; rows are {', '.join(sorted(known))}",
              file=sys.stderr)
        sys.exit(2)
    try:
        opts["rounds"] = int(opts["rounds"])
    except ValueError:
        opts["rounds"] = 0
    if opts["rounds"] < 1:
        print("run.sh: --rounds (BENCH_ROUNDS) takes a whole number, 1 or more", file=sys.stderr)
        sys.exit(2)
    return opts


def thread_env(n, quick):
    """One thread count for everyone; returns the variables that were set."""
    env = {
        "OMP_NUM_THREADS": str(n),
        "MKL_NUM_THREADS": str(n),
        "OPENBLAS_NUM_THREADS": str(n),
        "TFE_NUM_THREADS": str(n),
        "TF_NUM_INTRAOP_THREADS": str(n),
        "TF_NUM_INTEROP_THREADS": str(n),
        "XLA_FLAGS": f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={n}",
        "BENCH_THREADS": str(n),
        "BENCH_REPEATS": "3" if quick else "7",
        "BENCH_MIN_BATCH_S": "0.05" if quick else "0.2",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "JAX_PLATFORMS": "cpu",
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    os.environ.update(env)
    return env


class Runner:
    def __init__(self, opts):
        self.opts = opts
        self.tfe = os.path.abspath(os.environ.get("TFE", os.path.join(ROOT, "tfe")))
        self.venv = os.environ.get("BENCH_PYTHON", os.path.join(BENCH, ".venv", "bin", "python"))
        self.cpython = "/usr/bin/python3"
        self.lua = shutil.which("lua5.4") or "lua5.4"
        self.timeout = float(os.environ.get("BENCH_TIMEOUT", "900"))
        self.hyperfine = shutil.which("hyperfine")
        self.versions = {}   # peer -> version string
        self.fastest = {}    # (row, side) -> its fastest batch's seconds per iteration
        self.notes = []      # lines printed under the table
        ncpu = os.cpu_count() or 1
        self.threads = int(os.environ.get("BENCH_THREADS", "0") or 0) or ncpu
        # Pin every process to the same cores when fewer threads than cores.
        self.pin = (["taskset", "-c", f"0-{self.threads - 1}"]
                    if self.threads < ncpu and shutil.which("taskset") else [])

    def argv(self, template):
        subst = {"{tfe}": self.tfe, "{venv}": self.venv, "{cpython}": self.cpython,
                 "{lua}": self.lua}
        out = []
        for a in template:
            a = subst.get(a, a)
            out.append(a.replace("{bench}", BENCH))
        return out

    def available(self, side):
        """None when the side's program exists, else why not."""
        need = {"tfe": self.tfe, "CPython": self.cpython, "Lua": self.lua}.get(side, self.venv)
        path = need if os.path.isabs(need) else shutil.which(need)
        if path and os.path.exists(path) and os.access(path, os.X_OK):
            return None
        if side == "tfe":
            return f"no tfe binary at {need} (build it, or set TFE=...)"
        if side in ("CPython", "Lua"):
            return f"{need} not installed"
        return f"no venv python at {need} (run bench/setup.sh)"

    def log(self, side, row, lines):
        if self.opts["verbose"]:
            for line in lines:
                print(f"    [{row.name} {side}] {line}")

    def run_program(self, row, side, template):
        """(the batches' seconds per iteration, None) or (None,
        'missing'/'error: ...'): one process, its timed batches."""
        cmd = self.pin + self.argv(template)
        try:
            p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                               timeout=self.timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return None, f"error: timed out after {self.timeout:g} s"
        except OSError as e:
            return None, f"error: {e}"
        out = p.stdout.splitlines()
        self.log(side, row, out + p.stderr.splitlines())
        times = []
        for line in out:
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "SECONDS_PER_ITER":
                try:
                    times.append(float(parts[1]))
                except ValueError:
                    pass
            elif len(parts) >= 3 and parts[0] == "VERSION":
                self.versions.setdefault(side, parts[2])
        if p.returncode == MISSING_EXIT and side != "tfe":
            why = [l.split(None, 2)[-1] for l in out if l.startswith("MISSING ")]
            return None, "missing: " + (why[0] if why else "not installed")
        if p.returncode != 0 or not times:
            return None, f"error: exit {p.returncode}: {first_error(p.stderr)}"
        key = (row.name, side)
        self.fastest[key] = min(times + [self.fastest.get(key, times[0])])
        return times, None

    def run_startup(self, row, side, template):
        """Median wall time of the whole process, hyperfine when present."""
        cmd = self.pin + self.argv(template)
        runs = 20 if self.opts["quick"] else 100
        check = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                               timeout=60, stdin=subprocess.DEVNULL)
        if check.returncode != 0:
            return None, f"error: exit {check.returncode}: {first_error(check.stderr)}"
        if self.hyperfine:
            with tempfile.NamedTemporaryFile(suffix=".json") as f:
                hf = [self.hyperfine, "-N", "--warmup", "5", "--runs", str(runs),
                      "--style", "none", "--export-json", f.name, shlex.join(cmd)]
                p = subprocess.run(hf, cwd=ROOT, capture_output=True, text=True,
                                   timeout=self.timeout)
                self.log(side, row, p.stdout.splitlines() + p.stderr.splitlines())
                if p.returncode == 0:
                    with open(f.name) as jf:
                        res = json.load(jf)["results"][0]
                    return res["median"], None
                self.log(side, row, ["hyperfine failed; timing a loop of runs instead"])
        times = []
        for i in range(runs + 5):
            t0 = time.perf_counter()
            subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            if i >= 5:
                times.append(time.perf_counter() - t0)
        return statistics.median(times), None

    def measure(self, row, side, template):
        """One process of a side: (seconds, None) for a startup row, (the
        batches' seconds, None) for the others, or (None, why not)."""
        why = self.available(side)
        if why:
            return None, ("error: " if side == "tfe" else "missing: ") + why
        if row.kind == "startup":
            return self.run_startup(row, side, template)
        return self.run_program(row, side, template)

    def measure_row(self, row):
        """{side: (seconds per iteration, None) or (None, why not)}.
        With rounds > 1 the sides run in turn, round after round, and a
        side's figure is the median of the batches of all its processes:
        on a machine whose speed drifts (a virtual machine's neighbours, its
        two-thread phases: docs/benchmarks.md) every side then meets the
        same drift, where one process per side would give the drift to
        whichever side ran in it. A side that failed is not run again;
        startup rows (hyperfine's own medians) run once."""
        sides = [("tfe", row.tfe)] + list(row.peers.items())
        rounds = 1 if row.kind == "startup" else self.opts["rounds"]
        batches = {side: [] for side, _ in sides}
        status = {}
        spent = {side: 0.0 for side, _ in sides}
        for i in range(rounds):
            for side, template in sides:
                if side in status:
                    continue
                t0 = time.time()
                got, st = self.measure(row, side, template)
                spent[side] += time.time() - t0
                if st:
                    status[side] = st
                elif row.kind == "startup":
                    batches[side] = [got]
                else:
                    batches[side] += got
                    if rounds > 1:  # each process's own median: the drift, visible
                        print(f"    {row.name:<10} {side:<11} round {i + 1}: "
                              f"{fmt_figure(row, statistics.median(got))}", flush=True)
        res = {}
        for side, _ in sides:
            if side in status:
                res[side] = (None, status[side])
            else:
                res[side] = (statistics.median(batches[side]), None)
            t, st = res[side]
            shown = fmt_figure(row, t) if t is not None else st
            print(f"  {row.name:<10} {side:<11} {shown}   [{spent[side]:.1f} s]", flush=True)
            if st and st.startswith("missing"):
                note = f"{side} is missing: {st.split(':', 1)[-1].strip()}"
                if note not in self.notes:
                    self.notes.append(note)
        return res


def first_error(stderr):
    """The line of a failed run's stderr that says what went wrong: the
    first naming an error (tfe's `file:line:col: error: ...`, a Python
    exception), else the last."""
    lines = [l.strip() for l in stderr.splitlines() if l.strip()]
    if not lines:
        return "no SECONDS_PER_ITER line"
    for l in lines:
        if "error" in l.lower() and not l.startswith("Traceback"):
            return l[:200]
    return lines[-1][:200]


def fmt_time(s):
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if s >= scale or unit == "ns":
            v = s / scale
            return f"{v:.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"


def fmt_ratio(r):
    return f"{r:.2f}" if r >= 0.1 else f"{r:.2g}"


PEAKS = {}  # row name -> GFLOP/s of its fastest batch on any side in this run


def fmt_figure(row, t):
    if row.work and t:
        rate = row.work / t / 1e9
        share = ""
        if row.peak and PEAKS.get(row.peak):
            share = f", {100 * rate / PEAKS[row.peak]:.0f}% of peak"
        return f"{fmt_time(t)} ({rate:.3g} {row.unit}{share})"
    return fmt_time(t)


def note_peak(row, runner):
    """Record a row's best rate: its fastest batch on any side (the GEMM
    peak for the model rows whose `peak` names it; the fastest batch, not
    the median, as a peak is what the hardware can do, and on a loaded
    machine one long GEMM is often interrupted)."""
    rates = [row.work / t / 1e9 for (r, _), t in runner.fastest.items() if r == row.name and t]
    if row.work and rates:
        PEAKS[row.name] = max(rates)


def short(status):
    """The table cell for a side with no figure."""
    return "missing" if status.startswith("missing") else "error"


def tables(results, rows):
    cols = [p for p in PEERS if any(p in r.peers for r in rows)]
    head = "| row | what | tfe | " + " | ".join(cols) + " |"
    sep = "|---|---|---:|" + "---:|" * len(cols)
    times = [head, sep]
    ratios = ["| row | " + " | ".join(f"tfe / {c}" for c in cols) + " |",
              "|---|" + "---:|" * len(cols)]
    for r in rows:
        res = results[r.name]
        t_tfe, st_tfe = res["tfe"]
        cells, rcells = [], []
        for c in cols:
            if c not in r.peers:
                cells.append("")
                rcells.append("")
                continue
            t, st = res[c]
            cells.append(fmt_figure(r, t) if t is not None else short(st))
            if t is None:
                rcells.append(short(st))
            elif t_tfe is None:
                rcells.append("error")
            else:
                rcells.append(fmt_ratio(t_tfe / t))
        tfe_cell = fmt_figure(r, t_tfe) if t_tfe is not None else short(st_tfe)
        times.append(f"| {r.name} | {r.what} | {tfe_cell} | " + " | ".join(cells) + " |")
        ratios.append(f"| {r.name} | " + " | ".join(rcells) + " |")
    return times, ratios


def lua_version(lua):
    try:
        p = subprocess.run([lua, "-v"], capture_output=True, text=True, timeout=10)
        return " ".join((p.stdout or p.stderr).split()[:2])
    except (OSError, subprocess.SubprocessError):
        return "Lua missing"


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    opts = parse_args(sys.argv[1:])
    rows = [r for r in ROWS if not opts["rows"] or r.name in opts["rows"]]
    # A row whose rate is shown as a share of another's peak needs that row
    # in the same run: measured first, under the same load.
    wanted = {r.peak for r in rows if r.peak} - {r.name for r in rows}
    rows = [r for r in ROWS if r.name in wanted] + rows
    quick = opts["quick"]
    runner = Runner(opts)
    env = thread_env(runner.threads, quick)
    started = time.time()

    rounds = opts["rounds"]
    print(f"bench: {len(rows)} row(s){' (quick)' if quick else ''}, "
          f"{runner.threads} thread(s) for every side"
          + (f", {rounds} rounds alternating the sides" if rounds > 1 else "")
          + (f", pinned with {' '.join(runner.pin)}" if runner.pin else ""))
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "TFE_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
              "XLA_FLAGS"):
        print(f"  {k}={env[k]}")
    print(f"  torch.set_num_threads({runner.threads}), set_num_interop_threads({runner.threads}); "
          f"tf.config.threading intra/inter = {runner.threads}")
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"  warning: load average {load:.2f} before starting: other work on this "
              "machine will skew the figures")
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if k in os.environ:
            print(f"  note: {k}={os.environ[k]} is set (it applies to tfe and NumPy alike)")
    print(f"  tfe: {runner.tfe}")

    results = {}
    for r in rows:
        results[r.name] = runner.measure_row(r)
        note_peak(r, runner)

    elapsed = time.time() - started
    times, ratios = tables(results, rows)
    header = [
        "# tfe benchmarks",
        "",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}"
        f"{' (quick run)' if quick else ''}",
        f"- machine: {cpu_model()}, {os.cpu_count()} cores; {platform.system()} {platform.release()}",
        f"- threads: {runner.threads} for every side (OMP/MKL/OpenBLAS, TFE_NUM_THREADS, "
        "torch, TF intra/inter op, XLA)",
        f"- tfe: `{runner.tfe if not runner.tfe.startswith(ROOT + os.sep) else os.path.relpath(runner.tfe, ROOT)}`",
        "- peers: CPython " + platform.python_version() + " (/usr/bin/python3)"
        + "".join(f", {k} {v}" for k, v in sorted(runner.versions.items()))
        + (f", {lua_version(runner.lua)}" if any("Lua" in r.peers for r in rows) else ""),
        f"- total run time: {elapsed:.0f} s; load average before the run {load:.2f}",
        "",
        "Medians over repeated timed batches after warm-up"
        + (f", pooled over {rounds} rounds that alternate the sides" if rounds > 1 else "")
        + " (docs/benchmarks.md).",
        "",
        "## Time per iteration (rate)",
        "",
    ]
    md = header + times + ["", "## Ratios: tfe time / peer time (< 1: tfe is faster)", ""] + ratios
    errors = []
    for r in rows:
        for side, (t, st) in results[r.name].items():
            if not (st and st.startswith("error")):
                continue
            # One note for a tfe binary that is not there, not one per row.
            e = st if "no tfe binary" in st else f"{r.name} {side}: {st}"
            if e not in errors:
                errors.append(e)
    peaks = sorted({r.peak for r in rows if r.peak and r.peak in PEAKS})
    for p in peaks:
        runner.notes.append(f"% of peak: of {PEAKS[p]:.3g} GFLOP/s, the fastest batch of the `{p}` row "
                            "on any side in this run (GFLOP/s of a model step: its conv and matmul "
                            "FLOPs, docs/benchmarks.md)")
    if runner.notes or errors:
        md += ["", "## Notes", ""] + [f"- {n}" for n in runner.notes + errors]
    text = "\n".join(md) + "\n"

    print()
    print("\n".join(times))
    print()
    print("Ratios tfe / peer (< 1: tfe is faster):")
    print("\n".join(ratios))
    for n in runner.notes + errors:
        print(f"note: {n}")
    os.makedirs(os.path.join(BENCH, "results"), exist_ok=True)
    out = os.path.join(BENCH, "results", "latest.md")
    with open(out, "w") as f:
        f.write(text)
    print(f"\nwritten to {os.path.relpath(out, os.getcwd())}; total {elapsed:.0f} s")


if __name__ == "__main__":
    main()
