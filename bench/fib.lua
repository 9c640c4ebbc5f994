-- bench/fib.lua — recursive fib(27) in Lua 5.4 (peer of fib.tfe).
-- os.clock is process CPU time: Lua has no finer wall clock, and this
-- single-threaded run spends its wall time on the CPU.
local function fib(n)
  if n < 2 then return n end
  return fib(n - 1) + fib(n - 2)
end

local reps = tonumber(os.getenv("BENCH_REPEATS") or "5")
fib(27) -- warm-up
for _ = 1, reps do
  local t0 = os.clock()
  fib(27)
  print(string.format("SECONDS_PER_ITER %.9g", os.clock() - t0))
end
