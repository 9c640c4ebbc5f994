"""bench/dist_bench.py — the distributed benchmarks (bench/dist.sh; docs/
benchmarks.md, "Distributed training"): in one run,
  (a) allreduce of float32 buffers, 8 B .. 64 MiB, on 2 ranks: tfe's
      dist.allreduce (bench/dist_allreduce.tfe) against a plain C MPI loop
      (bench/dist_allreduce.c, built here with mpicc), with the interpreter's
      own per-iteration cost (empty loop, a local op) beside it;
  (b) the mlp_step training step data-parallel on 2 ranks x 1 thread
      (bench/dist_mlp_step.tfe) against 1 rank x 1 thread and 1 rank x 2
      threads (bench/mlp_step.tfe, mlp_step_staged.tfe), and PyTorch DDP
      (gloo, 2 processes) and PyTorch on one process
      (bench/dist_mlp_step_ddp.py);
  (c) overlap: the staged step with one allreduce per gradient, the share of
      allreduce time hidden behind the backward pass ($TFE_DIST_STATS lines).
The sides run in alternating rounds (C, tfe, C, tfe, ...), so that a change
in the machine's load falls on both; each figure is the median of every
timed batch of every round. Writes bench/results/dist.md and dist.json (the
input of bench/dist_model.py). Standard library only.
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
RESULTS = os.path.join(BENCH, "results")


def usage(status):
    print("usage: bench/dist.sh [--quick] [--rounds N] [-v] [a] [b] [c]\n"
          "  a, b, c   only these parts (default all)\n"
          "  --quick   one round, fewer batches: a smoke run\n"
          "  --rounds  alternating rounds of every side (default 3)\n"
          "env: TFE=./tfe  BENCH_PYTHON=bench/.venv/bin/python  MPIRUN=mpirun  MPICC=mpicc\n"
          "     DIST_TIMEOUT=600 (seconds per process)", file=sys.stderr)
    sys.exit(status)


def parse_args(argv):
    o = {"quick": False, "rounds": 3, "verbose": False, "parts": []}
    it = iter(argv)
    for a in it:
        if a == "--quick":
            o["quick"] = True
            o["rounds"] = 1
        elif a == "--rounds":
            o["rounds"] = int(next(it, "3"))
        elif a in ("-v", "--verbose"):
            o["verbose"] = True
        elif a in ("a", "b", "c"):
            o["parts"].append(a)
        elif a in ("-h", "--help"):
            usage(0)
        else:
            usage(2)
    o["parts"] = o["parts"] or ["a", "b", "c"]
    return o


class Bench:
    def __init__(self, opts):
        self.o = opts
        self.tfe = os.path.abspath(os.environ.get("TFE", os.path.join(ROOT, "tfe")))
        self.py = os.environ.get("BENCH_PYTHON", os.path.join(BENCH, ".venv", "bin", "python"))
        self.mpirun = os.environ.get("MPIRUN", "mpirun")
        self.mpicc = os.environ.get("MPICC", "mpicc")
        self.timeout = float(os.environ.get("DIST_TIMEOUT", "600"))
        self.notes = []
        self.versions = {}
        self.env = dict(os.environ)
        self.env.setdefault("TFE_PATH", os.path.join(ROOT, "stdlib"))
        self.env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                        CUDA_VISIBLE_DEVICES="", PYTHONDONTWRITEBYTECODE="1")
        self.pin1 = ["taskset", "-c", "0"] if shutil.which("taskset") else []

    # --- running one program ------------------------------------------------
    def mpi(self, np, argv):
        # one rank per core, each bound to it (Open MPI's default for np <= 2,
        # said explicitly); --oversubscribe only matters past the core count
        return [self.mpirun, "--oversubscribe", "--bind-to", "core", "--map-by", "core",
                "-np", str(np)] + argv

    def run(self, argv, threads, extra_env=None, label=""):
        """Runs argv with `threads` threads for BLAS and tfe; returns
        (stdout lines, stderr lines) or None on failure (noted)."""
        env = dict(self.env)
        t = str(threads)
        env.update(OMP_NUM_THREADS=t, MKL_NUM_THREADS=t, OPENBLAS_NUM_THREADS=t,
                   TFE_NUM_THREADS=t, BENCH_THREADS=t)
        env.update(extra_env or {})
        try:
            p = subprocess.run(["timeout", str(int(self.timeout))] + argv, cwd=ROOT, env=env,
                               capture_output=True, text=True, stdin=subprocess.DEVNULL)
        except OSError as e:
            self.notes.append(f"{label}: {e}")
            return None
        out, err = p.stdout.splitlines(), p.stderr.splitlines()
        if self.o["verbose"]:
            for line in out + err:
                print(f"    [{label}] {line}")
        for line in out:
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "VERSION":
                self.versions.setdefault(parts[1], " ".join(parts[2:]))
        if p.returncode != 0:
            why = next((l for l in err if "error" in l.lower()), err[-1] if err else "")
            if p.returncode == 3 and any(l.startswith("MISSING") for l in out):
                why = next(l for l in out if l.startswith("MISSING"))
            self.notes.append(f"{label}: exit {p.returncode}: {why.strip()}")
            return None
        return out, err

    # --- (a) allreduce --------------------------------------------------------
    def part_a(self):
        binary = os.path.join(RESULTS, "dist_allreduce")
        src = os.path.join(BENCH, "dist_allreduce.c")
        c = subprocess.run([self.mpicc, "-O2", "-Wall", "-Wextra", "-o", binary, src],
                           capture_output=True, text=True)
        if c.returncode != 0:
            self.notes.append(f"(a) mpicc failed: {c.stderr.strip()}")
            return None
        sides = {
            "c_inplace": self.mpi(2, [binary, "inplace"]),
            "c_outofplace": self.mpi(2, [binary, "outofplace"]),
            "c_agree": self.mpi(2, [binary, "agree"]),
            "tfe": self.mpi(2, [self.tfe, os.path.join(BENCH, "dist_allreduce.tfe")]),
        }
        data = {k: {} for k in sides}   # side -> (label, bytes) -> [seconds]
        iters = {}
        for r in range(self.o["rounds"]):
            for side, argv in sides.items():
                print(f"  (a) round {r + 1}/{self.o['rounds']}: {side}", flush=True)
                res = self.run(argv, 1, label=f"(a) {side}")
                if res is None:
                    continue
                for line in res[0]:
                    f = line.split()
                    if len(f) == 5 and f[3] == "SECONDS_PER_ITER":
                        key = (f[0], int(f[1]))
                        iters[key] = int(f[2])
                        data[side].setdefault(key, []).append(float(f[4]))
        med = {s: {k: statistics.median(v) for k, v in d.items()} for s, d in data.items()}
        best = {s: {k: min(v) for k, v in d.items()} for s, d in data.items()}
        return {"median": med, "best": best, "iters": iters,
                "batches": {s: {k: len(v) for k, v in d.items()} for s, d in data.items()}}

    # --- (b) the training step ----------------------------------------------
    def part_b(self):
        steps = "20" if self.o["quick"] else "100"
        ex = {"DIST_STEPS": steps, "DIST_BATCHES": "3" if self.o["quick"] else "5"}
        tfe = lambda f: [self.tfe, os.path.join(BENCH, f)]  # noqa: E731
        ddp = os.path.join(BENCH, "dist_mlp_step_ddp.py")
        configs = [
            # name, argv, threads, env, ranks
            ("tfe eager 1x1", self.pin1 + tfe("mlp_step.tfe"), 1, {}, 1),
            ("tfe eager 1x2", tfe("mlp_step.tfe"), 2, {}, 1),
            ("tfe eager 2x1", self.mpi(2, tfe("dist_mlp_step.tfe")), 1, dict(ex, DIST_MODE="eager"), 2),
            ("tfe staged 1x1", self.pin1 + tfe("mlp_step_staged.tfe"), 1, {}, 1),
            ("tfe staged 1x2", tfe("mlp_step_staged.tfe"), 2, {}, 1),
            ("tfe staged 2x1", self.mpi(2, tfe("dist_mlp_step.tfe")), 1, dict(ex, DIST_MODE="staged"), 2),
        ]
        if os.path.exists(self.py):
            configs += [
                ("PyTorch 1x1", self.pin1 + [self.py, ddp, "1"], 1, ex, 1),
                ("PyTorch DDP 2x1", [self.py, ddp, "2"], 1, ex, 2),
            ]
        else:
            self.notes.append(f"(b) PyTorch: missing: no venv python at {self.py} (bench/setup.sh)")
        data = {c[0]: [] for c in configs}
        extra = {}
        for r in range(self.o["rounds"]):
            for name, argv, threads, env, ranks in configs:
                print(f"  (b) round {r + 1}/{self.o['rounds']}: {name}", flush=True)
                res = self.run(argv, threads, env, label=f"(b) {name}")
                if res is None:
                    continue
                for line in res[0]:
                    f = line.split()
                    if len(f) == 2 and f[0] == "SECONDS_PER_ITER":
                        data[name].append(float(f[1]))
                    elif f and f[0] == "LOSS":
                        extra[name] = line
                        if "WEIGHT_SPREAD" in f and float(f[f.index("WEIGHT_SPREAD") + 1]) != 0:
                            self.notes.append(f"(b) {name}: the ranks' weights differ: {line}")
        out = {}
        for name, argv, threads, env, ranks in configs:
            if data[name]:
                t = statistics.median(data[name])
                out[name] = {"step_s": t, "best_s": min(data[name]), "ranks": ranks, "threads": threads,
                             "samples_s": ranks * 64 / t, "batches": len(data[name]),
                             "check": extra.get(name, "")}
        return out

    # --- (c) overlap ------------------------------------------------------------
    def part_c(self):
        """The staged step of (b) with its gradients in buckets of 0.25 MiB
        (two allreduces) and of 0 (one per gradient), overlapped (the
        default) and blocking (TFE_OVERLAP=0), with TFE_DIST_STATS=1: the
        executor's per-run line on stderr (graph/exec_dist.c) gives the time
        blocked in waits and from each start to its completion. Each rank's
        first SKIP runs (the trace, the warm-up) are left out."""
        skip = 5
        steps = "20" if self.o["quick"] else "100"
        argv = self.mpi(2, [self.tfe, os.path.join(BENCH, "dist_mlp_step.tfe")])
        configs = []
        for mb in ("0.25", "0"):
            for overlap in ("on", "off"):
                env = {"DIST_STEPS": steps, "DIST_BATCHES": "3" if self.o["quick"] else "5",
                       "DIST_MODE": "staged", "DIST_BUCKET_MB": mb, "TFE_DIST_STATS": "1"}
                if overlap == "off":
                    env["TFE_OVERLAP"] = "0"
                configs.append((f"bucket_mb={mb} overlap {overlap}", env))
        keys = ("wait_ms", "comm_ms", "hidden", "split", "allreduces")
        data = {name: {k: [] for k in keys + ("step",)} for name, _ in configs}
        pat = re.compile(r"(\w+)=([0-9.]+)(?=\s|$)")
        for r in range(self.o["rounds"]):
            for name, env in configs:
                print(f"  (c) round {r + 1}/{self.o['rounds']}: {name}", flush=True)
                res = self.run(argv, 1, env, label=f"(c) {name}")
                if res is None:
                    continue
                for line in res[0]:
                    f = line.split()
                    if len(f) == 2 and f[0] == "SECONDS_PER_ITER":
                        data[name]["step"].append(float(f[1]))
                for line in res[1]:
                    if line.startswith("dist_stats"):
                        kv = dict(pat.findall(line))
                        if int(kv.get("run", "0")) < skip:
                            continue
                        for k in keys:
                            if k in kv:
                                data[name][k].append(float(kv[k]))
        out = {}
        for name, d in data.items():
            out[name] = {k: (statistics.median(v) if v else None) for k, v in d.items()}
            out[name]["runs"] = len(d["wait_ms"])
        return out


# --- tables ---------------------------------------------------------------------
def us(s):
    return "—" if s is None else (f"{s * 1e6:.2f} µs" if s < 1e-3 else f"{s * 1e3:.3f} ms")


def size_name(b):
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k:
            return f"{b // k} {unit}"
    return f"{b} B"


def table_a(a, stat):
    m = a[stat]
    c, co, ca, t = m["c_inplace"], m["c_outofplace"], m["c_agree"], m["tfe"]
    lines = ["| size | iters | C MPI in place | C MPI out of place | C agree + in place | tfe `dist.allreduce` | tfe − C in place | tfe / C in place |",
             "|---|---|---|---|---|---|---|---|"]
    sizes = sorted({k[1] for k in list(c) + list(t) if k[0] == "ALLREDUCE"})
    for b in sizes:
        k = ("ALLREDUCE", b)
        ci, cov, tv = c.get(k), co.get(k), t.get(k)
        diff = f"{(tv - ci) * 1e6:+.2f} µs" if ci and tv else "—"
        ratio = f"{tv / ci:.3f}" if ci and tv else "—"
        lines.append(f"| {size_name(b)} | {a['iters'].get(k, '')} | {us(ci)} | {us(cov)} | {us(ca.get(k))} | {us(tv)} | {diff} | {ratio} |")
    loop, local = t.get(("LOOP", 8)), t.get(("LOCAL_OP", 8))
    lines.append("")
    lines.append(f"tfe's own per-iteration cost (same loop, rank 0 of 2): empty loop {us(loop)}, "
                 f"a local op `y = x * 1.0` on the 8-byte tensor {us(local)}.")
    k8, k64 = ("ALLREDUCE", 8), ("ALLREDUCE", 64 << 20)
    if c.get(k8) and t.get(k8):
        extra = t[k8] - c[k8]
        lines.append(f"At 8 B tfe adds {extra * 1e6:.2f} µs per allreduce over the C loop "
                     f"(target ≤ 2 µs: {'met' if extra <= 2e-6 else 'NOT met'}); "
                     f"less the empty loop, the collective's own overhead is "
                     f"{(extra - (loop or 0)) * 1e6:.2f} µs.")
    if c.get(k64) and t.get(k64):
        r = t[k64] / c[k64] - 1
        lines.append(f"At 64 MiB tfe is {r * 100:+.1f} % over the C loop in place "
                     f"(target ≤ 5 %: {'met' if r <= 0.05 else 'NOT met'})"
                     + (f"; {t[k64] / co[k64] * 100 - 100:+.1f} % over the C loop out of place."
                        if co.get(k64) else "."))
    return lines


def table_b(b):
    lines = ["| configuration | ranks × threads | step (median) | samples/s | vs tfe eager 1×1 | best batch's step | samples/s | vs tfe eager 1×1 |",
             "|---|---|---|---|---|---|---|---|"]
    ref = b.get("tfe eager 1x1")
    for name, v in b.items():
        rel = f"{v['samples_s'] / ref['samples_s']:.2f}×" if ref else "—"
        bs = v["ranks"] * 64 / v["best_s"]
        brel = f"{bs / (ref['ranks'] * 64 / ref['best_s']):.2f}×" if ref else "—"
        cfg = name.split()[-1]
        lines.append(f"| {name[:-4]} | {cfg.replace('x', ' × ')} | {us(v['step_s'])} | "
                     f"{v['samples_s']:.0f} | {rel} | {us(v['best_s'])} | {bs:.0f} | {brel} |")
    lines.append("")
    sps = lambda v, key: v["ranks"] * 64 / v[key]  # noqa: E731
    for key, what in (("step_s", "medians"), ("best_s", "best batches")):
        for mode in ("eager", "staged"):
            one, two, dp = (b.get(f"tfe {mode} 1x1"), b.get(f"tfe {mode} 1x2"), b.get(f"tfe {mode} 2x1"))
            if one and dp:
                s = sps(dp, key) / sps(one, key)
                msg = (f"tfe {mode} ({what}): 2 ranks × 1 thread give {s:.2f}× the samples/s of 1 × 1 "
                       f"(target ≥ 1.7×: {'met' if s >= 1.7 else 'NOT met'})")
                if two:
                    s2 = sps(dp, key) / sps(two, key)
                    msg += f", {s2:.2f}× those of 1 × 2 (target ≥ 1: {'met' if s2 >= 1 else 'NOT met'})"
                lines.append(msg + ".")
        ddp = b.get("PyTorch DDP 2x1")
        for mode in ("eager", "staged"):
            dp = b.get(f"tfe {mode} 2x1")
            if ddp and dp:
                r = dp[key] / ddp[key]
                lines.append(f"tfe {mode} 2 × 1 step / PyTorch DDP 2 × 1 step ({what}) = {r:.2f} "
                             f"(target ≤ 1: {'met' if r <= 1 else 'NOT met'}).")
    return lines


def table_c(c):
    lines = ["| staged step (b), 2 ranks | step | allreduces | blocked in waits | start to completion | executor's hidden | runs |",
             "|---|---|---|---|---|---|---|"]
    ms = lambda x: "—" if x is None else f"{x:.3f} ms"  # noqa: E731
    for name, v in c.items():
        hid = "—" if v["hidden"] is None else f"{v['hidden']:.2f}"
        n = "—" if v["allreduces"] is None else f"{v['allreduces']:.0f} ({v['split'] or 0:.0f} split)"
        lines.append(f"| {name} | {us(v['step'])} | {n} | {ms(v['wait_ms'])} | {ms(v['comm_ms'])} | {hid} | {v['runs']} |")
    lines.append("")
    for mb in ("0.25", "0"):
        on, off = c.get(f"bucket_mb={mb} overlap on"), c.get(f"bucket_mb={mb} overlap off")
        if on and off and on["wait_ms"] is not None and off["wait_ms"]:
            share = 1 - on["wait_ms"] / off["wait_ms"]
            msg = (f"bucket_mb={mb}: the overlap hid {share * 100:.0f} % of the blocking allreduce time "
                   f"(1 − blocked overlapped / blocked blocking, medians per step)")
            if on["step"] and off["step"]:
                msg += f"; step time {off['step'] * 1e3:.2f} ms blocking, {on['step'] * 1e3:.2f} ms overlapped"
            lines.append(msg + ".")
    return lines


def main():
    opts = parse_args(sys.argv[1:])
    os.makedirs(RESULTS, exist_ok=True)
    b = Bench(opts)
    for need in (b.tfe, shutil.which(b.mpirun) or "", shutil.which(b.mpicc) or ""):
        if not (need and os.path.exists(need)):
            print(f"dist.sh: missing {need or 'mpirun/mpicc'} (build tfe --with-mpi; Open MPI)",
                  file=sys.stderr)
            sys.exit(1)
    load = os.getloadavg()[0]
    print(f"dist.sh: {opts['rounds']} round(s), parts {' '.join(opts['parts'])}; "
          f"load average {load:.2f}" + (" (other work on the machine: noisy figures)" if load > 0.5 else ""))
    t0 = time.time()
    res = {"load_before": load, "rounds": opts["rounds"], "cpus": os.cpu_count()}
    md = ["# Distributed benchmarks (bench/dist.sh)", ""]
    if "a" in opts["parts"]:
        a = b.part_a()
        if a:
            res["a"] = {stat: {s: {f"{k[0]} {k[1]}": v for k, v in d.items()}
                               for s, d in a[stat].items()} for stat in ("median", "best")}
            res["a"].update({
                        "iters": {f"{k[0]} {k[1]}": v for k, v in a["iters"].items()}})
            md += ["## (a) allreduce, 2 ranks, float32 sum: median per iteration", ""] + table_a(a, "median") + [""]
            md += ["## (a) the same, best batch (the least disturbed by other work)", ""] + table_a(a, "best") + [""]
    if "b" in opts["parts"]:
        bb = b.part_b()
        res["b"] = bb
        md += ["## (b) mlp_step data-parallel (batch 64 per rank)", ""] + table_b(bb) + [""]
    if "c" in opts["parts"]:
        c = b.part_c()
        res["c"] = c
        md += ["## (c) overlap of the gradient allreduces with the backward pass", ""] + table_c(c) + [""]
    load_after = os.getloadavg()[0]
    res.update(load_after=load_after, versions=b.versions, notes=b.notes,
               seconds=time.time() - t0)
    md += [f"- versions: {', '.join(f'{k} {v}' for k, v in b.versions.items()) or '—'}",
           f"- load average before {load:.2f}, after {load_after:.2f}; {os.cpu_count()} CPUs; "
           f"{opts['rounds']} alternating round(s); total {time.time() - t0:.0f} s"]
    md += [f"- note: {n}" for n in b.notes]
    text = "\n".join(md) + "\n"
    print()
    print(text)
    with open(os.path.join(RESULTS, "dist.md"), "w") as f:
        f.write(text)
    with open(os.path.join(RESULTS, "dist.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(f"written: bench/results/dist.md, bench/results/dist.json")


if __name__ == "__main__":
    main()
