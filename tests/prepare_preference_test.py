#!/usr/bin/env python3
"""scripts/prepare_preference.sh end to end: each of TRL's preference forms (standard, conversational, implicit
prompt, pre-tokenized), from JSONL, a JSON list and Parquet, read back from the pair file by an independent parser that
follows docs/data.md's table; a BOS the tokenizer adds; --max-length; identical answers counted; bad rows exit 2
naming FILE:LINE (or FILE:row N) and the field; a control that the parser catches a wrong offset.

Usage: prepare_preference_test.py REPO   (run by the venv's python: it needs tokenizers, transformers, numpy, pyarrow)
The tiny word-level tokenizer of prepare_sft_test.py is built here, so nothing is downloaded.
The script runs twice as a user runs it (a success and an exit 2); its other runs call scripts/lib/prepare_preference.py's
main() in this process (prepare_sft_test.py's run_main), since a new process per run paid the imports again (about 1 s
of CPU each).
Cost: ~10 s of CPU (about thirty runs of the preparer).
"""
import json
import os
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prepare_sft_test import check, jsonl, make_tokenizer, parquet, run_main, run_script  # noqa: E402


def read_pairs(path):
    """The pair file by docs/data.md: a 64-byte header, uint32 tokens, 3 * num_pairs + 1 uint64 offsets. Raises
    ValueError on anything the table forbids."""
    data = open(path, "rb").read()
    if data[:8] != b"SGPAIR\0\0":
        raise ValueError(f"magic {data[:8]!r}")
    version, width, pairs, tokens = struct.unpack_from("<IIQQ", data, 8)
    (max_id,) = struct.unpack_from("<I", data, 32)
    if (version, width) != (1, 4) or data[36:64] != b"\0" * 28:
        raise ValueError("header")
    at = 64 + 4 * tokens
    if len(data) != at + 8 * (3 * pairs + 1):
        raise ValueError(f"size {len(data)} is not what the counts imply")
    ids = list(struct.unpack_from(f"<{tokens}I", data, 64))
    off = list(struct.unpack_from(f"<{3 * pairs + 1}Q", data, at))
    if off[0] != 0 or off[-1] != tokens or any(b < a for a, b in zip(off, off[1:])):
        raise ValueError(f"offsets {off}")
    if max(ids) != max_id:
        raise ValueError(f"largest id {max(ids)} != header's {max_id}")
    out = []
    for i in range(pairs):
        p, c, r = (ids[off[3 * i + k]: off[3 * i + k + 1]] for k in range(3))
        if not p or not c or not r:
            raise ValueError(f"pair {i}: an empty prompt or answer")
        out.append((p, c, r))
    return out


def run(args, expect=0, script=False):
    """prepare_preference with ARGS: through scripts/prepare_preference.sh with SCRIPT, else its main() in this
    process."""
    return (run_script("prepare_preference.sh", args, expect) if script
            else run_main("prepare_preference", args, expect))


def main():
    d = tempfile.mkdtemp(prefix="sg_prepare_preference_")
    vocab = make_tokenizer(os.path.join(d, "tok"))
    v = lambda text: [vocab[w] for w in text.split()]
    tok = ["--tokenizer", os.path.join(d, "tok")]
    eos, end, asst = vocab["</s>"], vocab["<|end|>"], vocab["<|assistant|>"]
    user = lambda text: {"role": "user", "content": text}
    bot = lambda text: {"role": "assistant", "content": text}

    # Standard text rows: the EOS ends both answers; identical answers kept and counted; the output's directory made.
    # prompt + answer is one string, as in TRL: each answer carries its leading space.
    src = jsonl(d, "std.jsonl", [{"prompt": "what is the capital of france", "chosen": " paris",
                                  "rejected": " the cat"}, "", {"prompt": "hello", "chosen": " hi", "rejected": " hi"}])
    out_path = os.path.join(d, "new", "dir", "std.pair")
    out = run([src, out_path] + tok, script=True)
    pairs = read_pairs(out_path)
    check(pairs == [(v("what is the capital of france"), v("paris") + [eos], v("the cat") + [eos]),
                    (v("hello"), v("hi") + [eos], v("hi") + [eos])],
          "standard: prompt as encoded, EOS appended to both answers; a blank line skipped; directory created")
    check("2 pairs" in out and "identical answers: 1" in out and "form: standard" in out
          and f"largest token id {max(max(x) for pr in pairs for x in pr)}" in out,
          "standard: the summary counts pairs, identical answers, the form and the largest id")

    # A BOS from the tokenizer's post-processor: once, before the prompt, never before an answer.
    make_tokenizer(os.path.join(d, "tok_bos"), bos_by_post_processor=True)
    run([src, os.path.join(d, "bos.pair"), "--tokenizer", os.path.join(d, "tok_bos")])
    bos = vocab["<s>"]
    check(read_pairs(os.path.join(d, "bos.pair"))[1] == ([bos] + v("hello"), v("hi") + [eos], v("hi") + [eos]),
          "standard: the tokenizer's BOS starts the prompt only")

    # Conversational: the prompt with the generation prompt; an answer is what the template adds (no EOS added).
    want = (v("<|user|> hello <|end|>") + [asst], v("hi") + [end], v("the cat") + [end])
    conv = {"prompt": [user("hello")], "chosen": [bot("hi")], "rejected": [bot("the cat")]}
    src = jsonl(d, "conv.jsonl", [conv])
    out = run([src, os.path.join(d, "conv.pair")] + tok)
    check(read_pairs(os.path.join(d, "conv.pair")) == [want] and "form: conversational" in out,
          "conversational: prompt through the template with its generation prompt, answers after it")

    # Implicit prompt: the common leading messages, here including an earlier assistant turn.
    long_c = [user("hello"), bot("hi"), user("what is the capital of france"), bot("paris")]
    long_r = long_c[:3] + [bot("the cat")]
    src = jsonl(d, "implicit.jsonl", [{"chosen": [user("hello"), bot("hi")], "rejected": [user("hello"),
                                                                                          bot("the cat")]},
                                      {"chosen": long_c, "rejected": long_r}])
    out = run([src, os.path.join(d, "implicit.pair")] + tok)
    pairs = read_pairs(os.path.join(d, "implicit.pair"))
    prompt2 = v("<|user|> hello <|end|> <|assistant|> hi <|end|> <|user|> what is the capital of france <|end|>")
    check(pairs == [want, (prompt2 + [asst], v("paris") + [end], v("the cat") + [end])] and "form: implicit" in out,
          "implicit prompt: the prompt is the common leading messages, the answers the last messages")

    # Implicit prompt as plain text (Anthropic HH-RLHF): the prompt is the longest common prefix, less the space it
    # ends with (TRL's extract_prompt), so a shared start of the answers ("the") joins the prompt.
    hh = [{"chosen": "hello what is the capital of france paris", "rejected": "hello what is the capital of france the "
                                                                             "cat"},
          {"chosen": "hello hi the cat sat</s>", "rejected": "hello hi the dog"}]
    out = run([jsonl(d, "hh.jsonl", hh), os.path.join(d, "hh.pair")] + tok)
    check(read_pairs(os.path.join(d, "hh.pair")) == [(v("hello what is the capital of france"), v("paris") + [eos],
                                                      v("the cat") + [eos]),
                                                     (v("hello hi the"), v("cat sat") + [eos], v("dog") + [eos])]
          and "form: implicit text" in out,
          "implicit prompt as text: the longest common prefix is the prompt; an answer ending in the EOS keeps one")

    # Pre-tokenized, from a JSON list spread over lines: stored exactly as given (no EOS, no BOS), no tokenizer.
    rows = [{"prompt_ids": [5, 6], "chosen_ids": [7], "rejected_ids": [8, 9, 2**32 - 1]},
            {"prompt_ids": [1], "chosen_ids": [0], "rejected_ids": [0]}]
    src = os.path.join(d, "ids.json")
    with open(src, "w") as f:
        json.dump(rows, f, indent=2)
    out = run([src, os.path.join(d, "ids.pair")])
    check(read_pairs(os.path.join(d, "ids.pair")) == [([5, 6], [7], [8, 9, 2**32 - 1]), ([1], [0], [0])],
          "pre-tokenized (a JSON list): stored exactly as given, ids up to 2^32 - 1")
    check("identical answers: 1" in out and "largest token id 4294967295" in out, "pre-tokenized: the summary")

    # Parquet, as the hub serves it: conversational rows (lists of structs) and pre-tokenized rows (lists of ints).
    src = parquet(d, "conv.parquet", [conv, conv])
    run([src, os.path.join(d, "pq.pair")] + tok)
    check(read_pairs(os.path.join(d, "pq.pair")) == [want, want], "Parquet: conversational rows")
    src = parquet(d, "ids.parquet", rows)
    run([src, os.path.join(d, "pqids.pair")])
    check(read_pairs(os.path.join(d, "pqids.pair")) == read_pairs(os.path.join(d, "ids.pair")),
          "Parquet: pre-tokenized rows, the same pairs as from JSON")

    # --max-length: each prompt + answer keeps its first N tokens; a prompt of N or more drops its pair.
    rows = [{"prompt_ids": [1, 2, 3], "chosen_ids": [4, 5, 6, 7], "rejected_ids": [8, 9]},
            {"prompt_ids": [1, 2, 3, 4, 5], "chosen_ids": [6], "rejected_ids": [7]},
            {"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": [3]}]
    src = jsonl(d, "long.jsonl", rows)
    out = run([src, os.path.join(d, "t.pair"), "--max-length", "5"])
    check(read_pairs(os.path.join(d, "t.pair")) == [([1, 2, 3], [4, 5], [8, 9]), ([1], [2], [3])]
          and "truncated: 1" in out and "dropped: 1; 1 a prompt of --max-length 5" in out,
          "--max-length 5: the long answer cut to 2 tokens, the 5-token prompt's pair dropped")
    out = run([src, os.path.join(d, "dr.pair"), "--max-length", "5", "--long", "drop"])
    check(len(read_pairs(os.path.join(d, "dr.pair"))) == 1 and "dropped: 2; 2 longer than --max-length 5" in out,
          "--long drop: both long pairs dropped, the reason given")

    # The control: the parser above catches a wrong offset, so the comparisons can fail.
    good = open(os.path.join(d, "ids.pair"), "rb").read()
    tokens = struct.unpack_from("<Q", good, 24)[0]
    at = 64 + 4 * tokens
    for what, index, value in (("the last offset short of num_tokens", 6, tokens - 1),
                               ("a decreasing offset", 1, 5), ("an empty answer", 2, 2)):
        bad = bytearray(good)
        struct.pack_into("<Q", bad, at + 8 * index, value)
        with open(os.path.join(d, "bad.pair"), "wb") as f:
            f.write(bad)
        try:
            read_pairs(os.path.join(d, "bad.pair"))
            caught = False
        except ValueError:
            caught = True
        check(caught, f"control: the parser rejects {what}")
    bad = bytearray(good)
    struct.pack_into("<Q", bad, at + 8 * 1, 1)  # the prompt one token short, the chosen answer one longer
    with open(os.path.join(d, "bad.pair"), "wb") as f:
        f.write(bad)
    check(read_pairs(os.path.join(d, "bad.pair")) != read_pairs(os.path.join(d, "ids.pair")),
          "control: a shifted interior offset changes what is read back")

    # Bad rows: exit 2 naming FILE:LINE (or FILE:row N) and the field (the tokenizer only where the row needs it).
    ok_std = {"prompt": "hello", "chosen": " hi", "rejected": " the cat"}
    bad_rows = [
        ("missing.jsonl", [ok_std, "", {"prompt": "hello", "chosen": " hi"}], tok, ":3: rejected: missing"),
        ("glued.jsonl", [{"prompt": "hello", "chosen": "hi", "rejected": "cat"}], tok,
         ":1: prompt: 0 tokens left: its encoding shares no token with prompt + answer"),
        ("empty.jsonl", [{"prompt": "hello", "chosen": "", "rejected": "hi"}], [], ":1: chosen: empty answer"),
        ("type.jsonl", [{"prompt": "hello", "chosen": 3, "rejected": "hi"}], [], ":1: chosen: must be a str"),
        ("notok.jsonl", [ok_std], [], ":1: prompt: text needs --tokenizer"),
        ("noprompt.jsonl", [{"prompt": "", "chosen": "hi", "rejected": "cat"}], tok, ":1: prompt: 0 tokens"),
        ("role.jsonl", [dict(conv, chosen=[user("hi")])], [], ":1: chosen[0].role: 'user': must be assistant"),
        ("convtype.jsonl", [dict(conv, rejected="the cat")], [], ":1: rejected: must be a list"),
        ("msg.jsonl", [dict(conv, prompt=[{"role": "user"}])], [], ":1: prompt[0].content: must be a string"),
        ("prefix.jsonl", [{"chosen": [user("hello"), bot("hi")], "rejected": [user("hi"), bot("hi")]}], [],
         ":1: chosen: no common prefix"),
        ("hhprefix.jsonl", [{"chosen": "hello hi", "rejected": "the cat"}], tok, ":1: chosen: no common prefix"),
        ("hhmixed.jsonl", [hh[0], {"chosen": [user("hello"), bot("hi")], "rejected": [user("hello"), bot("a")]}], tok,
         ":2: an implicit row in a file of implicit text rows"),
        ("last.jsonl", [{"chosen": [user("hello"), bot("hi")], "rejected": [user("hello"), bot("a"), user("the")]}],
         [], ":1: rejected[2].role: 'user': the last message must be the assistant's answer"),
        ("vocab.jsonl", [{"prompt_ids": [1, 999], "chosen_ids": [2], "rejected_ids": [3]}], tok,
         ":1: prompt_ids[1]: 999 is not a token id in the tokenizer's vocabulary"),
        ("negative.jsonl", [{"prompt_ids": [1], "chosen_ids": [-1], "rejected_ids": [3]}], [],
         ":1: chosen_ids[0]: -1 is not a token id in [0, 2^32)"),
        ("wide.jsonl", [{"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": [2**32]}], [],
         ":1: rejected_ids[0]: 4294967296 is not a token id"),
        ("float.jsonl", [{"prompt_ids": [1.5], "chosen_ids": [2], "rejected_ids": [3]}], [],
         ":1: prompt_ids[0]: 1.5 is not a token id"),
        ("emptyids.jsonl", [{"prompt_ids": [], "chosen_ids": [2], "rejected_ids": [3]}], [],
         ":1: prompt_ids: 0 tokens"),
        ("emptyans.jsonl", [{"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": []}], [],
         ":1: rejected_ids: empty answer"),
        ("mixed.jsonl", [ok_std, {"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": [3]}], tok,
         ":2: a pre-tokenized row in a file of standard rows"),
        ("unknown.jsonl", [{"question": "hello", "answer": "hi"}], [], ":1: unknown form"),
        ("notjson.jsonl", [ok_std, "{oops"], tok, ":2: not JSON"),
    ]
    for name, lines, extra, expected in bad_rows:
        src = jsonl(d, name, lines)
        out = run([src, os.path.join(d, "bad.pair")] + extra, expect=2)
        check(src + expected in out, f"{name}: exit 2 with '{name}{expected}'")
    out = run([jsonl(d, "unknown.jsonl", [{"question": "x"}]), os.path.join(d, "bad.pair")], expect=2, script=True)
    check(all(f in out for f in ("standard", "conversational", "implicit", "pre-tokenized")),
          "an unknown form lists the forms known")

    src = os.path.join(d, "bad.json")  # a JSON list: the line the bad element starts on
    with open(src, "w") as f:
        f.write('[\n  {"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": [3]},\n\n'
                '  {"prompt_ids": [1],\n   "chosen_ids": [], "rejected_ids": [3]}\n]\n')
    out = run([src, os.path.join(d, "bad.pair")], expect=2)
    check(src + ":4: chosen_ids: empty answer" in out, "a JSON list names the line its bad element starts on")
    src = parquet(d, "bad.parquet", [{"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": [3]},
                                     {"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": []}])
    out = run([src, os.path.join(d, "bad.pair")], expect=2)
    check(src + ":row 1: rejected_ids: empty answer" in out, "Parquet names the row (counted from 0) and the field")
    print("prepare_preference_test: all passed")


if __name__ == "__main__":
    main()
