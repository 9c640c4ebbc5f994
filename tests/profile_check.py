#!/usr/bin/env python3
"""tests/profile_check.py — checks a trace written by tfe's profiler
(p.save, TFE_PROFILE) by its structure, never by its times: it parses as the
Chrome trace event format, "X" events nest properly on each thread, the self
times add up to the time the top-level events cover, and (--known) every op
of tests/profile/known.tfe appears with its count, staged calls labeled
trace or cached. Usage: profile_check.py TRACE.json [--known] [--threads] [--collective]."""
import collections
import json
import sys


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check_structure(doc):
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        fail("no traceEvents list")
    evs = doc["traceEvents"]
    names = {}
    for e in evs:
        ph = e.get("ph")
        if ph not in ("X", "C", "M"):
            fail("unexpected phase %r" % (ph,))
        if not isinstance(e.get("name"), str) or not isinstance(e.get("pid"), int) or not isinstance(e.get("tid"), int):
            fail("event without name/pid/tid: %r" % (e,))
        if ph == "M":
            if e["name"] == "thread_name":
                names[e["tid"]] = e["args"]["name"]
            continue
        if not isinstance(e.get("ts"), (int, float)) or e["ts"] < 0:
            fail("bad ts: %r" % (e,))
        if ph == "X":
            if not isinstance(e.get("dur"), (int, float)) or e["dur"] < 0:
                fail("bad dur: %r" % (e,))
            if not isinstance(e.get("cat"), str):
                fail("X event without cat: %r" % (e,))
        if ph == "C" and not isinstance(e.get("args", {}).get("bytes"), int):
            fail("counter without bytes: %r" % (e,))
    if names.get(0) != "main":
        fail("thread 0 is not named main: %r" % (names,))
    return evs, names


def nest(evs):
    """Per thread: every X event inside its parent or after it; returns the
    self times' sum and the top-level events' durations' sum (in ns)."""
    by_tid = collections.defaultdict(list)
    for e in evs:
        if e["ph"] == "X":
            # the file's microseconds have three decimals: exact nanoseconds
            by_tid[e["tid"]].append((round(e["ts"] * 1000), round(e["dur"] * 1000), e))
    sums = {}
    for tid, xs in by_tid.items():
        xs.sort(key=lambda t: (t[0], -t[1]))
        stack = []
        self_sum = top_sum = 0
        selfs = []
        for ts, dur, e in xs:
            while stack and not (ts >= stack[-1][0] and ts + dur <= stack[-1][0] + stack[-1][1]):
                if ts < stack[-1][0] + stack[-1][1]:
                    fail("events overlap without nesting on thread %d: %r and %r" % (tid, stack[-1][2], e))
                stack.pop()
            rec = [ts, dur, e, dur]
            if stack:
                stack[-1][3] -= dur
            else:
                top_sum += dur
            stack.append(rec)
            selfs.append(rec)
        self_sum = sum(r[3] for r in selfs)
        if any(r[3] < 0 for r in selfs):
            fail("an event's children outlast it on thread %d" % tid)
        sums[tid] = (self_sum, top_sum)
    return sums


def main():
    args = sys.argv[1:]
    if not args:
        fail("usage: profile_check.py TRACE.json [--known] [--threads] [--collective]")
    with open(args[0]) as f:
        doc = json.load(f)
    evs, names = check_structure(doc)
    sums = nest(evs)
    self_sum, top_sum = sums.get(0, (0, 0))
    # self times partition the top-level events' time exactly (integer ns)
    if self_sum != top_sum:
        fail("self times add to %d ns, the top-level events cover %d ns" % (self_sum, top_sum))
    xs = [e for e in evs if e["ph"] == "X"]
    count = collections.Counter((e["cat"], e["name"]) for e in xs)
    if "--known" in args:
        want = {
            ("op", "add"): 3, ("op", "mul"): 4, ("op", "matmul"): 3, ("op", "sum"): 2, ("op", "relu"): 1,
            ("staged", "step (trace)"): 1, ("staged", "step (cached)"): 2,
            ("plan", "matmul"): 2, ("fused", "fused(add,relu,mul,sum)"): 2,
            ("backward", "backward matmul"): 1, ("backward", "backward mul"): 1, ("backward", "backward sum"): 1,
            ("checkpoint", "save"): 1,
        }
        for k, n in want.items():
            if count.get(k) != n:
                fail("%s %s: %r events, expected %d" % (k[0], k[1], count.get(k), n))
        tr = [e for e in xs if e["name"] == "step (trace)"][0]
        if tr["args"].get("reason") != "first call":
            fail("the trace's reason: %r" % (tr["args"],))
        add = [e for e in xs if e["cat"] == "op" and e["name"] == "add"]
        if sorted(e["args"]["inputs"] for e in add) != ["float32[4,2] float32[]", "float32[4,3] float32[4,3]",
                                                         "float32[4,3] float32[]"]:
            fail("add's inputs: %r" % ([e["args"] for e in add],))
        if any(e["args"].get("device") != "cpu:0" for e in add):
            fail("add's device: %r" % ([e["args"] for e in add],))
        if [e["args"]["bytes"] for e in add if e["args"]["inputs"] == "float32[4,3] float32[4,3]"] != [64]:
            fail("the add of two float32[4,3] should allocate one 64-byte block")
        # every op of a cached call inside its staged event
        for c in (e for e in xs if e["name"] == "step (cached)"):
            inner = [e for e in xs if e["tid"] == 0 and e["ts"] >= c["ts"] and
                     e["ts"] + e["dur"] <= c["ts"] + c["dur"] and e is not c]
            if sorted(e["name"] for e in inner) != ["fused(add,relu,mul,sum)", "matmul"]:
                fail("a cached call holds %r" % ([e["name"] for e in inner],))
        if not any(e["ph"] == "C" and e["name"] == "live bytes" for e in evs):
            fail("no live bytes counter")
    if "--threads" in args:
        pool = [e for e in xs if e["cat"] == "pool"]
        if not pool or any(e["tid"] == 0 for e in pool):
            fail("no pool work on worker threads: %r" % (pool[:3],))
        if not all(names.get(e["tid"], "").startswith("pool worker") for e in pool):
            fail("pool threads not named: %r" % (names,))
    if "--collective" in args:
        if not any(e["cat"] == "collective" and e["name"] == "allreduce" and e["args"].get("bytes", 0) > 0 for e in xs):
            fail("no allreduce event")
    print("ok: %d events, %d threads" % (len(evs), len(sums)))


main()
