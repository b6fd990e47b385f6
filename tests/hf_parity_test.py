#!/usr/bin/env python3
"""Parity with transformers for Hugging Face checkpoints (docs/huggingface.md), on tiny random models that
transformers' own classes build and save_pretrained writes, all fp32 on the CPU:

- logits: our Decoder (through src/hub's reader) against the transformers model on the same tokens;
- GA: one step of the trainer (K=4 microbatches into an fp32 shadow, SGD at lr 100, so the exported weights give the
  gradient back as (w0 - w1) / 100) against transformers plus the `loss / K` .grad loop;
- 3 AdamW steps (no clipping, constant LR), exported, against torch.optim.AdamW;
- the round trip: from_pretrained of the export (no missing or unexpected keys) gives our logits;
- eval_loss on a token file against transformers' loss over the same windows.

Every figure is a relative error in the Frobenius norm, ||ours - theirs|| / ||theirs||, per tensor; the largest is
printed. A deliberately wrong reference (another rope theta) must fail the same test.

Usage: hf_parity_test.py TRAINER EXPORT_HF TESTS_BIN WORK_DIR [CASE ...]
       hf_parity_test.py --real MODEL_DIR TRAINER WORK_DIR      (eval_loss on a real model, e.g. SmolLM2)
"""
import json
import os
import shutil
import struct
import subprocess
import sys

import torch
from safetensors.torch import load_file, save_file
import transformers

TOL = 1e-5
V, T, B, K = 64, 16, 2, 4
MASK64 = (1 << 64) - 1


def mix64(x):  # util/Hash.h: SplitMix64's finaliser
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def example_offset(j, n_tokens, seed=0):  # data/TokenSource.cpp: example j of the run (sequences order)
    return mix64(mix64(mix64(seed) ^ 0) ^ j) % (n_tokens - T)


def write_tokens(path, tokens):  # llm.c v1: 256 int32 header, uint16 tokens
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


def windows(tokens, first, count):
    n = len(tokens)
    rows = [tokens[o:o + T + 1] for o in (example_offset(j, n) for j in range(first, first + count))]
    w = torch.tensor(rows, dtype=torch.long)
    return w[:, :-1], w[:, 1:]


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


BASE = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5,
            rope_parameters={"rope_type": "default", "rope_theta": 5000.0})
LLAMA3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
CASES = {
    "llama": ("Llama", {}),
    "llama_tied": ("Llama", {"tie_word_embeddings": True}),
    "gqa_head_dim": ("Llama", {"num_key_value_heads": 1, "head_dim": 16}),  # 4 x 16 != hidden 32
    "llama3_rope": ("Llama", {"rope_parameters": LLAMA3}),
    "qwen2_bias": ("Qwen2", {}),
    "qwen3_qk_norm": ("Qwen3", {"head_dim": 16, "tie_word_embeddings": True}),
    "mistral": ("Mistral", {"sliding_window": None}),
}


def build(family, extra):
    cfg = getattr(transformers, family + "Config")(**{**BASE, **extra})
    model = getattr(transformers, family + "ForCausalLM")(cfg).float().eval()
    torch.manual_seed(0)
    with torch.no_grad():  # off the default init (ones, zeros), so every tensor matters
        for name, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name else 0.1 * torch.randn_like(p))
    return model


def hf_logits(model, tokens):
    with torch.no_grad():
        return model(input_ids=tokens).logits.float()


def our_logits(tests_bin, model_dir, tokens):
    save_file({"tokens": tokens.float()}, os.path.join(model_dir, "tokens.safetensors"))
    run([tests_bin, "hub: logits of a model directory for tests/hf_parity_test.py", "--warn", "NoTests"],
        env={**os.environ, "SHADOWGRAD_HF_LOGITS": model_dir})
    return load_file(os.path.join(model_dir, "ours.safetensors"))["logits"]


def train(trainer, export_hf, model_dir, data, work, name, keys):
    run([trainer, "base.yml", f"load_parameters_path={model_dir}", "dtype=float32", "dataset_type=tokens",
         f"dataset_path={data}", f"max_target_length={T}", f"per_device_batch_size={B}",
         f"gradient_accumulation_steps={K}", "warmup_steps_fraction=0", "cosine_learning_rate_final_fraction=1",
         "gradient_clipping_threshold=0", f"base_output_directory={work}", f"run_name={name}", "num_threads=1",
         "checkpoint_period=1", "max_num_checkpoints_to_keep=0", *keys])
    out = os.path.join(work, name + "-hf")
    run([export_hf, os.path.join(work, name), out, "--dtype", "float32"])
    return out


def hf_step_grads(model, tokens, step):
    """The transformers user's GA loop: K microbatches, loss / K into .grad."""
    for m in range(K):
        x, y = windows(tokens, step * B * K + m * B, B)
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        (loss / K).backward()


def check(label, err, results):
    results.append((label, err))
    print(f"  {label}: max rel err {err:.2e}")
    return err <= TOL


def by_hf_name(model):
    return {n: p for n, p in model.named_parameters()}


def run_case(name, args, tokens, data):
    trainer, export_hf, tests_bin, work = args
    family, extra = CASES[name]
    print(f"case {name}:")
    ok = True
    results = []
    model_dir = os.path.join(work, name)
    model = build(family, extra)
    model.save_pretrained(model_dir)
    probe = torch.tensor([tokens[:T], tokens[T:2 * T]])

    # 1. logits, and a wrong reference (another theta) that must fail
    ours = our_logits(tests_bin, model_dir, probe)
    ok &= check("logits", rel(ours, hf_logits(model, probe)), results)
    wrong = build(family, {**extra, "rope_parameters": {**model.config.rope_parameters, "rope_theta": 10000.0}})
    wrong.load_state_dict(model.state_dict())
    wrong_err = rel(ours, hf_logits(wrong, probe))
    print(f"  logits against theta=10000 (must fail): {wrong_err:.2e}")
    ok &= wrong_err > TOL

    # 2. GA gradients: one SGD step at lr 100
    lr = 100.0
    out = train(trainer, export_hf, model_dir, data, work, name + "-sgd",
                ["steps=1", "opt_type=sgd", f"learning_rate={lr}", "adam_weight_decay=0"])
    w1 = load_file(os.path.join(out, "model.safetensors"))
    model.zero_grad()
    model.train()
    hf_step_grads(model, tokens, 0)
    params = by_hf_name(model)
    ok &= check("GA K=4 gradients", max(rel((params[n].detach() - w1[n]) / lr, params[n].grad) for n in w1), results)

    # 3. three AdamW steps, exported
    reference = build(family, extra)
    reference.load_state_dict(model.state_dict())
    reference.train()
    # eps 1e-6, not 1e-8: an element whose gradient is at the rounding level (seen: 9e-10 against our 8e-9 in the GQA
    # case's embedding) is blown up to about +-lr by eps=1e-8 in both implementations, with signs neither controls.
    opt = torch.optim.AdamW(reference.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-6, weight_decay=0.1)
    for step in range(3):
        opt.zero_grad()
        hf_step_grads(reference, tokens, step)
        opt.step()
    out = train(trainer, export_hf, model_dir, data, work, name + "-adamw",
                ["steps=3", "opt_type=adamw", "learning_rate=1e-3", "adam_b1=0.9", "adam_b2=0.95", "adam_eps=1e-6",
                 "adam_weight_decay=0.1"])
    w3 = load_file(os.path.join(out, "model.safetensors"))
    ref = by_hf_name(reference)
    ok &= check("3 AdamW steps, weights", max(rel(w3[n], ref[n].detach()) for n in w3), results)

    # 4. round trip: transformers loads the export with no missing or unexpected keys, and gives our logits
    loaded, info = transformers.AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        print(f"  from_pretrained loading info not clean: {bad}")
        ok = False
    if extra.get("tie_word_embeddings"):
        ok &= "lm_head.weight" not in w3 and json.load(open(os.path.join(out, "config.json")))["tie_word_embeddings"]
    ok &= check("round trip logits", rel(our_logits(tests_bin, out, probe), hf_logits(loaded.float().eval(), probe)),
                results)
    return ok


def eval_loss_case(trainer, model_dir, work, tokens, windows_count, tol):
    """The trainer's eval_loss over the first windows of a token file (learning_rate=0, so one step changes
    nothing) against transformers' loss over the same windows."""
    os.makedirs(work, exist_ok=True)
    data, train = os.path.join(work, "eval.bin"), os.path.join(work, "train.bin")
    write_tokens(data, tokens)
    write_tokens(train, tokens[::-1])  # training reads it; lr 0 changes nothing
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    run([trainer, "base.yml", f"load_parameters_path={model_dir}", "dtype=float32", "dataset_type=tokens",
         f"dataset_path={train}", f"eval_dataset_path={data}", f"max_target_length={T_eval}", "per_device_batch_size=1",
         "gradient_accumulation_steps=1", "steps=1", "learning_rate=0", "adam_weight_decay=0", "eval_interval=1",
         f"eval_steps={windows_count}", "eval_per_device_batch_size=1", f"base_output_directory={work}",
         "run_name=eval", "enable_checkpointing=false", "num_threads=0"])
    lines = [json.loads(l) for l in open(os.path.join(work, "eval", "metrics.jsonl")) if "eval_loss" in l]
    ours = [l["eval_loss"] for l in lines if l.get("eval_loss") is not None][-1]
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(windows_count):
            w = torch.tensor([tokens[i * T_eval:i * T_eval + T_eval + 1]])
            logits = model(input_ids=w[:, :-1]).logits
            total += torch.nn.functional.cross_entropy(logits.reshape(-1, cfg["vocab_size"]), w[0, 1:],
                                                       reduction="sum").item()
            count += T_eval
    theirs = total / count
    err = abs(ours - theirs) / abs(theirs)
    print(f"eval_loss {ours:.6f} against transformers {theirs:.6f}: rel err {err:.2e} ({windows_count} windows of "
          f"{T_eval} tokens)")
    return err <= tol


T_eval = T


def main():
    global T_eval
    if sys.argv[1] == "--real":
        model_dir, trainer, work = sys.argv[2:5]
        if not os.path.exists(os.path.join(model_dir, "config.json")):
            print(f"skipped: {model_dir} not prepared (scripts/prepare_model.sh)")
            sys.exit(77)
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        text = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")).read()
        T_eval = 128
        ids = tok.encode(text).ids[:4 * T_eval + 1]
        shutil.rmtree(work, ignore_errors=True)
        sys.exit(0 if eval_loss_case(trainer, model_dir, work, ids, 4, 1e-4) else 1)

    args = sys.argv[1:5]
    names = sys.argv[5:] or list(CASES)
    work = args[3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    torch.manual_seed(1)
    tokens = torch.randint(0, V, (600,)).tolist()
    data = os.path.join(work, "train.bin")
    write_tokens(data, tokens)
    failed = [n for n in names if not run_case(n, args, tokens, data)]
    ok = eval_loss_case(args[0], os.path.join(work, names[0]), os.path.join(work, "eval"), tokens, 4, TOL)
    if failed or not ok:
        sys.exit(f"FAILED: {failed or ''} {'' if ok else 'eval_loss'}")
    print("all cases within", TOL)


if __name__ == "__main__":
    main()
