"""bench/resnet20_infer.py — ResNet-20 inference (peer of
resnet20_infer.tfe and resnet20_infer_staged.tfe): the network of
resnet20_step.py, batch norm with given statistics (a trained network's: here
random means, variances in [0.5, 1.5)), a forward pass on a batch of 32
random 32x32x3 images; each side prints `PARAMS n` (the statistics counted).

--lib torch|tensorflow|jax, each in its natural layout: PyTorch NCHW/OIHW
(F.batch_norm with training=False, under torch.inference_mode), TensorFlow
NHWC/HWIO (the fused batch norm with is_training=False), JAX NHWC/HWIO (the
formula written out). Eager by default (JAX op by op). With --compiled first
(peer of resnet20_infer_staged.tfe): torch.compile (inductor, default
options), tf.function (Grappler's remapper may fuse conv + batch norm +
relu into one op on the CPU), jax.jit.
[--compiled] --lib torch|tensorflow|jax"""
import sys

from benchlib import lib_from_argv, load, measure

compiled = sys.argv[1:2] == ["--compiled"]
if compiled:
    del sys.argv[1]

lib = lib_from_argv()
if lib == "numpy":
    raise SystemExit("resnet20_infer.py: no NumPy peer (no convolution); use --lib torch|tensorflow|jax")
m = load(lib)
import numpy as np  # noqa: E402  (data is made once with NumPy, then handed over)
from resnet20_common import BATCH, EPS, blocks, make_params  # noqa: E402

rng = np.random.default_rng(0)
X = rng.standard_normal((BATCH, 32, 32, 3), dtype=np.float32)   # NHWC
# The parameters in order: (HWIO kernel, gamma, beta, mean, variance) per
# conv, then the dense layer.
INIT = make_params(rng, stats=True)
print(f"PARAMS {sum(p.size for p in INIT)}")


def network(params, conv_bn_act, shortcut, relu, head):
    """The forward pass over params, given each library's pieces."""
    it = iter(params)

    def cbr(h, stride, act=True):
        return conv_bn_act(h, stride, act, [next(it) for _ in range(5)])

    def forward(x):
        h = cbr(x, 1)
        for cin, cout, stride in blocks():
            r = cbr(cbr(h, stride), 1, act=False)
            if stride != 1:
                h = shortcut(h, (cout - cin) // 2)
            h = relu(r + h)
        return head(h, next(it), next(it))
    return forward


if lib == "torch":
    import torch
    import torch.nn.functional as F
    x = torch.from_numpy(X.transpose(0, 3, 1, 2).copy())                       # NCHW
    params = [torch.from_numpy(np.ascontiguousarray(p.transpose(3, 2, 0, 1)) if p.ndim == 4 else p.copy())
              for p in INIT]

    def forward(x, *ps):
        def conv_bn_act(h, stride, act, q):
            w, g, b, mu, var = q
            h = F.batch_norm(F.conv2d(h, w, stride=stride, padding=1), mu, var, g, b, training=False, eps=EPS)
            return torch.relu(h) if act else h
        return network(ps, conv_bn_act, lambda h, pad: F.pad(h[:, :, ::2, ::2], (0, 0, 0, 0, pad, pad)),
                       torch.relu, lambda h, w, b: h.mean((2, 3)) @ w + b)(x)

    if compiled:
        forward = torch.compile(forward)  # compiled by the first (warm-up) call

    def run(n):
        with torch.inference_mode():
            for _ in range(n):
                out = forward(x, *params)
        return out
elif lib == "tensorflow":
    tf = m
    x = tf.constant(X)
    params = [tf.constant(p) for p in INIT]

    def forward(x, params):
        def conv_bn_act(h, stride, act, q):
            w, g, b, mu, var = q
            h, _, _ = tf.compat.v1.nn.fused_batch_norm(tf.nn.conv2d(h, w, stride, "SAME"), g, b, mean=mu,
                                                       variance=var, epsilon=EPS, is_training=False)
            return tf.nn.relu(h) if act else h
        return network(params, conv_bn_act,
                       lambda h, pad: tf.pad(h[:, ::2, ::2, :], [[0, 0], [0, 0], [0, 0], [pad, pad]]),
                       tf.nn.relu, lambda h, w, b: tf.reduce_mean(h, axis=(1, 2)) @ w + b)(x)

    if compiled:
        forward = tf.function(forward)  # traced by the first (warm-up) call

    def run(n):
        for _ in range(n):
            out = forward(x, params)
        return out.numpy()
else:
    import jax
    import jax.numpy as jnp
    from jax import lax
    x = jnp.asarray(X)
    params = [jnp.asarray(p) for p in INIT]
    DN = ("NHWC", "HWIO", "NHWC")

    def forward(x, params):
        def conv_bn_act(h, stride, act, q):
            w, g, b, mu, var = q
            h = lax.conv_general_dilated(h, w, (stride, stride), "SAME", dimension_numbers=DN)
            h = (h - mu) * lax.rsqrt(var + EPS) * g + b
            return jax.nn.relu(h) if act else h
        return network(params, conv_bn_act,
                       lambda h, pad: jnp.pad(h[:, ::2, ::2, :], ((0, 0), (0, 0), (0, 0), (pad, pad))),
                       jax.nn.relu, lambda h, w, b: jnp.mean(h, axis=(1, 2)) @ w + b)(x)

    if compiled:
        forward = jax.jit(forward)  # compiled by the first (warm-up) call

    def run(n):
        for _ in range(n):
            out = forward(x, params)
        return out.block_until_ready()

measure(run)
print(f"OUT {float(np.sum(np.asarray(run(1)))):.4f}")
