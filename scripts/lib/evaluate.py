"""scripts/evaluate.sh: lm-evaluation-harness (lm-eval 0.4.13, the `hf` backend) on a Hugging Face model directory,
or a base plus a peft adapter. Checks what it can before lm-eval starts (exit 2, one line), then runs
`python -m lm_eval run` with the options spelled out (printed first), and prints one line per task from its results.
"""
import argparse
import glob
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
from urllib.parse import urlparse

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
# datasets' builders that read local files: a task whose dataset_path is one of these needs no hub
LOCAL_BUILDERS = {"json", "csv", "parquet", "text", "arrow", "pandas", "imagefolder", "audiofolder"}
EXAMPLE_TASK = "--tasks shadowgrad_example_mc --include-path examples/lm_eval"
# `python -m lm_eval` indexing only --include_path's tasks: when every task asked for is defined there, lm-eval's own
# 14,000 task files are not parsed (~8 s of CPU of its start).
LOCAL_TASKS_ONLY = ("import functools, sys; import lm_eval.tasks.manager as m; "
                    "m.TaskManager.__init__ = functools.partialmethod(m.TaskManager.__init__, include_defaults=False); "
                    "from lm_eval.__main__ import cli_evaluate; sys.argv[0] = 'lm_eval'; cli_evaluate()")


def fail(message):
    print(f"evaluate.sh: {message}", file=sys.stderr)
    sys.exit(2)


def directory(path, what, needs=None, hint=""):
    """An existing directory (absolute), holding one of `needs` when given; its path must not hold a comma, which
    lm-eval's --model_args would split on."""
    if os.path.isfile(path):
        fail(f"{path}: a file; give {what}, the one holding it: {os.path.dirname(path) or '.'}")
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
    p.add_argument("--output", help="where lm-eval writes its JSON (default: lm-eval/ in the current directory)")
    p.add_argument("--log-samples", action="store_true", help="also write every document's log-likelihoods")
    p.add_argument("--offline", action="store_true", help="no network: HF_HUB_OFFLINE, HF_DATASETS_OFFLINE")
    return p.parse_args(argv)


def model_args(args):
    hint = " (a run directory? export it first: build/export_hf RUN OUT)"
    model = directory(args.model_dir, "a Hugging Face model directory", ("config.json",), hint)
    if not any(os.path.isfile(os.path.join(model, n)) for n in WEIGHT_FILES):
        fail(f"{args.model_dir}: config.json but no weights ({' or '.join(WEIGHT_FILES[::2])}); a run's hf/ holds "
             "only the config and tokenizer: export the weights with build/export_hf RUN OUT, then evaluate OUT")
    fields = [f"pretrained={model}", f"dtype={args.dtype}"]
    if args.tokenizer:
        fields.append(f"tokenizer={directory(args.tokenizer, 'a tokenizer directory', TOKENIZER_FILES)}")
    elif not any(os.path.isfile(os.path.join(model, n)) for n in TOKENIZER_FILES):
        fail(f"{args.model_dir}: no tokenizer ({', '.join(TOKENIZER_FILES)}); give --tokenizer DIR")
    if args.adapter:
        fields.append(f"peft={directory(args.adapter, 'a peft adapter directory', ('adapter_config.json',))}")
    return ",".join(fields)


def command(args):
    """lm-eval's command line and the output directory, after every check (exit 2) but the hub's."""
    if importlib.util.find_spec("lm_eval") is None:
        fail(f"lm-eval is not installed in {sys.prefix} (pip install lm-eval==0.4.13)")
    output = os.path.abspath(args.output or "lm-eval")
    launch = ["-m", "lm_eval"]
    if args.include_path:
        include = directory(args.include_path, "a folder of task YAMLs")
        files = TaskFiles([include])
        if all(files.local(t.strip()) for t in args.tasks.split(",") if t.strip()):
            launch = ["-c", LOCAL_TASKS_ONLY]
    cmd = [sys.executable, *launch, "run", "--model", "hf", "--model_args", model_args(args), "--tasks", args.tasks,
           "--batch_size", args.batch_size, "--output_path", output]
    if args.include_path:
        cmd += ["--include_path", include]
    if args.num_fewshot is not None:
        cmd += ["--num_fewshot", str(args.num_fewshot)]
    if args.limit is not None:
        cmd += ["--limit", f"{args.limit:g}"]
    if args.log_samples:
        cmd.append("--log_samples")
    return cmd, output


# ---- tasks whose data comes from the Hugging Face hub ----------------------------------------------------------------

def hub_reason(args):
    """Why the hub cannot be used ("--offline", "HF_HUB_OFFLINE=1", or the endpoint's host cannot be reached within
    3 s), or None when it can."""
    if args.offline:
        return "--offline"
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE=1"
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection((url.hostname, url.port or (80 if url.scheme == "http" else 443)), timeout=3).close()
        return None
    except OSError as e:
        return f"{url.hostname} cannot be reached ({e.strerror or e})"


def task_loader():
    """A PyYAML loader for lm-eval's task files, which read `!function module.name` as None."""
    import yaml
    loader = type("TaskLoader", (getattr(yaml, "CSafeLoader", yaml.SafeLoader),), {})
    loader.add_multi_constructor("!", lambda _loader, _suffix, _node: None)
    return loader


class TaskFiles:
    """lm-eval's task YAMLs (its own and --include-path's), read as text once (~1 s for lm-eval 0.4.13's 14,000
    files) and parsed only where a name occurs: which hub data sets a task, tag or group reads."""

    def __init__(self, roots):
        import yaml
        self.yaml, self.loader, self.parsed = yaml, task_loader(), {}
        self.texts = {}
        for root in roots:
            for d, _, files in os.walk(root):
                for f in files:
                    if f.endswith((".yaml", ".yml")):
                        with open(os.path.join(d, f), errors="replace") as fh:
                            self.texts[os.path.join(d, f)] = fh.read()

    def config(self, path):
        """The file's config merged over the files it includes (lm-eval's `include:`, relative to the file)."""
        if path not in self.parsed:
            try:
                cfg = self.yaml.load(self.texts.get(path) or open(path).read(), Loader=self.loader) or {}
            except (OSError, self.yaml.YAMLError):
                cfg = {}
            cfg = cfg if isinstance(cfg, dict) else {}
            if isinstance(cfg.get("include"), str):
                cfg = {**self.config(os.path.join(os.path.dirname(path), cfg["include"])), **cfg}
            self.parsed[path] = cfg
        return self.parsed[path]

    def defining(self, name):
        """(config, members) of each file that defines NAME: a group's member task names (members), or a task or a
        tag's task (members None)."""
        for path, text in self.texts.items():
            if name not in text:
                continue
            cfg = self.config(path)
            tags = cfg.get("tag") if isinstance(cfg.get("tag"), list) else [cfg.get("tag")]
            if cfg.get("group") == name and isinstance(cfg.get("task"), list):
                subs = [sub.get("task") if isinstance(sub, dict) else sub for sub in cfg["task"]]
                yield cfg, [sub for sub in subs if isinstance(sub, str)]
            elif cfg.get("task") == name or name in tags:
                yield cfg, None

    def datasets(self, name, depth=0):
        """The hub data sets NAME reads (a task, a tag or a group, followed 4 levels down); None if NAME is unknown."""
        if depth > 4:
            return set()
        found, out = False, set()
        for cfg, members in self.defining(name):
            found = True
            if members is not None:
                for sub in members:
                    out |= self.datasets(sub, depth + 1) or set()
            else:
                where = cfg.get("dataset_path")
                local = ("custom_dataset" in cfg or not isinstance(where, str) or where in LOCAL_BUILDERS
                         or os.path.isdir(where))
                out |= set() if local else {where}
        return out if found else None

    def local(self, name, depth=0):
        """Whether NAME is a task, tag or group of these files whose every member is too (followed 4 levels down)."""
        found = False
        for _, members in self.defining(name):
            if depth > 4 or not all(self.local(sub, depth + 1) for sub in members or ()):
                return False
            found = True
        return found


def cached(dataset):
    """Whether the hub data set is in the Hugging Face caches (the hub's snapshots or datasets' own)."""
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    hub = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    data = os.environ.get("HF_DATASETS_CACHE") or os.path.join(home, "datasets")
    return (os.path.isdir(os.path.join(hub, "datasets--" + dataset.replace("/", "--")))
            or os.path.isdir(os.path.join(data, dataset.replace("/", "___"))))


def check_hub(args):
    """Exits 2 at once, in one line, when a task reads a hub data set that is not cached and the hub cannot be used
    (lm-eval would retry for half a minute, then end in a traceback). Returns the environment lm-eval runs in:
    offline whenever the hub cannot be used, so that cached data is read without retries."""
    why = hub_reason(args)
    if why is None:
        return dict(os.environ)
    spec = importlib.util.find_spec("lm_eval")
    roots = [os.path.join(os.path.dirname(spec.origin), "tasks")] + ([args.include_path] if args.include_path else [])
    files = TaskFiles(roots)
    for task in [t.strip() for t in args.tasks.split(",") if t.strip()]:
        missing = sorted(d for d in files.datasets(task) or () if not cached(d))
        if missing:
            fail(f"--tasks {task} needs the Hugging Face hub (its data: {', '.join(missing[:3])}"
                 f"{' ...' if len(missing) > 3 else ''}, not in the cache), and {why}: run it once with the hub in "
                 f"reach, or run a local task (the example: {EXAMPLE_TASK})")
    return {**os.environ, **OFFLINE}


def newest_results(output, since):
    files = [f for f in glob.glob(os.path.join(output, "**", "results_*.json"), recursive=True)
             if os.path.getmtime(f) >= since]
    return max(files, key=os.path.getmtime) if files else None


def main(argv):
    args = parse_args(argv)
    cmd, output = command(args)
    env = check_hub(args)
    device = args.device
    if device is None:  # after the checks: importing torch takes seconds
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
    cmd += ["--device", device]
    local = cmd[1] == "-c"
    print("evaluate.sh: -m lm_eval", " ".join(cmd[3 if local else 1 + 2:]) +
          ("  (lm-eval's own tasks not indexed: every task is in --include-path)" if local else ""), flush=True)
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
