#!/usr/bin/env python3
"""The yardstick for scripts/generate.sh's one-shot start (docs/generate.md, "Start-up"): the plain transformers
script a user would write to get the same tokens. It loads MODEL_DIR's tokenizer and model (fp32, CPU), continues
PROMPT greedily for --max-new tokens and prints the text, as `scripts/generate.sh MODEL_DIR --prompt PROMPT
--max-new N` does.
Cost: one process: import torch and transformers, read the weights, decode N tokens (~6 s for SmolLM2-135M on 2 cores).

Usage: hf_generate_once.py MODEL_DIR PROMPT [--max-new N]
"""
import argparse

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("model_dir")
p.add_argument("prompt")
p.add_argument("--max-new", type=int, default=64)
args = p.parse_args()

import torch  # noqa: E402  (after --help, which must answer at once)
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

tok = AutoTokenizer.from_pretrained(args.model_dir)
model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32).eval()
ids = tok(args.prompt, return_tensors="pt")
with torch.no_grad():
    out = model.generate(**ids, max_new_tokens=args.max_new, do_sample=False)
print(tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True))
