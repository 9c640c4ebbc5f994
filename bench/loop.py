"""bench/loop.py — a 10^7-step scalar while loop in CPython (peer of loop.tfe)."""
from benchlib import measure


def loop(n):
    i = 0
    s = 0
    while i < n:
        s += i
        i += 1
    return s


def run(n):
    i = 0
    while i < n:
        loop(10000000)
        i += 1


measure(run, iters=1)
