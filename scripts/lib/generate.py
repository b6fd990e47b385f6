#!/usr/bin/env python3
"""Text in, text out around build/generate (docs/generate.md): the model's own tokenizer and chat template here, the
model in build/generate, which speaks token ids as JSON lines on its stdin and stdout (`generate SOURCE --serve`).

Usage: generate.py SOURCE (--prompt TEXT | --prompts FILE.jsonl | --chat) [options]
  SOURCE            a run directory (latest checkpoint, or --step N; LoRA runs included) or a Hugging Face model
                    directory (with --adapter DIR: a peft adapter on top of it)
  --prompt TEXT     one completion of TEXT as it stands (--template: as a user message through the chat template)
  --prompts FILE    one completion per JSONL line, {"prompt": TEXT} or {"messages": [...]} (through the chat
                    template); written as JSONL to --out (default stdout)
  --chat            an interactive conversation through the chat template (/reset forgets it; Ctrl-C or Ctrl-D ends)
  --max-new N       most new tokens (64); generation also stops at the tokenizer's EOS and generation_config.json's
  --temperature T   0 (default): greedy; with --top-k K, --top-p P and --seed S (the same seed, the same text)
  --tokenizer DIR   where tokenizer.json is (default: the model directory, a run's hf/, the adapter's directory)
Exit: 0 ok; 1 failure; 2 bad input (a SOURCE, --adapter or --tokenizer that does not exist, an empty prompt, one
longer than the context, a token id outside the vocabulary, an adapter that does not fit the base, a bad JSONL line
named FILE:LINE: every line is checked before the first answer is written); Ctrl-C in --chat ends with 0.
"""
import argparse
import json
import os
import subprocess
import sys

EXIT_BAD_INPUT = 2


class BadInput(Exception):
    pass


class ModelExited(Exception):
    """build/generate refused to start and has said why on stderr itself: exit with its code, saying nothing more."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


def read_yaml_key(path, key):
    """One top-level scalar of a run's config.yml (flat `key: value` lines), without a YAML dependency."""
    with open(path) as f:
        for line in f:
            name, sep, value = line.partition(":")
            if sep and name.strip() == key:
                value = value.split(" #")[0].strip()
                return value[1:-1] if value[:1] in "'\"" and value[-1:] == value[:1] else value
    return ""


def has_tokenizer(d):
    return d and any(os.path.exists(os.path.join(d, n)) for n in ("tokenizer.json", "tokenizer_config.json"))


def is_adapter(d):
    """A peft adapter directory: adapter_config.json, and neither a model's config.json nor a run's config.yml."""
    return (os.path.isfile(os.path.join(d, "adapter_config.json"))
            and not any(os.path.isfile(os.path.join(d, n)) for n in ("config.json", "config.yml")))


def adapter_base(d):
    """The base model an adapter names (adapter_config.json's base_model_name_or_path), or BASE_MODEL_DIR."""
    from hf_tokenizer import json_key
    base = json_key(os.path.join(d, "adapter_config.json"), "base_model_name_or_path")
    return base if isinstance(base, str) and base else "BASE_MODEL_DIR"


def tokenizer_dir(args):
    """The first directory holding a Hugging Face tokenizer: --tokenizer; the adapter's; a run's hf/ (what it carried
    from load_parameters_path) or that directory itself; a model directory itself."""
    if args.tokenizer:
        return args.tokenizer
    candidates = [args.adapter]
    if os.path.exists(os.path.join(args.source, "config.yml")):
        candidates += [os.path.join(args.source, "hf"),
                       read_yaml_key(os.path.join(args.source, "config.yml"), "load_parameters_path")]
    else:
        candidates.append(args.source)
    for d in candidates:
        if has_tokenizer(d):
            return d
    raise BadInput(f"{args.source}: no tokenizer found (a run trained from scratch has none); give --tokenizer DIR")


def stop_ids(tok, tok_dir, source):
    """The tokenizer's EOS and generation_config.json's eos_token_id (an int or a list), from the tokenizer's
    directory or the model's."""
    ids = set()
    if tok.eos_token_id is not None:
        ids.add(int(tok.eos_token_id))
    for d in (tok_dir, source, os.path.join(source, "hf")):
        path = os.path.join(d, "generation_config.json")
        if os.path.exists(path):
            with open(path) as f:
                eos = json.load(f).get("eos_token_id")
            ids.update(int(e) for e in (eos if isinstance(eos, list) else [eos] if eos is not None else []))
            break
    return sorted(ids)


class Model:
    """build/generate --serve as a child: requests of token ids in, tokens (streamed) and a summary out. It starts
    at once and is waited for in wait_ready(), so that its start (LibTorch, the weights) overlaps the tokenizer's."""

    def __init__(self, args):
        cmd = [args.generate_bin, args.source, "--serve", "--step", str(args.step)]
        for flag, value in (("--adapter", args.adapter), ("--max-length", args.max_length), ("--dtype", args.dtype)):
            if value:
                cmd += [flag, str(value)]
        # A session of its own: Ctrl-C reaches this script only, which then closes the child's stdin.
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                     start_new_session=True)
        self.info = None

    def wait_ready(self):
        ready = self._read()
        if "error" in ready:
            raise ModelExited(self.proc.wait())
        self.info = ready

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise (BadInput if code == EXIT_BAD_INPUT else RuntimeError)(f"build/generate ended (exit {code})")
        return json.loads(line)

    def generate(self, ids, options, on_token=None):
        self.proc.stdin.write(json.dumps({"ids": ids, **options, "stream": on_token is not None}) + "\n")
        self.proc.stdin.flush()
        while True:
            msg = self._read()
            if "token" in msg:
                on_token(msg["token"])
            elif "error" in msg:
                raise (BadInput if msg.get("code") == EXIT_BAD_INPUT else RuntimeError)(msg["error"])
            else:
                return msg

    def close(self):
        if self.proc.poll() is None and self.info is None:  # still starting (a bad prompt was found meanwhile): it
            self.proc.kill()  # has nothing to save, and it takes SIGTERM as a request to stop once it is ready
            self.proc.wait()
        elif self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:  # interrupted mid-answer: it has nothing to save
                self.proc.terminate()
                self.proc.wait()


class Streamer:
    """Prints a completion as its tokens arrive: the decoded text of all tokens so far, less what was printed (a
    token may end inside a UTF-8 character, shown as U+FFFD until the next one completes it)."""

    def __init__(self, tok, out):
        self.tok, self.out, self.ids, self.shown = tok, out, [], ""

    def __call__(self, token):
        self.ids.append(token)
        text = self.tok.decode(self.ids, skip_special_tokens=True)
        if not text.endswith("\ufffd"):
            self.out.write(text[len(self.shown):])
            self.out.flush()
            self.shown = text


def chat_ids(tok, messages):
    if not getattr(tok, "chat_template", None):
        raise BadInput("the tokenizer has no chat template (use --prompt without --template)")
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    return list(ids["input_ids"] if isinstance(ids, dict) else ids)


def text_ids(tok, text):
    if not text:
        raise BadInput("the prompt is empty")
    return list(tok(text)["input_ids"])  # with the special tokens the tokenizer adds (a BOS), as transformers' users do


def summary(result):
    n = len(result["ids"])
    rate = (n - 1) / result["decode_s"] if n > 1 and result["decode_s"] > 0 else float("nan")
    return (f"[{result['prompt_tokens']} prompt tokens ({result['reused_tokens']} cached), {n} new, "
            f"finish {result['finish']}, first token {result['first_token_s'] * 1000:.0f} ms, {rate:.1f} tokens/s]")


def read_prompts(path, tok):
    """Every line of a --prompts file as (FILE:LINE, the object, its token ids), all checked before anything is
    generated: a bad line anywhere leaves --out unwritten."""
    prompts = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                item = json.loads(line)
                if not isinstance(item, dict) or ("messages" in item) == ("prompt" in item):
                    raise BadInput('expected an object with "prompt" or "messages"')
                if "messages" in item:
                    if not item["messages"]:
                        raise BadInput("the prompt is empty")
                    ids = chat_ids(tok, item["messages"])
                else:
                    ids = text_ids(tok, item["prompt"])
            except (BadInput, json.JSONDecodeError) as e:
                raise BadInput(f"{where}: {e}")
            prompts.append((where, item, ids))
    return prompts


def check_fits(prompts, info):
    """The model's own refusals (build/generate's Generator::run), asked of every prompt before the first answer."""
    for where, _, ids in prompts:
        if len(ids) > info["max_length"]:
            raise BadInput(f"{where}: the prompt has {len(ids)} tokens; the context holds {info['max_length']}")
        outside = [i for i in ids if not 0 <= i < info["vocab_size"]]
        if outside:
            raise BadInput(f"{where}: prompt token id {outside[0]} is outside the vocabulary [0, {info['vocab_size']})")


def run_prompts(args, tok, model, options, prompts):
    check_fits(prompts, model.info)
    out = open(args.out, "w") if args.out else sys.stdout
    try:
        for where, item, ids in prompts:
            try:
                result = model.generate(ids, options)
            except BadInput as e:
                raise BadInput(f"{where}: {e}")
            record = {**item, "completion": tok.decode(result["ids"], skip_special_tokens=True), **result}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            out.flush()
    finally:
        if out is not sys.stdout:
            out.close()


def run_chat(args, tok, model, options):
    messages = [{"role": "system", "content": args.system}] if args.system else []
    print(f"chatting with {model.info['model']} (/reset forgets the conversation; Ctrl-D or Ctrl-C ends)",
          file=sys.stderr)
    while True:
        try:
            text = input("> " if sys.stdin.isatty() else "")  # piped: stdout holds the answers alone
        except EOFError:
            print(file=sys.stderr)
            return
        if text.strip() == "/reset":
            messages = messages[:1] if args.system else []
            continue
        if not text.strip():
            continue
        messages.append({"role": "user", "content": text})
        streamer = Streamer(tok, sys.stdout)
        try:
            result = model.generate(chat_ids(tok, messages), options, streamer)
        except BadInput as e:  # e.g. the conversation outgrew the context: say so and let the user /reset
            messages.pop()
            print(f"error: {e}", file=sys.stderr)
            continue
        print()
        if args.verbose:
            print(summary(result), file=sys.stderr)
        messages.append({"role": "assistant", "content": tok.decode(result["ids"], skip_special_tokens=True)})


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("source")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--prompt")
    mode.add_argument("--prompts")
    mode.add_argument("--chat", action="store_true")
    p.add_argument("--template", action="store_true", help="--prompt as a user message through the chat template")
    p.add_argument("--system", default="", help="a system message first (--chat, --template)")
    p.add_argument("--out", help="--prompts: the JSONL to write (default stdout)")
    p.add_argument("--step", type=int, default=-1)
    p.add_argument("--adapter", default="")
    p.add_argument("--tokenizer", default="")
    p.add_argument("--max-new", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-length", type=int, default=0, help="the context in tokens (default: the source's)")
    p.add_argument("--dtype", default="", help="float32 (default) or bfloat16")
    p.add_argument("--verbose", action="store_true", help="timings after each completion, on stderr")
    p.add_argument("--generate-bin", default=os.environ.get("SHADOWGRAD_GENERATE", os.path.join(root, "build", "generate")))
    args = p.parse_args()
    if args.prompt is not None and not args.prompt:
        raise BadInput("the prompt is empty")
    if args.max_new < 1:
        raise BadInput(f"--max-new must be >= 1, got {args.max_new}")
    for what, path in (("", args.source), ("--adapter ", args.adapter), ("--tokenizer ", args.tokenizer),
                       ("--prompts ", args.prompts)):
        if path and not os.path.exists(path):
            raise BadInput(f"{what}{path}: no such {'file' if what == '--prompts ' else 'directory'}")
    if args.tokenizer and os.path.isfile(args.tokenizer):
        raise BadInput(f"--tokenizer {args.tokenizer}: a file; --tokenizer takes the model's directory (the one holding "
                       f"tokenizer.json): --tokenizer {os.path.dirname(args.tokenizer) or '.'}")
    if is_adapter(args.source):
        raise BadInput(f"{args.source}: a peft adapter directory (adapter_config.json), not a model; give the base "
                       f"model it was trained on and the adapter: generate.sh {adapter_base(args.source)} --adapter "
                       f"{args.source} ...")
    if args.adapter and not os.path.isfile(os.path.join(args.adapter, "adapter_config.json")):
        raise BadInput(f"--adapter {args.adapter}: no adapter_config.json in it (a peft adapter directory holds "
                       "adapter_config.json and adapter_model.safetensors)")

    tok_dir = tokenizer_dir(args)
    model = Model(args)  # after the cheap checks: it loads LibTorch and the weights while the tokenizer loads here
    try:
        from hf_tokenizer import load_tokenizer  # transformers takes ~1 s of CPU to import
        tok = load_tokenizer(tok_dir)
        options = {"max_new": args.max_new, "stop": stop_ids(tok, tok_dir, args.source),
                   "temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p, "seed": args.seed}
        prompts = read_prompts(args.prompts, tok) if args.prompts else None
        model.wait_ready()
        if args.chat:
            run_chat(args, tok, model, options)
        elif args.prompts:
            run_prompts(args, tok, model, options, prompts)
        else:
            messages = ([{"role": "system", "content": args.system}] if args.system else []) + \
                [{"role": "user", "content": args.prompt}]
            ids = chat_ids(tok, messages) if args.template else text_ids(tok, args.prompt)
            result = model.generate(ids, options, Streamer(tok, sys.stdout))
            print()
            if args.verbose:
                print(summary(result), file=sys.stderr)
    finally:
        model.close()


if __name__ == "__main__":
    try:
        main()
    except BadInput as e:
        print(f"generate: error: {e}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except ModelExited as e:
        sys.exit(e.code)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        sys.exit(0)
    except BrokenPipeError:
        sys.exit(0)
