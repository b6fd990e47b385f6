#!/usr/bin/env python3
"""scripts/evaluate.sh (lm-eval 0.4.13's `hf` backend) against transformers' own log-likelihoods, offline, on the
tiny multiple-choice task in tests/lm_eval_tiny (24 questions of 4 choices over a 64-word tokenizer) and a tiny random
Llama (tests/hf_parity_test.py's build) saved with that tokenizer.

- a merged model directory, and the same base with a peft adapter (init_lora_weights=False, so it changes the
  model): the harness's accuracy must equal the accuracy computed here from transformers (each choice's summed
  log-probs after the question, the highest wins), and every choice's log-likelihood in its samples must agree
  within 1e-4;
- controls: the task with every answer moved to the next choice (tiny_mc_wrong_key.yaml) must give the harness
  another accuracy than the true key's direct one; the adapter's log-likelihoods must differ from the base's;
- bad input exits 2 before lm-eval starts: a directory without config.json, --tokenizer given a file, one with
  config.json and a tokenizer but no weights (a run's hf/: the message names build/export_hf), an adapter without adapter_config.json, and a hub task
  (arc_easy) whose data is not cached while the hub cannot be used (--offline, or an endpoint that refuses): one line,
  no traceback, lm-eval never started;
- the results land in the directory the command runs in (lm-eval/ there), not in the model's directory;
- tasks all defined in --include-path start lm-eval without indexing its own ~14,000 task files;
- the example task that docs/huggingface.md runs (examples/lm_eval) runs offline and scores its 20 questions.

Usage: evaluate_test.py REPO WORK_DIR
Exit: 0 pass; 1 fail; 77 skipped (no lm_eval or peft in this Python).
"""
import json
import os
import shutil
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TASKS = os.path.join(HERE, "lm_eval_tiny")
sys.path.insert(0, HERE)
sys.path.insert(0, TASKS)
from hf_parity_test import build  # noqa: E402
import tiny_mc  # noqa: E402

try:
    import lm_eval  # noqa: F401
    import peft
except ImportError as e:
    print(f"skipped: no {e.name} in this Python (pip install lm-eval==0.4.13 peft)")
    sys.exit(77)
import transformers  # noqa: E402

LL_TOL = 1e-4
TASK, WRONG, EXAMPLE = "shadowgrad_tiny_mc", "shadowgrad_tiny_mc_wrong_key", "shadowgrad_example_mc"


def evaluate(repo, args, expect=0, cwd=None, env=None):
    r = subprocess.run([os.path.join(repo, "scripts", "evaluate.sh"), *args], capture_output=True, text=True, cwd=cwd,
                       env={**os.environ, "SHADOWGRAD_VENV": sys.prefix, **(env or {})})
    if r.returncode != expect:
        sys.exit(f"FAILED: evaluate.sh {' '.join(args)} exited {r.returncode}, not {expect}\n{r.stdout[-3000:]}\n"
                 f"{r.stderr[-3000:]}")
    return r


def harness(repo, work, name, model_dir, adapter, tasks, include):
    """evaluate.sh on the tiny tasks, run in WORK/in_NAME with no --output; returns {task: (acc, {doc_id: [log-likelihood
    per choice]})}."""
    here = os.path.join(work, "in_" + name)
    os.makedirs(here)
    args = [model_dir, "--tasks", ",".join(tasks), "--include-path", include, "--dtype", "float32", "--device", "cpu",
            "--batch-size", "64", "--offline", "--log-samples"]
    args += ["--adapter", adapter] if adapter else []
    stdout = evaluate(repo, args, cwd=here).stdout
    if "lm-eval's own tasks not indexed" not in stdout:  # every task is in the include path: lm-eval's ~8 s spared
        sys.exit(f"FAILED: evaluate.sh indexed lm-eval's own tasks for tasks all in --include-path\n{stdout[-2000:]}")
    results = [l.split(" ", 1)[1] for l in stdout.splitlines() if l.startswith("results: ")]
    if len(results) != 1:
        sys.exit(f"FAILED: evaluate.sh printed no 'results: PATH' line\n{stdout[-2000:]}")
    if not results[0].startswith(os.path.join(here, "lm-eval") + os.sep):
        sys.exit(f"FAILED: the results {results[0]} are not under lm-eval/ in the directory the command ran in ({here})")
    accs = json.load(open(results[0]))["results"]
    found = {}
    for task in tasks:
        stamp = os.path.basename(results[0])[len("results_"):-len(".json")]
        samples = os.path.join(os.path.dirname(results[0]), f"samples_{task}_{stamp}.jsonl")
        lls = {}
        for line in open(samples):
            s = json.loads(line)
            lls[s["doc_id"]] = [float(r[0]) for r in s["filtered_resps"]]
        found[task] = (accs[task]["acc,none"], lls)
        print(f"  {name}: harness {task} acc {accs[task]['acc,none']:.6f} over {len(lls)} documents")
    return found


def direct(model, tokenizer, docs):
    """Each choice's summed log-probs of ' ' + choice after the question, one sequence at a time, from the logits."""
    lls = []
    with torch.no_grad():
        for doc in docs:
            context = tokenizer(doc["question"]).input_ids
            row = []
            for choice in doc["choices"]:
                ids = tokenizer(doc["question"] + " " + choice).input_ids
                logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, :-1].double(), dim=-1)
                row.append(logp[len(context) - 1:].gather(1, torch.tensor(ids[len(context):])[:, None]).sum().item())
            lls.append(row)
    return lls


def accuracy(lls, key):
    return sum(row.index(max(row)) == answer for row, answer in zip(lls, key)) / len(key)


def check(label, ok, detail):
    print(f"  {label}: {detail}{'' if ok else '  FAILED'}")
    return ok


def main():
    repo, work = sys.argv[1:3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model_dir, adapter_dir = os.path.join(work, "model"), os.path.join(work, "adapter")
    tokenizer = tiny_mc.tokenizer()
    base = build("Llama", {}).eval()
    base.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    torch.manual_seed(5)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"],
                           lora_dropout=0.0, init_lora_weights=False, task_type="CAUSAL_LM")
    peft.get_peft_model(transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                        lora).save_pretrained(adapter_dir)
    docs = [json.loads(l) for l in open(os.path.join(TASKS, "tiny_mc.jsonl"))]
    key = [d["answer"] for d in docs]
    wrong_key = [(a + 1) % len(d["choices"]) for a, d in zip(key, docs)]

    ok = True
    print("bad input:")
    r = evaluate(repo, [work, "--tasks", TASK], expect=2)
    ok &= check("a directory without config.json exits 2", "config.json" in r.stderr, r.stderr.strip())
    r = evaluate(repo, [model_dir, "--tasks", TASK, "--adapter", work], expect=2)
    ok &= check("an adapter without adapter_config.json exits 2", "adapter_config.json" in r.stderr, r.stderr.strip())
    weights = os.path.join(model_dir, "model.safetensors")
    r = evaluate(repo, [model_dir, "--tasks", TASK, "--tokenizer", weights], expect=2)
    ok &= check("--tokenizer MODEL_DIR/model.safetensors exits 2 naming the directory to give",
                f"{weights}: a file; give a tokenizer directory, the one holding it: {model_dir}" in r.stderr,
                r.stderr.strip())
    hf_dir = os.path.join(work, "hf")  # as a run's hf/: config.json and the tokenizer, no weights
    os.makedirs(hf_dir)
    for f in os.listdir(model_dir):
        if "safetensors" not in f:
            shutil.copy(os.path.join(model_dir, f), hf_dir)
    r = evaluate(repo, [hf_dir, "--tasks", TASK], expect=2)
    ok &= check("config.json and a tokenizer but no weights exits 2, pointing to build/export_hf",
                "no weights" in r.stderr and "build/export_hf" in r.stderr, r.stderr.strip())
    no_cache = {"HF_HOME": os.path.join(work, "empty_hf_home")}
    for how, flags, env in (("--offline", ["--offline"], no_cache),
                            ("a hub that refuses", [], {**no_cache, "HF_ENDPOINT": "http://127.0.0.1:9"})):
        r = evaluate(repo, [model_dir, "--tasks", "arc_easy"] + flags, expect=2, env=env)
        ok &= check(f"a hub task, not cached, {how}: exit 2 in one line before lm-eval starts",
                    "arc_easy needs the Hugging Face hub" in r.stderr and "allenai/ai2_arc" in r.stderr
                    and EXAMPLE in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "lm_eval" not in r.stdout,
                    r.stderr.strip())
    include = os.path.join(work, "tasks")  # the tiny tasks and the docs' example: lm-eval takes one --include_path
    shutil.copytree(TASKS, include)
    for f in os.listdir(os.path.join(repo, "examples", "lm_eval")):
        shutil.copy(os.path.join(repo, "examples", "lm_eval", f), include)

    cases = [("model", None, [TASK, WRONG, EXAMPLE]), ("adapter", adapter_dir, [TASK])]
    direct_lls, found_example = {}, None
    for name, adapter, tasks in cases:
        print(f"{name}:")
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        if adapter:
            model = peft.PeftModel.from_pretrained(model, adapter).eval()
        ours = direct_lls[name] = direct(model, tokenizer, docs)
        found = harness(repo, work, name, model_dir, adapter, tasks, include)
        acc, lls = found[TASK]
        mine = accuracy(ours, key)
        ok &= check("harness accuracy against transformers'", acc == mine, f"{acc:.6f} vs {mine:.6f}")
        err = max(abs(a - b) for d in range(len(docs)) for a, b in zip(lls[d], ours[d]))
        ok &= check("every choice's log-likelihood against transformers'", err <= LL_TOL,
                    f"max abs diff {err:.2e} (limit {LL_TOL:g}) over {4 * len(docs)} choices")
        if EXAMPLE in found:
            found_example = found[EXAMPLE]
        if WRONG in found:
            wrong = found[WRONG][0]
            ok &= check("control: the wrong key moves the harness's accuracy", wrong != mine,
                        f"{wrong:.6f} (transformers with the wrong key {accuracy(ours, wrong_key):.6f}; the true key "
                        f"{mine:.6f})")
            ok &= check("the wrong key's accuracy equals transformers' with that key",
                        wrong == accuracy(ours, wrong_key), f"{wrong:.6f}")
    ok &= check("the results land where the command runs, not in the model's directory",
                not os.path.exists(os.path.join(model_dir, "lm-eval")), f"nothing under {model_dir}/lm-eval")
    questions = sum(1 for _ in open(os.path.join(repo, "examples", "lm_eval", "example_mc.jsonl")))
    ok &= check("the docs' example task (examples/lm_eval) runs offline over all its questions",
                found_example is not None and len(found_example[1]) == questions == 20,
                f"{EXAMPLE}: {found_example and len(found_example[1])} of {questions} questions scored")
    moved = max(abs(a - b) for ra, rb in zip(direct_lls["adapter"], direct_lls["model"]) for a, b in zip(ra, rb))
    ok &= check("control: the adapter changes the log-likelihoods", moved > 1e-3, f"by up to {moved:.3f}")
    if not ok:
        sys.exit("FAILED")
    print("evaluate: all passed")


if __name__ == "__main__":
    main()
