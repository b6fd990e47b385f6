#!/usr/bin/env python3
"""SFT eval loss against transformers (docs/data.md, "Supervised fine-tuning"), fp32 on the CPU.

A tiny random Llama that transformers' own classes build and save_pretrained writes (tests/hf_parity_test.py's
build) is imported with load_parameters_path. Ragged pre-tokenized prompt/completion examples ({"input_ids",
"labels"}, -100 on the prompt) go through scripts/prepare_sft.sh into a train and an eval .sft file. The trainer's
completion-only eval_loss (learning_rate=0, one step, eval after it; the exported weights are checked bitwise equal to
the imported ones) must equal, packed and unpacked, transformers' loss over all examples: each example's summed
target loss (the model's own loss with num_items_in_batch) added up and divided by ALL targets, within 1e-5 relative.
The mean of per-example means, the wrong normalisation, must miss the trainer's figure by more than 1e-3.

Usage: sft_hf_parity_test.py REPO TRAINER EXPORT_HF WORK_DIR
"""
import json
import os
import shutil
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_parity_test import V, build, run  # noqa: E402

TOL, WRONG_MIN, T = 1e-5, 1e-3, 16
# (prompt, completion) lengths: ragged on purpose, so the per-example mean weights a 1-target example like a
# 13-target one; every example fits a row of T tokens (no truncation).
EVAL_SHAPES = [(2, 1), (3, 13), (5, 2), (1, 9), (8, 4), (4, 12), (6, 1), (2, 6), (10, 6)]
TRAIN_SHAPES = [(3, 5), (2, 9), (4, 4), (6, 7)]


def examples(shapes, seed):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for prompt, completion in shapes:
        ids = torch.randint(0, V, (prompt + completion,), generator=g).tolist()
        rows.append({"input_ids": ids, "labels": [-100] * prompt + ids[prompt:]})
    return rows


def write_sft(repo, work, name, rows):
    jsonl, out = os.path.join(work, name + ".jsonl"), os.path.join(work, name + ".sft")
    with open(jsonl, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    # prepare_sft.sh under this test's Python's venv (the one the build links), not the checkout's .venv
    run([os.path.join(repo, "scripts", "prepare_sft.sh"), jsonl, out],
        env={**os.environ, "SHADOWGRAD_VENV": sys.prefix})
    return out


def trainer_eval_loss(trainer, export_hf, model_dir, train, val, work, packing, weights):
    name = f"packing_{packing}"
    run([trainer, "base.yml", f"load_parameters_path={model_dir}", "dtype=float32", "dataset_type=sft",
         f"dataset_path={train}", f"eval_dataset_path={val}", "sft_train_on_completion_only=true",
         f"packing={packing}", f"max_target_length={T}", "per_device_batch_size=2", "gradient_accumulation_steps=1",
         "steps=1", "learning_rate=0", "adam_weight_decay=0", "eval_interval=1", "eval_per_device_batch_size=2",
         f"base_output_directory={work}", f"run_name={name}", "checkpoint_period=1", "max_num_checkpoints_to_keep=0",
         "num_threads=1"])
    lines = [json.loads(l) for l in open(os.path.join(work, name, "metrics.jsonl"))]
    losses = [l["eval_loss"] for l in lines if l.get("eval_loss") is not None]
    if len(losses) != 1:
        sys.exit(f"FAILED: expected one eval_loss in {name}'s metrics.jsonl, got {losses}")
    # lr 0 must leave the weights as imported, so the eval saw transformers' weights
    out = os.path.join(work, name + "-hf")
    run([export_hf, os.path.join(work, name), out, "--dtype", "float32"])
    after = load_file(os.path.join(out, "model.safetensors"))
    changed = [n for n in weights if not torch.equal(after[n], weights[n])]
    if changed or set(after) != set(weights):
        sys.exit(f"FAILED: the weights changed in {name} ({changed}) or their names differ")
    return losses[0]


def main():
    repo, trainer, export_hf, work = sys.argv[1:5]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model = build("Llama", {})
    model_dir = os.path.join(work, "llama")
    model.save_pretrained(model_dir)
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}

    val_rows = examples(EVAL_SHAPES, 2)
    train = write_sft(repo, work, "train", examples(TRAIN_SHAPES, 1))
    val = write_sft(repo, work, "eval", val_rows)

    # transformers: its own causal-LM loss, summed over examples / all targets (num_items_in_batch)
    targets = sum(sum(1 for y in r["labels"] if y != -100) for r in val_rows)
    total, means = 0.0, []
    with torch.no_grad():
        for r in val_rows:
            x, y = torch.tensor([r["input_ids"]]), torch.tensor([r["labels"]])
            total += model(input_ids=x, labels=y, num_items_in_batch=targets).loss.double().item()
            means.append(model(input_ids=x, labels=y).loss.double().item())
    theirs, mean_of_means = total, sum(means) / len(means)
    print(f"transformers: {len(val_rows)} examples, {targets} targets, loss {theirs:.8f}; "
          f"mean of per-example means {mean_of_means:.8f}")

    ok = True
    for packing in ("true", "false"):
        ours = trainer_eval_loss(trainer, export_hf, model_dir, train, val, work, packing, weights)
        err = abs(ours - theirs) / abs(theirs)
        wrong = abs(mean_of_means - ours) / abs(ours)
        print(f"packing={packing}: eval_loss {ours:.8f}, rel err {err:.2e} (limit {TOL:g}); "
              f"mean of means off by {wrong:.2e} (must exceed {WRONG_MIN:g})")
        ok &= err <= TOL and wrong > WRONG_MIN
    if not ok:
        sys.exit("FAILED")
    print("sft_hf_parity: all passed")


if __name__ == "__main__":
    main()
