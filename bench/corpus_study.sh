#!/usr/bin/env bash
# Intent: does the GA carry's dtype change held-out loss on a real corpus? Trains the default model on the KJV token
# files of scripts/prepare_data.sh at K=32 once per arm (default arms: grad_dtype=float32 and grad_dtype=bfloat16),
# all with the same data, seed and eval set, and tabulates final loss and final eval_loss. More arms (e.g. a
# stochastic-rounding one) are added with --arm; the runs already finished are skipped, so adding an arm costs one
# run. With --seeds N every arm is trained N times (init_weights_seed = data_shuffle_seed = 0..N-1, the eval set
# fixed) and each arm is compared with the first arm at the same seed (bench/lib/paired_stats.py: mean
# difference, its sd and a 95 % t-interval), because one run per arm cannot tell a carry's effect from seed noise.
# Cost: one full trainer run per arm and seed (nice -n 10), --jobs at a time: 200 steps of 32 x 128 tokens and 10
# evaluations of 16384 tokens each; the measured time is in docs/data.md. bench/grad_dtype_study.sh runs the
# seeded study on a smaller model at several K within about an hour of CPU.
#
# Usage: bench/corpus_study.sh [--data DIR] [--out DIR] [--arm "NAME key=value ..."]... [--no-default-arms]
#                                [--seeds N] [--jobs J | --parallel] [--last L] [key=value ...]
#   --data DIR         token files from scripts/prepare_data.sh (default data/kjv; made if missing)
#   --out DIR          where each run directory goes (default runs/corpus_study)
#   --arm "NAME k=v"   one more arm: its run name and its overrides, in one quoted argument
#   --no-default-arms  run only the --arm arms (the first arm is the baseline of the paired comparison)
#   --seeds N          train every arm with seeds 0..N-1 (run NAME-seedS); N >= 2 adds DIR/paired.md and
#                      DIR/paired.png (each arm minus the first arm, per seed). Without it: one run NAME per arm.
#   --jobs J           train up to J runs at once (default 1; add num_threads=1 on a small machine)
#   --parallel         train all the runs at once
#   --last L           the paired table's second measure: the mean eval_loss of the last L evaluations (default 3)
#   key=value          overrides for every arm (after the study's own settings), e.g. steps=100
# Writes DIR/results.md (one row per run, with its CPU seconds) and DIR/loss.png (training and eval loss).
# Exit: 0 every run ok; 1 a run failed; 2 bad usage.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() {
  echo "corpus_study.sh: $*" >&2
  exit 2
}
data=data/kjv out=runs/corpus_study arms=() common=() defaults=1 jobs=1 seeds=0 last=3
while (($#)); do
  case $1 in
  -h | --help) sed -n '/^# Usage:/,/^# Exit:/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" && exit 0 ;;
  --data | --out | --arm | --seeds | --jobs | --last)
    (($# >= 2)) || die "$1 needs a value"
    case $1 in
    --data) data=$2 ;; --out) out=$2 ;; --arm) arms+=("$2") ;;
    --seeds | --jobs | --last)
      [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1 needs a whole number >= 1, not '$2'"
      case $1 in --seeds) seeds=$2 ;; --jobs) jobs=$2 ;; --last) last=$2 ;; esac
      ;;
    esac
    shift
    ;;
  --no-default-arms) defaults=0 ;;
  --parallel) jobs=1000000 ;;
  *=*) common+=("$1") ;;
  *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done
((defaults)) && arms=("fp32 grad_dtype=float32" "bf16 grad_dtype=bfloat16" "${arms[@]}")
((${#arms[@]})) || die "no arms to run"
for arm in "${arms[@]}"; do
  [[ ${arm%% *} =~ ^[A-Za-z0-9_.]+$ ]] || die "arm name '${arm%% *}' may hold only letters, digits, '_' and '.'"
done

[[ -f $data/train.bin ]] || "$repo/scripts/prepare_data.sh" --out "$data"
# SentencePiece writes one line per piece into tokenizer.vocab: the model's vocabulary is the trainer's vocab_size.
[[ -f $data/tokenizer.vocab ]] || die "$data has no tokenizer.vocab (made by scripts/prepare_data.sh)"
vocab=$(wc -l <"$data/tokenizer.vocab")
trainer=${TRAINER:-$repo/build/trainer}
[[ -x $trainer ]] || "$repo/scripts/build.sh" trainer >&2

# The study: default model (configs/base.yml), K=32 microbatches of 1 sequence, evaluation every 20 steps on the
# first 16 x 8 windows of val.bin (the same for every arm and seed: eval windows do not depend on the seeds).
study=(dataset_type=tokens "dataset_path=$data/train.bin" "eval_dataset_path=$data/val.bin"
       "tokenizer_path=$data/tokenizer.model" "vocab_size=$vocab" gradient_accumulation_steps=32
       per_device_batch_size=1 steps=200 eval_interval=20 eval_steps=8 eval_per_device_batch_size=16
       checkpoint_period=50 log_period=20)

# runs: "RUN_NAME override ..." per run; with --seeds, both seeds vary together and come after the arm's overrides.
runs=()
for arm in "${arms[@]}"; do
  if ((seeds)); then
    read -ra words <<<"$arm"
    for ((s = 0; s < seeds; s++)); do
      runs+=("${words[0]}-seed$s ${words[*]:1} init_weights_seed=$s data_shuffle_seed=$s")
    done
  else
    runs+=("$arm")
  fi
done

mkdir -p "$out"
# merged KEY=VALUE...: each key once, the last value given winning (the trainer refuses a key given twice), in the
# order of first appearance.
merged() {
  local -A value=()
  local order=() kv
  for kv in "$@"; do
    [[ -n ${value[${kv%%=*}]+x} ]] || order+=("${kv%%=*}")
    value[${kv%%=*}]=${kv#*=}
  done
  for kv in "${order[@]}"; do printf '%s\n' "$kv=${value[$kv]}"; done
}
# train NAME OVERRIDE...: one trainer run, the study's settings overridden by the arm's, then by the command
# line's; its CPU seconds (user + system) go to DIR/NAME.cpu. Rerunning resumes an interrupted run from its
# checkpoint (run_name is fixed).
train() {
  local name=$1 args
  shift
  mapfile -t args < <(merged "${study[@]}" "$@" "${common[@]}" "base_output_directory=$out" "run_name=$name")
  /usr/bin/time -f "%U %S" -o "$out/$name.cpu" nice -n 10 "$trainer" base.yml "${args[@]}" >"$out/$name.log" 2>&1 ||
    { echo "[$name] FAILED; see $out/$name.log" >&2 && return 1; }
  echo "[$name] done"
}
# busy NAME: a trainer holds NAME's run lock now (another study process on the same DIR is training it).
busy() {
  [[ -f $out/$1/trainer.lock ]] && ! flock -n "$out/$1/trainer.lock" true
}
failed=0 running=0
for run in "${runs[@]}"; do
  read -ra words <<<"$run"
  name=${words[0]}
  if [[ -f $out/$name/summary.json ]]; then
    echo "[$name] finished earlier: skipped"
    continue
  fi
  if ((running >= jobs)); then
    wait -n || failed=1
    running=$((running - 1))
  fi
  # One study process per run (flock on DIR/.NAME.lock, held by the background job and its trainer): a second
  # process started on the same DIR skips what the first is training, so the two share the work.
  exec {lock}>"$out/.$name.lock"
  if ! flock -n "$lock" || busy "$name"; then
    echo "[$name] being trained by another process: skipped"
    exec {lock}>&-
    continue
  fi
  [[ -f $out/$name/summary.json ]] && { exec {lock}>&- && echo "[$name] finished meanwhile: skipped" && continue; }
  # A run directory without a checkpoint cannot be resumed, and the trainer refuses to overwrite it.
  if [[ -d $out/$name ]] && ! compgen -G "$out/$name/checkpoints/step-*" >/dev/null; then
    echo "[$name] removing an incomplete run without a checkpoint"
    rm -rf "${out:?}/$name"
  fi
  echo "[$name] training: ${words[*]:1} ${common[*]}"
  train "${words[@]}" &
  exec {lock}>&-
  running=$((running + 1))
done
while ((running > 0)); do
  wait -n || failed=1
  running=$((running - 1))
done

# One row per run: the final training loss, the final and the best eval_loss seen, and the trainer's CPU time.
{
  echo "| run | overrides | final loss | final eval_loss | best eval_loss | train s | CPU s |"
  echo "|---|---|---:|---:|---:|---:|---:|"
  for run in "${runs[@]}"; do
    read -ra words <<<"$run"
    name=${words[0]} m=$out/${words[0]}/metrics.jsonl
    [[ -f $out/$name/summary.json ]] || { echo "| $name | ${words[*]:1} | failed | | | | |" && continue; }
    cpu=$(awk '{ printf "%.0f", $1 + $2 }' "$out/$name.cpu" 2>/dev/null || true)
    awk -v name="$name" -v ov="${words[*]:1}" -v cpu="$cpu" '
      function field(k,   s) { if (!match($0, "\"" k "\": [^,}]*")) return ""; s = substr($0, RSTART, RLENGTH)
                               sub(/^[^:]*: /, "", s); return s }
      { loss = field("loss"); t += field("step_time_s"); e = field("eval_loss")
        if (e != "") { last = e; if (best == "" || e + 0 < best + 0) best = e } }
      END { printf "| %s | %s | %.4f | %.4f | %.4f | %.0f | %s |\n", name, ov, loss, last, best, t, cpu }' "$m"
  done
} >"$out/results.md"
cat "$out/results.md"
done_runs=()
for run in "${runs[@]}"; do
  [[ ! -f $out/${run%% *}/metrics.jsonl ]] || done_runs+=("$out/${run%% *}")
done
((${#done_runs[@]} == 0)) || "$repo/scripts/plot.sh" "${done_runs[@]}" --out "$out/loss.png" || true
if ((seeds >= 2)); then
  python3 "$repo/bench/lib/paired_stats.py" --baseline "${arms[0]%% *}" --last "$last" \
    --md "$out/paired.md" --tsv "$out/paired.tsv" --plot "$out/paired.png" "$out" || failed=1
fi
exit $failed
