#!/usr/bin/env python3
"""What an export keeps of a fine-tune (src/hub/ExportSurvival.h), on a tiny Llama that transformers saves in bf16
(vocab 64, hidden 32, 2 layers), fine-tuned in fp32 masters by the real trainer:

- lr 1e-5, 3 AdamW steps: `export_hf --dtype auto` writes bf16, and nearly every update is under half a bf16 step:
  survival < 0.9, and a warning naming `--dtype float32`;
- the same run exported with `--dtype float32`: survival 1 (1e-6), no warning;
- the control: lr 1e-2 moves the weights by many bf16 steps: `--dtype auto` keeps > 0.9, no warning;
- the printed figure equals ||export - start|| / ||master - start|| computed here from the files (the start read with
  safetensors, the master from the float32 export) to 1e-5;
- LoRA (lora_rank=4, lr 1e-3): the master of a written weight is its base with the adapters merged (fp32); the printed
  figure equals the one computed from the files (the master from the float32 export), and float32 keeps 1;
- a from-scratch run (no start): "not measured", no warning.

Usage: export_survival_test.py TRAINER EXPORT_HF WORK_DIR
Cost: 5 trainer runs of 3 steps and 7 exports of the tiny model: ~15 s on 2 cores.
"""
import os
import re
import shutil
import struct
import subprocess
import sys

import torch
import transformers
from safetensors.torch import load_file

V, T = 64, 16


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def write_tokens(path, n=4000):  # llm.c v1: 256 int32 header, uint16 tokens
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, V, (n,), generator=g).tolist()
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack(f"<{n}H", *tokens))


def survival_line(r):
    m = re.search(r"export survival ([0-9.]+): ", r.stdout)
    return float(m.group(1)) if m else None


def main():
    trainer, export_hf, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    data = os.path.join(work, "train.bin")
    write_tokens(data)
    cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():  # weights of magnitude ~0.1-1, as trained models have, not the init's zeros and ones
        for name, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name else 0.1 * torch.randn_like(p))
    start_dir = os.path.join(work, "start-bf16")
    model.to(torch.bfloat16).save_pretrained(start_dir)
    start = load_file(os.path.join(start_dir, "model.safetensors"))
    assert all(t.dtype == torch.bfloat16 for t in start.values()), "the start is not bf16"

    def train(name, lr, from_start=True, keys=()):
        model_keys = ["base.yml", f"load_parameters_path={start_dir}"] if from_start else ["tiny.yml"]
        run([trainer, *model_keys, "dtype=float32", "weight_dtype=float32", "dataset_type=tokens",
             f"dataset_path={data}", f"max_target_length={T}", "per_device_batch_size=2",
             "gradient_accumulation_steps=2", "steps=3", f"learning_rate={lr}", "warmup_steps_fraction=0",
             "cosine_learning_rate_final_fraction=1", f"base_output_directory={work}", f"run_name={name}",
             "num_threads=1", *keys])
        return os.path.join(work, name)

    def export(run_dir, dtype):
        out = f"{run_dir}-{dtype}"
        r = run([export_hf, run_dir, out, "--dtype", dtype])
        print(f"  {os.path.basename(out)}: {r.stdout.strip().splitlines()[-1]}")
        for line in r.stderr.splitlines():
            print(f"    stderr: {line}")
        return out, r

    ok = True

    def expect(what, cond):
        nonlocal ok
        print(f"  {'ok' if cond else 'FAIL'}: {what}")
        ok &= bool(cond)

    def by_hand(out, master):
        exported = load_file(os.path.join(out, "model.safetensors"))
        kept = sum(((exported[n].double() - start[n].double()) ** 2).sum() for n in exported)
        moved = sum(((master[n].double() - start[n].double()) ** 2).sum() for n in exported)
        return (kept / moved).sqrt().item()

    print("lr 1e-5 from a bf16 model: --dtype auto, then float32")
    small = train("small", 1e-5)
    out32, r32 = export(small, "float32")
    master = load_file(os.path.join(out32, "model.safetensors"))
    auto, r = export(small, "auto")
    s_auto, s32 = survival_line(r), survival_line(r32)
    expect("auto wrote bf16", all(t.dtype == torch.bfloat16 for t in load_file(os.path.join(auto, "model.safetensors")).values()))
    expect(f"auto: survival {s_auto} < 0.9", s_auto is not None and s_auto < 0.9)
    expect("auto: a warning naming --dtype float32", "--dtype float32" in r.stderr and "warning" in r.stderr)
    expect(f"auto: printed {s_auto} = by hand {by_hand(auto, master):.6f} (1e-5)",
           s_auto is not None and abs(s_auto - by_hand(auto, master)) <= 1e-5)
    expect(f"float32: survival {s32} = 1 (1e-6)", s32 is not None and abs(s32 - 1) <= 1e-6)
    expect("float32: no warning", "warning" not in r32.stderr)

    print("the control, lr 1e-2: --dtype auto")
    large = train("large", 1e-2)
    master_large = load_file(os.path.join(export(large, "float32")[0], "model.safetensors"))
    auto_large, r = export(large, "auto")
    s = survival_line(r)
    expect(f"auto: survival {s} >= 0.9", s is not None and s >= 0.9)
    expect("auto: no warning", "warning" not in r.stderr)
    expect(f"auto: printed {s} = by hand {by_hand(auto_large, master_large):.6f} (1e-5)",
           s is not None and abs(s - by_hand(auto_large, master_large)) <= 1e-5)

    print("LoRA (r=4) from the bf16 model, lr 1e-3: the merged export")
    lora = train("lora", 1e-3, keys=["lora_rank=4"])
    lora32, r32 = export(lora, "float32")
    lora_auto, r = export(lora, "auto")
    master_lora = load_file(os.path.join(lora32, "model.safetensors"))
    s_lora, s_lora32 = survival_line(r), survival_line(r32)
    expect(f"auto: printed {s_lora} = by hand {by_hand(lora_auto, master_lora):.6f} (1e-5)",
           s_lora is not None and abs(s_lora - by_hand(lora_auto, master_lora)) <= 1e-5)
    expect(f"float32: survival {s_lora32} = 1 (1e-6)", s_lora32 is not None and abs(s_lora32 - 1) <= 1e-6)
    expect("auto: a warning exactly when the figure is below 0.9",
           s_lora is not None and (s_lora < 0.9) == ("--dtype float32" in r.stderr))

    print("a from-scratch run")
    _, r = export(train("scratch", 1e-5, from_start=False), "auto")
    expect("not measured, no warning", "export survival: not measured" in r.stdout and "warning" not in r.stderr)

    if not ok:
        sys.exit(f"export_survival: FAIL (scratch kept in {work})")
    shutil.rmtree(work, ignore_errors=True)
    print("export_survival: PASS")


if __name__ == "__main__":
    main()
