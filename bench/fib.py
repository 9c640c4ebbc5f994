"""bench/fib.py — recursive fib(27) in CPython (peer of fib.tfe)."""
from benchlib import measure


def fib(n):
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)


def run(n):
    i = 0
    while i < n:
        fib(27)
        i += 1


measure(run, iters=1)
