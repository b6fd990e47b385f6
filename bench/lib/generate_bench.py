#!/usr/bin/env python3
"""build/generate against transformers' generate (its KV cache, greedy) on the same prompts, in alternating rounds
(docs/generate.md, "Speed").

Usage: generate_bench.py MODEL_DIR [--rounds N] [--max-new N] [--threads N] [--dtype float32|bfloat16]
                         [--generate-bin PATH]
Each round runs every prompt once on each side, the side that goes first alternating. Both sides load the model
once, before the rounds (a warm-up request each), so the figures are the generation alone:
  first token: from the request to the first new token chosen (the prefill of the prompt);
  decode: tokens/s over the remaining max_new - 1 tokens (one forward each, through the cache).
No EOS ends a completion (every one is max_new tokens), and ours never reuses the last request's cache.
Prints one line per round and side (medians over the prompts), then the medians over rounds and the ratios
ours/theirs (decode: > 1 is faster; first token: < 1 is faster).
"""
import argparse
import json
import os
import statistics
import subprocess
import time

import torch
import transformers
from transformers.generation.streamers import BaseStreamer

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
           "The three primary colors are", "To make a cup of tea, first"]
LONG = ("Summarise the following text. " + "The quick brown fox jumps over the lazy dog near the river bank. " * 24)


class Clock(BaseStreamer):
    """generate() calls put() with the prompt, then with each new token as it is chosen."""

    def __init__(self):
        self.times = []

    def put(self, value):
        self.times.append(time.perf_counter())

    def end(self):
        pass


def theirs(model, ids, max_new):
    clock = Clock()
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=max_new, min_new_tokens=max_new, do_sample=False,
                             streamer=clock, attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             pad_token_id=0)
    assert out.shape[1] - len(ids) == max_new, out.shape
    first, last = clock.times[1], clock.times[-1]
    return first - start, (max_new - 1) / (last - first)


class Ours:
    def __init__(self, generate, model_dir, threads, dtype):
        cmd = [generate, model_dir, "--serve", "--threads", str(threads)] + (["--dtype", dtype] if dtype else [])
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        ready = json.loads(self.proc.stdout.readline())
        assert "error" not in ready, ready

    def __call__(self, ids, max_new):
        self.proc.stdin.write(json.dumps({"ids": ids, "max_new": max_new, "reuse_cache": False}) + "\n")
        self.proc.stdin.flush()
        r = json.loads(self.proc.stdout.readline())
        assert "error" not in r and len(r["ids"]) == max_new, r
        return r["first_token_s"], (max_new - 1) / r["decode_s"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = argparse.ArgumentParser()
    p.add_argument("model_dir")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-new", type=int, default=64)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--generate-bin", default=os.path.join(root, "build", "generate"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    tok = transformers.AutoTokenizer.from_pretrained(args.model_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=dtype).eval()
    model.generation_config.eos_token_id = None  # every completion max_new tokens, as ours (no stop ids)
    ours = Ours(args.generate_bin, args.model_dir, args.threads, args.dtype)
    prompts = [tok(t)["input_ids"] for t in PROMPTS + [LONG]]
    print(f"{os.path.basename(args.model_dir.rstrip('/'))}, {args.dtype}, {args.threads} threads, {len(prompts)} "
          f"prompts of {min(map(len, prompts))}-{max(map(len, prompts))} tokens, {args.max_new} new tokens each, "
          f"torch {torch.__version__}, transformers {transformers.__version__}")
    sides = {"ours": ours, "theirs": lambda ids, n: theirs(model, ids, n)}
    for side in sides.values():  # warm-up: first-call allocations and kernel choices
        side(prompts[0], 4)
    rounds = {name: [] for name in sides}
    for r in range(args.rounds):
        order = ["ours", "theirs"] if r % 2 == 0 else ["theirs", "ours"]
        for name in order:
            runs = [sides[name](ids, args.max_new) for ids in prompts]
            ttft = statistics.median(t for t, _ in runs)
            rate = statistics.median(d for _, d in runs)
            rounds[name].append((ttft, rate))
            print(f"round {r + 1} {name:6s}: first token {ttft * 1000:7.1f} ms (median of {len(runs)}; long prompt "
                  f"{runs[-1][0] * 1000:.1f} ms), decode {rate:6.1f} tokens/s", flush=True)
    ours.close()
    med = {n: (statistics.median(t for t, _ in v), statistics.median(d for _, d in v)) for n, v in rounds.items()}
    ratio_ttft = [o[0] / t[0] for o, t in zip(rounds["ours"], rounds["theirs"])]
    ratio_rate = [o[1] / t[1] for o, t in zip(rounds["ours"], rounds["theirs"])]
    for n, (t, d) in med.items():
        print(f"median over {args.rounds} rounds, {n:6s}: first token {t * 1000:.1f} ms, decode {d:.1f} tokens/s")
    print(f"ours/theirs per round: decode {', '.join(f'{x:.2f}' for x in ratio_rate)} (> 1: ours faster); "
          f"first token {', '.join(f'{x:.2f}' for x in ratio_ttft)} (< 1: ours faster)")


if __name__ == "__main__":
    main()
