"""bench/fma.py — eager elementwise `a * b + c` on 10^7 float32 (peer of
fma.tfe): two ops, one temporary. --lib numpy|torch|tensorflow|jax"""
from benchlib import measure, setup

ops, m = setup()
a = ops.randn((10000000,))
b = ops.randn((10000000,))
c = ops.randn((10000000,))
sync = ops.sync


def run(n):
    i = 0
    while i < n:
        d = a * b + c
        sync(d)
        i += 1


measure(run)
