#!/usr/bin/env python3
"""bench/dist_overlap.py — how much of the gradient allreduces a staged
data-parallel step hides behind its backward pass (docs/distributed.md,
"Gradient buckets and overlap").

Runs a tfe program (default bench/dist_overlap.tfe: the MLP 784-256-256-10,
batch 64 per rank) under `mpirun -np N`, --reps times each way, alternated:
with the allreduces split and overlapped (the default) and with
TFE_OVERLAP=0 (blocking, where they were traced). Both with TFE_DIST_STATS=1, whose per-step lines it reads
(graph/exec_dist.c), skipping each rank's first --skip runs. Prints per
mode: the step time (the program's SECONDS_PER_ITER line, if any), the
time a step spends blocked in allreduces (inside starts and waits, or in
the blocking ones), the executor's own share
hidden (1 - wait / time from start to completion), and the share of the
blocking allreduce time the overlap hid: 1 - wait(overlap) / wait(blocking)
(medians over the steps of both ranks).

Usage: bench/dist_overlap.py [-n 2] [--bucket-mb 0.25] [--steps 200]
                             [--skip 5] [--reps 3] [PROG.tfe]
Environment: TFE (default ./tfe), TFE_PATH, MPIRUN (default mpirun)."""
import argparse
import os
import re
import statistics
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))


def run(args, overlap):
    """One mpirun: the step time and the kept dist_stats rows."""
    env = dict(os.environ, TFE_DIST_STATS="1", STEPS=str(args.steps), BUCKET_MB=str(args.bucket_mb),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.setdefault("TFE_PATH", os.path.join(here, "..", "stdlib"))
    if not overlap:
        env["TFE_OVERLAP"] = "0"
    cmd = ["timeout", str(args.timeout), os.environ.get("MPIRUN", "mpirun"), "--oversubscribe", "-np", str(args.n),
           os.environ.get("TFE", "./tfe"), args.prog]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"dist_overlap.py: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    m = re.search(r"SECONDS_PER_ITER (\S+)", p.stdout)
    rows = []
    for line in p.stderr.splitlines():
        if not line.startswith("dist_stats "):
            continue
        f = dict(kv.split("=", 1) for kv in line.split()[1:])
        if int(f["run"]) > args.skip and int(f["allreduces"]) > 0:
            rows.append(f)
    if not rows:
        sys.exit("dist_overlap.py: no dist_stats lines (a build without this executor?)")
    return (float(m.group(1)) * 1e3 if m else float("nan")), rows


def summary(runs):
    """Medians over the steps of every run and both ranks: on a loaded
    machine a rank descheduled for a while makes a few steps wait long, and
    a mean would be those steps."""
    rows = [r for _, rs in runs for r in rs]
    med = lambda k: statistics.median(float(r.get(k, 0)) for r in rows)  # noqa: E731
    return {
        "step_ms": statistics.median(t for t, _ in runs),
        # blocked: inside starts (the agreement) and waits, or blocking allreduces
        "wait_ms": statistics.median(float(r["wait_ms"]) + float(r.get("start_ms", 0)) for r in rows),
        "hidden": med("hidden"),
        "early": med("early"),
        "allreduces": rows[-1]["allreduces"],
        "ops_overlapped": rows[-1]["ops_overlapped"],
        "ops": rows[-1]["ops"],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--bucket-mb", type=float, default=0.25)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--skip", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--reps", type=int, default=3, help="runs of each mode, alternated")
    ap.add_argument("prog", nargs="?", default=os.path.join(here, "dist_overlap.tfe"))
    args = ap.parse_args()
    runs = {False: [], True: []}
    for _ in range(args.reps):  # alternated, so a change of load hits both
        for overlap in (False, True):
            runs[overlap].append(run(args, overlap))
    blk, ovl = summary(runs[False]), summary(runs[True])
    print(f"{os.path.basename(args.prog)}: {args.n} ranks, buckets of {args.bucket_mb} MiB, "
          f"{ovl['allreduces']} allreduces per step")
    for name, r in (("blocking", blk), ("overlap", ovl)):
        print(f"  {name:9s} step {r['step_ms']:8.3f} ms  waited {r['wait_ms']:7.3f} ms  "
              f"executor's hidden share {r['hidden']:.3f}  early {r['early']:.2f}  "
              f"ops overlapped {r['ops_overlapped']} of {r['ops']}")
    share = 1 - ovl["wait_ms"] / blk["wait_ms"] if blk["wait_ms"] > 0 else float("nan")
    print(f"  OVERLAP_HIDDEN_SHARE {share:.3f}  (1 - waited with overlap / blocking allreduce time)")


if __name__ == "__main__":
    main()
