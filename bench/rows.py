"""bench/rows.py — the table of benchmark rows: the one place a new row goes.

Each row names its tfe side and its peers as argument vectors; the harness
(bench/harness.py) fills in {tfe}, {cpython}, {venv}, {lua} and {bench}.
A "program" row follows the SECONDS_PER_ITER protocol (docs/benchmarks.md);
a "startup" row times the whole process, start to exit.
"""
from dataclasses import dataclass, field

# Column order of the tables; a row leaves out the peers it has none for.
PEERS = ("CPython", "Lua", "NumPy", "PyTorch", "TensorFlow", "JAX")


@dataclass
class Row:
    name: str          # what ROWS on the command line select
    issue: int         # the issue that brought the row (docs/benchmarks.md)
    what: str          # one line for the table
    tfe: list          # argv of the tfe side
    peers: dict = field(default_factory=dict)  # peer -> argv
    kind: str = "program"  # "program" or "startup"
    work: float = 0.0  # units of `unit` per iteration (bytes, flops), 0: none
    unit: str = ""     # "GB/s" or "GFLOP/s": the rate shown beside times
    peak: str = ""     # a GFLOP/s row whose best rate in the run is the peak:
                       # the table also shows this row's rate as % of it


def tensor_peers(script, *args):
    """The four array-library peers of a tensor row, one process each;
    args go before --lib."""
    libs = (("NumPy", "numpy"), ("PyTorch", "torch"),
            ("TensorFlow", "tensorflow"), ("JAX", "jax"))
    return {peer: ["{venv}", "{bench}/" + script, *args, "--lib", lib] for peer, lib in libs}


def autodiff_peers(script):
    """The peers of a training-step row: the three libraries with autodiff
    (NumPy has none)."""
    libs = (("PyTorch", "torch"), ("TensorFlow", "tensorflow"), ("JAX", "jax"))
    return {peer: ["{venv}", "{bench}/" + script, "--lib", lib] for peer, lib in libs}


def staged_peers(script, *args):
    """The PyTorch, TensorFlow and JAX peers of a staging row, one process
    each; args go before --lib. Each script says how it stages (tf.function,
    jax.jit, and for PyTorch torch.compile, torch.jit.trace or eager: see the
    row's `what`)."""
    libs = (("PyTorch", "torch"), ("TensorFlow", "tensorflow"), ("JAX", "jax"))
    return {peer: ["{venv}", "{bench}/" + script, *args, "--lib", lib] for peer, lib in libs}


def scalar_peers(name):
    return {"CPython": ["{cpython}", "{bench}/%s.py" % name],
            "Lua": ["{lua}", "{bench}/%s.lua" % name]}


F32 = 4
ROWS = [
    # --- the interpreter -------------------------------------------------
    Row("fib", 2, "fib(27), recursive",
        ["{tfe}", "{bench}/fib.tfe"], scalar_peers("fib")),
    Row("loop", 2, "10^7-step scalar while loop",
        ["{tfe}", "{bench}/loop.tfe"], scalar_peers("loop")),
    Row("startup", 2, "start-up: tfe -e '1' / python3 -c 1 / lua5.4 -e ''",
        ["{tfe}", "-e", "1"],
        {"CPython": ["{cpython}", "-c", "1"], "Lua": ["{lua}", "-e", ""]},
        kind="startup"),
    # --- eager tensors ---------------------------------------------------
    Row("add8", 3, "eager a + b, 8 x float32, in a loop",
        ["{tfe}", "{bench}/add8.tfe"], tensor_peers("add8.py")),
    Row("matmul", 3, "a @ b, 1024x1024 float32",
        ["{tfe}", "{bench}/matmul.tfe"], tensor_peers("matmul.py"),
        work=2 * 1024 ** 3, unit="GFLOP/s"),
    Row("fma", 3, "a * b + c, 10^7 float32",
        ["{tfe}", "{bench}/fma.tfe"], tensor_peers("fma.py"),
        work=4 * F32 * 10 ** 7, unit="GB/s"),
    Row("sum_axis0", 3, "sum(x, axis=0), 4096x4096 float32",
        ["{tfe}", "{bench}/sum_axis0.tfe"], tensor_peers("sum_axis.py", "--axis", "0"),
        work=F32 * 4096 * 4096, unit="GB/s"),
    Row("sum_axis1", 3, "sum(x, axis=1), 4096x4096 float32",
        ["{tfe}", "{bench}/sum_axis1.tfe"], tensor_peers("sum_axis.py", "--axis", "1"),
        work=F32 * 4096 * 4096, unit="GB/s"),
    # --- autodiff -------------------------------------------------------
    Row("mlp_step", 4, "SGD step, MLP 784-256-256-10, batch 64, eager autodiff",
        ["{tfe}", "{bench}/mlp_step.tfe"], autodiff_peers("mlp_step.py")),
    Row("cnn_step", 4, "SGD step, LeNet-5-style CNN 28x28x1, batch 64, eager autodiff",
        ["{tfe}", "{bench}/cnn_step.tfe"], autodiff_peers("cnn_step.py")),
    # --- staging ---------------------------------------------------------
    Row("staged_call", 5, "cached call of a staged fn, x + 1.0 on 4 x float32, in a loop "
        "(tf.function, jax.jit, torch.compile inductor)",
        ["{tfe}", "{bench}/staged_call.tfe"], staged_peers("staged_call.py")),
    Row("staged_call_eager", 5, "the same fn called eagerly (no staging), for reference",
        ["{tfe}", "{bench}/staged_call_eager.tfe"], tensor_peers("staged_call.py", "--eager")),
    # --- graph optimizer ------------------------------------------------
    Row("ew_chain", 6, "cached call of a staged fn: 100 x (x * 0.999 + 0.001), unrolled, "
        "64 x float32 (TorchScript torch.jit.trace, tf.function, jax.jit)",
        ["{tfe}", "{bench}/ew_chain.tfe"], staged_peers("ew_chain.py")),
    Row("ew_chain_eager", 6, "the same fn called eagerly, 200 ops (no staging), for reference",
        ["{tfe}", "{bench}/ew_chain_eager.tfe"], tensor_peers("ew_chain.py", "--eager")),
    Row("mlp_step_staged", 6, "mlp_step with the step staged (PyTorch eager, tf.function, jax.jit)",
        ["{tfe}", "{bench}/mlp_step_staged.tfe"], staged_peers("mlp_step.py", "--compiled")),
    Row("l2hmc", 6, "HMC step, 2-D correlated Gaussian, 200 chains, 10 leapfrogs with grad "
        "inside, staged (PyTorch eager, tf.function, jax.jit)",
        ["{tfe}", "{bench}/l2hmc.tfe"], staged_peers("l2hmc.py")),
    Row("l2hmc_eager", 6, "the same HMC step eagerly (no staging), for reference",
        ["{tfe}", "{bench}/l2hmc_eager.tfe"], staged_peers("l2hmc.py", "--eager")),
    Row("mlp_step_staged_fwd", 19, "mlp_step with only the forward staged, the tape outside "
        "(PyTorch eager, tf.function, jax.jit)",
        ["{tfe}", "{bench}/mlp_step_staged_fwd.tfe"], staged_peers("mlp_step.py", "--compiled")),
]


# --- real models: FLOPs of a training step ------------------------------
# Nominal FLOPs of the convolutions and matmuls of one SGD step (2 per
# multiply-add): the forward, and in the backward the gradient w.r.t. the
# weights and w.r.t. the input of every layer but the first (its input is
# data, not differentiated); elementwise ops, BN, pooling and the update are
# not counted. The rate is shown as % of the GEMM peak: the best GFLOP/s of
# the `matmul` row in the same run (the harness adds the row when missing).
def conv_flops(n, h_out, w_out, k, c_in, c_out):
    return 2 * n * h_out * w_out * k * k * c_in * c_out


def step_flops(forward):
    """forward: the FLOPs of each layer's forward, first layer first."""
    return 3 * sum(forward) - forward[0]


MLP_FLOPS = step_flops([2 * 64 * 784 * 256, 2 * 64 * 256 * 256, 2 * 64 * 256 * 10])
LENET_FLOPS = step_flops([conv_flops(64, 28, 28, 5, 1, 6), conv_flops(64, 10, 10, 5, 6, 16),
                          2 * 64 * 400 * 120, 2 * 64 * 120 * 84, 2 * 64 * 84 * 10])
RESNET20_FORWARD = ([conv_flops(32, 32, 32, 3, 3, 16)]
                    + [conv_flops(32, 32, 32, 3, 16, 16)] * 6
                    + [conv_flops(32, 16, 16, 3, 16, 32)] + [conv_flops(32, 16, 16, 3, 32, 32)] * 5
                    + [conv_flops(32, 8, 8, 3, 32, 64)] + [conv_flops(32, 8, 8, 3, 64, 64)] * 5
                    + [2 * 32 * 64 * 10])
RESNET20_FLOPS = step_flops(RESNET20_FORWARD)
MODEL_RATE = dict(work=0, unit="GFLOP/s", peak="matmul")
for r in ROWS:  # the older training-step rows get their FLOPs too
    if r.name in ("mlp_step", "mlp_step_staged", "mlp_step_staged_fwd"):
        r.work, r.unit, r.peak = MLP_FLOPS, "GFLOP/s", "matmul"
    elif r.name == "cnn_step":
        r.work, r.unit, r.peak = LENET_FLOPS, "GFLOP/s", "matmul"
ROWS += [
    Row("cnn_step_staged", 19, "cnn_step with the step staged (torch.compile, tf.function, jax.jit)",
        ["{tfe}", "{bench}/cnn_step_staged.tfe"], staged_peers("cnn_step.py", "--compiled"),
        **dict(MODEL_RATE, work=LENET_FLOPS)),
    Row("resnet20_step", 19, "SGD step, ResNet-20 (CIFAR, option-A shortcuts, BN, 0.27 M params) "
        "32x32x3, batch 32, eager autodiff",
        ["{tfe}", "{bench}/resnet20_step.tfe"], autodiff_peers("resnet20_step.py"),
        **dict(MODEL_RATE, work=RESNET20_FLOPS)),
    Row("resnet20_step_staged", 19, "resnet20_step with the step staged "
        "(torch.compile, tf.function, jax.jit)",
        ["{tfe}", "{bench}/resnet20_step_staged.tfe"], staged_peers("resnet20_step.py", "--compiled"),
        **dict(MODEL_RATE, work=RESNET20_FLOPS)),
]
ROWS += [
    Row("resnet20_infer", 19, "ResNet-20 inference (batch norm with given statistics), forward "
        "of a batch of 32, eager (PyTorch inference_mode, TensorFlow eager, JAX op by op)",
        ["{tfe}", "{bench}/resnet20_infer.tfe"], staged_peers("resnet20_infer.py"),
        **dict(MODEL_RATE, work=sum(RESNET20_FORWARD))),
    Row("resnet20_infer_staged", 19, "resnet20_infer with the forward staged "
        "(torch.compile, tf.function, jax.jit)",
        ["{tfe}", "{bench}/resnet20_infer_staged.tfe"], staged_peers("resnet20_infer.py", "--compiled"),
        **dict(MODEL_RATE, work=sum(RESNET20_FORWARD))),
    Row("bn_step", 19, "batch norm forward + backward (training), ResNet-20's shapes 32x32x16, 16x16x32, "
        "8x8x64, batch 32 (tfe NHWC batch_norm_train, PyTorch NCHW F.batch_norm)",
        ["{tfe}", "{bench}/bn_step.tfe"], {"PyTorch": ["{venv}", "{bench}/bn_step.py", "--lib", "torch"]}),
]
