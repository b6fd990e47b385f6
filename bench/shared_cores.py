#!/usr/bin/env python3
"""Tokens/s when the cores are shared: the trainer quiet, beside one busy process, and as two processes of
scripts/launch.sh --nproc 2 on the same cores, in alternating rounds of fresh processes.

Each round runs three arms one after the other, with the same keys (default: configs/base.yml's model, global batch 8,
dtype=auto):
  quiet  one trainer process alone;
  busy   the same beside one busy process (a Python loop spinning on one core), started before it and stopped after;
  two    scripts/launch.sh --nproc 2: two trainer processes with default keys (num_threads=0), the same global batch.
Each arm's tokens/s is the median of its steps after --warmup (metrics.jsonl, rank 0: the global batch's tokens).
Printed: every round's figures, then busy/quiet and two/quiet as the median and range over the rounds (a ratio is
taken within its round, so a machine whose speed drifts between rounds still gives a fair ratio).

    bench/shared_cores.sh                         # 3 rounds, base.yml's model
    bench/shared_cores.sh --rounds 5 num_threads=1 --env OMP_WAIT_POLICY=active
Standard library only.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# base.yml's model (emb 256, 4 layers, vocab 256, 128 tokens), the global batch of 8 split so that one process and
# two processes run the same global batch (K=2 x 4 alone, K=1 x 4 each of two).
DEFAULT = ["base.yml", "global_batch_size=8", "per_device_batch_size=4"]


def tokens_per_s(run_dir, warmup):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rates = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r and "step" in r][warmup:]
    if not rates:
        sys.exit(f"{run_dir}: no steps after the {warmup} warm-up ones")
    return statistics.median(rates)


def run_arm(a, arm, workdir, env, n):
    name = f"{arm}-{n}"
    keys = [*a.keys, f"steps={a.steps}", "log_period=1000", "enable_checkpointing=false",
            f"base_output_directory={workdir}", f"run_name={name}"]
    if arm == "two":
        cmd = [os.path.join(ROOT, "scripts", "launch.sh"), "--nproc", "2", *keys]
    else:
        cmd = [a.trainer, *keys]
    busy = None
    if arm == "busy":
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.5)  # running before the trainer starts
    log = os.path.join(workdir, name + ".log")
    try:
        with open(log, "w") as f:
            rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    finally:
        if busy:
            busy.kill()
            busy.wait()
    if rc != 0:
        with open(log) as f:
            tail = f.read()[-2000:]
        sys.exit(f"{arm}: exited {rc} ({' '.join(cmd)}); the end of its log:\n{tail}")
    return tokens_per_s(os.path.join(workdir, name), a.warmup)


def spread(values):
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("keys", nargs="*", help="a config and trainer keys (key=value); without a config: base.yml, global batch 8")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the three arms")
    p.add_argument("--steps", type=int, default=8, help="steps per run")
    p.add_argument("--warmup", type=int, default=2, help="steps left out of each run's median")
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE for every trainer (repeatable)")
    p.add_argument("--trainer", default=os.environ.get("TRAINER", os.path.join(ROOT, "build", "trainer")))
    p.add_argument("--keep", action="store_true", help="keep the run directories (printed)")
    a = p.parse_args()
    if a.steps <= a.warmup:
        p.error("--steps must exceed --warmup")
    if not any(k.endswith(".yml") for k in a.keys):
        a.keys = DEFAULT + a.keys
    env = dict(os.environ, TRAINER=a.trainer)
    for pair in a.env:
        name, _, value = pair.partition("=")
        env[name] = value
    workdir = tempfile.mkdtemp(prefix="shared_cores.")
    ratios = {"busy": [], "two": []}
    try:
        print(f"Shared cores, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs "
              f"({len(os.sched_getaffinity(0))} in this process's mask), load average {os.getloadavg()[0]:.1f} at "
              f"the start; keys: {' '.join(a.keys)}; env: {' '.join(a.env) or '-'}\n")
        print("| round | quiet tokens/s | beside one busy process | two processes (launch.sh --nproc 2), total | "
              "busy / quiet | two / quiet | load average |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for n in range(1, a.rounds + 1):
            quiet = run_arm(a, "quiet", workdir, env, n)
            busy = run_arm(a, "busy", workdir, env, n)
            two = run_arm(a, "two", workdir, env, n)
            ratios["busy"].append(busy / quiet)
            ratios["two"].append(two / quiet)
            print(f"| {n} | {quiet:.0f} | {busy:.0f} | {two:.0f} | {busy / quiet:.2f} | {two / quiet:.2f} | "
                  f"{os.getloadavg()[0]:.1f} |")
            sys.stdout.flush()
        print(f"\nbeside one busy process / quiet: {spread(ratios['busy'])} (median (range) over {a.rounds} rounds)")
        print(f"two processes on these cores / one: {spread(ratios['two'])}")
    finally:
        if a.keep:
            print(f"runs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
