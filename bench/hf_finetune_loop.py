#!/usr/bin/env python3
"""The fine-tuning loop a transformers user writes, for docs/performance.md's comparison with the trainer on a Hugging
Face model: LlamaForCausalLM (SDPA attention) in fp32, torch.optim.AdamW(fused=True), clipping at 1.0, K microbatches
of 1 x T tokens per step with `loss / K` into .grad, eager or under torch.compile. --bf16 runs the forward under
torch.autocast(bfloat16), as such a user would on a CPU with native bf16 (where the trainer's dtype=auto picks bf16).
--lora R is the loop a peft user writes: get_peft_model(LoraConfig(r=R, lora_alpha=2R, all seven projections,
dropout 0)), AdamW over the adapters only (the base frozen in fp32, as from_pretrained loads it).
The windows are the trainer's (example j of the run at offset mix64(...) % (n - T), src/data/TokenSource.cpp),
so both train on the same tokens.
Prints one line: steady-state tokens/s over steps 2..STEPS (the first step, with compilation, is not counted).

Usage: hf_finetune_loop.py MODEL_DIR TOKENS.bin [--steps 3] [--k 4] [--seq 512] [--compile] [--bf16] [--threads 2]
                          [--lora R]
"""
import argparse
import struct
import sys
import time

import numpy as np
import torch
import transformers

MASK64 = (1 << 64) - 1


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def read_llmc(path):
    with open(path, "rb") as f:
        magic, version, count = struct.unpack("<3i", f.read(12))
        f.seek(1024)
        return np.frombuffer(f.read(), dtype=np.uint16 if version == 1 else np.uint32)[:count]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model_dir")
    p.add_argument("tokens")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lora", type=int, default=0, help="LoRA rank with peft (0: full fine-tuning)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    tokens = read_llmc(a.tokens)
    model = transformers.AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=torch.float32,
                                                              attn_implementation="sdpa")
    if a.lora:
        import peft
        model = peft.get_peft_model(model, peft.LoraConfig(
            r=a.lora, lora_alpha=2 * a.lora, lora_dropout=0.0, task_type="CAUSAL_LM",
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    forward = torch.compile(model) if a.compile else model
    n = len(tokens)
    j = 0
    times = []
    for step in range(a.steps):
        start = time.perf_counter()
        for _ in range(a.k):
            o = mix64(mix64(mix64(0) ^ 0) ^ j) % (n - a.seq)
            j += 1
            w = torch.from_numpy(tokens[o:o + a.seq + 1].astype(np.int64))[None]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
                logits = forward(input_ids=w[:, :-1]).logits
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), w[0, 1:])
            (loss / a.k).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)  # as the trainer's gradient_clipping_threshold=1
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    steady = times[1:] or times
    print(f"tokens_per_s {a.k * a.seq * len(steady) / sum(steady):.1f} loss {loss.item():.4f} "
          f"step_s {' '.join(f'{t:.2f}' for t in times)}")


if __name__ == "__main__":
    sys.exit(main())
