#!/usr/bin/env python3
"""scripts/prepare_preference.sh and scripts/prepare_sft.sh against TRL 1.16's own tokenization of the same text rows
(docs/data.md): DPOTrainer._prepare_dataset (extract_prompt, add_eos, tokenize_fn) and SFTTrainer._prepare_dataset
(add_eos, tokenize_fn, the completion-only labels), called on a datasets.Dataset of the rows, under three tokenizers
built here with the `tokenizers` library (nothing is downloaded):

- SentencePiece-style as Llama-2's tokenizer.json (a Prepend("▁") + Replace(" ", "▁") normalizer, BPE with byte
  fallback, a BOS from the post-processor);
- SentencePiece-style as Mistral's newer tokenizer.json (a Metaspace pre-tokenizer, prepend_scheme "first");
- byte-level BPE as SmolLM2's (no BOS).

The rows: a prompt ending in a space ("Answer: " + "blue"), a prompt ending in a newline, answers that start with a
space, an answer (and a text) that already ends in the EOS, and Anthropic HH-RLHF-style implicit-prompt pairs (plain
text, the prompt their common prefix). Then conversational rows (pairs, implicit-prompt conversations, SFT
prompt/completion) through two chat templates on the byte-level tokenizer: ChatML, and one whose generation prompt
opens an empty think block that the whole conversation drops (as Qwen3's and Gemma's), where TRL cuts the prompt where
the renderings part (the old preparers refused such rows). Every pair and every example must equal TRL's ids, and the SFT targets TRL's
labels (!= -100). Controls, so that the comparison can fail: under each tokenizer the answers encoded apart from the
prompt (the old way) differ from TRL's on some row, and the byte-level "Answer: " + "blue" starts its answer with the
token " blue"; an answer that ends in the EOS ends in one EOS, not two.

The preparers run in this process (their main(), as scripts/prepare_*.sh runs it, with its arguments and its
printout: prepare_sft_test.py's run_main), since a new process per run paid the imports again (~1.5 s of CPU each, 16
runs); prepare_preference and prepare_sft run the scripts themselves once or twice.

Usage: prepare_trl_test.py REPO   (the venv's python: trl, datasets, transformers, tokenizers, numpy)
Exit: 0 pass; 1 fail; 77 skipped (no trl or datasets in this Python).
Cost: ~12 s of CPU: trl's import, the tokenizers' training, the 16 preparer runs.
"""
import json
import logging
import os
import sys
import tempfile
import types
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "scripts", "lib"))
from prepare_preference_test import read_pairs  # noqa: E402
from prepare_sft_test import check, jsonl, read_sft, run_main  # noqa: E402

try:
    import datasets
    from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer
except ImportError as e:
    print(f"skipped: no {e.name} in this Python (pip install trl==1.16.0 datasets)")
    sys.exit(77)
import transformers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

WORDS = ("answer question what color is the sky blue green red grass it four five two plus human assistant hello "
         "there yes no thank you sun moon cat dog sat on mat").split()


def corpus():
    """Sentences of the words, capitalised and punctuated in turn, so that BPE learns words, not phrases."""
    out = []
    for i in range(400):
        w = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(1 + i % 6)]
        w[0] = w[0].capitalize() if i % 2 else w[0]
        out.append(" ".join(w) + ".?:!\n"[i % 5] + (" " + WORDS[i % len(WORDS)] if i % 3 else ""))
    return out + ["Answer: blue", "Question: what is two plus two?\nfour", "Human: hello Assistant: yes"] * 5


def save(tok, directory, **specials):
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, **specials).save_pretrained(directory)
    return transformers.AutoTokenizer.from_pretrained(directory)


def sentencepiece_style(directory, metaspace):
    """Llama-2's layout (metaspace=False: the Prepend normalizer) or Mistral's newer one (a Metaspace pre-tokenizer).
    Trained with the words split at "▁", as SentencePiece trains, so no token spans two words."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.train_from_iterator(corpus(), trainers.BpeTrainer(vocab_size=320, special_tokens=["<unk>", "<s>", "</s>"],
                                                          initial_alphabet=["▁"], show_progress=False))
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([])
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return save(tok, directory, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def byte_level(directory):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train_from_iterator(corpus(), trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    return save(tok, directory, bos_token="<|endoftext|>", eos_token="<|endoftext|>")


def rows(eos):
    standard = [{"prompt": "Answer: ", "chosen": "blue", "rejected": "green"},
                {"prompt": "Question: what is two plus two?\n", "chosen": "four", "rejected": "five" + eos},
                {"prompt": "What color is the sky?", "chosen": " It is blue." + eos, "rejected": " It is red."}]
    implicit = [{"chosen": "\n\nHuman: What color is the sky?\n\nAssistant: It is blue.",
                 "rejected": "\n\nHuman: What color is the sky?\n\nAssistant: It is green."},
                {"chosen": "\n\nHuman: hello\n\nAssistant: Hello there" + eos,
                 "rejected": "\n\nHuman: hello\n\nAssistant: No."},
                {"chosen": "\n\nHuman: two plus two?\n\nAssistant: four", "rejected": "\n\nHuman: two plus two?\n\n"
                                                                                     "Assistant: five"}]
    completions = [{"prompt": r["prompt"], "completion": r["chosen"]} for r in standard]
    texts = [{"text": "the cat sat on the mat"}, {"text": "Hello there." + eos}]
    return standard, implicit, completions, texts


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# As Qwen3's and Gemma's templates: the generation prompt opens an empty think block that the whole conversation drops,
# so the prompt rendered alone is not a prefix of prompt + answer.
THINK = CHATML.replace("assistant\n{% endif %}", "assistant\n<think>\n\n</think>\n\n{% endif %}")


def conversations():
    user = lambda text: {"role": "user", "content": text}
    bot = lambda text: {"role": "assistant", "content": text}
    pairs = [{"prompt": [user("What color is the sky?")], "chosen": [bot("It is blue.")], "rejected": [bot("Red.")]},
             {"prompt": [user("hello"), bot("Hello there"), user("two plus two?")], "chosen": [bot("four")],
              "rejected": [bot("It is five.")]}]
    implicit = [{"chosen": r["prompt"] + r["chosen"], "rejected": r["prompt"] + r["rejected"]} for r in pairs]
    return pairs, implicit, [{"prompt": r["prompt"], "completion": r["chosen"]} for r in pairs]


def run_preference(args):
    return run_main("prepare_preference", args)


def run_sft(args):
    return run_main("prepare_sft", args)


def trl_pairs(tok, data, work):
    args = DPOConfig(output_dir=work, use_cpu=True, bf16=False, report_to=[], max_length=None)
    out = DPOTrainer._prepare_dataset(types.SimpleNamespace(_tokenizer=tok), datasets.Dataset.from_list(data), tok,
                                      args, "train")
    return [(r["prompt_ids"], r["chosen_ids"], r["rejected_ids"]) for r in out]


def trl_examples(tok, data, work):
    args = SFTConfig(output_dir=work, use_cpu=True, bf16=False, report_to=[], max_length=None,
                     completion_only_loss=True)
    trainer = types.SimpleNamespace(_tokenizer=tok, chat_template=None, completion_only_loss=True)
    out = SFTTrainer._prepare_dataset(trainer, datasets.Dataset.from_list(data), tok, args, False, None, "train")
    return [(r["input_ids"], [int(l != -100) for l in r["labels"]]) for r in out]


def common(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def apart(tok, row):
    """The old preparer's pair: the prompt and each answer encoded on their own, the EOS id always appended."""
    return (tok(row["prompt"])["input_ids"],
            *[tok(row[k], add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for k in ("chosen", "rejected")])


def main():
    repo = sys.argv[1]
    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()
    logging.getLogger("trl").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    d = tempfile.mkdtemp(prefix="sg_prepare_trl_")
    makers = [("sentencepiece-style, Prepend normalizer (Llama-2)", lambda p: sentencepiece_style(p, False)),
              ("sentencepiece-style, Metaspace (Mistral)", lambda p: sentencepiece_style(p, True)),
              ("byte-level BPE (SmolLM2)", byte_level)]
    for n, (name, make) in enumerate(makers):
        print(f"{name}:")
        tok_dir = os.path.join(d, f"tok{n}")
        tok = make(tok_dir)
        eos = tok.eos_token
        standard, implicit, completions, texts = rows(eos)
        flag = ["--tokenizer", tok_dir]

        for label, data in (("standard", standard), ("implicit text (HH-RLHF)", implicit)):
            src, out = jsonl(d, f"{n}_{label[:8]}.jsonl", data), os.path.join(d, f"{n}_{label[:8]}.pair")
            printed = run_preference([src, out] + flag)
            ours, theirs = read_pairs(out), trl_pairs(tok, data, d)
            check(ours == theirs, f"prepare_preference, {label}: every pair's ids equal TRL's "
                                  f"({sum(len(x) for p in ours for x in p)} tokens)" if ours == theirs
                  else f"prepare_preference, {label}: ours {ours} != TRL's {theirs}")
            if label == "standard":
                cut = sum(len(p) < len(tok(row["prompt"])["input_ids"]) for (p, _, _), row in zip(theirs, data))
                check((f"prompts cut: {cut} " in printed) if cut else "prompts cut" not in printed,
                      f"  the summary counts the {cut} prompts TRL cuts where their end merges with the answer")
            ended = sum(row[k].endswith(eos) for row in data for k in ("chosen", "rejected"))
            check(all(a[-1] == tok.eos_token_id != a[-2] for _, *answers in ours for a in answers),
                  f"  one EOS ends each answer, {ended} of them ending in it as text")
        old = [apart(tok, r) for r in standard]
        check(old != read_pairs(os.path.join(d, f"{n}_standard.pair")),
              "control: the answers encoded apart from the prompt differ from TRL's on some row")

        src, out = jsonl(d, f"{n}_pc.jsonl", completions), os.path.join(d, f"{n}_pc.sft")
        run_sft([src, out] + flag)
        ours = read_sft(out)
        theirs = [(ids, [0] + flags[1:]) for ids, flags in trl_examples(tok, completions, d)]
        check(ours == theirs, "prepare_sft, prompt/completion: ids and targets equal TRL's (completion-only labels)"
              if ours == theirs else f"prepare_sft, prompt/completion: ours {ours} != TRL's {theirs}")
        src, out = jsonl(d, f"{n}_text.jsonl", texts), os.path.join(d, f"{n}_text.sft")
        run_sft([src, out] + flag)
        ours = read_sft(out)
        theirs = [(ids, [0] + flags[1:]) for ids, flags in trl_examples(tok, texts, d)]
        check(ours == theirs, "prepare_sft, text: ids equal TRL's, one EOS at the end" if ours == theirs
              else f"prepare_sft, text: ours {ours} != TRL's {theirs}")

        if "byte-level" in name:
            first = read_pairs(os.path.join(d, f"{n}_standard.pair"))[0]
            blue = tok.convert_tokens_to_ids("Ġblue")
            check(first[1][0] == blue and tok.convert_ids_to_tokens(first[0])[-1] != "Ġ",
                  f"control: \"Answer: \" + \"blue\": the answer starts with \" blue\" ({blue}), the prompt does not "
                  "end in the space token")
    # Conversational rows through two chat templates (byte-level tokenizer): ChatML, where the prompt's rendering is a
    # prefix of the whole, and the think-block template, where TRL cuts the prompt where the renderings part.
    pairs, implicit, completions = conversations()
    for name, template in (("ChatML", CHATML), ("think block", THINK)):
        print(f"conversational rows, {name} template:")
        tok_dir = os.path.join(d, f"chat_{len(template)}")
        tok = byte_level(tok_dir)
        tok.chat_template = template
        tok.save_pretrained(tok_dir)
        flag = ["--tokenizer", tok_dir]
        render = lambda m, gen=False: list(tok.apply_chat_template(m, add_generation_prompt=gen,
                                                                   return_dict=True)["input_ids"])
        cut = sum(common(render(r["prompt"], True), render(r["prompt"] + r["chosen"])) < len(render(r["prompt"], True))
                  for r in pairs)
        check((cut == 0) == (template == CHATML), f"  the template cuts {cut} of {len(pairs)} prompts")
        for label, data in (("conversational", pairs), ("implicit messages", implicit)):
            src, out = jsonl(d, f"c{len(template)}_{label[:8]}.jsonl", data), os.path.join(d, f"c{label[:8]}.pair")
            printed = run_preference([src, out] + flag)
            ours, theirs = read_pairs(out), trl_pairs(tok, data, d)
            check(ours == theirs, f"prepare_preference, {label}: every pair's ids equal TRL's" if ours == theirs
                  else f"prepare_preference, {label}: ours {ours} != TRL's {theirs}")
            check((f"prompts cut: {cut} " in printed) if cut else "prompts cut" not in printed,
                  f"  the summary counts the {cut} prompts cut")
        src, out = jsonl(d, f"c{len(template)}_pc.jsonl", completions), os.path.join(d, "cpc.sft")
        run_sft([src, out] + flag)
        ours = read_sft(out)
        theirs = [(ids, [0] + flags[1:]) for ids, flags in trl_examples(tok, completions, d)]
        check(ours == theirs, "prepare_sft, conversational prompt/completion: ids and targets equal TRL's"
              if ours == theirs else f"prepare_sft, conversational prompt/completion: ours {ours} != TRL's {theirs}")
    print("prepare_trl_test: all passed")


if __name__ == "__main__":
    main()
