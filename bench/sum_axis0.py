"""bench/sum_axis0.py — `sum` over axis 0 of a 4096x4096 float32 tensor
(peer of sum_axis0.tfe). --lib numpy|torch|tensorflow|jax"""
from benchlib import measure, setup

ops, m = setup()
x = ops.randn((4096, 4096))
total = ops.sum
sync = ops.sync


def run(n):
    i = 0
    while i < n:
        s = total(x, 0)
        sync(s)
        i += 1


measure(run)
