"""scripts/evaluate.sh: lm-evaluation-harness (lm-eval 0.4.13, the `hf` backend) on a Hugging Face model directory,
or a base plus a peft adapter. Checks what it can before lm-eval starts (exit 2, one line), then runs
`python -m lm_eval run` with the options spelled out (printed first), and prints one line per task from its results.
"""
import argparse
import glob
import importlib.util
import json
import os
import subprocess
import sys
import time

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def fail(message):
    print(f"evaluate.sh: {message}", file=sys.stderr)
    sys.exit(2)


def directory(path, what, needs=None, hint=""):
    """An existing directory (absolute), holding one of `needs` when given; its path must not hold a comma, which
    lm-eval's --model_args would split on."""
    if not os.path.isdir(path):
        fail(f"{path}: no such directory ({what})")
    if needs and not any(os.path.isfile(os.path.join(path, n)) for n in needs):
        fail(f"{path}: no {' or '.join(needs)}: not {what}{hint}")
    if "," in path:
        fail(f"{path}: a comma in the path; lm-eval's --model_args cannot carry it (move or link the directory)")
    return os.path.abspath(path)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="evaluate.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir")
    p.add_argument("--tasks", required=True, help="lm-eval task names, comma-separated (hellaswag,arc_easy,...)")
    p.add_argument("--adapter", help="a peft adapter directory to apply on MODEL_DIR")
    p.add_argument("--include-path", help="a folder of your own lm-eval task YAMLs")
    p.add_argument("--num-fewshot", type=int)
    p.add_argument("--limit", type=float, help="at most N documents per task (a fraction when below 1)")
    p.add_argument("--batch-size", default="8")
    p.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"))
    p.add_argument("--device", help="default: cuda when torch sees a GPU, else cpu")
    p.add_argument("--tokenizer", help="a directory holding the tokenizer, when MODEL_DIR has none")
    p.add_argument("--output", help="where lm-eval writes its JSON (default: MODEL_DIR/lm-eval or ADAPTER/lm-eval)")
    p.add_argument("--log-samples", action="store_true", help="also write every document's log-likelihoods")
    p.add_argument("--offline", action="store_true", help="no network: HF_HUB_OFFLINE, HF_DATASETS_OFFLINE")
    return p.parse_args(argv)


def model_args(args):
    hint = " (a run directory? export it first: build/export_hf RUN OUT)"
    model = directory(args.model_dir, "a Hugging Face model directory", ("config.json",), hint)
    fields = [f"pretrained={model}", f"dtype={args.dtype}"]
    if args.tokenizer:
        fields.append(f"tokenizer={directory(args.tokenizer, 'a tokenizer directory', TOKENIZER_FILES)}")
    elif not any(os.path.isfile(os.path.join(model, n)) for n in TOKENIZER_FILES):
        fail(f"{args.model_dir}: no tokenizer ({', '.join(TOKENIZER_FILES)}); give --tokenizer DIR")
    if args.adapter:
        fields.append(f"peft={directory(args.adapter, 'a peft adapter directory', ('adapter_config.json',))}")
    return ",".join(fields)


def command(args):
    if importlib.util.find_spec("lm_eval") is None:
        fail(f"lm-eval is not installed in {sys.prefix} (pip install lm-eval==0.4.13)")
    device = args.device
    if device is None:
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
    output = os.path.abspath(args.output or os.path.join(args.adapter or args.model_dir, "lm-eval"))
    cmd = [sys.executable, "-m", "lm_eval", "run", "--model", "hf", "--model_args", model_args(args), "--tasks",
           args.tasks, "--device", device, "--batch_size", args.batch_size, "--output_path", output]
    if args.include_path:
        cmd += ["--include_path", directory(args.include_path, "a folder of task YAMLs")]
    if args.num_fewshot is not None:
        cmd += ["--num_fewshot", str(args.num_fewshot)]
    if args.limit is not None:
        cmd += ["--limit", f"{args.limit:g}"]
    if args.log_samples:
        cmd.append("--log_samples")
    return cmd, output


def newest_results(output, since):
    files = [f for f in glob.glob(os.path.join(output, "**", "results_*.json"), recursive=True)
             if os.path.getmtime(f) >= since]
    return max(files, key=os.path.getmtime) if files else None


def main(argv):
    args = parse_args(argv)
    cmd, output = command(args)
    env = {**os.environ, **(OFFLINE if args.offline else {})}
    print("evaluate.sh:", " ".join(cmd[1:]), flush=True)
    started = time.time() - 1
    rc = subprocess.run(cmd, env=env).returncode
    if rc != 0:
        print(f"evaluate.sh: lm-eval exited {rc}", file=sys.stderr)
        sys.exit(1)
    results = newest_results(output, started)
    if results is None:
        print(f"evaluate.sh: lm-eval wrote no results_*.json under {output}", file=sys.stderr)
        sys.exit(1)
    for task, metrics in sorted(json.load(open(results))["results"].items()):
        shown = " ".join(f"{k.split(',')[0]}={v:.6g}" for k, v in metrics.items()
                         if "," in k and "stderr" not in k and isinstance(v, (int, float)))
        print(f"{task} {shown}")
    print(f"results: {results}")


if __name__ == "__main__":
    main(sys.argv[1:])
