#!/usr/bin/env python3
"""Preference pairs (JSONL, JSON or Parquet) -> a shadowgrad pair file (dataset_type=preference; docs/data.md).

Usage: prepare_preference.py IN OUT [--tokenizer MODEL_DIR] [--max-length N] [--long truncate|drop]
  IN: JSON Lines, a JSON list of objects, or Parquet. The rows' form is that of the first row, as TRL detects it per
  dataset:
    standard        {"prompt": TEXT, "chosen": TEXT, "rejected": TEXT}: tokenized as TRL 1.16 does, the prompt and each
                    prompt + answer as one string (the EOS appended to an answer that does not end with it); the
                    prompt is the tokens its encoding shares with both joint ones, an answer the rest of its own
    conversational  {"prompt": [messages], "chosen": [assistant messages], "rejected": [assistant messages]}: the
                    prompt through the chat template with the generation prompt; an answer is the rest of prompt +
                    answer rendered whole, from where the two renderings part (TRL 1.16's split)
    implicit        {"chosen": [messages], "rejected": [messages]}: whole conversations; the prompt is their common
                    leading messages, and the last message of each must be the assistant's answer;
                    {"chosen": TEXT, "rejected": TEXT} (Anthropic HH-RLHF): the prompt is their longest common prefix
                    (TRL's extract_prompt), then as standard
    pre-tokenized   {"prompt_ids": [...], "chosen_ids": [...], "rejected_ids": [...]}: stored exactly as given
  --tokenizer MODEL_DIR  a Hugging Face model directory (tokenizer.json, chat template) or a SentencePiece model;
                         not needed for pre-tokenized rows (with it, their ids are checked against its vocabulary)
  --max-length N         a prompt + answer longer than N tokens keeps its first N (TRL's keep_start; --long truncate)
                         or drops its pair (--long drop); a pair whose prompt leaves no answer token is dropped;
                         0 (default): keep every length (the trainer applies max_target_length)
Writes OUT (creating its directory) and prints the counts. Exit: 0 ok; 2 a bad row (named FILE:LINE or FILE:row N,
and the field), bad arguments or no pair left.
"""
import array
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dataset_io import BadRow, fail, messages, need, parse_args, read_rows, token_ids, write_atomically  # noqa: E402

MAGIC = b"SGPAIR\0\0"
VERSION = 1
HEADER_BYTES = 64
ANSWERS = ("chosen", "rejected")
FORMS = ('standard {"prompt": text, "chosen": text, "rejected": text}; conversational {"prompt": [messages], '
         '"chosen": [messages], "rejected": [messages]}; implicit prompt {"chosen": [messages], "rejected": '
         '[messages]} or {"chosen": text, "rejected": text}; pre-tokenized {"prompt_ids", "chosen_ids", '
         '"rejected_ids"}')


def form_of(row):
    if not isinstance(row, dict):
        raise BadRow(None, f"a row must be a JSON object, got {type(row).__name__}")
    if any(k in row for k in ("prompt_ids", "chosen_ids", "rejected_ids")):
        return "pre-tokenized"
    if "chosen" in row or "rejected" in row:
        if "prompt" not in row:
            return "implicit text" if isinstance(row.get("chosen"), str) else "implicit"
        return "conversational" if isinstance(row["prompt"], list) else "standard"
    raise BadRow(None, f"unknown form (keys {sorted(row)}); the forms known: {FORMS}")


def text_ids(tok, prompt, answers):
    """TRL's tokenize step for text: prompt + answer encoded as one string (Tokenizer.prompt_answers)."""
    if tok is None:
        raise BadRow("prompt", "text needs --tokenizer MODEL_DIR")
    p, ids = tok.prompt_answers(prompt, answers)
    if prompt and not p:
        raise BadRow("prompt", "0 tokens left: its encoding shares no token with prompt + answer, which is one string "
                               "(does the answer start with the space or newline that separates it?)")
    return [p] + ids


def text_pair(row, tok):
    prompt = need(row, "prompt")
    answers = [need(row, k) for k in ANSWERS]
    for k, a in zip(ANSWERS, answers):
        if not a:
            raise BadRow(k, "empty answer")
    return text_ids(tok, prompt, answers)


def extract_prompt(chosen, rejected):
    """TRL 1.16's extract_prompt on text (Anthropic HH-RLHF's rows): the prompt is the longest common prefix, less a
    space it ends with (the space starts both answers); when one text is a prefix of the other, the shorter one's
    last character is its answer, as TRL's loop leaves it."""
    n = min(len(chosen), len(rejected))
    for at in range(n):
        if chosen[at] != rejected[at]:
            if at == 0:
                raise BadRow("chosen", "no common prefix with \"rejected\": an implicit-prompt pair's texts start "
                                       "with the same prompt")
            if chosen[at - 1] == " ":
                at -= 1
            break
    return chosen[:at], [chosen[at:], rejected[at:]]


def implicit_text_pair(row, tok):
    answers = [need(row, k) for k in ANSWERS]
    for k, a in zip(ANSWERS, answers):
        if not a:
            raise BadRow(k, "empty text")
    prompt, answers = extract_prompt(*answers)
    if not prompt:
        raise BadRow("chosen", "a text of one character: no prompt before the answer")
    return text_ids(tok, prompt, answers)


def chat_pair(tok, prompt, answers):
    """The prompt's ids and each answer's, as TRL 1.16 splits them (Tokenizer.chat_answers)."""
    if tok is None:
        raise BadRow("prompt", "messages need --tokenizer MODEL_DIR")
    p, ids = tok.chat_answers(prompt, answers, "prompt")
    return [p] + ids


def conversational_pair(row, tok):
    prompt = messages(need(row, "prompt", list), "prompt")
    if not prompt:
        raise BadRow("prompt", "no message")
    answers = [messages(need(row, k, list), k, roles=("assistant",)) for k in ANSWERS]
    for k, a in zip(ANSWERS, answers):
        if not a:
            raise BadRow(k, "empty answer (no message)")
    return chat_pair(tok, prompt, answers)


def implicit_pair(row, tok):
    """The prompt is the conversations' common leading messages; it never takes the last message of either."""
    chosen, rejected = [messages(need(row, k, list), k) for k in ANSWERS]
    for k, conv in zip(ANSWERS, (chosen, rejected)):
        if not conv:
            raise BadRow(k, "empty conversation")
        if conv[-1]["role"] != "assistant":
            raise BadRow(f"{k}[{len(conv) - 1}].role", f"{conv[-1]['role']!r}: the last message must be the "
                                                       "assistant's answer")
    common = 0
    while common < min(len(chosen), len(rejected)) - 1 and chosen[common] == rejected[common]:
        common += 1
    if common == 0:
        raise BadRow("chosen", "no common prefix with \"rejected\": an implicit-prompt pair's conversations start "
                               "with the same prompt messages")
    return chat_pair(tok, chosen[:common], [chosen[common:], rejected[common:]])


def tokenized_pair(row, tok):
    vocab = tok.vocab_size if tok else None
    return [token_ids(need(row, k, list), k, vocab) for k in ("prompt_ids", "chosen_ids", "rejected_ids")]


PAIR = {"standard": text_pair, "conversational": conversational_pair, "implicit": implicit_pair,
        "implicit text": implicit_text_pair, "pre-tokenized": tokenized_pair}


def pair(row, file_form, tok):
    """(prompt, chosen, rejected) token ids of one row, and its form."""
    form = form_of(row)
    if file_form and form != file_form:
        article = "an" if form[0] in "aeiou" else "a"
        raise BadRow(None, f"{article} {form} row in a file of {file_form} rows (the form is the first row's)")
    prompt, chosen, rejected = PAIR[form](row, tok)
    names = ("prompt_ids", "chosen_ids", "rejected_ids") if form == "pre-tokenized" else ("prompt",) + ANSWERS
    if not prompt:
        raise BadRow(names[0], "0 tokens (the first answer token is predicted from the prompt's last token)")
    for name, ids in zip(names[1:], (chosen, rejected)):
        if not ids:
            raise BadRow(name, "empty answer (0 tokens)")
    return prompt, chosen, rejected, form


def write_pairs(path, tokens, offsets, max_id):
    """docs/data.md, "The pair file": a 64-byte header, uint32 tokens, then 3 * num_pairs + 1 uint64 offsets."""
    header = MAGIC + struct.pack("<IIQQI", VERSION, 4, (len(offsets) - 1) // 3, len(tokens), max_id)
    header += b"\0" * (HEADER_BYTES - len(header))
    write_atomically(path, [header, np.frombuffer(tokens, dtype=np.uint32).astype("<u4").tobytes(),
                            np.frombuffer(offsets, dtype=np.uint64).astype("<u8").tobytes()], "prepare_preference")


def main():
    a, tok = parse_args(__doc__, "prepare_preference")
    tokens, offsets = array.array("I"), array.array("Q", [0])
    file_form, identical, truncated, max_id = None, 0, 0, 0
    dropped, lengths, prompt_lengths = {}, [], []
    answer_tokens = [0, 0]
    for label, row in read_rows(a.input):
        try:
            prompt, chosen, rejected, file_form = pair(row, file_form, tok)
        except BadRow as e:
            fail(f"{label}: {e}")
        longest = len(prompt) + max(len(chosen), len(rejected))
        if a.max_length and longest > a.max_length:
            if a.long == "drop" or len(prompt) >= a.max_length:
                why = (f"longer than --max-length {a.max_length}" if a.long == "drop"
                       else f"a prompt of --max-length {a.max_length} tokens or more (no answer token left)")
                dropped[why] = dropped.get(why, 0) + 1
                continue
            room = a.max_length - len(prompt)
            chosen, rejected = chosen[:room], rejected[:room]
            truncated += 1
        identical += chosen == rejected
        for part in (prompt, chosen, rejected):
            tokens.extend(part)
            offsets.append(len(tokens))
        max_id = max(max_id, *prompt, *chosen, *rejected)
        answer_tokens[0] += len(chosen)
        answer_tokens[1] += len(rejected)
        prompt_lengths.append(len(prompt))
        lengths += [len(prompt) + len(chosen), len(prompt) + len(rejected)]
    n = len(prompt_lengths)
    if n == 0:
        fail(f"prepare_preference: {a.input} gave no pair ({sum(dropped.values())} dropped: {dropped})")
    write_pairs(a.output, tokens, offsets, max_id)
    print(f"{a.output}: {n} pairs, {len(tokens)} tokens ({answer_tokens[0]} chosen and {answer_tokens[1]} rejected "
          f"answer tokens); form: {file_form}")
    print(f"identical answers: {identical}" + (" (kept; such a pair carries no gradient)" if identical else ""))
    print(f"lengths (prompt + answer): min {min(lengths)}, median {int(np.median(lengths))}, max {max(lengths)} "
          f"tokens; prompts: min {min(prompt_lengths)}, max {max(prompt_lengths)}; largest token id {max_id} "
          f"(vocab_size must be > {max_id})")
    if tok is not None and tok.prompts_cut:
        print(f"prompts cut: {tok.prompts_cut} (the prompt's own encoding and prompt + answer part before its end: a "
              "prompt ending in a space under a byte-level BPE, or a chat template that renders a prompt alone "
              "otherwise; the answer starts where they part, as in TRL)")
    print(f"truncated: {truncated}" + (f" (to --max-length {a.max_length})" if truncated else ""))
    print(f"dropped: {sum(dropped.values())}" + "".join(f"; {v} {k}" for k, v in sorted(dropped.items())))


if __name__ == "__main__":
    main()
