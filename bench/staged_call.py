"""bench/staged_call.py — a cached call of a staged function with one tiny op,
`x + 1.0` on a 4-element float32 tensor, in a while loop (peer of
staged_call.tfe): the fixed per-call cost of running a compiled trace, loop
included. --lib tensorflow|jax|torch stages f the way its users do:
tf.function, jax.jit (each result waited for with block_until_ready),
torch.compile (inductor; backend="eager" when inductor cannot compile here).
The first call traces/compiles, untimed; every timed call hits the cache.

With --eager first (peer of staged_call_eager.tfe) f is called as a plain
function, op by op, and --lib numpy is allowed too.
[--eager] --lib numpy|torch|tensorflow|jax"""

from benchlib import measure_staged_calls, setup, take_eager_flag

eager = take_eager_flag()  # before benchlib parses --lib

ops, m = setup()
x = ops.randn((4,))


def f(x):
    return x + 1.0


def compile_torch(torch):
    """torch.compile(f) with the default backend, inductor, compiled now;
    when inductor fails (it needs a working C++ compiler) backend="eager"."""
    try:
        g = torch.compile(f)
        g(x)
        print("BACKEND torch.compile inductor")
        return g
    except Exception as e:  # BackendCompilerFailed, InductorError, ...
        print(f"NOTE torch.compile inductor failed ({type(e).__name__}: "
              f"{str(e).splitlines()[0][:200] if str(e) else ''}); using backend='eager'")
        torch._dynamo.reset()
        g = torch.compile(f, backend="eager")
        print("BACKEND torch.compile eager")
        return g


measure_staged_calls(f, x, ops, m, eager, compile_torch, "staged_call.py")
