"""bench/benchlib.py — the peer side of the benchmark protocol (docs/benchmarks.md).

Sets every framework to the same thread count, warms a workload up, times
repeated batches with a monotonic clock and prints `SECONDS_PER_ITER <float>`
per batch. Uses only the standard library until a framework is asked for.
"""
import os
import sys
import time

THREADS = int(os.environ.get("BENCH_THREADS", "0") or 0) or (os.cpu_count() or 1)
REPEATS = int(os.environ.get("BENCH_REPEATS", "5"))
# One timed batch lasts at least this long, so timer resolution and loop
# start-up vanish from the per-iteration figure.
MIN_BATCH_S = float(os.environ.get("BENCH_MIN_BATCH_S", "0.2"))

MISSING_EXIT = 3  # exit status meaning "this peer is not installed"

LIBS = ("numpy", "torch", "tensorflow", "jax")


def missing(lib, err):
    print(f"MISSING {lib} {type(err).__name__}: {err}")
    sys.exit(MISSING_EXIT)


def load(lib):
    """Import a framework, pin its threads to THREADS, print its version.

    The environment variables are set by run.sh as well; setting them here
    too keeps a file run by hand comparable with a full run."""
    n = str(THREADS)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
        os.environ.setdefault(var, n)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("XLA_FLAGS", f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={n}")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # CPU rows: never a GPU
    try:
        if lib == "numpy":
            import numpy as m
        elif lib == "torch":
            import torch as m
            m.set_num_threads(THREADS)
            m.set_num_interop_threads(THREADS)
        elif lib == "tensorflow":
            import tensorflow as m
            m.config.threading.set_intra_op_parallelism_threads(THREADS)
            m.config.threading.set_inter_op_parallelism_threads(THREADS)
            m.config.set_visible_devices([], "GPU")
        elif lib == "jax":
            import jax as m
            import jax.numpy  # noqa: F401  (fail here, not mid-benchmark)
        else:
            raise SystemExit(f"benchlib: unknown lib {lib!r}; expected one of {LIBS}")
    except ImportError as e:
        missing(lib, e)
    print(f"VERSION {lib} {m.__version__}")
    return m


def lib_from_argv():
    """The framework named by `--lib NAME` (default numpy)."""
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "--lib" and args[1] in LIBS:
        return args[1]
    if not args:
        return "numpy"
    raise SystemExit(f"usage: {sys.argv[0]} [--lib {'|'.join(LIBS)}]")


def torch_device_step(torch, step, tensors):
    """PyTorch on a GPU for bench/gpu.sh: BENCH_TORCH_DEVICE=cuda moves the
    given tensors (in place, keeping requires_grad) and makes sync wait for
    the device; BENCH_TORCH_COMPILE=1 wraps the step in torch.compile.
    Returns (step, sync). On the CPU without those variables: unchanged."""
    dev = os.environ.get("BENCH_TORCH_DEVICE", "cpu")
    if dev != "cpu":
        for t in tensors:
            t.data = t.data.to(dev)
    if os.environ.get("BENCH_TORCH_COMPILE") == "1":
        step = torch.compile(step)

    def sync(v):
        if dev != "cpu":
            torch.cuda.synchronize()
        return v
    return step, sync


def report(seconds_per_iter):
    print(f"SECONDS_PER_ITER {seconds_per_iter!r}", flush=True)


def measure(run, iters=None, repeats=None):
    """Time run(n), which performs n iterations of the workload.

    Without iters, n is calibrated (doubling from 1, which also warms up)
    until one batch lasts MIN_BATCH_S; with iters, one untimed run(iters)
    warms up. Then `repeats` batches are timed, each reported on its own line.
    """
    repeats = REPEATS if repeats is None else repeats
    if iters is None:
        n = 1
        while True:
            t0 = time.perf_counter()
            run(n)
            if time.perf_counter() - t0 >= MIN_BATCH_S or n >= 1 << 30:
                break
            n *= 2
    else:
        n = iters
        run(n)
    for _ in range(repeats):
        t0 = time.perf_counter()
        run(n)
        report((time.perf_counter() - t0) / n)


class Ops:
    """The few operations the tensor rows need, spelled per framework.

    randn(shape) gives float32; sync(x) waits until x is computed (JAX
    dispatches asynchronously; NumPy, PyTorch on CPU and TensorFlow eager
    return finished results)."""

    def __init__(self, lib, m):
        self.lib = lib
        if lib == "numpy":
            rng = m.random.default_rng(0)
            self.randn = lambda shape: rng.standard_normal(shape, dtype=m.float32)
            self.sum = lambda x, axis: x.sum(axis=axis)
        elif lib == "torch":
            m.manual_seed(0)
            self.randn = lambda shape: m.randn(shape, dtype=m.float32)
            self.sum = lambda x, axis: m.sum(x, dim=axis)
        elif lib == "tensorflow":
            m.random.set_seed(0)
            self.randn = lambda shape: m.random.normal(shape, dtype=m.float32)
            self.sum = lambda x, axis: m.reduce_sum(x, axis=axis)
        elif lib == "jax":
            import jax.numpy as jnp
            keys = iter(m.random.split(m.random.PRNGKey(0), 16))
            self.randn = lambda shape: m.random.normal(next(keys), shape, dtype=jnp.float32).block_until_ready()
            self.sum = lambda x, axis: jnp.sum(x, axis=axis)
        self.sync = (lambda x: x.block_until_ready()) if lib == "jax" else (lambda x: x)


def take_eager_flag():
    """--eager as the first argument (before benchlib's own --lib): removed
    from sys.argv; True when it was there."""
    eager = sys.argv[1:2] == ["--eager"]
    if eager:
        del sys.argv[1]
    return eager


def measure_staged_calls(f, x, ops, m, eager, stage_torch, script):
    """The per-call protocol of the staging rows: stage f the way each
    library's users do (tf.function, jax.jit, stage_torch(torch) for
    PyTorch; f itself when eager), call it once outside any timing (printing
    FIRST_CALL_SECONDS), then time cached calls g(x) in a while loop, each
    result waited for (JAX dispatches asynchronously)."""
    t0 = time.perf_counter()
    if eager:
        g = f
    elif ops.lib == "tensorflow":
        g = m.function(f)
    elif ops.lib == "jax":
        g = m.jit(f)
    elif ops.lib == "torch":
        g = stage_torch(m)
    else:
        raise SystemExit(f"{script}: numpy stages nothing; use --eager --lib numpy")
    ops.sync(g(x))
    print(f"FIRST_CALL_SECONDS {time.perf_counter() - t0!r}")

    def run(n):
        i = 0
        while i < n:
            ops.sync(g(x))
            i += 1

    measure(run)


def measure_steps(step, sync, lib):
    """Time training steps (step() returns the loss, sync(v) waits for the
    device), then print one more step's loss so a run shows the model trains."""
    def run(n):
        for _ in range(n):
            sync(step())
    measure(run)
    loss = step()
    print(f"LOSS {float(loss.detach() if lib == 'torch' else loss):.4f}")


def setup():
    """Parse --lib, load the framework and return (Ops, framework module)."""
    lib = lib_from_argv()
    m = load(lib)
    return Ops(lib, m), m
