"""bench/l2hmc.py — one HMC sampler step, L2HMC-style (peer of l2hmc.tfe and
l2hmc_eager.tfe): the "strongly correlated Gaussian" of the L2HMC paper
(2-D, covariance diag(100, 0.1) rotated by pi/4; energy 0.5 x^T P x), 200
chains, fresh momenta, 10 leapfrog steps of size 0.1, each computing the
gradient of the energy w.r.t. the positions inside the step, then a
Metropolis accept/reject per chain; each call continues the chains.

--lib tensorflow|jax stages the step the way its users do: tf.function
(tf.GradientTape inside), jax.jit (jax.grad inside; the PRNG key is carried
through the step; each result waited for with block_until_ready). The first
call traces/compiles, untimed. --lib torch runs the step eagerly
(torch.autograd.grad inside), as the goal compares against PyTorch eager.
With --eager first (peer of l2hmc_eager.tfe) nothing is staged.
[--eager] --lib torch|tensorflow|jax"""
import time

from benchlib import measure, setup, take_eager_flag

eager = take_eager_flag()  # before benchlib parses --lib

ops, m = setup()
CHAINS, LEAPFROGS, EPS = 200, 10, 0.1
PREC = [[5.005, -4.995], [-4.995, 5.005]]  # inverse of the covariance

def leapfrog(x, v, grad_energy):
    """LEAPFROGS leapfrog steps from (x, v), the same code for every library
    (their arrays share the operators); a Python loop, unrolled when traced."""
    g = grad_energy(x)
    i = 0
    while i < LEAPFROGS:
        v = v - 0.5 * EPS * g
        x = x + EPS * v
        g = grad_energy(x)
        v = v - 0.5 * EPS * g
        i += 1
    return x, v


if ops.lib == "torch":
    torch = m
    prec = torch.tensor(PREC, dtype=torch.float32)

    def energy(x):
        return 0.5 * torch.sum((x @ prec) * x, dim=-1)

    def grad_energy(x):
        x = x.detach().requires_grad_()
        return torch.autograd.grad(energy(x).sum(), x)[0]

    def hmc_step(x):
        v = torch.randn_like(x)
        h0 = energy(x) + 0.5 * torch.sum(v * v, dim=-1)
        x1, v = leapfrog(x, v, grad_energy)
        h1 = energy(x1) + 0.5 * torch.sum(v * v, dim=-1)
        accept = torch.rand(x.shape[0]) < torch.exp(h0 - h1)
        return torch.where(accept[:, None], x1, x)

    step = hmc_step
    state = ops.randn((CHAINS, 2))
elif ops.lib == "tensorflow":
    tf = m
    prec = tf.constant(PREC, dtype=tf.float32)

    def energy(x):
        return 0.5 * tf.reduce_sum((x @ prec) * x, axis=-1)

    def grad_energy(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            e = tf.reduce_sum(energy(x))
        return tape.gradient(e, x)

    def hmc_step(x):
        v = tf.random.normal(tf.shape(x))
        h0 = energy(x) + 0.5 * tf.reduce_sum(v * v, axis=-1)
        x1, v = leapfrog(x, v, grad_energy)
        h1 = energy(x1) + 0.5 * tf.reduce_sum(v * v, axis=-1)
        accept = tf.random.uniform(tf.shape(x)[:1]) < tf.exp(h0 - h1)
        return tf.where(accept[:, None], x1, x)

    step = hmc_step if eager else tf.function(hmc_step)
    state = ops.randn((CHAINS, 2))
elif ops.lib == "jax":
    jax = m
    import jax.numpy as jnp
    prec = jnp.asarray(PREC, dtype=jnp.float32)

    def energy(x):
        return 0.5 * jnp.sum((x @ prec) * x, axis=-1)

    grad_energy = jax.grad(lambda x: jnp.sum(energy(x)))

    def hmc_step(xk):
        x, key = xk
        key, kv, ku = jax.random.split(key, 3)
        v = jax.random.normal(kv, x.shape, dtype=jnp.float32)
        h0 = energy(x) + 0.5 * jnp.sum(v * v, axis=-1)
        x1, v = leapfrog(x, v, grad_energy)
        h1 = energy(x1) + 0.5 * jnp.sum(v * v, axis=-1)
        accept = jax.random.uniform(ku, (x.shape[0],)) < jnp.exp(h0 - h1)
        return jnp.where(accept[:, None], x1, x), key

    step = hmc_step if eager else jax.jit(hmc_step)
    state = (ops.randn((CHAINS, 2)), jax.random.PRNGKey(1))
else:
    raise SystemExit("l2hmc.py: no NumPy peer (NumPy has no autodiff); use --lib torch|tensorflow|jax")


def sync(s):
    if ops.lib == "jax":
        s[0].block_until_ready()
    return s


# The first call traces / compiles, outside any timing.
t0 = time.perf_counter()
state = sync(step(state))
print(f"FIRST_CALL_SECONDS {time.perf_counter() - t0!r}")


def run(n):
    global state
    i = 0
    while i < n:
        state = sync(step(state))
        i += 1


measure(run)
# A check that the chains sample the target (each marginal variance -> 50.05
# once they have mixed); the harness ignores the line.
x = state[0] if ops.lib == "jax" else state
print("VAR", [round(float(v), 2) for v in (x * x).numpy().mean(axis=0)]
      if ops.lib != "jax" else [round(float(v), 2) for v in (x * x).mean(axis=0)])
