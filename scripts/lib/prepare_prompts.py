#!/usr/bin/env python3
"""Encodes prompts for eval_prompts_path (scripts/prepare_prompts.sh --help): each line of IN gets "prompt_ids" (what
the model is fed) and "stop_ids" (the tokenizer's EOS and generation_config.json's), and keeps its text for
samples.jsonl."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dataset_io import read_rows, write_atomically  # noqa: E402
from generate import BadInput, EXIT_BAD_INPUT, chat_ids, stop_ids, text_ids  # noqa: E402


def encode(item, tok):
    """The line as samples.jsonl will echo it, with its ids; an SFT answer moves to "reference"."""
    if not isinstance(item, dict) or ("messages" in item) == ("prompt" in item):
        raise BadInput('expected an object with "prompt" or "messages"')
    if "messages" in item:
        messages = list(item["messages"])
        reference = None
        if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant":
            reference = messages.pop()["content"]
        if not messages:
            raise BadInput("no message before the assistant's")
        out = {"messages": messages, "prompt_ids": chat_ids(tok, messages)}
    else:
        prompt = item["prompt"]
        if not isinstance(prompt, str):
            raise BadInput('"prompt" must be text (a conversational prompt goes in "messages")')
        reference = item.get("completion")
        out = {"prompt": prompt, "prompt_ids": text_ids(tok, prompt)}
    if reference is not None:
        out["reference"] = reference
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--tokenizer", required=True, help="a Hugging Face model directory with tokenizer.json")
    p.add_argument("--limit", type=int, default=0)
    args = p.parse_args()
    from hf_tokenizer import load_tokenizer
    tok = load_tokenizer(args.tokenizer)
    stops = stop_ids(tok, args.tokenizer, args.tokenizer)
    lines = []
    for label, row in read_rows(args.input):
        try:
            item = encode(row, tok)
        except (BadInput, KeyError, TypeError) as e:
            raise BadInput(f"{label}: {e}")
        item["stop_ids"] = stops
        lines.append(item)
        if args.limit and len(lines) == args.limit:
            break
    if not lines:
        raise BadInput(f"{args.input}: no prompts")
    text = "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in lines)
    write_atomically(args.output, [text.encode("utf-8")], "prepare_prompts")
    longest = max(len(i["prompt_ids"]) for i in lines)
    print(f"prepare_prompts: {len(lines)} prompts, the longest {longest} tokens, stop ids {stops} -> {args.output}")


if __name__ == "__main__":
    try:
        main()
    except BadInput as e:
        print(f"prepare_prompts: error: {e}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
