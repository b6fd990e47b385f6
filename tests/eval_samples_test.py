#!/usr/bin/env python3
"""eval_prompts_path (docs/generate.md, "Samples while training"): greedy completions written to samples.jsonl at each
evaluation, against transformers, fp32 on the CPU.

Two tiny Llamas, each with a tokenizer of its own kind, trained for 4 steps with an evaluation every 2:
- ByteLevel BPE (as SmolLM2, Llama 3 and Qwen; with clean_up_tokenization_spaces, which transformers 5 ignores for
  BPE, as we do), full fine-tuning: text, chat and SFT-form prompts through
  scripts/prepare_prompts.sh; at step 4 each completion's ids equal transformers' greedy generate on the run's
  export (stopping at the stop ids), its text equals tokenizer.decode(ids, skip_special_tokens=True); the step-2
  samples differ from the step-4 ones (the control: they follow training); samples_s is in the metrics where
  eval_loss is.
- Metaspace with byte fallback (as Llama 2 and Mistral), LoRA with dropout: the same checks on the merged export, and
  the run's losses equal, bit for bit, those of the same run without eval_prompts_path (generating leaves the model
  in train mode and draws nothing from the run's random streams).
Bad input exits 2 naming FILE:LINE: a line without prompt_ids, an id outside the vocabulary, a prompt with no room
left in max_target_length; and eval_prompts_path without an evaluation schedule.

Usage: eval_samples_test.py REPO TRAINER EXPORT_HF WORK_DIR
"""
import json
import os
import shutil
import subprocess
import sys

import torch
import transformers

torch.set_num_threads(1)
FAILURES = []
MAX_NEW = 12
TEXT = ["the cat sat on the mat and looked at the dog", "a quick brown fox jumps over the lazy dog",
        "what is the capital of france? paris is.", "sampling while training shows what the model says",
        "héllo wörld: ünïcode bytes"]
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
            "{% if add_generation_prompt %}<|assistant|> {% endif %}")
SPECIALS = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|end|>"]


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def run(cmd, expect=0):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if expect is not None and r.returncode != expect:
        sys.exit(f"FAILED (exit {r.returncode}, wanted {expect}): {' '.join(cmd)}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def byte_level_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=330, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TEXT * 4, trainer)
    return tok


def metaspace_tokenizer():
    """Llama 2's kind: BPE over ▁-joined words, unknown characters as <0xHH> byte tokens, and the decoder sequence
    Replace(▁, ' '), ByteFallback, Fuse, Strip(' ', 1, 0)."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece in ["▁"] + list("abcdefghijklmnopqrstuvwxyz?.:") + ["▁t", "▁th", "▁the", "he", "at", "▁a"]:
        vocab.setdefault(piece, len(vocab))
    merges = [("▁", "t"), ("▁t", "h"), ("▁th", "e"), ("h", "e"), ("a", "t"), ("▁", "a")]
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    return tok


def save_model(directory, tokenizer, seed, clean_up):
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>",
                                                eos_token="</s>", additional_special_tokens=SPECIALS[3:],
                                                clean_up_tokenization_spaces=clean_up)
    fast.chat_template = TEMPLATE
    cfg = transformers.LlamaConfig(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 5000.0},
                                   bos_token_id=1, eos_token_id=[2, 5])
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(cfg).float()
    with torch.no_grad():  # a large output scale, so that greedy picks vary from token to token
        for name, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name else 0.3 * torch.randn_like(p))
    model.generation_config.eos_token_id = [2, 5]  # </s> and <|end|>, as a chat model's generation_config says
    model.save_pretrained(directory, safe_serialization=True)
    fast.save_pretrained(directory)
    return fast


def write_prompts(path):
    with open(path, "w") as f:
        f.write(json.dumps({"prompt": TEXT[0]}) + "\n")
        f.write(json.dumps({"prompt": TEXT[4]}) + "\n")
        f.write(json.dumps({"messages": [{"role": "user", "content": TEXT[2]}]}) + "\n")
        f.write(json.dumps({"messages": [{"role": "user", "content": TEXT[3]},
                                         {"role": "assistant", "content": "it does"}]}) + "\n")


def train(repo, trainer, model_dir, work, name, prompts, *keys):
    cmd = [trainer, "base.yml", f"load_parameters_path={model_dir}", "dtype=float32", "dataset_type=synthetic",
           "max_target_length=64", "per_device_batch_size=2", "gradient_accumulation_steps=2", "steps=4",
           "learning_rate=0.05", "warmup_steps_fraction=0", "eval_interval=2", "eval_steps=1", "num_threads=1",
           f"base_output_directory={work}", f"run_name={name}", "checkpoint_period=4", f"eval_prompts_max_new={MAX_NEW}",
           *([f"eval_prompts_path={prompts}"] if prompts else []), *keys]
    run(cmd)
    run_dir = os.path.join(work, name)
    metrics = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    samples_path = os.path.join(run_dir, "samples.jsonl")
    samples = [json.loads(l) for l in open(samples_path)] if os.path.exists(samples_path) else []
    return run_dir, metrics, samples


def hf_greedy(model, ids, stops, context):
    """transformers' greedy generate with our two limits as it spells them: MAX_NEW new tokens, and max_length (prompt
    and output together) the run's context."""
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_length=min(context, len(ids) + MAX_NEW), do_sample=False,
                             eos_token_id=stops, pad_token_id=0, attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    return out[0, len(ids):].tolist()


def case(repo, trainer, export_hf, work, name, tokenizer, *keys):
    model_dir = os.path.join(work, f"{name}-base")
    tok = save_model(model_dir, tokenizer, seed=len(name), clean_up=name == "byte_level")
    prompts_text, prompts = os.path.join(work, f"{name}-prompts-text.jsonl"), os.path.join(work, f"{name}-prompts.jsonl")
    write_prompts(prompts_text)
    run([os.path.join(repo, "scripts", "prepare_prompts.sh"), prompts_text, prompts, "--tokenizer", model_dir])
    encoded = [json.loads(l) for l in open(prompts)]
    check(encoded[3].get("reference") == "it does" and len(encoded[3]["messages"]) == 1,
          f"{name}: an SFT line's answer is kept as reference and not shown to the model")
    check(encoded[0]["stop_ids"] == [2, 5], f"{name}: stop ids from the tokenizer and generation_config: {encoded[0]['stop_ids']}")

    run_dir, metrics, samples = train(repo, trainer, model_dir, work, name, prompts, *keys)
    check([s["step"] for s in samples] == [2] * 4 + [4] * 4, f"{name}: 4 samples at steps 2 and 4: "
          f"{[s['step'] for s in samples]}")
    evaluated = [m for m in metrics if "eval_loss" in m]
    check(len(evaluated) == 2 and all(m.get("samples_s", 0) > 0 for m in evaluated)
          and not any("samples_s" in m for m in metrics if "eval_loss" not in m),
          f"{name}: samples_s beside each eval_loss, and only there")
    merged = os.path.join(work, f"{name}-export")
    run([export_hf, run_dir, merged, "--dtype", "float32"])
    tuned = transformers.AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32).eval()
    for p, s in zip(encoded, samples[4:]):
        want = hf_greedy(tuned, p["prompt_ids"], p["stop_ids"], 64)  # the context is max_target_length=64
        finish = "stop" if want[-1] in (2, 5) else "length" if len(want) == MAX_NEW else "context"
        check(s["ids"] == want, f"{name}: step 4, {len(p['prompt_ids'])}-token prompt: the sample's ids equal "
              "transformers' greedy generate on the export" + ("" if s["ids"] == want else f" (ours {s['ids']}, theirs {want})"))
        check(s["finish"] == finish, f"{name}: finish {s['finish']} (expected {finish})")
    for s in samples:
        want = tok.decode(s["ids"], skip_special_tokens=True)
        check(s.get("completion") == want, f"{name}: step {s['step']}: text {s.get('completion')!r} == "
              f"tokenizer.decode {want!r}")
    check(any(a["ids"] != b["ids"] for a, b in zip(samples[:4], samples[4:])),
          f"{name}: control: the step-2 samples differ from the step-4 ones")
    check(all(("prompt" in s) != ("messages" in s) for s in samples), f"{name}: each sample echoes its prompt")
    return model_dir, prompts, metrics


def bad_inputs(trainer, work, model_dir, prompts):
    good = [json.loads(l) for l in open(prompts)]
    base = [trainer, "base.yml", f"load_parameters_path={model_dir}", "dtype=float32", "dataset_type=synthetic",
            "max_target_length=64", "steps=1", "eval_interval=1", "eval_steps=1", f"base_output_directory={work}",
            "run_name=bad", "enable_checkpointing=false"]
    cases = {
        "no prompt_ids": ({"prompt": "hello"}, ":2: no \"prompt_ids\""),
        "an id outside the vocabulary": ({"prompt_ids": [1, 100000]}, ":2: token id 100000"),
        "no room left": ({"prompt_ids": [1] * 64}, ":2: the prompt has 64 tokens"),
    }
    for what, (line, expected) in cases.items():
        path = os.path.join(work, "bad-prompts.jsonl")
        with open(path, "w") as f:
            f.write(json.dumps(good[0]) + "\n" + json.dumps(line) + "\n")
        r = run([*base, f"eval_prompts_path={path}"], expect=None)
        check(not os.path.exists(os.path.join(work, "bad")), f"{what}: refused before the run directory is made")
        check(r.returncode == 2 and expected in r.stderr and path in r.stderr,
              f"{what}: exit 2 naming {path}{expected} (exit {r.returncode}: {r.stderr.strip()[-300:]})")
    r = run([k for k in base if k != "eval_interval=1"] + [f"eval_prompts_path={prompts}"], expect=None)
    check(r.returncode == 2 and "eval_prompts_path" in r.stderr and "eval_interval" in r.stderr,
          f"no evaluation schedule: exit 2 naming both keys (exit {r.returncode}: {r.stderr.strip()[-300:]})")


def main():
    repo, trainer, export_hf, work = sys.argv[1:5]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model_dir, prompts, _ = case(repo, trainer, export_hf, work, "byte_level", byte_level_tokenizer())
    lora = ["lora_rank=4", "lora_alpha=8", "lora_dropout=0.1"]
    _, _, with_samples = case(repo, trainer, export_hf, work, "metaspace_lora", metaspace_tokenizer(), *lora)
    _, without, _ = train(repo, trainer, os.path.join(work, "metaspace_lora-base"), work, "metaspace_lora_plain", "",
                          *lora)
    check([m["loss"] for m in with_samples] == [m["loss"] for m in without]
          and [m.get("eval_loss") for m in with_samples] == [m.get("eval_loss") for m in without],
          "LoRA with dropout: the losses with samples equal those without, bit for bit "
          f"({[m['loss'] for m in with_samples]} / {[m['loss'] for m in without]})")
    bad_inputs(trainer, work, model_dir, prompts)
    if FAILURES:
        sys.exit(f"{len(FAILURES)} FAILED:\n" + "\n".join(FAILURES))
    print("all passed")


if __name__ == "__main__":
    main()
