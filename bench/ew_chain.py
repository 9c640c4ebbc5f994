"""bench/ew_chain.py — a cached call of a staged function that runs a chain of
100 elementwise steps `x = x * 0.999 + 0.001` (200 ops) on a 64-element
float32 tensor, in a while loop (peer of ew_chain.tfe). The chain is a Python
`while i < 100` loop with a plain int counter, unrolled when the function is
traced. --lib torch|tensorflow|jax stages f the way its users do:
TorchScript (torch.jit.trace, which unrolls the loop as tfe does), tf.function
(grappler), jax.jit (XLA; each result waited for with block_until_ready).
The first call traces/compiles, untimed; every timed call hits the cache.

With --eager first (peer of ew_chain_eager.tfe) f is called as a plain
function, op by op, and --lib numpy is allowed too.
[--eager] --lib numpy|torch|tensorflow|jax"""

from benchlib import measure_staged_calls, setup, take_eager_flag

eager = take_eager_flag()  # before benchlib parses --lib

ops, m = setup()
x = ops.randn((64,))


def f(x):
    i = 0
    while i < 100:
        x = x * 0.999 + 0.001
        i += 1
    return x


def script_torch(torch):
    """TorchScript: torch.jit.trace of f (the loop unrolls into 200 nodes,
    as in tfe's trace); its profiling executor optimizes the graph during
    the first few calls, which the warm-up covers."""
    g = torch.jit.trace(f, (x,))
    print("BACKEND torch.jit.trace")
    return g


measure_staged_calls(f, x, ops, m, eager, script_torch, "ew_chain.py")
