#!/usr/bin/env python3
"""JSONL instruction data -> a shadowgrad SFT file (dataset_type=sft; the format is in docs/data.md).

Usage: prepare_sft.py IN.jsonl OUT [--tokenizer MODEL_DIR] [--max-length N] [--long truncate|drop]
  One JSON object per line, in any of these forms (blank lines are skipped):
    {"prompt": ..., "completion": ...}          the completion is the target
    {"instruction": ..., "input": ..., "output": ...}   Alpaca; rendered with Alpaca's prompt, the output the target
    {"messages": [{"role": ..., "content": ...}, ...]}  through the tokenizer's chat template; assistant turns are
                                                 the targets, every other token is prompt
    {"input_ids": [...], "labels": [...]}       pre-tokenized; labels aligned with input_ids as in transformers
                                                 (-100: not a target; otherwise labels[i] == input_ids[i], predicted
                                                 from position i-1); labels may be omitted (every token a target)
  --tokenizer MODEL_DIR  a Hugging Face model directory (tokenizer.json, chat template) or a directory or file with a
                         SentencePiece model (tokenizer.model); not needed when every line is pre-tokenized
  --max-length N         examples longer than N tokens are truncated to N (--long truncate) or dropped (--long drop);
                         0 (default): keep every length (the trainer applies max_target_length and sft_long_examples)
Writes OUT and prints the counts. Exit: 0 ok; 2 a bad line (named FILE:LINE), bad arguments or no example left.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

MAGIC = b"SGSFT\0\0\0"
VERSION = 1
HEADER_BYTES = 64
IGNORE = -100
ALPACA_WITH_INPUT = ("Below is an instruction that describes a task, paired with an input that provides further "
                     "context. Write a response that appropriately completes the request.\n\n"
                     "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n")
ALPACA_NO_INPUT = ("Below is an instruction that describes a task. Write a response that appropriately completes the "
                   "request.\n\n### Instruction:\n{instruction}\n\n### Response:\n")


class BadLine(Exception):
    pass


class Tokenizer:
    """encode(text, first) -> ids (before the first piece, the special tokens the tokenizer itself puts before a text:
    a BOS, if any), eos, and chat()."""

    def __init__(self, path):
        self.hf = None
        self.sp = None
        sp_file = path if os.path.isfile(path) else os.path.join(path, "tokenizer.model")
        if os.path.isdir(path) and os.path.exists(os.path.join(path, "tokenizer.json")):
            from hf_tokenizer import load_tokenizer  # the venv's transformers; tokenizer.json and the chat template
            self.hf = load_tokenizer(path)
            self.eos = self.hf.eos_token_id
            self.prefix = self._special_prefix()
        elif os.path.exists(sp_file):
            import sentencepiece
            self.sp = sentencepiece.SentencePieceProcessor(model_file=sp_file)
            self.eos = self.sp.eos_id() if self.sp.eos_id() >= 0 else None
            self.prefix = [self.sp.bos_id()] if self.sp.bos_id() >= 0 else []
        else:
            raise SystemExit(f"prepare_sft: --tokenizer {path}: neither tokenizer.json nor a SentencePiece model there")

    def _special_prefix(self):
        """The tokens encode(..., add_special_tokens=True) puts before the text: a BOS, whether add_bos_token or the
        post-processor (Llama 3's <|begin_of_text|>) adds it. What it appends after the text (an EOS) is left out:
        the completion's EOS is added by prompt_completion."""
        probe = "hello"
        plain = list(self.hf.encode(probe, add_special_tokens=False))
        full = list(self.hf.encode(probe, add_special_tokens=True))
        for at in range(len(full) - len(plain) + 1):
            if full[at: at + len(plain)] == plain:
                return full[:at]
        raise SystemExit("prepare_sft: the tokenizer's encode(add_special_tokens=True) does not contain its plain "
                         "encoding; cannot tell which special tokens it adds")

    def encode(self, text, first):
        ids = self.hf.encode(text, add_special_tokens=False) if self.hf else self.sp.encode(text)
        return (list(self.prefix) if first else []) + list(ids)

    def chat(self, messages):
        """Token ids of the conversation and a target flag per token: the assistant turns' own tokens. Each assistant
        turn's span is the rendering of the turns up to it minus the rendering, with a generation prompt, of the turns
        before it; a template whose renderings are not prefixes of one another is refused."""
        if self.hf is None or not self.hf.chat_template:
            raise BadLine("\"messages\" needs --tokenizer with a chat template (a Hugging Face model directory)")

        def render(turns, prompt):
            out = self.hf.apply_chat_template(turns, tokenize=True, add_generation_prompt=prompt)
            return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)

        ids = render(messages, False)
        flags = [0] * len(ids)
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            before, upto = render(messages[:i], True) if i else [], render(messages[: i + 1], False)
            if upto[: len(before)] != before or ids[: len(upto)] != upto:
                raise BadLine(f"the chat template renders turn {i} differently once later turns follow; it cannot "
                              "mark the assistant's tokens (pre-tokenize with input_ids and labels instead)")
            for j in range(len(before), len(upto)):
                flags[j] = 1
        return ids, flags


def need(obj, key, kind=str):
    if key not in obj:
        raise BadLine(f"missing \"{key}\"")
    if not isinstance(obj[key], kind):
        raise BadLine(f"\"{key}\" must be a {kind.__name__}, got {type(obj[key]).__name__}")
    return obj[key]


def prompt_completion(tok, prompt, completion):
    if tok is None:
        raise BadLine("text needs --tokenizer MODEL_DIR")
    p = tok.encode(prompt, True)
    c = tok.encode(completion, False) + ([tok.eos] if tok.eos is not None else [])
    return p + c, [0] * len(p) + [1] * len(c)


def example(obj, tok):
    """(ids, flags, form) of one JSON object."""
    if not isinstance(obj, dict):
        raise BadLine(f"a line must be a JSON object, got {type(obj).__name__}")
    if "input_ids" in obj:
        ids = need(obj, "input_ids", list)
        labels = obj.get("labels", ids)
        if not isinstance(labels, list) or len(labels) != len(ids):
            raise BadLine(f"\"labels\" must be a list as long as \"input_ids\" ({len(ids)})")
        for i, (t, l) in enumerate(zip(ids, labels)):
            if not isinstance(t, int) or isinstance(t, bool) or t < 0 or t >= 2**32:
                raise BadLine(f"input_ids[{i}] = {t!r} is not a token id (an integer in [0, 2^32))")
            if l != IGNORE and l != t:
                raise BadLine(f"labels[{i}] = {l!r}: a label is -100 or the token at the same position "
                              f"(input_ids[{i}] = {t}; labels are aligned with input_ids, as in transformers)")
        return list(ids), [0 if l == IGNORE else 1 for l in labels], "pre-tokenized"
    if "messages" in obj:
        msgs = need(obj, "messages", list)
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise BadLine(f"messages[{i}] must be {{\"role\": str, \"content\": str}}")
        if not any(m["role"] == "assistant" for m in msgs):
            raise BadLine("\"messages\" has no assistant turn (nothing to train on)")
        if tok is None:
            raise BadLine("\"messages\" needs --tokenizer MODEL_DIR")
        ids, flags = tok.chat(msgs)
        return ids, flags, "messages"
    if "instruction" in obj:
        inst, out = need(obj, "instruction"), need(obj, "output")
        extra = obj.get("input", "")
        if not isinstance(extra, str):
            raise BadLine("\"input\" must be a string")
        prompt = (ALPACA_WITH_INPUT if extra else ALPACA_NO_INPUT).format(instruction=inst, input=extra)
        return (*prompt_completion(tok, prompt, out), "alpaca")
    if "prompt" in obj:
        return (*prompt_completion(tok, need(obj, "prompt"), need(obj, "completion")), "prompt/completion")
    raise BadLine("unknown form: expected prompt/completion, messages, instruction/input/output, or input_ids/labels; "
                  f"got keys {sorted(obj)}")


def write_sft(path, ids, flags, offsets):
    """docs/data.md, "SFT file": a 64-byte header, uint32 tokens, uint8 target flags padded to 8 bytes, then
    num_examples + 1 uint64 offsets."""
    tokens = np.asarray(ids, dtype="<u4")
    flag_bytes = np.asarray(flags, dtype=np.uint8)
    pad = (-len(flag_bytes)) % 8
    targets = int(flag_bytes.sum())
    max_id = int(tokens.max()) if len(tokens) else 0
    header = MAGIC + struct.pack("<IIQQQI", VERSION, 4, len(offsets) - 1, len(tokens), targets, max_id)
    header += b"\0" * (HEADER_BYTES - len(header))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header)
        f.write(tokens.tobytes())
        f.write(flag_bytes.tobytes() + b"\0" * pad)
        f.write(np.asarray(offsets, dtype="<u8").tobytes())
    os.replace(tmp, path)
    return targets, max_id


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--tokenizer")
    ap.add_argument("--max-length", type=int, default=0)
    ap.add_argument("--long", choices=["truncate", "drop"], default="truncate")
    a = ap.parse_args()
    if a.max_length < 0 or a.max_length == 1:
        raise SystemExit("prepare_sft: --max-length must be 0 (off) or >= 2")
    tok = Tokenizer(a.tokenizer) if a.tokenizer else None
    ids, flags, offsets = [], [], [0]
    forms, dropped = {}, {}
    truncated = 0
    try:
        f = open(a.input, encoding="utf-8")
    except OSError as e:
        raise SystemExit(f"prepare_sft: cannot read {a.input}: {e.strerror}")
    with f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise BadLine(f"not JSON: {e.msg} at column {e.colno}")
                x, m, form = example(obj, tok)
            except BadLine as e:
                print(f"{a.input}:{number}: {e}", file=sys.stderr)
                sys.exit(2)
            m[0] = 0  # nothing predicts an example's first token
            if a.max_length and len(x) > a.max_length:
                if a.long == "drop":
                    dropped[f"longer than --max-length {a.max_length}"] = dropped.get(
                        f"longer than --max-length {a.max_length}", 0) + 1
                    continue
                x, m = x[: a.max_length], m[: a.max_length]
                truncated += 1
            if len(x) < 2:
                dropped["fewer than 2 tokens"] = dropped.get("fewer than 2 tokens", 0) + 1
                continue
            if not any(m):
                why = "no target token" + (" left after truncation" if a.max_length and len(x) == a.max_length else "")
                dropped[why] = dropped.get(why, 0) + 1
                continue
            forms[form] = forms.get(form, 0) + 1
            ids += x
            flags += m
            offsets.append(len(ids))
    n = len(offsets) - 1
    if n == 0:
        print(f"prepare_sft: {a.input} gave no example ({sum(dropped.values())} dropped: {dropped})", file=sys.stderr)
        sys.exit(2)
    targets, max_id = write_sft(a.output, ids, flags, offsets)
    lengths = np.diff(np.asarray(offsets))
    print(f"{a.output}: {n} examples, {len(ids)} tokens, {targets} target tokens "
          f"({100.0 * targets / len(ids):.1f}%); forms: " + ", ".join(f"{k} {v}" for k, v in sorted(forms.items())))
    print(f"lengths: min {lengths.min()}, median {int(np.median(lengths))}, max {lengths.max()} tokens; "
          f"largest token id {max_id} (vocab_size must be > {max_id})")
    print(f"truncated: {truncated}" + (f" (to --max-length {a.max_length})" if truncated else ""))
    print(f"dropped: {sum(dropped.values())}" + "".join(f"; {v} {k}" for k, v in sorted(dropped.items())))


if __name__ == "__main__":
    main()
