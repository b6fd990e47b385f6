#!/usr/bin/env bash
# Intent: does the GA carry's dtype change held-out loss on a real corpus? Trains the default model on the KJV token
# files of scripts/prepare_data.sh at K=32 once per arm (default arms: grad_dtype=float32 and grad_dtype=bfloat16),
# all with the same data, seed and eval set, and tabulates final loss and final eval_loss. More arms (e.g. a
# stochastic-rounding one) are added with --arm; the runs already finished are skipped, so adding an arm costs one
# run.
# Cost: one full trainer run per arm (nice -n 5), one after another or all at once (--parallel): 200 steps of
# 32 x 128 tokens and 10 evaluations of 16384 tokens each; the measured time is in docs/data.md.
#
# Usage: scripts/corpus_study.sh [--data DIR] [--out DIR] [--arm "NAME key=value ..."]... [--no-default-arms]
#                                [key=value ...]
#   --data DIR         token files from scripts/prepare_data.sh (default data/kjv; made if missing)
#   --out DIR          where each arm's run directory goes (default runs/corpus_study)
#   --arm "NAME k=v"   one more arm: its run name and its overrides, in one quoted argument
#   --no-default-arms  run only the --arm arms
#   --parallel         train the arms at the same time (add num_threads=1 on a small machine)
#   key=value          overrides for every arm (after the study's own settings), e.g. steps=100
# Writes DIR/results.md (one row per arm) and DIR/loss.png (training and eval loss of every arm).
# Exit: 0 every arm ok; 1 an arm failed; 2 bad usage.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() {
  echo "corpus_study.sh: $*" >&2
  exit 2
}
data=data/kjv out=runs/corpus_study arms=() common=() defaults=1 parallel=0
while (($#)); do
  case $1 in
  -h | --help) sed -n '/^# Usage:/,/^# Exit:/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" && exit 0 ;;
  --data | --out | --arm)
    (($# >= 2)) || die "$1 needs a value"
    case $1 in --data) data=$2 ;; --out) out=$2 ;; --arm) arms+=("$2") ;; esac
    shift
    ;;
  --no-default-arms) defaults=0 ;;
  --parallel) parallel=1 ;;
  *=*) common+=("$1") ;;
  *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done
((defaults)) && arms=("fp32 grad_dtype=float32" "bf16 grad_dtype=bfloat16" "${arms[@]}")
((${#arms[@]})) || die "no arms to run"

[[ -f $data/train.bin ]] || "$repo/scripts/prepare_data.sh" --out "$data"
# SentencePiece writes one line per piece into tokenizer.vocab: the model's vocabulary is the trainer's vocab_size.
[[ -f $data/tokenizer.vocab ]] || die "$data has no tokenizer.vocab (made by scripts/prepare_data.sh)"
vocab=$(wc -l <"$data/tokenizer.vocab")
trainer=${TRAINER:-$repo/build/trainer}
[[ -x $trainer ]] || "$repo/scripts/build.sh" trainer >&2

# The study: default model (configs/base.yml), K=32 microbatches of 1 sequence, evaluation every 25 steps on the
# first 16 x 8 windows of val.bin (the same for every arm).
study=(dataset_type=tokens "dataset_path=$data/train.bin" "eval_dataset_path=$data/val.bin"
       "tokenizer_path=$data/tokenizer.model" "vocab_size=$vocab" gradient_accumulation_steps=32
       per_device_batch_size=1 steps=200 eval_interval=20 eval_steps=8 eval_per_device_batch_size=16
       checkpoint_period=50 log_period=20)

mkdir -p "$out"
failed=0
for arm in "${arms[@]}"; do
  read -ra words <<<"$arm"
  name=${words[0]} overrides=("${words[@]:1}")
  if [[ -f $out/$name/summary.json ]]; then
    echo "[$name] finished earlier: skipped"
    continue
  fi
  echo "[$name] training: ${overrides[*]} ${common[*]}"
  # Rerunning resumes an interrupted arm from its checkpoint (run_name is fixed).
  train() {
    nice -n 5 "$trainer" base.yml "${study[@]}" "$@" "${common[@]}" "base_output_directory=$out" "run_name=$name" \
      >"$out/$name.log" 2>&1 || { echo "[$name] FAILED; see $out/$name.log" >&2 && return 1; }
  }
  if ((parallel)); then
    train "${overrides[@]}" &
  else
    train "${overrides[@]}" || failed=1
  fi
done
if ((parallel)); then
  for job in $(jobs -p); do wait "$job" || failed=1; done
fi

# One row per arm: the final training loss, the final eval_loss and the best eval_loss seen.
{
  echo "| arm | overrides | final loss | final eval_loss | best eval_loss | train s |"
  echo "|---|---|---:|---:|---:|---:|"
  for arm in "${arms[@]}"; do
    read -ra words <<<"$arm"
    name=${words[0]} m=$out/${words[0]}/metrics.jsonl
    [[ -f $out/$name/summary.json ]] || { echo "| $name | ${words[*]:1} | failed | | | |" && continue; }
    awk -v name="$name" -v ov="${words[*]:1}" '
      function field(k,   s) { if (!match($0, "\"" k "\": [^,}]*")) return ""; s = substr($0, RSTART, RLENGTH)
                               sub(/^[^:]*: /, "", s); return s }
      { loss = field("loss"); t += field("step_time_s"); e = field("eval_loss")
        if (e != "") { last = e; if (best == "" || e + 0 < best + 0) best = e } }
      END { printf "| %s | %s | %.4f | %.4f | %.4f | %.0f |\n", name, ov, loss, last, best, t }' "$m"
  done
} >"$out/results.md"
cat "$out/results.md"
runs=()
for arm in "${arms[@]}"; do
  read -ra words <<<"$arm"
  [[ ! -f $out/${words[0]}/metrics.jsonl ]] || runs+=("$out/${words[0]}")
done
((${#runs[@]} == 0)) || "$repo/scripts/plot.sh" "${runs[@]}" --out "$out/loss.png" || true
exit $failed
