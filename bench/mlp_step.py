"""bench/mlp_step.py — one SGD training step of an MLP 784-256-256-10 (ReLU),
batch 64, softmax cross-entropy from logits, lr 0.1: forward + backward +
update (peer of mlp_step.tfe). --lib torch|tensorflow|jax, eager by default:
PyTorch autograd (update under torch.no_grad), TensorFlow GradientTape (no
tf.function), JAX jax.value_and_grad of a plain function (no jax.jit; JAX
runs it op by op).

With --compiled first (peer of mlp_step_staged.tfe) the TensorFlow
step is a tf.function and the JAX step (value_and_grad and the update) is
one jax.jit; PyTorch stays eager (the goal compares tfe's staged step with
PyTorch's eager one).
[--compiled] --lib torch|tensorflow|jax"""
import sys

from benchlib import lib_from_argv, load, measure_steps, torch_device_step

# --compiled comes first; benchlib parses the rest (--lib)
compiled = sys.argv[1:2] == ["--compiled"]
if compiled:
    del sys.argv[1]

BATCH, SIZES, LR = 64, (784, 256, 256, 10), 0.1

lib = lib_from_argv()
if lib == "numpy":
    raise SystemExit("mlp_step.py: no NumPy peer (NumPy has no autodiff); use --lib torch|tensorflow|jax")
m = load(lib)
import numpy as np  # noqa: E402  (data is made once with NumPy, then handed over)

rng = np.random.default_rng(0)
X = rng.standard_normal((BATCH, SIZES[0]), dtype=np.float32)
LABELS = rng.integers(0, SIZES[-1], BATCH)
Y = np.eye(SIZES[-1], dtype=np.float32)[LABELS]
INIT = []
for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
    INIT.append(rng.standard_normal((fan_in, fan_out), dtype=np.float32) * np.float32(np.sqrt(2.0 / fan_in)))
    INIT.append(np.zeros((fan_out,), np.float32))

if lib == "torch":
    import torch
    import torch.nn.functional as F
    x, labels = torch.from_numpy(X), torch.from_numpy(LABELS)
    params = [torch.from_numpy(p.copy()).requires_grad_() for p in INIT]
    data = [x, labels]

    def step():
        w1, b1, w2, b2, w3, b3 = params
        h = torch.relu(x @ w1 + b1)
        h = torch.relu(h @ w2 + b2)
        loss = F.cross_entropy(h @ w3 + b3, labels)
        loss.backward()
        with torch.no_grad():
            for p in params:
                p -= LR * p.grad
                p.grad = None
        return loss

    step, sync = torch_device_step(torch, step, data + params)  # bench/gpu.sh: on a GPU, torch.compile
elif lib == "tensorflow":
    tf = m
    x, y = tf.constant(X), tf.constant(Y)
    params = [tf.Variable(p) for p in INIT]

    def step():
        w1, b1, w2, b2, w3, b3 = params
        with tf.GradientTape() as tape:
            h = tf.nn.relu(x @ w1 + b1)
            h = tf.nn.relu(h @ w2 + b2)
            loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=h @ w3 + b3))
        grads = tape.gradient(loss, params)
        for p, g in zip(params, grads):
            p.assign_sub(LR * g)
        return loss

    if compiled:
        step = tf.function(step)  # traced by the first (warm-up) step
    sync = lambda v: v  # noqa: E731
else:
    import jax
    import jax.numpy as jnp
    x, y = jnp.asarray(X), jnp.asarray(Y)
    state = {"params": [jnp.asarray(p) for p in INIT]}

    def loss_fn(params):
        w1, b1, w2, b2, w3, b3 = params
        h = jax.nn.relu(x @ w1 + b1)
        h = jax.nn.relu(h @ w2 + b2)
        return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(h @ w3 + b3), axis=-1))

    value_and_grad = jax.value_and_grad(loss_fn)  # not jitted: op by op

    def update(params):
        loss, grads = value_and_grad(params)
        return loss, [p - LR * g for p, g in zip(params, grads)]

    if compiled:
        update = jax.jit(update)  # compiled by the first (warm-up) step

    def step():
        loss, state["params"] = update(state["params"])
        return loss

    def sync(v):
        for p in state["params"]:
            p.block_until_ready()
        return v.block_until_ready()


measure_steps(step, sync, lib)
