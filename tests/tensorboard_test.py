#!/usr/bin/env python3
"""enable_tensorboard=true: tensorboard's own reader (EventAccumulator) reads back, tag by tag, every numeric field of
every metrics.jsonl line at its step, as float32 (the event's simple_value):
  - a tiny synthetic run with K=2 and evaluations (loss, eval_loss, lr, grad_norm, tokens_per_s, gns_tokens, ...);
  - a tiny DPO run (rewards_*, logps_*, eval_rewards_*);
  - a resume from an earlier checkpoint (load_checkpoint_step): the second process's START event drops the first's
    steps after the checkpoint, as metrics.jsonl is cut back; control: read without that purge, steps repeat.
Cost: 4 trainer runs of the tiny model (2 layers, 32 wide), ~20 s on 2 cores.

Usage: tests/tensorboard_test.py REPO TRAINER SCRATCH_DIR
Exit: 0 pass; 1 fail.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

repo, trainer, scratch = sys.argv[1:4]
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def train(name, *keys, expect=0):
    cmd = [trainer, f"{repo}/configs/tiny.yml", f"base_output_directory={scratch}", f"run_name={name}",
           "enable_tensorboard=true", "log_period=100", *keys]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != expect:
        sys.exit(f"{' '.join(cmd)} exited {run.returncode}:\n{run.stdout}{run.stderr}")
    return f"{scratch}/{name}"


def metrics(run_dir):
    """{tag: [(step, float32 value)]} from metrics.jsonl, nulls left out as the writer leaves them out."""
    out = {}
    for line in open(f"{run_dir}/metrics.jsonl"):
        row = json.loads(line)
        for tag, value in row.items():
            if tag != "step" and value is not None:
                out.setdefault(tag, []).append((row["step"], float(np.float32(value))))
    return out


def events(run_dir, purge=True):
    acc = EventAccumulator(f"{run_dir}/tensorboard", size_guidance={"scalars": 0}, purge_orphaned_data=purge)
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def same(run_dir, what, purge=True):
    want, got = metrics(run_dir), events(run_dir, purge)
    check(sorted(want) == sorted(got), f"{what}: the same {len(want)} tags as metrics.jsonl's fields")
    bad = [t for t in want if got.get(t) != want[t]]
    check(not bad, f"{what}: every tag's (step, value) list equals metrics.jsonl's" + (f" (differ: {bad})" if bad else ""))
    return want, got


# 1. Synthetic data, K=2 (the noise scale needs two microbatches), an evaluation every 3 steps.
run = train("synthetic", "steps=6", "gradient_accumulation_steps=2", "eval_interval=3", "eval_steps=1")
want, got = same(run, "synthetic")
for tag in ("loss", "eval_loss", "lr", "grad_norm", "tokens_per_s", "gns_tokens"):
    check(tag in got, f"synthetic: {tag} is a scalar")
check([s for s, _ in got.get("eval_loss", [])] == [3, 6], "synthetic: eval_loss at steps 3 and 6")
check([s for s, _ in got.get("loss", [])] == list(range(1, 7)), "synthetic: loss at steps 1..6")

# 2. DPO on pre-tokenized pairs.
pairs = f"{scratch}/pairs.jsonl"
with open(pairs, "w") as f:
    for i in range(12):
        prompt = [1 + (i * 5 + j) % 60 for j in range(3 + i % 3)]
        f.write(json.dumps({"prompt_ids": prompt, "chosen_ids": [(prompt[-1] + k) % 64 for k in (1, 2, 3)],
                            "rejected_ids": [(7 * i + k) % 64 for k in range(2 + i % 2)]}) + "\n")
env = dict(os.environ, SHADOWGRAD_VENV=os.path.dirname(os.path.dirname(sys.executable)))
for name in ("train", "val"):
    subprocess.run([f"{repo}/scripts/prepare_preference.sh", pairs, f"{scratch}/{name}.pairs"], env=env, check=True,
                   capture_output=True)
run = train("dpo", "steps=3", "dataset_type=preference", "use_dpo=true", f"dataset_path={scratch}/train.pairs",
            f"eval_dataset_path={scratch}/val.pairs", "eval_interval=3", "gradient_accumulation_steps=2")
want, got = same(run, "dpo")
for tag in ("rewards_chosen", "rewards_margin", "logps_chosen", "eval_rewards_accuracy"):
    check(tag in got, f"dpo: {tag} is a scalar")

# 3. A resume from step 2 of a 4-step run: metrics.jsonl is cut back to step 2, then steps 3..6 follow.
train("resume", "steps=4", "checkpoint_period=2", "max_num_checkpoints_to_keep=0")
run = train("resume", "steps=6", "checkpoint_period=2", "load_checkpoint_step=2")
check(len(os.listdir(f"{run}/tensorboard")) == 2, "resume: a second event file")
want, got = same(run, "resume")
check([s for s, _ in got.get("loss", [])] == list(range(1, 7)), "resume: loss at steps 1..6, each once")
unpurged = events(run, purge=False)
check([s for s, _ in unpurged["loss"]] == [1, 2, 3, 4, 3, 4, 5, 6],
      "control: without the START event's purge, steps 3 and 4 appear twice")

print("PASS" if not failures else f"FAIL: {len(failures)} checks")
sys.exit(1 if failures else 0)
