"""bench/resnet20_step.py — one SGD training step of ResNet-20 (CIFAR-10
network of He et al. 2016) on random 32x32x3 images, batch 32: conv 3x3x16
-> BN -> relu, 3 stages of 3 basic blocks (16, 32, 64 channels, stride 2 at
the start of stages 2 and 3), option-A shortcuts (every other pixel, zero
channels padded on both sides: no parameters), global average pool, dense
10; softmax cross-entropy from logits, lr 0.1; convolutions without bias,
BN with the batch's statistics, eps 1e-5, no moving averages (peer of
resnet20_step.tfe). 269,722 parameters; each side prints `PARAMS n`.

--lib torch|tensorflow|jax, each in its natural layout: PyTorch NCHW/OIHW
(F.batch_norm with training=True, update under torch.no_grad), TensorFlow
NHWC/HWIO (the fused batch norm Keras uses, GradientTape), JAX NHWC/HWIO
(lax.conv_general_dilated, BN written out as flax does).

Eager by default (PyTorch autograd, TensorFlow GradientTape without
tf.function, JAX jax.value_and_grad op by op). With --compiled first (peer
of resnet20_step_staged.tfe): PyTorch's loss function is torch.compile'd
(inductor; its backward is compiled too, by AOTAutograd; the update stays
eager), TensorFlow's whole step is a tf.function and JAX's value-and-grad
plus update one jax.jit.
[--compiled] --lib torch|tensorflow|jax"""
import sys

from benchlib import lib_from_argv, load, measure_steps

compiled = sys.argv[1:2] == ["--compiled"]
if compiled:
    del sys.argv[1]

LR = 0.1

lib = lib_from_argv()
if lib == "numpy":
    raise SystemExit("resnet20_step.py: no NumPy peer (NumPy has no autodiff); use --lib torch|tensorflow|jax")
m = load(lib)
import numpy as np  # noqa: E402  (data is made once with NumPy, then handed over)
from resnet20_common import BATCH, EPS, blocks, make_params  # noqa: E402

rng = np.random.default_rng(0)
X = rng.standard_normal((BATCH, 32, 32, 3), dtype=np.float32)   # NHWC
LABELS = rng.integers(0, 10, BATCH)
Y = np.eye(10, dtype=np.float32)[LABELS]
# The parameters in order: (HWIO kernel, gamma, beta) per conv, then the dense layer.
INIT = make_params(rng)
print(f"PARAMS {sum(p.size for p in INIT)}")

if lib == "torch":
    import torch
    import torch.nn.functional as F
    x = torch.from_numpy(X.transpose(0, 3, 1, 2).copy())                       # NCHW
    labels = torch.from_numpy(LABELS)
    params = [torch.from_numpy(np.ascontiguousarray(p.transpose(3, 2, 0, 1)) if p.ndim == 4 else p.copy())
              .requires_grad_() for p in INIT]
    print(f"PARAMS_TORCH {sum(p.numel() for p in params)}")

    def forward_loss(x, labels, *ps):
        it = iter(ps)

        def cbr(h, stride, relu=True):
            w, g, b = next(it), next(it), next(it)
            h = F.batch_norm(F.conv2d(h, w, stride=stride, padding=1), None, None, g, b, training=True, eps=EPS)
            return torch.relu(h) if relu else h
        h = cbr(x, 1)
        for cin, cout, stride in blocks():
            r = cbr(cbr(h, stride), 1, relu=False)
            if stride != 1:
                pad = (cout - cin) // 2
                h = F.pad(h[:, :, ::2, ::2], (0, 0, 0, 0, pad, pad))
            h = torch.relu(r + h)
        w, b = next(it), next(it)
        return F.cross_entropy(h.mean((2, 3)) @ w + b, labels)

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

    sync = lambda v: v  # noqa: E731
elif lib == "tensorflow":
    tf = m
    x, y = tf.constant(X), tf.constant(Y)
    params = [tf.Variable(p) for p in INIT]

    def step():
        it = iter(params)

        def cbr(h, stride, relu=True):
            w, g, b = next(it), next(it), next(it)
            h, _, _ = tf.compat.v1.nn.fused_batch_norm(tf.nn.conv2d(h, w, stride, "SAME"), g, b,
                                                       epsilon=EPS, is_training=True)
            return tf.nn.relu(h) if relu else h
        with tf.GradientTape() as tape:
            h = cbr(x, 1)
            for cin, cout, stride in blocks():
                r = cbr(cbr(h, stride), 1, relu=False)
                if stride != 1:
                    pad = (cout - cin) // 2
                    h = tf.pad(h[:, ::2, ::2, :], [[0, 0], [0, 0], [0, 0], [pad, pad]])
                h = tf.nn.relu(r + h)
            w, b = next(it), next(it)
            logits = tf.reduce_mean(h, axis=(1, 2)) @ w + b
            loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits))
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

    def loss_fn(params):
        it = iter(params)

        def cbr(h, stride, relu=True):
            w, g, b = next(it), next(it), next(it)
            h = lax.conv_general_dilated(h, w, (stride, stride), "SAME", dimension_numbers=DN)
            mu = jnp.mean(h, axis=(0, 1, 2))
            var = jnp.var(h, axis=(0, 1, 2))
            h = (h - mu) * lax.rsqrt(var + EPS) * g + b
            return jax.nn.relu(h) if relu else h
        h = cbr(x, 1)
        for cin, cout, stride in blocks():
            r = cbr(cbr(h, stride), 1, relu=False)
            if stride != 1:
                pad = (cout - cin) // 2
                h = jnp.pad(h[:, ::2, ::2, :], ((0, 0), (0, 0), (0, 0), (pad, pad)))
            h = jax.nn.relu(r + h)
        w, b = next(it), next(it)
        return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(jnp.mean(h, axis=(1, 2)) @ w + b), axis=-1))

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
