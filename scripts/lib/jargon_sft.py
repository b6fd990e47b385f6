#!/usr/bin/env python3
"""The Jargon File (Debian's dict-jargon, public domain) as instruction data: one {"prompt", "completion"} per entry,
the prompt asking what the term means and the completion the entry's first paragraph (cut at a sentence end near
--max-chars). Every --every-th entry, by a hash of its headword, goes to the held-out file.

Usage: jargon_sft.py OUT_DIR [--max-chars N] [--every K]   -> OUT_DIR/train.jsonl, val.jsonl, corpus.txt
Standard library only.
"""
import argparse
import gzip
import hashlib
import json
import os
import re

DICT = "/usr/share/dictd/jargon.dict.dz"
INDEX = "/usr/share/dictd/jargon.index"
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def b64(s):
    v = 0
    for ch in s:
        v = v * 64 + B64.index(ch)
    return v


def first_paragraph(entry, max_chars):
    # "headword\n part-of-speech line\n\n    body..." : the body's first paragraph, markup and spacing removed.
    parts = entry.split("\n\n")
    body = next((p for p in parts[1:] if p.strip()), "")
    text = re.sub(r"\s+", " ", body.replace("\xa0", " ")).strip()
    text = re.sub(r"^(\d+\. )", "", text)                     # "1. [techspeak] ..." -> "[techspeak] ..."
    text = text.replace("{", "").replace("}", "")             # cross-reference braces
    if len(text) > max_chars:
        cut = text.rfind(". ", 0, max_chars)
        text = text[: cut + 1] if cut > 40 else text[:max_chars].rsplit(" ", 1)[0] + " ..."
    return text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--max-chars", type=int, default=500)
    ap.add_argument("--every", type=int, default=20)
    a = ap.parse_args()
    data = gzip.open(DICT).read()
    os.makedirs(a.out, exist_ok=True)
    files = {s: open(os.path.join(a.out, f"{s}.jsonl"), "w") for s in ("train", "val")}
    corpus = open(os.path.join(a.out, "corpus.txt"), "w")
    counts = {"train": 0, "val": 0}
    for line in open(INDEX, encoding="utf-8"):
        head, off, n = line.rstrip("\n").split("\t")
        if head.startswith("00-database") or head.startswith("00database"):
            continue
        entry = data[b64(off): b64(off) + b64(n)].decode("utf-8", "replace")
        answer = first_paragraph(entry, a.max_chars)
        if len(answer) < 20:
            continue
        prompt = f"Q: In hacker slang, what does \"{head}\" mean?\nA:"
        split = "val" if int(hashlib.sha1(head.encode()).hexdigest(), 16) % a.every == 0 else "train"
        files[split].write(json.dumps({"prompt": prompt, "completion": " " + answer}) + "\n")
        counts[split] += 1
        corpus.write(f"{prompt} {answer}\n\n")
    print(f"{a.out}: {counts['train']} training and {counts['val']} held-out term/definition pairs")


if __name__ == "__main__":
    main()
