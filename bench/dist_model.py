"""bench/dist_model.py — the ring-allreduce cost model of docs/distributed.md
("Cost model: ring allreduce"), fitted to the 2-rank measurements of
bench/dist.sh (a) and projected to clusters.

    T(n, p) = 2(p-1)/p * n/B + 2(p-1) * alpha

n bytes per rank, p ranks, B the link bandwidth (bytes/s), alpha the
latency of one message. A ring allreduce is a reduce-scatter then an
allgather, each p-1 steps of n/p bytes to the next rank; the time of the
reduction arithmetic is folded into B.

Usage: python3 bench/dist_model.py [DIST_JSON]
  DIST_JSON  bench/results/dist.json from bench/dist.sh: fit alpha and B to
             its C MPI (in place) and tfe medians. Without it, the medians
             recorded below (the run docs/distributed.md quotes) are used,
             so the tables there can be reproduced as they are.
Prints Markdown: the fit, model against measurement per size, and the
projections. Standard library only.
"""
import json
import sys

# The medians (seconds per allreduce, float32 sum, 2 ranks, one machine) of
# the bench/dist.sh run quoted in docs/distributed.md: size in bytes ->
# (C MPI_Allreduce in place, tfe dist.allreduce).
RECORDED = {
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
    """alpha, B of T = n/B + 2 alpha (p = 2) by least squares on the
    relative error: minimises sum ((x/B + 2a - T)/T)^2 over (1/B, a),
    so that 8 B and 64 MiB weigh alike."""
    # unknowns u = 1/B, v = alpha; model row (n/T, 2/T) . (u, v) ~ 1
    s11 = s12 = s22 = r1 = r2 = 0.0
    for n, t in points:
        a1, a2 = n / t, 2.0 / t
        s11 += a1 * a1
        s12 += a1 * a2
        s22 += a2 * a2
        r1 += a1
        r2 += a2
    det = s11 * s22 - s12 * s12
    u = (r1 * s22 - r2 * s12) / det
    v = (s11 * r2 - s12 * r1) / det
    return v, 1.0 / u


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


def load(path):
    with open(path) as f:
        res = json.load(f)
    med = res["a"]["median"]
    out = {}
    for key, t in med["c_inplace"].items():
        label, n = key.split()
        if label == "ALLREDUCE":
            out[int(n)] = (t, med["tfe"].get(key))
    return out


def main():
    data = load(sys.argv[1]) if len(sys.argv) > 1 else RECORDED
    if not data:
        sys.exit("dist_model.py: no measurements (run bench/dist.sh a, then pass bench/results/dist.json)")
    lines = []
    for side, idx in (("C MPI", 0), ("tfe", 1)):
        pts = [(n, v[idx]) for n, v in sorted(data.items()) if v[idx]]
        if len(pts) < 2:
            continue
        alpha, bw = fit(pts)
        lines += [f"### {side}, 2 ranks on this machine: α = {alpha * 1e6:.2f} µs, "
                  f"B = {bw / 1e9:.2f} GB/s", "",
                  "| size | measured | model | model / measured |", "|---|---|---|---|"]
        worst = 0.0
        for n, t in pts:
            m = ring_time(n, 2, bw, alpha)
            worst = max(worst, abs(m / t - 1))
            lines.append(f"| {size_name(n)} | {fmt_t(t)} | {fmt_t(m)} | {m / t:.2f} |")
        lines += ["", f"Largest deviation: {worst * 100:.0f} %.", ""]
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
