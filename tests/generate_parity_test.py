#!/usr/bin/env python3
"""build/generate against transformers' generate(do_sample=False), token for token, fp32 on the CPU
(docs/generate.md).

Tiny random models that transformers' own classes build and save_pretrained writes (Llama with GQA, a tied Llama,
Llama 3 RoPE scaling, Qwen2's biases, Qwen3's q/k norms with a tied output): the first N greedy tokens of a few
prompts, with no EOS and with an EOS that ends them early. A LoRA run trained on one of them for a few steps: its
greedy tokens from the run directory equal transformers' on the merged export, and differ from the base's (the
control: the adapters matter). A peft adapter on a base (--adapter) against peft's generate, and an adapter for
another base refused with exit 2. Text through scripts/generate.sh with a tiny word-level tokenizer and chat template:
--prompt, --template, --prompts JSONL and a two-turn --chat give transformers' decoded text; its bad inputs exit 2;
Ctrl-C in --chat ends with 0 and leaves no build/generate behind.

--real MODEL_DIR: SmolLM2-135M-Instruct (scripts/prepare_model.sh): 5 prompts x 64 greedy tokens (transformers'
greedy tokens found from one forward over the prompt and ours, hf_greedy_of), and the chat answer to "What is the
capital of France?" through the template against generate(); exits 77 (skipped) when MODEL_DIR is absent.

Usage: generate_parity_test.py REPO GENERATE TRAINER EXPORT_HF WORK_DIR
       generate_parity_test.py --real MODEL_DIR REPO GENERATE WORK_DIR
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import torch
import transformers

N_NEW = 24
# One thread for transformers: beside other ctest entries on 2 cores, its spinning OpenMP threads made the SmolLM2 case
# take 20 minutes.
torch.set_num_threads(1)
SKIP = 77
FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


class Serve:
    """build/generate SOURCE --serve: one JSON request per line, one summary back (docs/generate.md)."""

    def __init__(self, generate, source, *flags):
        self.proc = subprocess.Popen([generate, source, "--serve", *flags], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.ready = json.loads(self.proc.stdout.readline())
        if "error" in self.ready:
            sys.exit(f"FAILED: {source}: {self.ready['error']}")

    def __call__(self, ids, **options):
        self.proc.stdin.write(json.dumps({"ids": ids, **options}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        return self.proc.wait(timeout=60)


def hf_greedy(model, ids, n, eos=None):
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, eos_token_id=eos,
                             pad_token_id=0, attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    return out[0, len(ids):].tolist()


def hf_greedy_of(model, ids, got, n, stops):
    """transformers' greedy continuation of IDS (N tokens at most, ending at the first of STOPS), found from one
    forward over IDS + GOT instead of N decoding steps: its first token is the argmax after IDS, and each next one the
    argmax after the tokens before it, as long as those equal GOT's (a greedy step sees only the tokens before it).
    So it equals hf_greedy(model, ids, n) wherever GOT does, and where GOT parts from it, it is transformers' token at
    the first difference (the tokens after that are not computed). At the 135M model this costs one forward of ~80
    positions against 64 decoding steps that each read all the weights (~55 ms a token)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids + got])).logits[0, len(ids) - 1:]
    want = []
    for k, token in enumerate(logits.argmax(-1).tolist()[:n]):
        want.append(token)
        if token in stops or k >= len(got) or token != got[k]:
            break
    return want


# The tiny shapes of hf_parity_test.py: vocab 64, hidden 32, 2 layers, 4 query heads over 2 KV heads, 64 positions.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_parity_test import BASE, LLAMA3  # noqa: E402
CASES = {
    "llama_gqa": ("Llama", {}),
    "llama_tied": ("Llama", {"tie_word_embeddings": True}),
    "llama3_rope": ("Llama", {"rope_parameters": LLAMA3, "num_key_value_heads": 1, "head_dim": 16}),
    "qwen2_bias": ("Qwen2", {}),
    "qwen3_qk_norm_tied": ("Qwen3", {"head_dim": 16, "tie_word_embeddings": True}),
}
PROMPTS = [[1, 5, 9, 13], [2, 40, 41, 42, 43, 44, 45, 7, 8, 63], [30]]


def build(family, extra, seed=0):
    cfg = getattr(transformers, family + "Config")(**{**BASE, **extra})
    torch.manual_seed(seed)
    model = getattr(transformers, family + "ForCausalLM")(cfg).float().eval()
    with torch.no_grad():  # off the default init (ones, zeros), so every tensor matters; a large output scale, so
        for name, p in model.named_parameters():  # that greedy picks vary from token to token
            p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name else 0.3 * torch.randn_like(p))
    return model


def tiny_cases(generate, work):
    for name, (family, extra) in CASES.items():
        model = build(family, extra)
        d = os.path.join(work, name)
        model.save_pretrained(d, safe_serialization=True)
        serve = Serve(generate, d)
        first_run = None
        for ids in PROMPTS:
            want = hf_greedy(model, ids, N_NEW)
            got = serve(ids, max_new=N_NEW)
            check(got["ids"] == want and got["finish"] == "length",
                  f"{name}: {len(ids)}-token prompt, {N_NEW} greedy tokens equal transformers'"
                  + ("" if got["ids"] == want else f" (ours {got['ids']}, theirs {want})"))
            first_run = first_run or want
        # An EOS that ends generation early: the 6th token transformers picked (its first occurrence ends both).
        eos = first_run[5]
        want = hf_greedy(model, PROMPTS[0], N_NEW, eos=eos)
        got = serve(PROMPTS[0], max_new=N_NEW, stop=[eos])
        check(got["ids"] == want and got["finish"] == "stop" and len(want) < N_NEW,
              f"{name}: stopping at EOS {eos} after {len(want)} tokens as transformers does")
        check(len(set(first_run)) > 4, f"{name}: the greedy tokens vary ({sorted(set(first_run))})")
        check(serve.close() == 0, f"{name}: --serve ends with 0 at the end of its input")


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


def lora_run(generate, trainer, export_hf, work):
    base_dir = os.path.join(work, "llama_gqa")  # written by tiny_cases
    run([trainer, "base.yml", f"load_parameters_path={base_dir}", "dtype=float32", "dataset_type=synthetic",
         "max_target_length=16", "per_device_batch_size=2", "gradient_accumulation_steps=2", "steps=4",
         "learning_rate=0.05", "warmup_steps_fraction=0", "lora_rank=4", "lora_alpha=8",
         "lora_target_modules=all-linear", f"base_output_directory={work}", "run_name=lora", "num_threads=1",
         "checkpoint_period=4", "enable_checkpointing=true"])
    run_dir = os.path.join(work, "lora")
    merged = os.path.join(work, "lora-merged")
    run([export_hf, run_dir, merged, "--dtype", "float32"])
    tuned = transformers.AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32).eval()
    base = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
    serve = Serve(generate, run_dir, "--max-length", "64")
    check("LoRA" in serve.ready["model"], f"the run is read as a LoRA run: {serve.ready['model']}")
    for ids in PROMPTS:
        want = hf_greedy(tuned, ids, N_NEW)
        got = serve(ids, max_new=N_NEW)["ids"]
        check(got == want, f"LoRA run: {len(ids)}-token prompt, {N_NEW} tokens equal transformers' on the merged "
                           "export" + ("" if got == want else f" (ours {got}, theirs {want})"))
    check(serve(PROMPTS[1], max_new=N_NEW)["ids"] != hf_greedy(base, PROMPTS[1], N_NEW),
          "control: the tuned run's tokens differ from the base's")
    serve.close()


def adapter_cases(generate, work):
    """A peft adapter on a tiny base (every projection, B off zero): ours with --adapter equals peft's generate; an
    adapter saved for another base (hidden 48) exits 2 naming the tensor that does not fit."""
    from peft import LoraConfig, get_peft_model
    base_dir = os.path.join(work, "llama_gqa")  # written by tiny_cases
    base = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
    base_tokens = {tuple(ids): hf_greedy(base, ids, N_NEW) for ids in PROMPTS}
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=targets, lora_dropout=0.0))
    torch.manual_seed(3)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.3 * torch.randn_like(p))
    peft_model.eval()
    adapter = os.path.join(work, "adapter")
    peft_model.save_pretrained(adapter)
    serve = Serve(generate, base_dir, "--adapter", adapter)
    for ids in PROMPTS:
        want = hf_greedy(peft_model, ids, N_NEW)
        got = serve(ids, max_new=N_NEW)["ids"]
        check(got == want and want != base_tokens[tuple(ids)],
              f"--adapter: {len(ids)}-token prompt, {N_NEW} tokens equal peft's (and differ from the base's)"
              + ("" if got == want else f" (ours {got}, theirs {want})"))
    serve.close()
    other = build("Llama", {"hidden_size": 48})
    other_adapter = os.path.join(work, "adapter_other")
    get_peft_model(other, LoraConfig(r=4, lora_alpha=8, target_modules=targets)).save_pretrained(other_adapter)
    r = subprocess.run([generate, base_dir, "--adapter", other_adapter, "--prompt-ids", "1 2"], capture_output=True,
                       text=True)
    check(r.returncode == 2 and "adapter_model.safetensors" in r.stderr,
          f"exit 2 on an adapter for another base: {r.returncode} {r.stderr.strip()[-200:]}")


WORDS = ("the a of cat dog sat on mat what is capital france paris answer question hello hi and to in it was "
         "big small red blue green yes no why how").split()
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
            "{% if add_generation_prompt %}<|assistant|> {% endif %}")


def make_tokenizer(directory):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    specials = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]
    vocab = {w: i for i, w in enumerate(specials + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   additional_special_tokens=specials[3:])
    fast.chat_template = TEMPLATE
    fast.save_pretrained(directory)
    return fast


def script(repo, generate, args, stdin=None):
    env = {**os.environ, "SHADOWGRAD_GENERATE": generate}
    return subprocess.run([os.path.join(repo, "scripts", "generate.sh"), *args], capture_output=True, text=True,
                          input=stdin, env=env)


def text_cases(repo, generate, work):
    d = os.path.join(work, "text")
    model = build("Llama", {}, seed=1)
    # Generation stops at <|end|> (as a chat model's generation_config says) and at the tokenizer's </s>.
    model.generation_config.eos_token_id = [2, 6]
    model.save_pretrained(d, safe_serialization=True)
    tok = make_tokenizer(d)

    def hf_text(ids, n=12):
        return tok.decode(hf_greedy(model, ids, n, eos=[2, 6]), skip_special_tokens=True)

    prompt = "the cat sat on the mat and"
    r = script(repo, generate, [d, "--prompt", prompt, "--max-new", "12"])
    want = hf_text(tok(prompt)["input_ids"])
    check(r.returncode == 0 and r.stdout == want + "\n", f"--prompt: {r.stdout!r} == transformers' {want!r}"
          + ("" if r.returncode == 0 else r.stderr[-500:]))
    question = "what is the capital of france"
    chat_ids = tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                       return_dict=False)
    r = script(repo, generate, [d, "--prompt", question, "--template", "--max-new", "12"])
    check(r.returncode == 0 and r.stdout == hf_text(chat_ids) + "\n",
          f"--prompt --template: {r.stdout!r} == transformers' {hf_text(chat_ids)!r}")

    prompts = os.path.join(work, "prompts.jsonl")
    with open(prompts, "w") as f:
        f.write(json.dumps({"prompt": prompt}) + "\n\n")
        f.write(json.dumps({"messages": [{"role": "user", "content": question}], "id": 7}) + "\n")
    out = os.path.join(work, "completions.jsonl")
    r = script(repo, generate, [d, "--prompts", prompts, "--out", out, "--max-new", "12"])
    rows = [json.loads(line) for line in open(out)] if r.returncode == 0 else []
    check(len(rows) == 2 and rows[0]["completion"] == want and rows[1]["completion"] == hf_text(chat_ids)
          and rows[1]["id"] == 7, f"--prompts: one JSONL completion per line, each transformers' ({r.stderr[-300:]})")

    # Two turns: the second prompt is the whole conversation through the template, answer included.
    r = script(repo, generate, [d, "--chat", "--max-new", "8", "--verbose"], stdin="hello\nwhat is the cat\n")
    messages = [{"role": "user", "content": "hello"}]
    first = tok.decode(hf_greedy(model, tok.apply_chat_template(messages, add_generation_prompt=True,
                                                                return_dict=False), 8, eos=[2, 6]),
                       skip_special_tokens=True)
    messages += [{"role": "assistant", "content": first}, {"role": "user", "content": "what is the cat"}]
    second = tok.decode(hf_greedy(model, tok.apply_chat_template(messages, add_generation_prompt=True,
                                                                 return_dict=False), 8, eos=[2, 6]),
                        skip_special_tokens=True)
    check(r.returncode == 0 and r.stdout.split("\n")[:2] == [first, second],
          f"--chat: two turns {r.stdout.splitlines()[:2]} == transformers' {[first, second]}")
    summaries = [line for line in r.stderr.splitlines() if line.startswith("[") and " cached)" in line]
    reused = [int(line.split("(")[1].split()[0]) for line in summaries]
    check(len(reused) == 2 and reused[0] == 0 and reused[1] > 0,
          f"--chat --verbose: a summary per turn; the second turn reuses the first's cache ({summaries})")

    # Bad input exits 2.
    for args, what in (([d, "--prompt", ""], "an empty prompt"),
                       ([d, "--prompt", " ".join(["the"] * 70)], "a prompt longer than the context (64)"),
                       ([d, "--prompt", "x", "--top-p", "0"], "top_p 0")):
        r = script(repo, generate, args)
        check(r.returncode == 2 and "error" in r.stderr, f"exit 2 on {what}: {r.returncode} {r.stderr.strip()[-200:]}")
    small = os.path.join(work, "small_vocab")
    build("Llama", {"vocab_size": 16}).save_pretrained(small, safe_serialization=True)
    tok.save_pretrained(small)
    r = script(repo, generate, [small, "--prompt", "what is the capital of france"])
    check(r.returncode == 2 and "vocabulary" in r.stderr,
          f"exit 2 on a token id outside a 16-token vocabulary: {r.returncode} {r.stderr.strip()[-200:]}")

    # Ctrl-C while --chat waits for the next line: exit 0, and its build/generate is gone.
    env = {**os.environ, "SHADOWGRAD_GENERATE": generate}
    p = subprocess.Popen([os.path.join(repo, "scripts", "generate.sh"), d, "--chat", "--max-new", "4"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    p.stdin.write("hello\n")
    p.stdin.flush()
    answer = p.stdout.readline()
    children = [pid for pid in os.listdir("/proc") if pid.isdigit() and child_of(int(pid), p.pid)]
    p.send_signal(signal.SIGINT)
    try:
        code = p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        code = "hung"
    time.sleep(0.5)
    alive = [pid for pid in children if os.path.exists(f"/proc/{pid}") and not zombie(pid)]
    check(code == 0 and answer and children and not alive,
          f"Ctrl-C in --chat: exit {code} after an answer {answer.strip()!r}; build/generate {children} gone")


def child_of(pid, parent):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1]) == parent
    except OSError:
        return False


def zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


REAL_PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
                "The three primary colors are", "To make a cup of tea, first"]


def real(model_dir, repo, generate, work):
    if not os.path.exists(os.path.join(model_dir, "model.safetensors")):
        print(f"skipped: {model_dir} has no model.safetensors (scripts/prepare_model.sh makes it)")
        sys.exit(SKIP)
    os.makedirs(work, exist_ok=True)
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    eos = model.generation_config.eos_token_id
    serve = Serve(generate, model_dir)
    stops = eos if isinstance(eos, list) else [eos]
    for text in REAL_PROMPTS:
        ids = tok(text)["input_ids"]
        got = serve(ids, max_new=64, stop=stops)
        want = hf_greedy_of(model, ids, got["ids"], 64, stops)
        same = next((i for i, (a, b) in enumerate(zip(got["ids"], want)) if a != b), min(len(want), len(got["ids"])))
        check(got["ids"] == want, f"SmolLM2 {text!r}: {len(want)} greedy tokens equal transformers' "
                                  f"(first difference at {same}; {got['decode_s']:.2f} s for ours)")
    serve.close()
    question = "What is the capital of France?"
    messages = [{"role": "user", "content": question}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    want = tok.decode(hf_greedy(model, ids, 64, eos=eos), skip_special_tokens=True)
    r = script(repo, generate, [model_dir, "--prompt", question, "--template", "--max-new", "64"])
    print(f"chat answer: {r.stdout.strip()!r}")
    check(r.returncode == 0 and r.stdout == want + "\n", f"SmolLM2 chat: {question!r} answered as transformers does "
                                                         f"({want!r})")


def main():
    if sys.argv[1] == "--real":
        model_dir, repo, generate, work = sys.argv[2:6]
        real(model_dir, repo, generate, work)
    else:
        repo, generate, trainer, export_hf, work = sys.argv[1:6]
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        tiny_cases(generate, work)
        lora_run(generate, trainer, export_hf, work)
        adapter_cases(generate, work)
        text_cases(repo, generate, work)
    if FAILURES:
        sys.exit(f"{len(FAILURES)} failed:\n  " + "\n  ".join(FAILURES))
    print("all passed")


if __name__ == "__main__":
    main()
