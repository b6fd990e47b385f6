#!/usr/bin/env python3
"""Preference tuning against TRL 1.16's DPOTrainer (docs/preference.md, "Parity with TRL"), fp32 on the CPU, on a tiny
random Llama that transformers' own classes build (tests/hf_parity_test.py's build).

TRL takes all 8 ragged pairs in one batch with no accumulation, which makes it exact (tests/lib/trl_reference.py,
whose `check` holds it against a float64 hand computation). The trainer takes the same pre-tokenized pairs through
scripts/prepare_preference.sh, at K=4 microbatches of 2 pairs, unpacked and packed, for 2 SGD steps (no clipping, no
weight decay, constant LR), and export_hf --step 1 gives the weights after step 1 back. Cases (trl_reference.CASES):
sigmoid, ipo, hinge, sigmoid with dpo_nll_weight 0.5 (TRL's [sigmoid, sft] with weights [1, 0.5]), and that one with
LoRA from the same starting peft adapter (init_lora_weights=False; TRL's reference is the starting adapter).

- step 1: loss and logps_chosen / logps_rejected within 1e-5 relative (rewards are 0 at step 1: within 1e-5 of
  beta x the log-probs);
- the weights after step 1: ||ours - TRL's|| / ||TRL's update|| per tensor within 1e-4;
- step 2 (policy moved, reference fixed): loss and every metric within 1e-5 (rewards relative to beta x the log-probs),
  rewards_accuracy equal;
- a control that must miss by more than 1e-3 of the update: TRL's own GA at K=4 (a mean of microbatch means; its sft
  term a mean over each microbatch's chosen tokens), in the dpo_nll_weight cases.

Usage: preference_trl_parity_test.py REPO TRAINER EXPORT_HF WORK_DIR [CASE ...]
Exit: 0 pass; 1 fail; 77 skipped (no trl, datasets or peft in this Python).
"""
import json
import os
import shutil
import sys

from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from hf_parity_test import build, rel, run  # noqa: E402
import trl_reference as ref  # noqa: E402  (exits 77 without trl)

LOSS_TOL, WEIGHT_TOL, STEP2_TOL, WRONG_MIN = 1e-5, 1e-4, 1e-5, 1e-3
T, B, K, BETA = 16, 2, 4, 0.1


def write_pairs(repo, work, pairs):
    jsonl, out = os.path.join(work, "pairs.jsonl"), os.path.join(work, "pairs.pair")
    with open(jsonl, "w") as f:
        f.write("".join(json.dumps(p) + "\n" for p in pairs))
    # prepare_preference.sh under this test's Python's venv (the one the build links), not the checkout's .venv
    run([os.path.join(repo, "scripts", "prepare_preference.sh"), jsonl, out],
        env={**os.environ, "SHADOWGRAD_VENV": sys.prefix})
    return out


def ours(trainer, export_hf, work, name, model_dir, adapter_dir, pairs_file, case, packing):
    """Two SGD steps at K=4; returns (the metrics of steps 1 and 2, the trained tensors after step 1)."""
    loss_type, nll_weight, _, lr = case
    cmd = [trainer, "base.yml", f"load_parameters_path={model_dir}", "dtype=float32", "dataset_type=preference",
           "use_dpo=true", f"dpo_loss_type={loss_type}", f"dpo_beta={BETA}", f"dpo_nll_weight={nll_weight}",
           f"dataset_path={pairs_file}", f"packing={packing}", f"max_target_length={T}",
           f"per_device_batch_size={B}", f"gradient_accumulation_steps={K}", "steps=2", "opt_type=sgd",
           f"learning_rate={lr}", "adam_weight_decay=0", "gradient_clipping_threshold=0", "warmup_steps_fraction=0",
           "cosine_learning_rate_final_fraction=1", f"base_output_directory={work}", f"run_name={name}",
           "checkpoint_period=1", "max_num_checkpoints_to_keep=0", "num_threads=1"]
    if adapter_dir:
        cmd.append(f"lora_restore_path={adapter_dir}")
    run(cmd)
    lines = [json.loads(l) for l in open(os.path.join(work, name, "metrics.jsonl"))]
    steps = [l for l in lines if l.get("loss") is not None]
    if len(steps) != 2:
        sys.exit(f"FAILED: expected 2 step lines with a loss in {name}'s metrics.jsonl, got {len(steps)}")
    missing = [m for m in ref.METRICS.values() if any(m not in s for s in steps)]
    if missing:
        sys.exit(f"FAILED: {name}'s metrics.jsonl lacks {missing}")
    out = os.path.join(work, name + "-step1")
    run([export_hf, os.path.join(work, name), out, "--step", "1"] + (["--adapter"] if adapter_dir else
                                                                      ["--dtype", "float32"]))
    weights = load_file(os.path.join(out, "adapter_model.safetensors" if adapter_dir else "model.safetensors"))
    return steps, weights


def update_error(after, start, theirs):
    """max over tensors of ||after - theirs|| / ||theirs - start||: how far from TRL's weights, in its update."""
    if set(after) != set(theirs):
        sys.exit(f"FAILED: the exported tensors' names differ from TRL's: {sorted(set(after) ^ set(theirs))[:6]}")
    return max(rel(after[n] - start[n], theirs[n] - start[n]) for n in theirs)


def check(label, err, limit, must_fail=False):
    ok = err > limit if must_fail else err <= limit
    print(f"  {label}: {err:.2e} ({'must exceed' if must_fail else 'limit'} {limit:g}){'' if ok else '  FAILED'}")
    return ok


def run_case(name, args, model_dir, adapter_dir, pairs, pairs_file):
    repo, trainer, export_hf, work = args
    case = ref.CASES[name]
    loss_type, nll_weight, lora, lr = case
    adapter = adapter_dir if lora else None
    records, trl_weights, _ = ref.trl_steps(model_dir, pairs, loss_type, BETA, nll_weight, lr, steps=2,
                                            adapter_dir=adapter)
    start, theirs = trl_weights[0], trl_weights[1]
    print(f"case {name}: TRL step 1 loss {records[0]['loss']:.8f}, logps_chosen {records[0]['logps_chosen']:.6f}; "
          f"step 2 loss {records[1]['loss']:.8f}, rewards_accuracy {records[1]['rewards_accuracy']:g}")
    mean_of_means = None
    if nll_weight:
        mean_of_means = ref.trl_steps(model_dir, pairs, loss_type, BETA, nll_weight, lr, adapter_dir=adapter,
                                      accumulation=K)[1][1]
    ok = True
    for packing in ("false", "true"):
        steps, after = ours(trainer, export_hf, work, f"{name}-packing-{packing}", model_dir, adapter, pairs_file,
                            case, packing)
        print(f" packing={packing}: step 1 loss {steps[0]['loss']:.8f}, step 2 loss {steps[1]['loss']:.8f}")
        step1 = {m: steps[0][m] for m in ("logps_chosen", "logps_rejected", "rewards_chosen", "rewards_rejected",
                                         "rewards_margin")}
        scale = BETA * max(abs(step1["logps_chosen"]), abs(step1["logps_rejected"]))
        err1 = max([abs(steps[0]["loss"] - records[0]["loss"]) / abs(records[0]["loss"])] +
                   [abs(v - records[0][m]) / (scale if m.startswith("rewards_") else abs(records[0][m]))
                    for m, v in step1.items()])
        ok &= check("step 1: loss, logps and rewards against TRL (rel err)", err1, LOSS_TOL)
        ok &= check("weights after step 1: ||ours - TRL|| / ||TRL's update||, worst tensor",
                    update_error(after, start, theirs), WEIGHT_TOL)
        step2 = {m: steps[1][m] for m in ref.METRICS.values()}
        err2, where = ref.record_error(records[1], steps[1]["loss"], step2, BETA)
        ok &= check(f"step 2: loss and metrics against TRL (worst: {where})", err2, STEP2_TOL)
        if mean_of_means:
            ok &= check(f"control: TRL's own GA at K={K} (a mean of microbatch means), in its update",
                        update_error(after, start, mean_of_means), WRONG_MIN, must_fail=True)
    return ok


def main():
    args = sys.argv[1:5]
    names = sys.argv[5:] or list(ref.CASES)
    unknown = [n for n in names if n not in ref.CASES]
    if unknown:
        sys.exit(f"unknown case(s) {unknown}; the cases are {list(ref.CASES)}")
    repo, work = args[0], args[3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model_dir = os.path.join(work, "llama")
    build("Llama", {}).save_pretrained(model_dir)
    adapter_dir = ref.make_adapter(model_dir, os.path.join(work, "adapter"))
    pairs = ref.make_pairs()
    pairs_file = write_pairs(repo, work, pairs)
    print(f"trl {ref.trl.__version__}, peft {ref.peft.__version__}; {len(pairs)} ragged pairs, ours at K={K} x {B}, "
          f"TRL in one batch; beta {BETA:g}")
    failed = [n for n in names if not run_case(n, args, model_dir, adapter_dir, pairs, pairs_file)]
    if failed:
        sys.exit(f"FAILED: {failed}")
    print("preference_trl_parity: all passed")


if __name__ == "__main__":
    main()
