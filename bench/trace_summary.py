#!/usr/bin/env python3
"""Per-op table of a trace written by `trainer ... profiler=trace` (LibTorch's profiler, chrome://tracing format).

    python3 bench/trace_summary.py runs/<run>/profile.trace.json [--top 25] [--steps N]

Self time is an op's duration minus the time of the ops nested directly inside it on the same thread, so the self
column adds up to the profiled time and shows where the time went: a matmul kernel, a cast, a copy, an allocation.
"""
import argparse
import collections
import json
import sys


def load_events(path):
    with open(path) as f:
        events = [e for e in json.load(f) if e.get("ph") == "X"]
    return sorted(events, key=lambda e: (e["tid"], e["ts"], -e["dur"]))


def self_times(events):
    """Returns {name: [calls, total_us, self_us]} with nesting found per thread from the time intervals."""
    table = collections.defaultdict(lambda: [0, 0.0, 0.0])
    stack = []  # (end_ts, name, child_us) for the open ops of the current thread
    tid = None

    def close_until(ts):
        while stack and stack[-1][0] <= ts:
            end, name, dur, child = stack.pop()
            table[name][2] += dur - child
            if stack:
                stack[-1][3] += dur

    for e in events:
        if e["tid"] != tid:
            close_until(float("inf"))
            tid = e["tid"]
        close_until(e["ts"])
        table[e["name"]][0] += 1
        table[e["name"]][1] += e["dur"]
        stack.append([e["ts"] + e["dur"], e["name"], e["dur"], 0.0])
    close_until(float("inf"))
    return table


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("--top", type=int, default=25, help="rows to print, by self time")
    p.add_argument("--steps", type=int, default=1, help="profiled steps in the trace: times are divided by it")
    a = p.parse_args()
    table = self_times(load_events(a.trace))
    total = sum(v[2] for v in table.values())
    if total <= 0:
        sys.exit(f"{a.trace}: no events")
    print(f"profiled op time: {total / 1e6 / a.steps:.3f} s per step\n")
    print("| op | calls/step | self ms/step | self % | total ms/step |")
    print("|---|---:|---:|---:|---:|")
    for name, (calls, tot, own) in sorted(table.items(), key=lambda kv: -kv[1][2])[: a.top]:
        print(f"| {name} | {calls / a.steps:.0f} | {own / 1e3 / a.steps:.1f} | {100 * own / total:.1f} | "
              f"{tot / 1e3 / a.steps:.1f} |")


if __name__ == "__main__":
    main()
