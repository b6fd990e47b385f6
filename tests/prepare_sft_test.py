#!/usr/bin/env python3
"""scripts/prepare_sft.sh end to end: each row form (prompt/completion as text and as messages, Alpaca, messages,
ShareGPT, text, pre-tokenized), read back from the binary file by an independent parser that follows docs/data.md;
JSON Lines, a JSON list and Parquet giving the same examples; a BOS the tokenizer's post-processor adds; --max-length
truncation and dropping; the output's directory created (prepare_prompts.sh's too); bad rows exit 2 naming FILE:LINE
(or FILE:row N) and the field.

Usage: prepare_sft_test.py REPO   (run by the venv's python: it needs tokenizers, transformers and numpy)
A tiny word-level Hugging Face tokenizer with a chat template is built here, so nothing is downloaded.
The script runs twice as a user runs it (a success and an exit 2); its other runs call scripts/lib/prepare_sft.py's
main() in this process (run_main), since a new process per run paid the imports again (about 1 s of CPU each).
Cost: ~10 s of CPU (twenty-five runs of the preparer).
"""
import contextlib
import importlib
import io
import json
import os
import struct
import subprocess
import sys
import tempfile

REPO = sys.argv[1]
SCRIPT = os.path.join(REPO, "scripts", "prepare_sft.sh")
sys.path.insert(0, os.path.join(REPO, "scripts", "lib"))  # the preparers' modules, for run_main
WORDS = ("the a of cat dog sat on mat what is capital france paris answer question hello hi below instruction "
         "describes task write response that appropriately completes request paired with input provides further "
         "context ### Below Write Instruction: Input: Response: . ,").split()
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
            "{% if add_generation_prompt %}<|assistant|> {% endif %}")


def make_tokenizer(directory, bos_by_post_processor=False):
    """bos_by_post_processor: BOS added by the tokenizer's post-processor (as Llama 3's fast tokenizer adds
    <|begin_of_text|>), with no add_bos_token."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast
    specials = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]
    vocab = {w: i for i, w in enumerate(specials + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if bos_by_post_processor:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                           special_tokens=[("<s>", vocab["<s>"])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   additional_special_tokens=specials[3:])
    fast.chat_template = TEMPLATE
    fast.save_pretrained(directory)
    return vocab


def read_sft(path):
    """The SFT file by docs/data.md: header, uint32 tokens, uint8 flags padded to 8, uint64 offsets."""
    data = open(path, "rb").read()
    assert data[:8] == b"SGSFT\0\0\0", data[:8]
    version, width, n, tokens, targets, max_id = struct.unpack_from("<IIQQQI", data, 8)
    assert (version, width) == (1, 4)
    ids = list(struct.unpack_from(f"<{tokens}I", data, 64))
    flags = list(data[64 + 4 * tokens: 64 + 5 * tokens])
    at = 64 + 4 * tokens + (tokens + 7) // 8 * 8
    offsets = list(struct.unpack_from(f"<{n + 1}Q", data, at))
    assert len(data) == at + 8 * (n + 1)
    assert sum(flags) == targets and max(ids) == max_id
    return [(ids[a:b], flags[a:b]) for a, b in zip(offsets, offsets[1:])]


def run_script(script, args, expect=0):
    """scripts/SCRIPT with ARGS in a process of its own, as a user runs it; returns what it printed. An exit code
    other than EXPECT, or a traceback, fails the test."""
    env = dict(os.environ, SHADOWGRAD_VENV=sys.prefix)  # this interpreter's venv
    r = subprocess.run([os.path.join(REPO, "scripts", script)] + args, capture_output=True, text=True, env=env)
    if r.returncode != expect or "Traceback" in r.stderr:
        sys.exit(f"FAIL: {script} {' '.join(args)} exited {r.returncode}, expected {expect}\n{r.stdout}{r.stderr}")
    return r.stdout + r.stderr


def run_main(module, args, expect=0):
    """scripts/lib/MODULE.py's main() with ARGS as its command line, in this process, as scripts/MODULE.sh runs it;
    returns what it printed. An exit code other than EXPECT fails the test; an exception (the script's traceback)
    propagates and fails it too."""
    out, argv, code = io.StringIO(), sys.argv, 0
    sys.argv = [module] + args
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            importlib.import_module(module).main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if isinstance(e.code, str):
            out.write(e.code + "\n")
    finally:
        sys.argv = argv
    if code != expect:
        sys.exit(f"FAIL: {module} {' '.join(args)} exited {code}, expected {expect}\n{out.getvalue()}")
    return out.getvalue()


def run(args, expect=0, script=False):
    """prepare_sft with ARGS: through scripts/prepare_sft.sh with SCRIPT, else its main() in this process."""
    return run_script("prepare_sft.sh", args, expect) if script else run_main("prepare_sft", args, expect)


def jsonl(directory, name, rows):
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        for row in rows:
            f.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    return path


def parquet(directory, name, rows):
    import pyarrow
    import pyarrow.parquet
    path = os.path.join(directory, name)
    keys = list(dict.fromkeys(k for row in rows for k in row))  # every row's columns (from_pylist takes the first's)
    pyarrow.parquet.write_table(pyarrow.Table.from_pydict({k: [row.get(k) for row in rows] for k in keys}), path)
    return path


def check(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}")
    print(f"ok: {what}")


def main():
    d = tempfile.mkdtemp(prefix="sg_prepare_sft_")
    vocab = make_tokenizer(os.path.join(d, "tok"))
    v = lambda text: [vocab[w] for w in text.split()]
    tok = ["--tokenizer", os.path.join(d, "tok")]

    # prompt/completion: the completion and EOS are targets. prompt + completion is one string, as in TRL: the
    # completion carries its leading space.
    src = jsonl(d, "pc.jsonl", [{"prompt": "what is the capital of france", "completion": " paris"}, "",
                                {"prompt": "hello", "completion": " hi hi"}])
    out = run([src, os.path.join(d, "pc.sft")] + tok, script=True)
    ex = read_sft(os.path.join(d, "pc.sft"))
    eos = vocab["</s>"]
    check(ex[0] == (v("what is the capital of france") + v("paris") + [eos], [0] * 6 + [1, 1]),
          "prompt/completion: prompt flagged 0, completion and EOS 1")
    check(ex[1][1] == [0, 1, 1, 1], "a blank line is skipped")
    check("2 examples" in out and "5 target tokens" in out and "dropped: 0" in out, "the counts are printed")

    # A BOS that the post-processor adds (no add_bos_token): once, first, not a target; none before the completion.
    make_tokenizer(os.path.join(d, "tok_bos"), bos_by_post_processor=True)
    run([src, os.path.join(d, "bos.sft"), "--tokenizer", os.path.join(d, "tok_bos")])
    ex = read_sft(os.path.join(d, "bos.sft"))
    bos = vocab["<s>"]
    check(ex[0] == ([bos] + v("what is the capital of france") + v("paris") + [eos], [0] * 7 + [1, 1]),
          "a post-processor's BOS starts the prompt, once, and is not a target")
    check(ex[1][0] == [bos] + v("hello") + v("hi hi") + [eos], "and starts every example")

    # Alpaca, with and without input.
    src = jsonl(d, "alpaca.jsonl", [{"instruction": "write the answer", "input": "cat", "output": "dog"},
                                    {"instruction": "write the answer", "output": "mat"}])
    run([src, os.path.join(d, "alpaca.sft")] + tok)
    ex = read_sft(os.path.join(d, "alpaca.sft"))
    check(ex[0][0][-2:] == [vocab["dog"], eos] and ex[0][1][-2:] == [1, 1] and sum(ex[0][1]) == 2,
          "alpaca: only the output and EOS are targets")
    check(vocab["Input:"] in ex[0][0] and vocab["Input:"] not in ex[1][0], "alpaca: the input section only with input")

    # messages through the chat template: assistant turns only.
    conv = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"},
            {"role": "user", "content": "what is the capital of france"}, {"role": "assistant", "content": "paris"}]
    src = jsonl(d, "chat.jsonl", [{"messages": conv}])
    run([src, os.path.join(d, "chat.sft")] + tok)
    ids, flags = read_sft(os.path.join(d, "chat.sft"))[0]
    targets = [t for t, f in zip(ids, flags) if f]
    check(targets == v("hi") + [vocab["<|end|>"]] + v("paris") + [vocab["<|end|>"]],
          "messages: the assistant turns (content and end marker) are the only targets")
    check(ids[:2] == [vocab["<|user|>"], vocab["hello"]], "messages: rendered by the template")

    # pre-tokenized: labels aligned with input_ids, -100 not a target; the first token never a target.
    src = jsonl(d, "ids.jsonl", [{"input_ids": [5, 6, 7, 8], "labels": [5, -100, 7, 8]}, {"input_ids": [9, 10]}])
    run([src, os.path.join(d, "ids.sft")])
    ex = read_sft(os.path.join(d, "ids.sft"))
    check(ex == [([5, 6, 7, 8], [0, 0, 1, 1]), ([9, 10], [0, 1])], "pre-tokenized: flags = labels != -100")

    # --max-length: truncate counts; drop counts and says why; an example cut before its target is dropped.
    rows = [{"input_ids": list(range(1, 11)), "labels": [-100] * 5 + list(range(6, 11))},
            {"input_ids": [1, 2, 3], "labels": [-100, 2, 3]},
            {"input_ids": list(range(1, 9)), "labels": [-100] * 7 + [8]}]
    src = jsonl(d, "long.jsonl", rows)
    out = run([src, os.path.join(d, "t.sft"), "--max-length", "6"])
    check("truncated: 2" in out and "1 no target token left after truncation" in out,
          "--max-length 6: 2 truncated, the one whose target was cut dropped")
    check([len(x) for x, _ in read_sft(os.path.join(d, "t.sft"))] == [6, 3], "truncated to 6 tokens")
    out = run([src, os.path.join(d, "d.sft"), "--max-length", "6", "--long", "drop"])
    check("dropped: 2; 2 longer than --max-length 6" in out, "--long drop: 2 dropped, reason given")

    # ShareGPT: the same conversation as "messages" gives the same example.
    sharegpt = [{"from": {"user": "human", "assistant": "gpt"}[m["role"]], "value": m["content"]} for m in conv]
    src = jsonl(d, "sharegpt.jsonl", [{"conversations": [{"from": "system", "value": "hi"}] + sharegpt}])
    out = run([src, os.path.join(d, "sharegpt.sft")] + tok)
    ids, flags = read_sft(os.path.join(d, "sharegpt.sft"))[0]
    check(ids[:3] == [vocab["<|system|>"], vocab["hi"], vocab["<|end|>"]] and ids[3:] == read_sft(os.path.join(d, "chat.sft"))[0][0]
          and [t for t, f in zip(ids, flags) if f] == targets and "sharegpt 1" in out,
          "ShareGPT: system/human/gpt become system/user/assistant; the gpt turns are the targets")

    # TRL's conversational prompt/completion: everything the template adds after the prompt (with its generation
    # prompt) is a target.
    src = jsonl(d, "convpc.jsonl", [{"prompt": conv[:3], "completion": conv[3:]}])
    run([src, os.path.join(d, "convpc.sft")] + tok)
    prompt_ids = v("<|user|> hello <|end|>") + [vocab["<|assistant|>"]] + v("hi <|end|> <|user|> what is the capital "
                                                                            "of france <|end|>") + [vocab["<|assistant|>"]]
    check(read_sft(os.path.join(d, "convpc.sft")) == [(prompt_ids + v("paris") + [vocab["<|end|>"]],
                                                       [0] * len(prompt_ids) + [1, 1])],
          "conversational prompt/completion: the completion's tokens are the only targets, the prompt's assistant "
          "turn is not")

    # {"text"}: every token a target (the first predicted from the BOS where the tokenizer adds one), EOS appended.
    src = jsonl(d, "text.jsonl", [{"text": "the cat sat on the mat"}])
    run([src, os.path.join(d, "text.sft")] + tok)
    check(read_sft(os.path.join(d, "text.sft")) == [(v("the cat sat on the mat") + [eos], [0] + [1] * 6)],
          "text: every token but the first is a target, EOS appended")
    src_eos = jsonl(d, "text_eos.jsonl", [{"text": "the cat sat on the mat</s>"}])
    run([src_eos, os.path.join(d, "text_eos.sft")] + tok)
    check(read_sft(os.path.join(d, "text_eos.sft")) == read_sft(os.path.join(d, "text.sft")),
          "text ending in the EOS: no second EOS (TRL appends it only to a text that does not end with it)")
    run([src, os.path.join(d, "textbos.sft"), "--tokenizer", os.path.join(d, "tok_bos")])
    check(read_sft(os.path.join(d, "textbos.sft")) == [([bos] + v("the cat sat on the mat") + [eos], [0] + [1] * 7)],
          "text: with a BOS, every token of the text is a target")

    # A JSON list and Parquet give what JSON Lines gives; the output's directory is created.
    rows = [{"prompt": "what is the capital of france", "completion": " paris"}, {"messages": conv},
            {"input_ids": [5, 6, 7, 8], "labels": [5, -100, 7, 8]}, {"text": "the cat sat on the mat"}]
    run([jsonl(d, "mixed.jsonl", rows), os.path.join(d, "mixed.sft")] + tok)
    with open(os.path.join(d, "mixed.json"), "w") as f:
        json.dump(rows, f, indent=1)
    out = run([os.path.join(d, "mixed.json"), os.path.join(d, "new", "dir", "json.sft")] + tok)
    want = read_sft(os.path.join(d, "mixed.sft"))
    check(len(want) == 4 and read_sft(os.path.join(d, "new", "dir", "json.sft")) == want,
          "a JSON list: the same examples as JSON Lines, into a directory that did not exist")
    run([parquet(d, "mixed.parquet", rows), os.path.join(d, "pq.sft")] + tok)
    check(read_sft(os.path.join(d, "pq.sft")) == want, "Parquet (a null column is an absent field): the same examples")
    sharegpt_rows = [{"conversations": sharegpt}] * 2
    run([parquet(d, "sharegpt.parquet", sharegpt_rows), os.path.join(d, "pqsg.sft")] + tok)
    check(read_sft(os.path.join(d, "pqsg.sft")) == [read_sft(os.path.join(d, "chat.sft"))[0]] * 2,
          "Parquet: ShareGPT rows (lists of structs)")

    # prepare_prompts.sh creates its output's directory too.
    prompts = os.path.join(d, "p", "q", "prompts.jsonl")
    run_script("prepare_prompts.sh", [os.path.join(d, "pc.jsonl"), prompts] + tok)
    check(len(open(prompts).readlines()) == 2, "prepare_prompts.sh writes into a directory that did not exist")

    # Bad lines: exit 2 naming FILE:LINE.
    bad = [("notjson.jsonl", ['{"input_ids": [1, 2]}', "{oops"], ":2: not JSON"),
           ("unterminated.jsonl", ['{"prompt": "a", "completion": "b'],
            ":1: not JSON: Unterminated string starting at column 31"),
           ("form.jsonl", [{"question": "x"}], ":1: unknown form"),
           ("labels.jsonl", [{"input_ids": [1, 2], "labels": [-100, 3]}], ":1: labels[1]: 3"),
           ("notok.jsonl", [{"prompt": "a", "completion": "b"}], ":1: prompt: text needs --tokenizer"),
           ("noassistant.jsonl", [{"messages": [{"role": "user", "content": "hi"}]}], ":1: messages: no assistant "
                                                                                       "turn"),
           ("from.jsonl", [{"conversations": [{"from": "human", "value": "hi"}, {"from": "bot", "value": "a"}]}],
            ":1: conversations[1].from: 'bot': expected human, gpt or system"),
           ("pair.jsonl", [{"prompt": "a", "chosen": "b", "rejected": "c"}], ":1: a preference pair"),
           ("convpc.jsonl", [{"prompt": [{"role": "user", "content": "hi"}], "completion": "a"}],
            ":1: completion: must be a list")]
    for name, lines, expected in bad:
        src = jsonl(d, name, lines)
        out = run([src, os.path.join(d, "bad.sft")], expect=2)
        check(src + expected in out, f"{name}: exit 2 with '{os.path.basename(src)}{expected}'")
    out = run([jsonl(d, "form.jsonl", [{"question": "x"}]), os.path.join(d, "bad.sft")], expect=2, script=True)
    check(all(f in out for f in ('"completion"', '"messages"', '"conversations"', '"instruction"', '"text"',
                                 '"input_ids"')), "an unknown form lists the forms known")
    weights = os.path.join(d, "tok", "model.safetensors")  # --tokenizer given a file of the model directory
    open(weights, "wb").close()
    out = run([os.path.join(d, "pc.jsonl"), os.path.join(d, "bad.sft"), "--tokenizer", weights], expect=2)
    check(f"--tokenizer {weights}: a file; --tokenizer takes the model's directory" in out
          and f"--tokenizer {os.path.join(d, 'tok')}" in out and "SentencePiece" not in out,
          "--tokenizer MODEL_DIR/model.safetensors: exit 2 saying --tokenizer takes the model's directory")
    os.remove(weights)
    src = parquet(d, "bad.parquet", [{"input_ids": [1, 2]}, {"input_ids": [1, -3]}])
    out = run([src, os.path.join(d, "bad.sft")], expect=2)
    check(src + ":row 1: input_ids[1]: -3 is not a token id" in out, "Parquet: a bad row named FILE:row N (from 0)")
    print("prepare_sft_test: all passed")


if __name__ == "__main__":
    main()
