"""bench/cnn_step.py — one SGD training step of a LeNet-5-style CNN on 28x28x1
images, batch 64: conv 5x5x6 (same) -> relu -> max pool 2 -> conv 5x5x16
(valid) -> relu -> max pool 2 -> flatten (400) -> dense 120 -> relu -> dense 84
-> relu -> dense 10, softmax cross-entropy from logits, lr 0.1 (peer of
cnn_step.tfe). --lib torch|tensorflow|jax, eager only, each in its natural
layout: PyTorch NCHW (update under torch.no_grad), TensorFlow NHWC/HWIO with
GradientTape (no tf.function), JAX NHWC/HWIO with jax.value_and_grad of a
plain function (no jax.jit).

With --compiled first (peer of cnn_step_staged.tfe): PyTorch's loss function
is torch.compile'd (inductor; AOTAutograd compiles its backward; the update
stays eager), TensorFlow's step is a tf.function and JAX's value-and-grad
plus update one jax.jit.
[--compiled] --lib torch|tensorflow|jax"""
import sys

from benchlib import lib_from_argv, load, measure_steps, torch_device_step

# --compiled comes first; benchlib parses the rest (--lib)
compiled = sys.argv[1:2] == ["--compiled"]
if compiled:
    del sys.argv[1]

BATCH, LR = 64, 0.1

lib = lib_from_argv()
if lib == "numpy":
    raise SystemExit("cnn_step.py: no NumPy peer (NumPy has no autodiff); use --lib torch|tensorflow|jax")
m = load(lib)
import numpy as np  # noqa: E402  (data is made once with NumPy, then handed over)

rng = np.random.default_rng(0)
X = rng.standard_normal((BATCH, 28, 28, 1), dtype=np.float32)   # NHWC
LABELS = rng.integers(0, 10, BATCH)
Y = np.eye(10, dtype=np.float32)[LABELS]


def he(shape, fan_in):
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(np.sqrt(2.0 / fan_in))


# HWIO filters and (in, out) dense weights, as tfe uses them
INIT = [he((5, 5, 1, 6), 25), np.zeros(6, np.float32),
        he((5, 5, 6, 16), 150), np.zeros(16, np.float32),
        he((400, 120), 400), np.zeros(120, np.float32),
        he((120, 84), 120), np.zeros(84, np.float32),
        he((84, 10), 84), np.zeros(10, np.float32)]

if lib == "torch":
    import torch
    import torch.nn.functional as F
    x = torch.from_numpy(X.transpose(0, 3, 1, 2).copy())                       # NCHW
    labels = torch.from_numpy(LABELS)
    conv = lambda w: np.ascontiguousarray(w.transpose(3, 2, 0, 1))            # noqa: E731  HWIO -> OIHW
    params = [torch.from_numpy(conv(p) if p.ndim == 4 else p.copy()).requires_grad_() for p in INIT]
    data = [x, labels]

    def forward_loss(x, labels, c1, cb1, c2, cb2, w1, b1, w2, b2, w3, b3):
        h = F.max_pool2d(torch.relu(F.conv2d(x, c1, cb1, padding=2)), 2)
        h = F.max_pool2d(torch.relu(F.conv2d(h, c2, cb2)), 2)
        h = h.reshape(BATCH, 400)
        h = torch.relu(h @ w1 + b1)
        h = torch.relu(h @ w2 + b2)
        return F.cross_entropy(h @ w3 + b3, labels)

    if compiled:
        forward_loss = torch.compile(forward_loss)  # compiled by the first (warm-up) step

    def step():
        loss = forward_loss(x, labels, *params)
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
        c1, cb1, c2, cb2, w1, b1, w2, b2, w3, b3 = params
        with tf.GradientTape() as tape:
            h = tf.nn.max_pool2d(tf.nn.relu(tf.nn.conv2d(x, c1, 1, "SAME") + cb1), 2, 2, "VALID")
            h = tf.nn.max_pool2d(tf.nn.relu(tf.nn.conv2d(h, c2, 1, "VALID") + cb2), 2, 2, "VALID")
            h = tf.reshape(h, (BATCH, 400))
            h = tf.nn.relu(h @ w1 + b1)
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
    from jax import lax
    x, y = jnp.asarray(X), jnp.asarray(Y)
    state = {"params": [jnp.asarray(p) for p in INIT]}
    DN = ("NHWC", "HWIO", "NHWC")

    def pool(h):
        return lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def loss_fn(params):
        c1, cb1, c2, cb2, w1, b1, w2, b2, w3, b3 = params
        h = pool(jax.nn.relu(lax.conv_general_dilated(x, c1, (1, 1), "SAME", dimension_numbers=DN) + cb1))
        h = pool(jax.nn.relu(lax.conv_general_dilated(h, c2, (1, 1), "VALID", dimension_numbers=DN) + cb2))
        h = h.reshape(BATCH, 400)
        h = jax.nn.relu(h @ w1 + b1)
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
