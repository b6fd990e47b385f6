#!/usr/bin/env bash
# Intent: hardware=cuda, end to end with the real trainer (ctest label `cuda`). Without a visible GPU the trainer
# must exit 2 with one line saying so, and the GPU cases report SKIPPED (exit 77), never passed. With a GPU: a tiny
# run in bf16 with a bf16 shadow, its checkpoint resumed bitwise on the same GPU.
# Usage: tests/cuda_test.sh TRAINER COMPARE_RUNS PYTHON      Cost: seconds (no GPU); under a minute on a GPU.
set -euo pipefail
trainer=$1 compare=$2 python=$3
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tiny=("$root/configs/tiny.yml" "base_output_directory=$tmp/runs" hardware=cuda)
if ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  set +e
  "$trainer" "${tiny[@]}" steps=1 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  set -e
  ((rc == 2)) || { cat "$tmp/out" "$tmp/err"; echo "FAIL: hardware=cuda without a GPU exited $rc, expected 2"; exit 1; }
  lines=$(grep -c . "$tmp/err" || true)
  ((lines == 1)) && grep -q 'no CUDA device is visible' "$tmp/err" ||
    { cat "$tmp/err"; echo "FAIL: expected one line saying no CUDA device is visible"; exit 1; }
  echo "no GPU: exit 2 with: $(cat "$tmp/err")"
  echo "cuda_test: SKIPPED: no CUDA device visible; the GPU cases need one"
  exit 77
fi
"$trainer" "${tiny[@]}" steps=6 grad_dtype=bfloat16 checkpoint_period=3 run_name=straight
"$trainer" "${tiny[@]}" steps=3 grad_dtype=bfloat16 checkpoint_period=3 run_name=resumed
"$trainer" "${tiny[@]}" steps=6 grad_dtype=bfloat16 checkpoint_period=3 run_name=resumed
"$compare" "$tmp/runs/resumed" "$tmp/runs/straight" --rtol 0 --atol 0
echo "PASS: hardware=cuda trains and resumes bitwise"
