"""bench/sum_axis.py — `sum` over one axis of a 4096x4096 float32 tensor
(peer of sum_axis0.tfe / sum_axis1.tfe). --axis 0|1 --lib numpy|torch|tensorflow|jax"""
import sys

from benchlib import measure, setup

# --axis N comes first; benchlib parses the rest (--lib)
axis = 0
if sys.argv[1:2] == ["--axis"]:
    axis = int(sys.argv[2])
    del sys.argv[1:3]

ops, m = setup()
x = ops.randn((4096, 4096))
total = ops.sum
sync = ops.sync


def run(n):
    i = 0
    while i < n:
        s = total(x, axis)
        sync(s)
        i += 1


measure(run)
