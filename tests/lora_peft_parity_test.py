#!/usr/bin/env python3
"""LoRA parity with peft (docs/lora.md, "Parity with peft"), fp32 on the CPU, on tiny random Hugging Face models that
transformers' own classes build and save_pretrained writes (tests/hf_parity_test.py's build): Llama, Qwen2 (q/k/v
biases, here with rsLoRA) and Qwen3 (tied embeddings, q/k norms).

For each case peft makes a random adapter on all seven projections (LoraConfig(init_lora_weights=False), so B is not
zero) and save_pretrained writes it; the trainer starts from it (load_parameters_path + lora_restore_path, which sets
r, alpha, rsLoRA and the targets) and takes one SGD step (no clipping, no weight decay, constant lr) on 8 ragged
prompt-masked SFT examples (packing=false: one example per row, so step 1 is every example once), K=4 microbatches of
2 rows. `export_hf RUN OUT --adapter` gives A and B back; the gradient is (before - after) / lr.

- loss: the trainer's step-1 loss against peft's (summed completion loss / all targets), 1e-5 relative;
- gradients: every A and B against peft's gradient of that loss, 1e-5 (relative Frobenius error per tensor);
- round trip, adapter: peft loads the exported adapter (PeftModel.load_adapter: no missing or unexpected key, and
  every tensor in the model equals the file's), and its loss on held-out examples equals the trainer's eval_loss
  after the step, 1e-5;
- round trip, merged: export_hf without --adapter loads in transformers with no missing or unexpected key, and
  equals peft's merge_and_unload of the exported adapter, tensor by tensor, 1e-5;
- invariance: K=1 (8 rows in one microbatch) and 2 processes (K=2 each; RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT)
  against K=4: the gradients within 1e-6 and the loss within 1e-6;
- controls that must fail (miss by more than 1e-3): peft's reference at the scale alpha instead of alpha / r, and the
  mean of microbatch means, taken over every way of splitting the 8 examples into 4 microbatches of 2 (the trainer's
  row order does not matter then).

Usage: lora_peft_parity_test.py REPO TRAINER EXPORT_HF WORK_DIR [CASE ...]
Exit: 0 pass; 1 fail; 77 skipped (no peft in this Python).
"""
import itertools
import json
import os
import shutil
import subprocess
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_parity_test import build, rel, run  # noqa: E402
from sft_hf_parity_test import examples, write_sft  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "lib"))
from free_port import free_port  # noqa: E402

try:
    import peft
except ImportError:
    print("skipped: no peft in this Python (scripts/lib/setup.sh installs it)")
    sys.exit(77)
import transformers  # noqa: E402

TOL, INVARIANCE_TOL, WRONG_MIN = 1e-5, 1e-6, 1e-3
T, B, K = 16, 2, 4
LR = 100.0
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# (prompt, completion) lengths: ragged, so the microbatches hold different target counts; 8 = B * K examples.
TRAIN_SHAPES = [(2, 1), (3, 13), (5, 2), (1, 9), (8, 4), (4, 12), (6, 1), (10, 6)]
EVAL_SHAPES = [(3, 5), (2, 9), (4, 4), (6, 7), (1, 2)]
# name: (family, config overrides, r, lora_alpha, use_rslora)
CASES = {
    "llama": ("Llama", {}, 4, 8.0, False),
    "qwen2_bias_rslora": ("Qwen2", {}, 4, 6.0, True),
    "qwen3_tied_qk_norm": ("Qwen3", {"head_dim": 16, "tie_word_embeddings": True}, 8, 16.0, False),
}




class Trainer:
    def __init__(self, trainer, export_hf, work, train, val):
        self.trainer, self.export_hf, self.work, self.train, self.val = trainer, export_hf, work, train, val

    def command(self, model_dir, adapter_dir, name, per_device, k):
        return [self.trainer, "base.yml", f"load_parameters_path={model_dir}", f"lora_restore_path={adapter_dir}",
                "dtype=float32", "dataset_type=sft", f"dataset_path={self.train}", f"eval_dataset_path={self.val}",
                "sft_train_on_completion_only=true", "packing=false", f"max_target_length={T}",
                f"per_device_batch_size={per_device}", f"gradient_accumulation_steps={k}", "steps=1", "opt_type=sgd",
                f"learning_rate={LR}", "adam_weight_decay=0", "gradient_clipping_threshold=0",
                "warmup_steps_fraction=0", "cosine_learning_rate_final_fraction=1", "eval_interval=1",
                "eval_per_device_batch_size=2", f"base_output_directory={self.work}", f"run_name={name}",
                "checkpoint_period=1", "max_num_checkpoints_to_keep=0", "num_threads=1"]

    def step(self, model_dir, adapter_dir, name, per_device=B, k=K, processes=1):
        """One SGD step; returns (step-1 loss, eval_loss after it, the exported adapter directory)."""
        cmd = self.command(model_dir, adapter_dir, name, per_device, k)
        if processes == 1:
            run(cmd)
        else:
            env = {**os.environ, "WORLD_SIZE": str(processes), "LOCAL_WORLD_SIZE": str(processes),
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
            procs = [subprocess.Popen(cmd, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True) for r in range(processes)]
            try:
                outs = [p.communicate(timeout=300)[0] for p in procs]
            except subprocess.TimeoutExpired:
                for p in procs:
                    p.kill()
                sys.exit(f"FAILED: {name}'s {processes} processes ran past 300 s")
            for r, (p, out) in enumerate(zip(procs, outs)):
                if p.returncode != 0:
                    sys.exit(f"FAILED: rank {r} of {name} exited {p.returncode}\n{out[-3000:]}")
        lines = [json.loads(l) for l in open(os.path.join(self.work, name, "metrics.jsonl"))]
        losses = [l["loss"] for l in lines if l.get("loss") is not None]
        evals = [l["eval_loss"] for l in lines if l.get("eval_loss") is not None]
        if len(losses) != 1 or len(evals) != 1:
            sys.exit(f"FAILED: expected one loss and one eval_loss in {name}'s metrics.jsonl, got {losses}, {evals}")
        out = os.path.join(self.work, name + "-adapter")
        run([self.export_hf, os.path.join(self.work, name), out, "--adapter"])
        return losses[0], evals[0], out

    def merged(self, name):
        out = os.path.join(self.work, name + "-merged")
        run([self.export_hf, os.path.join(self.work, name), out, "--dtype", "float32"])
        return out


def peft_name(param_name):  # peft's module parameter -> its name in adapter_model.safetensors
    return param_name.replace(".default", "")


def load_base(model_dir):
    return transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def example_sums(model, rows):
    """Per example: its summed completion loss (double) and the gradient of that sum for every adapter tensor."""
    losses, grads, counts = [], [], []
    params = {peft_name(n): p for n, p in model.named_parameters() if p.requires_grad}
    for r in rows:
        model.zero_grad()
        x, y = torch.tensor([r["input_ids"]]), torch.tensor([r["labels"]])
        logits = model(input_ids=x).logits[0, :-1]
        loss = torch.nn.functional.cross_entropy(logits, y[0, 1:], ignore_index=-100, reduction="sum")
        loss.backward()
        losses.append(loss.double().item())
        grads.append({n: p.grad.detach().double().clone() for n, p in params.items()})
        counts.append(sum(1 for t in r["labels"][1:] if t != -100))
    return losses, grads, counts


def normalised(losses, grads, counts, groups):
    """Loss and gradients over `groups` (lists of example indices): the mean over groups of (group sum / group
    targets). One group of everything is the exact normalisation; K groups is the mean of microbatch means."""
    loss, grad = 0.0, {n: torch.zeros_like(g) for n, g in grads[0].items()}
    for g in groups:
        n = sum(counts[i] for i in g)
        loss += sum(losses[i] for i in g) / n / len(groups)
        for name in grad:
            grad[name] += sum(grads[i][name] for i in g) / n / len(groups)
    return loss, grad


def pairings(items, size):
    """Every split of `items` into unordered groups of `size`."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for others in itertools.combinations(rest, size - 1):
        left = [i for i in rest if i not in others]
        for tail in pairings(left, size):
            yield [[first, *others], *tail]


def max_rel(ours, theirs):
    return max(rel(ours[n], theirs[n]) for n in theirs)


def gradients(before, after_dir):
    after = load_file(os.path.join(after_dir, "adapter_model.safetensors"))
    if set(after) != set(before):
        sys.exit(f"FAILED: the exported adapter's names differ from peft's: {sorted(set(after) ^ set(before))[:6]}")
    return {n: (before[n].double() - after[n].double()) / LR for n in before}


def check(label, err, limit, results, must_fail=False):
    ok = err > limit if must_fail else err <= limit
    results.append((label, err))
    print(f"  {label}: {err:.2e} ({'must exceed' if must_fail else 'limit'} {limit:g}){'' if ok else '  FAILED'}")
    return ok


def run_case(name, runner, work, train_rows, val_rows):
    family, extra, r, alpha, rslora = CASES[name]
    scale = alpha / (r ** 0.5 if rslora else r)
    print(f"case {name}: {family}, r={r}, lora_alpha={alpha:g}, use_rslora={rslora} (scale {scale:g})")
    ok, results = True, []
    model_dir, adapter_dir = os.path.join(work, name), os.path.join(work, name + "-peft")
    build(family, extra).save_pretrained(model_dir)
    torch.manual_seed(10 + len(name))
    lora = peft.LoraConfig(r=r, lora_alpha=alpha, use_rslora=rslora, target_modules=TARGETS, lora_dropout=0.0,
                           init_lora_weights=False, task_type="CAUSAL_LM")
    model = peft.get_peft_model(load_base(model_dir), lora)
    model.save_pretrained(adapter_dir)
    before = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    if len(before) != 2 * 7 * model.config.num_hidden_layers:
        sys.exit(f"FAILED: peft saved {len(before)} adapter tensors")

    # peft's reference: per-example sums, then the exact normalisation (everything / all targets)
    model.train()  # lora_dropout 0 and attention dropout 0: train mode changes nothing but is what a user runs
    losses, grads, counts = example_sums(model, train_rows)
    loss_ref, grad_ref = normalised(losses, grads, counts, [list(range(len(train_rows)))])
    print(f"  peft: {len(train_rows)} examples, {sum(counts)} targets, loss {loss_ref:.8f}")

    # 1. loss and K=4 gradients
    loss4, eval4, out4 = runner.step(model_dir, adapter_dir, name + "-k4")
    grad4 = gradients(before, out4)
    ok &= check("step-1 loss against peft", abs(loss4 - loss_ref) / loss_ref, TOL, results)
    ok &= check("K=4 gradients of every A and B against peft", max_rel(grad4, grad_ref), TOL, results)

    # 2. controls: the scale alpha instead of alpha / r, and the mean of microbatch means
    for m in model.modules():
        if isinstance(m, peft.tuners.lora.LoraLayer):
            m.scaling["default"] = alpha
    wl, wg, wc = example_sums(model, train_rows)
    wrong_loss, wrong_grad = normalised(wl, wg, wc, [list(range(len(train_rows)))])
    miss = max(abs(loss4 - wrong_loss) / wrong_loss, max_rel(grad4, wrong_grad))
    ok &= check(f"control: peft at scale alpha={alpha:g} (loss, gradients)", miss, WRONG_MIN, results, must_fail=True)
    splits = list(pairings(list(range(len(train_rows))), B))
    misses = []
    for groups in splits:
        mm_loss, mm_grad = normalised(losses, grads, counts, groups)
        misses.append(max(abs(loss4 - mm_loss) / mm_loss, max_rel(grad4, mm_grad)))
    ok &= check(f"control: mean of microbatch means, closest of {len(splits)} splits", min(misses), WRONG_MIN,
                results, must_fail=True)

    # 3. invariance: K=1 and 2 processes against K=4
    loss1, _, out1 = runner.step(model_dir, adapter_dir, name + "-k1", per_device=B * K, k=1)
    ok &= check("K=1 against K=4 (gradients)", max_rel(gradients(before, out1), grad4), INVARIANCE_TOL, results)
    ok &= check("K=1 against K=4 (loss)", abs(loss1 - loss4) / loss4, INVARIANCE_TOL, results)
    loss2, _, out2 = runner.step(model_dir, adapter_dir, name + "-p2", per_device=B, k=K // 2, processes=2)
    ok &= check("2 processes K=2 against 1 process K=4 (gradients)", max_rel(gradients(before, out2), grad4),
                INVARIANCE_TOL, results)
    ok &= check("2 processes against 1 (loss)", abs(loss2 - loss4) / loss4, INVARIANCE_TOL, results)

    # 4. round trip, adapter: peft loads the export, every tensor lands, and gives the trainer's eval_loss
    exported = load_file(os.path.join(out4, "adapter_model.safetensors"))
    config = peft.PeftConfig.from_pretrained(out4)
    if (config.r, config.lora_alpha, config.use_rslora, set(config.target_modules)) != (r, alpha, rslora,
                                                                                       set(TARGETS)):
        print(f"  exported adapter_config.json differs: r={config.r} lora_alpha={config.lora_alpha} "
              f"use_rslora={config.use_rslora} target_modules={config.target_modules}")
        ok = False
    loaded = peft.PeftModel(load_base(model_dir), config)
    result = loaded.load_adapter(out4, adapter_name="default")
    state = peft.get_peft_model_state_dict(loaded)
    landed = set(state) == set(exported) and all(torch.equal(state[n], exported[n]) for n in exported)
    print(f"  peft load_adapter of the export: missing {list(result.missing_keys)[:4]}, unexpected "
          f"{list(result.unexpected_keys)[:4]}, all {len(exported)} tensors landed: {landed}")
    ok &= landed and not result.missing_keys and not result.unexpected_keys
    loaded.eval()
    with torch.no_grad():
        vl, _, vc = [], None, []
        for row in val_rows:
            x, y = torch.tensor([row["input_ids"]]), torch.tensor([row["labels"]])
            logits = loaded(input_ids=x).logits[0, :-1]
            vl.append(torch.nn.functional.cross_entropy(logits, y[0, 1:], ignore_index=-100,
                                                        reduction="sum").double().item())
            vc.append(sum(1 for t in row["labels"][1:] if t != -100))
    peft_eval = sum(vl) / sum(vc)
    print(f"  eval_loss after the step: trainer {eval4:.8f}, peft with the exported adapter {peft_eval:.8f}")
    ok &= check("exported adapter in peft: held-out loss against the trainer's eval_loss",
                abs(eval4 - peft_eval) / peft_eval, TOL, results)

    # 5. round trip, merged: export_hf without --adapter against peft's merge_and_unload of the exported adapter
    merged_dir = runner.merged(name + "-k4")
    merged, info = transformers.AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32,
                                                                     output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        print(f"  from_pretrained of the merged export not clean: {bad}")
        ok = False
    reference = peft.PeftModel.from_pretrained(load_base(model_dir), out4).merge_and_unload().state_dict()
    ours = merged.state_dict()
    if set(ours) != set(reference):
        print(f"  merged names differ from peft's merge_and_unload: {sorted(set(ours) ^ set(reference))[:6]}")
        ok = False
    ok &= check("merged export against peft's merge_and_unload (per tensor)",
                max(rel(ours[n], reference[n]) for n in reference if n in ours), TOL, results)
    base = load_base(model_dir).state_dict()
    ok &= check("control: the merged export against the base alone (the projections' weights)",
                min(rel(ours[n], base[n]) for n in base if n.endswith("_proj.weight")), WRONG_MIN, results,
                must_fail=True)
    return ok, results


def main():
    repo, trainer, export_hf, work = sys.argv[1:5]
    names = sys.argv[5:] or list(CASES)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    train_rows, val_rows = examples(TRAIN_SHAPES, 1), examples(EVAL_SHAPES, 2)
    runner = Trainer(trainer, export_hf, work, write_sft(repo, work, "train", train_rows),
                     write_sft(repo, work, "eval", val_rows))
    print(f"peft {peft.__version__}, transformers {transformers.__version__}, torch {torch.__version__}; "
          f"SGD lr {LR:g}, {len(train_rows)} SFT examples as K={K} x {B} rows")
    failed = []
    for name in names:
        ok, _ = run_case(name, runner, work, train_rows, val_rows)
        if not ok:
            failed.append(name)
    if failed:
        sys.exit(f"FAILED: {failed}")
    print("lora_peft_parity: all passed")


if __name__ == "__main__":
    main()
