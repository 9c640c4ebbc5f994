"""bench/dist_mlp_step_ddp.py — PyTorch's peer of bench/dist_mlp_step.tfe:
the mlp_step model (784-256-256-10, ReLU, softmax cross-entropy, SGD lr 0.1,
batch 64 per process) data-parallel under DistributedDataParallel with the
gloo backend, on the CPU (bench/dist.sh; docs/benchmarks.md).

Usage: python dist_mlp_step_ddp.py [NPROCS]   (default 2)
Starts NPROCS processes itself (torch.multiprocessing), each with one
thread (torch.set_num_threads(1)) and pinned to its own core, as mpirun
binds tfe's ranks. NPROCS=1 is the same step without DDP (no process
group), the single-process reference. Every process runs the same fixed
number of steps per batch, after a barrier; rank 0 prints one
`SECONDS_PER_ITER <float>` per batch (the step time; samples/s is
NPROCS * 64 / it) and a `LOSS` line after them.
"""
import os
import sys
import time

BATCH, SIZES, LR = 64, (784, 256, 256, 10), 0.1
STEPS = int(os.environ.get("DIST_STEPS", "50"))      # steps per timed batch
BATCHES = int(os.environ.get("DIST_BATCHES", "7"))


def worker(rank, nprocs, port):
    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                      CUDA_VISIBLE_DEVICES="")
    ncpu = os.cpu_count() or 1
    if nprocs > 1 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {rank % ncpu})
    import numpy as np
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    if rank == 0:
        print(f"VERSION torch {torch.__version__}", flush=True)

    # The same initial weights on every process (seed 0), as in mlp_step.py;
    # each process its own data (seed 1 + rank), as a sharded data set gives.
    rng = np.random.default_rng(0)
    init = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        init.append(rng.standard_normal((fan_in, fan_out), dtype=np.float32)
                    * np.float32(np.sqrt(2.0 / fan_in)))
        init.append(np.zeros((fan_out,), np.float32))
    drng = np.random.default_rng(1 + rank)
    x = torch.from_numpy(drng.standard_normal((BATCH, SIZES[0]), dtype=np.float32))
    labels = torch.from_numpy(drng.integers(0, SIZES[-1], BATCH))

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.from_numpy(p.copy())) for p in init])

        def forward(self, x):
            w1, b1, w2, b2, w3, b3 = self.ps
            h = torch.relu(x @ w1 + b1)
            h = torch.relu(h @ w2 + b2)
            return h @ w3 + b3

    model = MLP()
    params = list(model.parameters())
    dist = None
    if nprocs > 1:
        import torch.distributed as dist
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=nprocs)
        model = torch.nn.parallel.DistributedDataParallel(model)

    def step():
        loss = F.cross_entropy(model(x), labels)
        loss.backward()  # DDP: the gradients are averaged over the processes here
        with torch.no_grad():
            for p in params:
                p -= LR * p.grad
                p.grad = None
        return loss

    def barrier():
        if dist is not None:
            dist.barrier()

    for _ in range(2):  # warm-up
        step()
    for _ in range(BATCHES):
        barrier()
        t0 = time.perf_counter()
        for _ in range(STEPS):
            step()
        t = (time.perf_counter() - t0) / STEPS
        if rank == 0:
            print(f"SECONDS_PER_ITER {t!r}", flush=True)
    loss = step()
    if rank == 0:
        print(f"LOSS {float(loss.detach()):.4f}", flush=True)
    if dist is not None:
        # Leave without tearing gloo down: its destructor sometimes aborts
        # ("terminate called without an active exception") after the last
        # collective, which would turn a finished run into a failed one.
        dist.barrier()
        sys.stdout.flush()
        os._exit(0)


def main():
    nprocs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    try:
        import torch  # noqa: F401
        import torch.multiprocessing as mp
    except ImportError as e:
        print(f"MISSING torch {type(e).__name__}: {e}")
        sys.exit(3)
    if nprocs == 1:
        worker(0, 1, 0)
        return
    import socket
    with socket.socket() as s:  # a free port on the loopback for gloo's rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(worker, args=(nprocs, port), nprocs=nprocs, start_method="spawn")


if __name__ == "__main__":
    main()
