#!/usr/bin/env python3
"""Token files from a text corpus with a Hugging Face model directory's own tokenizer (tokenizer.json, through the
`tokenizers` package in the project venv), for continued pretraining or fine-tuning of that model
(docs/huggingface.md). The same layout as build/tokenize: documents are paragraphs separated by blank lines, each
followed by the model's EOS token; document i goes to val.bin when floor((i+1) f) > floor(i f); llm.c files
(uint16 tokens when the vocabulary fits, else uint32).
Cost: about a second per MB of text.

Usage: hf_tokenize.py MODEL_DIR TEXT_FILE OUT_DIR [--val-fraction F]
Exit: 0 ok; 2 bad input (no tokenizer.json, no text).
"""
import argparse
import json
import math
import os
import re
import struct
import sys


def documents(text):
    return [d.strip() for d in re.split(r"\n\s*\n", text) if d.strip()]


def is_validation(i, fraction):  # src/tokenize/Corpus.h
    return math.floor((i + 1) * fraction) > math.floor(i * fraction)


def write_llmc(path, tokens, vocab):
    wide = vocab > 65536
    header = [20240801 if wide else 20240520, 7 if wide else 1, len(tokens)] + [0] * 253
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(tokens)}{'I' if wide else 'H'}", *tokens))
    os.replace(path + ".tmp", path)


def eos_id(model_dir, tokenizer):
    for name in ("generation_config.json", "config.json"):
        path = os.path.join(model_dir, name)
        if os.path.exists(path):
            eos = json.load(open(path)).get("eos_token_id")
            if isinstance(eos, list):
                eos = eos[0] if eos else None
            if isinstance(eos, int):
                return eos
    path = os.path.join(model_dir, "tokenizer_config.json")
    if os.path.exists(path):
        token = json.load(open(path)).get("eos_token")
        if isinstance(token, dict):
            token = token.get("content")
        if isinstance(token, str):
            return tokenizer.token_to_id(token)
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir")
    p.add_argument("text")
    p.add_argument("out_dir")
    p.add_argument("--val-fraction", type=float, default=0.05)
    a = p.parse_args()
    from tokenizers import Tokenizer
    path = os.path.join(a.model_dir, "tokenizer.json")
    if not os.path.exists(path):
        print(f"hf_tokenize.py: {path} does not exist", file=sys.stderr)
        sys.exit(2)
    if not os.path.isfile(a.text):
        print(f"hf_tokenize.py: no text file {a.text}", file=sys.stderr)
        sys.exit(2)
    tok = Tokenizer.from_file(path)
    eos = eos_id(a.model_dir, tok)
    docs = documents(open(a.text, encoding="utf-8").read())
    splits = {"train": [], "val": []}
    for i, enc in enumerate(tok.encode_batch(docs, add_special_tokens=False)):
        dest = splits["val" if is_validation(i, a.val_fraction) else "train"]
        dest.extend(enc.ids)
        if eos is not None:
            dest.append(eos)
    os.makedirs(a.out_dir, exist_ok=True)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    for name, tokens in splits.items():
        write_llmc(os.path.join(a.out_dir, name + ".bin"), tokens, vocab)
    print(f"{len(docs)} documents -> {a.out_dir}/train.bin ({len(splits['train'])} tokens), "
          f"val.bin ({len(splits['val'])} tokens); EOS id {eos}")


if __name__ == "__main__":
    main()
