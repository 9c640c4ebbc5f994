"""bench/dist_model.py — the ring-allreduce cost model of docs/distributed.md
("Cost model: ring allreduce"), fitted to the 2-rank measurements of
bench/dist.sh (a) and projected to clusters.

    T(n, p) = 2(p-1)/p * n/B + 2(p-1) * alpha

n bytes per rank, p ranks, B the link bandwidth (bytes/s), alpha the
latency of one message. A ring allreduce is a reduce-scatter then an
allgather, each p-1 steps of n/p bytes to the next rank; the time of the
reduction arithmetic is folded into B.

Usage: python3 bench/dist_model.py [--median] [DIST_JSON]
  DIST_JSON  bench/results/dist.json from bench/dist.sh: fit alpha and B to
             its C MPI (in place) and tfe figures. Without it, the figures
             recorded below (the run docs/distributed.md quotes) are used,
             so the tables there can be reproduced as they are.
  --median   fit the medians rather than the best batches. On a machine
             shared with other jobs the best batch is the figure least
             disturbed by them (the medians mostly measure the waits for a
             descheduled rank).
Prints Markdown: the fit, model against measurement per size, and the
projections. Standard library only.
"""
import json
import sys

# The bench/dist.sh run quoted in docs/distributed.md (2 ranks on a 2-core
# machine shared with other jobs, load average 6-7): seconds per allreduce
# (float32 sum), the best batch and the median of 21 batches per size:
# size in bytes -> (C MPI_Allreduce in place, tfe dist.allreduce).
RECORDED = {
    "best": {
        8: (2.94e-07, 2.275e-06),
        32: (2.553e-07, 2.171e-06),
        128: (2.441e-07, 1.92e-06),
        512: (1.567e-06, 2.54e-06),
        2048: (3.652e-06, 2.97e-06),
        8192: (2.81e-05, 1.154e-05),
        32768: (2.804e-05, 1.87e-05),
        131072: (8.918e-05, 4.404e-05),
        524288: (0.0001034, 0.0001085),
        2097152: (0.0003011, 0.0003523),
        8388608: (0.005507, 0.004947),
        33554432: (0.0201, 0.02855),
        67108864: (0.0446, 0.04611),
    },
    "median": {
        8: (3.562e-06, 1.787e-05),
        32: (2.483e-06, 4.331e-06),
        128: (5.537e-06, 2.478e-06),
        512: (6.548e-06, 2.499e-05),
        2048: (2.215e-05, 3.942e-05),
        8192: (6.41e-05, 0.000251),
        32768: (0.000155, 0.0003944),
        131072: (0.0003526, 0.0007163),
        524288: (0.0004071, 0.0009328),
        2097152: (0.002, 0.006721),
        8388608: (0.01347, 0.01879),
        33554432: (0.09088, 0.077),
        67108864: (0.1647, 0.1383),
    },
}

# Gradients to project: floats per gradient.
DIGITS_MLP = 64 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10  # examples/digits_mlp.tfe
RESNET50 = 25_600_000
GRADIENTS = [("digits MLP", DIGITS_MLP), ("ResNet-50", RESNET50)]
NODES = (8, 64, 512)
# Networks: (name, bits/s, alpha). alpha is the per-message latency one
# assumes for such a network with MPI on it: TCP over 10 Gb/s Ethernet
# about 20 us; RDMA (InfiniBand, RoCE) at 100 Gb/s about 5 us.
NETWORKS = [("10 Gb/s, α = 20 µs", 10e9, 20e-6), ("100 Gb/s, α = 5 µs", 100e9, 5e-6)]


def ring_time(nbytes, p, bandwidth, alpha):
    """Seconds for one ring allreduce of nbytes per rank over p ranks."""
    if p <= 1:
        return 0.0
    return 2 * (p - 1) / p * nbytes / bandwidth + 2 * (p - 1) * alpha


def fit(points):
    """alpha and B of T = n/B + 2 alpha (p = 2) from the two ends of the
    sweep, as the model is used: alpha from the latency-bound sizes (at most
    128 B: the median of T/2), B from the bandwidth-bound ones (8 MiB and
    more: the median of n / (T - 2 alpha)). The sizes between show how far
    a two-parameter model is from this machine (caches, protocol changes)."""
    import statistics
    small = [t / 2 for n, t in points if n <= 128]
    alpha = statistics.median(small)
    big = [n / (t - 2 * alpha) for n, t in points if n >= 8 << 20 and t > 2 * alpha]
    return alpha, statistics.median(big)


def size_name(b):
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k:
            return f"{b // k} {unit}"
    return f"{b} B"


def fmt_t(s):
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def load(path, stat):
    with open(path) as f:
        res = json.load(f)
    med = res["a"][stat]
    out = {}
    for key, t in med["c_inplace"].items():
        label, n = key.split()
        if label == "ALLREDUCE":
            out[int(n)] = (t, med["tfe"].get(key))
    return out


def main():
    args = sys.argv[1:]
    stat = "best"
    if args[:1] == ["--median"]:
        stat = "median"
        args = args[1:]
    data = load(args[0], stat) if args else RECORDED[stat]
    if not data:
        sys.exit("dist_model.py: no measurements (run bench/dist.sh a, then pass bench/results/dist.json)")
    lines = []
    for side, idx in (("C MPI", 0), ("tfe", 1)):
        pts = [(n, v[idx]) for n, v in sorted(data.items()) if v[idx]]
        if len(pts) < 2:
            continue
        alpha, bw = fit(pts)
        lines += [f"### {side}, 2 ranks on one machine ({stat} batches): α = {alpha * 1e6:.3f} µs, "
                  f"B = {bw / 1e9:.2f} GB/s", "",
                  "| size | measured | model | model / measured |", "|---|---|---|---|"]
        worst, ends = (1.0, 0), 1.0
        for n, t in pts:
            m = ring_time(n, 2, bw, alpha)
            off = max(m / t, t / m)
            if off > worst[0]:
                worst = (off, n)
            if n <= 128 or n >= 8 << 20:
                ends = max(ends, off)
            lines.append(f"| {size_name(n)} | {fmt_t(t)} | {fmt_t(m)} | {m / t:.2f} |")
        lines += ["", f"Off by at most {(ends - 1) * 100:.0f} % at the ends of the sweep (the sizes "
                  f"fitted); at most a factor {worst[0]:.1f} between them ({size_name(worst[1])}).", ""]
    lines += ["### Projections (ring allreduce of one gradient, float32)", "",
              "| gradient | floats | bytes | ranks | " +
              " | ".join(name for name, _, _ in NETWORKS) + " |",
              "|---|---|---|---|" + "---|" * len(NETWORKS)]
    for gname, floats in GRADIENTS:
        nbytes = 4 * floats
        for p in NODES:
            cells = []
            for _, bits, alpha in NETWORKS:
                bw = bits / 8
                t = ring_time(nbytes, p, bw, alpha)
                lat = 2 * (p - 1) * alpha
                cells.append(f"{fmt_t(t)} ({lat / t * 100:.0f} % latency)")
            lines.append(f"| {gname} | {floats:,} | {nbytes / 1e6:.2f} MB | {p} | " + " | ".join(cells) + " |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
