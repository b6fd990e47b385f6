#!/usr/bin/env python3
"""The README's fine-tuning quick start (the fenced block after `<!-- quickstart -->`), run as written.

Each line is run by bash, in order, in a scratch directory that holds the repository's `scripts/`, `examples/`, `.venv` and the
build under test (`build/`). Two lines are stood in for: `./scripts/build.sh` (the build under test is already made)
and `scripts/prepare_model.sh` (instead, a tiny Llama with a word-level tokenizer and a chat template is saved at the
path the README names, models/SmolLM2-135M-Instruct, so every later line runs word for word). Checks: every line exits
0; the run evaluated; the peft adapter was written (a random tiny model's answer may be empty). A README whose lines fail fails
this test.

Usage: quickstart_test.py REPO BUILD_DIR   (the venv's python: transformers, tokenizers, torch)
Cost: ~15 s of CPU (two prepare_sft.sh, a tiny LoRA run, an export, a generation).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

REPO, BUILD = sys.argv[1], sys.argv[2]
STANDS_IN = ("./scripts/build.sh", "scripts/prepare_model.sh")


def quickstart_lines():
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    m = re.search(r"<!-- quickstart -->\s*```[^\n]*\n(.*?)```", text, re.S)
    if not m:
        sys.exit("quickstart: README.md has no fenced block after <!-- quickstart -->")
    return [l.strip() for l in m.group(1).splitlines() if l.strip()]


def tiny_model(directory):
    """A 2-layer Llama and a word-level tokenizer over the example data's words, with a chat template."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    words = set()
    for name in ("chat_train.jsonl", "chat_val.jsonl"):
        for line in open(os.path.join(REPO, "examples", "data", name), encoding="utf-8"):
            for m in json.loads(line)["messages"]:
                words.update(m["content"].split())
    specials = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]
    vocab = {w: i for i, w in enumerate(specials + sorted(words))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   additional_special_tokens=specials[3:])
    fast.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
                          "{% if add_generation_prompt %}<|assistant|> {% endif %}")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                         tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(config).save_pretrained(directory)
    fast.save_pretrained(directory)


def main():
    lines = quickstart_lines()
    scratch = tempfile.mkdtemp(prefix="sg_quickstart_")
    for name in ("scripts", "examples"):
        os.symlink(os.path.join(REPO, name), os.path.join(scratch, name))
    os.symlink(BUILD, os.path.join(scratch, "build"))
    # The scripts find the venv beside themselves, as in a clone.
    os.symlink(os.environ.get("SHADOWGRAD_VENV", os.path.join(REPO, ".venv")), os.path.join(scratch, ".venv"))
    for line in lines:
        command = line.split("#")[0].strip()
        if command.startswith(STANDS_IN):
            if command.startswith("scripts/prepare_model.sh"):
                tiny_model(os.path.join(scratch, "models", "SmolLM2-135M-Instruct"))
            print(f"stood in for: {command}")
            continue
        r = subprocess.run(["bash", "-c", command], cwd=scratch, capture_output=True, text=True, timeout=600)
        print(f"exit {r.returncode}: {command}")
        if r.returncode != 0:
            sys.exit(f"quickstart: `{command}` exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}\n"
                     f"(scratch kept at {scratch})")
        last = r.stdout
    metrics = [json.loads(l) for l in open(os.path.join(scratch, "runs", "chat-lora", "metrics.jsonl"))]
    assert any("eval_loss" in m for m in metrics), "the quick start's run never evaluated"
    assert os.path.isfile(os.path.join(scratch, "out", "chat-lora", "adapter_config.json")), "no peft adapter written"
    print(f"quickstart: {len(lines)} lines ran as written ({len(STANDS_IN)} stood in), {len(metrics)} steps, "
          f"eval_loss {metrics[-1].get('eval_loss')}; generate.sh answered {last.strip()[:60]!r}")


if __name__ == "__main__":
    main()
