"""bench/matmul.py — `a @ b` on 1024x1024 float32 (peer of matmul.tfe).
--lib numpy|torch|tensorflow|jax"""
from benchlib import measure, setup

ops, m = setup()
a = ops.randn((1024, 1024))
b = ops.randn((1024, 1024))
sync = ops.sync


def run(n):
    i = 0
    while i < n:
        c = a @ b
        sync(c)
        i += 1


measure(run)
