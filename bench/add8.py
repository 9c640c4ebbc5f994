"""bench/add8.py — eager `a + b` on 8-element float32 tensors in a while loop
(peer of add8.tfe): per-op overhead, loop included. --lib numpy|torch|tensorflow|jax"""
from benchlib import measure, setup

ops, m = setup()
a = ops.randn((8,))
b = ops.randn((8,))
sync = ops.sync


def run(n):
    i = 0
    while i < n:
        c = a + b
        sync(c)  # JAX: block_until_ready each op; a no-op elsewhere
        i += 1


measure(run)
