#!/usr/bin/env bash
# Intent: score an exported model on standard benchmarks with lm-evaluation-harness (lm-eval 0.4.13, its `hf`
# backend): a merged export, or a base plus a peft adapter (docs/huggingface.md, "Benchmarks with lm-eval").
# Cost: lm-eval's start (~10 s; ~8 s of CPU less when every task is in --include-path) and one forward per choice
# of each question; hellaswag on SmolLM2-135M is ~40,000 forwards. The usual tasks download their data from the
# Hugging Face hub on first use; examples/lm_eval holds a local task that needs no network (--tasks
# shadowgrad_example_mc --include-path examples/lm_eval).
#
# Usage: scripts/evaluate.sh MODEL_DIR --tasks TASK[,TASK...] [--adapter DIR] [--include-path DIR] [--num-fewshot N]
#          [--limit N] [--batch-size N|auto] [--dtype auto|float32|bfloat16|float16] [--device cpu|cuda|...]
#          [--tokenizer DIR] [--output DIR] [--log-samples] [--offline]
#   MODEL_DIR: a Hugging Face model directory (build/export_hf RUN OUT writes one, tokenizer included); with
#   --adapter, the base the adapter was trained on (build/export_hf RUN OUT --adapter writes the adapter).
#   --include-path: a folder of lm-eval task YAMLs (your own tasks); --offline: no network (local tasks, cached data).
#   Results: lm-eval's table on stdout, its JSON under --output (default lm-eval/ in the current directory), and one
#   line per task: `TASK acc=... acc_norm=...`.
# Exit: 0 ok; 1 lm-eval failed; 2 bad input (no config.json, no weights (a run's hf/: export it with build/export_hf),
# no tokenizer, no adapter_config.json, no lm-eval, a task whose hub data is not cached while the hub is out of reach
# or --offline).
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '/^# Usage:/,/^# Exit:/s/^# \{0,1\}//p' "$0"; exit 0; }
SHADOWGRAD_VENV="${SHADOWGRAD_VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv}"
[[ -x $SHADOWGRAD_VENV/bin/python ]] || { echo "evaluate.sh: no venv at $SHADOWGRAD_VENV (run scripts/build.sh)" >&2; exit 2; }
exec "$SHADOWGRAD_VENV/bin/python" "$(dirname "$0")/lib/evaluate.py" "$@"
