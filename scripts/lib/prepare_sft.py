#!/usr/bin/env python3
"""Instruction data (JSONL, JSON or Parquet) -> a shadowgrad SFT file (dataset_type=sft; the format is in docs/data.md).

Usage: prepare_sft.py IN OUT [--tokenizer MODEL_DIR] [--max-length N] [--long truncate|drop]
  IN: JSON Lines, a JSON list of objects, or Parquet. Each row in any of these forms (blank lines are skipped):
    {"prompt": ..., "completion": ...}          the completion is the target; both text (prompt + completion encoded
                                                 as one string, as TRL 1.16 does), or (TRL's conversational
                                                 prompt/completion) both lists of messages through the chat template
    {"instruction": ..., "input": ..., "output": ...}   Alpaca; rendered with Alpaca's prompt, the output the target
    {"messages": [{"role": ..., "content": ...}, ...]}  through the tokenizer's chat template; assistant turns are
                                                 the targets, every other token is prompt
    {"conversations": [{"from": ..., "value": ...}, ...]}  ShareGPT (human/gpt/system), as "messages"
    {"text": ...}                                continued pretraining: every token a target, the EOS appended (unless
                                                 the text ends with it)
    {"input_ids": [...], "labels": [...]}       pre-tokenized; labels aligned with input_ids as in transformers
                                                 (-100: not a target; otherwise labels[i] == input_ids[i], predicted
                                                 from position i-1); labels may be omitted (every token a target)
  --tokenizer MODEL_DIR  a Hugging Face model directory (tokenizer.json, chat template) or a directory or file with a
                         SentencePiece model (tokenizer.model); not needed when every row is pre-tokenized
  --max-length N         examples longer than N tokens are truncated to N (--long truncate) or dropped (--long drop);
                         0 (default): keep every length (the trainer applies max_target_length and sft_long_examples)
Writes OUT (creating its directory) and prints the counts. Exit: 0 ok; 2 a bad row (named FILE:LINE or FILE:row N),
bad arguments or no example left.
"""
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dataset_io import BadRow, fail, messages, need, parse_args, read_rows, token_ids, write_atomically  # noqa: E402

MAGIC = b"SGSFT\0\0\0"
VERSION = 1
HEADER_BYTES = 64
IGNORE = -100
ALPACA_WITH_INPUT = ("Below is an instruction that describes a task, paired with an input that provides further "
                     "context. Write a response that appropriately completes the request.\n\n"
                     "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n")
ALPACA_NO_INPUT = ("Below is an instruction that describes a task. Write a response that appropriately completes the "
                   "request.\n\n### Instruction:\n{instruction}\n\n### Response:\n")


SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}
FORMS = ('{"prompt", "completion"} (text, or TRL\'s conversational: both lists of messages); {"messages"}; ShareGPT '
         '{"conversations"}; Alpaca {"instruction", "input", "output"}; {"text"}; pre-tokenized {"input_ids", '
         '"labels"}')


def text_tokens(tok, field):
    if tok is None:
        raise BadRow(field, "text needs --tokenizer MODEL_DIR")
    return tok


def prompt_completion(tok, prompt, completion, field):
    """As TRL 1.16's SFTTrainer tokenizes prompt/completion text: prompt + completion (the EOS appended unless it ends
    with it) encoded as one string; the targets start where it parts from the prompt's own encoding."""
    p, (c,) = text_tokens(tok, field).prompt_answers(prompt, [completion])
    return p + c, [0] * len(p) + [1] * len(c)


def conversation(tok, turns, field):
    if not any(m["role"] == "assistant" for m in turns):
        raise BadRow(field, "no assistant turn (nothing to train on)")
    if tok is None:
        raise BadRow(field, "messages need --tokenizer MODEL_DIR")
    return tok.chat(turns, field)


def sharegpt(turns):
    """ShareGPT's {"from", "value"} turns as messages (human/gpt/system -> user/assistant/system)."""
    if not isinstance(turns, list):
        raise BadRow("conversations", f"must be a list of turns, got {type(turns).__name__}")
    out = []
    for i, t in enumerate(turns):
        if not isinstance(t, dict) or not isinstance(t.get("value"), str):
            raise BadRow(f"conversations[{i}].value", "must be a string (a turn is {\"from\", \"value\"})")
        role = SHAREGPT_ROLES.get(t.get("from"))
        if role is None:
            raise BadRow(f"conversations[{i}].from", f"{t.get('from')!r}: expected human, gpt or system")
        out.append({"role": role, "content": t["value"]})
    return out


def example(obj, tok):
    """(ids, flags, form) of one row."""
    if not isinstance(obj, dict):
        raise BadRow(None, f"a row must be a JSON object, got {type(obj).__name__}")
    if "input_ids" in obj:
        ids = token_ids(obj["input_ids"], "input_ids", tok.vocab_size if tok else None)
        labels = obj.get("labels", ids)
        if not isinstance(labels, list) or len(labels) != len(ids):
            raise BadRow("labels", f"must be a list as long as \"input_ids\" ({len(ids)})")
        for i, (t, l) in enumerate(zip(ids, labels)):
            if l != IGNORE and l != t:
                raise BadRow(f"labels[{i}]", f"{l!r}: a label is -100 or the token at the same position "
                                             f"(input_ids[{i}] = {t}; labels are aligned with input_ids, as in "
                                             "transformers)")
        return ids, [0 if l == IGNORE else 1 for l in labels], "pre-tokenized"
    if "messages" in obj:
        return (*conversation(tok, messages(obj["messages"], "messages"), "messages"), "messages")
    if "conversations" in obj:
        return (*conversation(tok, sharegpt(obj["conversations"]), "conversations"), "sharegpt")
    if "instruction" in obj:
        inst, out = need(obj, "instruction"), need(obj, "output")
        extra = obj.get("input") or ""
        if not isinstance(extra, str):
            raise BadRow("input", "must be a string")
        prompt = (ALPACA_WITH_INPUT if extra else ALPACA_NO_INPUT).format(instruction=inst, input=extra)
        return (*prompt_completion(tok, prompt, out, "instruction"), "alpaca")
    if "chosen" in obj and "completion" not in obj and "text" not in obj:
        raise BadRow(None, "a preference pair (chosen, rejected): use scripts/prepare_preference.sh")
    if "prompt" in obj and isinstance(obj["prompt"], list):
        prompt = messages(obj["prompt"], "prompt")
        answer = messages(need(obj, "completion", list), "completion")
        if not answer:
            raise BadRow("completion", "empty (nothing to train on)")
        if tok is None:
            raise BadRow("prompt", "messages need --tokenizer MODEL_DIR")
        p, (c,) = tok.chat_answers(prompt, [answer], "completion")
        return p + c, [0] * len(p) + [1] * len(c), "conversational prompt/completion"
    if "prompt" in obj:
        return (*prompt_completion(tok, need(obj, "prompt"), need(obj, "completion"), "prompt"), "prompt/completion")
    if "text" in obj:
        ids = text_tokens(tok, "text").with_eos(need(obj, "text"))
        return ids, [1] * len(ids), "text"
    raise BadRow(None, f"unknown form (keys {sorted(obj)}); the forms known: {FORMS}")


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
    write_atomically(path, [header, tokens.tobytes(), flag_bytes.tobytes() + b"\0" * pad,
                            np.asarray(offsets, dtype="<u8").tobytes()], "prepare_sft")
    return targets, max_id


def main():
    a, tok = parse_args(__doc__, "prepare_sft")
    ids, flags, offsets = [], [], [0]
    forms, dropped = {}, {}
    truncated = 0
    for label, row in read_rows(a.input):
        try:
            x, m, form = example(row, tok)
        except BadRow as e:
            fail(f"{label}: {e}")
        m[0] = 0  # nothing predicts an example's first token
        if a.max_length and len(x) > a.max_length:
            if a.long == "drop":
                why = f"longer than --max-length {a.max_length}"
                dropped[why] = dropped.get(why, 0) + 1
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
        fail(f"prepare_sft: {a.input} gave no example ({sum(dropped.values())} dropped: {dropped})")
    targets, max_id = write_sft(a.output, ids, flags, offsets)
    lengths = np.diff(np.asarray(offsets))
    print(f"{a.output}: {n} examples, {len(ids)} tokens, {targets} target tokens "
          f"({100.0 * targets / len(ids):.1f}%); forms: " + ", ".join(f"{k} {v}" for k, v in sorted(forms.items())))
    print(f"lengths: min {lengths.min()}, median {int(np.median(lengths))}, max {lengths.max()} tokens; "
          f"largest token id {max_id} (vocab_size must be > {max_id})")
    if tok is not None and tok.prompts_cut:
        print(f"prompts cut: {tok.prompts_cut} (the prompt's own encoding and prompt + completion part before its "
              "end: a prompt ending in a space under a byte-level BPE, or a chat template that renders a prompt alone "
              "otherwise; the targets start where they part, as in TRL)")
    print(f"truncated: {truncated}" + (f" (to --max-length {a.max_length})" if truncated else ""))
    print(f"dropped: {sum(dropped.values())}" + "".join(f"; {v} {k}" for k, v in sorted(dropped.items())))


if __name__ == "__main__":
    main()
