-- bench/loop.lua — a 10^7-step scalar while loop in Lua 5.4 (peer of
-- loop.tfe). os.clock is process CPU time (see fib.lua).
local function loop(n)
  local i = 0
  local s = 0
  while i < n do
    s = s + i
    i = i + 1
  end
  return s
end

local reps = tonumber(os.getenv("BENCH_REPEATS") or "5")
loop(10000000) -- warm-up
for _ = 1, reps do
  local t0 = os.clock()
  loop(10000000)
  print(string.format("SECONDS_PER_ITER %.9g", os.clock() - t0))
end
