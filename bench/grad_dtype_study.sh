#!/usr/bin/env bash
# Intent: the grad_dtype question with error bars. Does a bf16 GA carry cost held-out loss on the KJV corpus, at
# which K, and does stochastic rounding buy it back? Runs bench/corpus_study.sh --seeds N at each K with the arms
# fp32 (the baseline), bf16 (round to nearest), bf16sr (stochastic rounding) and, with --fp16, fp16; then
# bench/lib/paired_stats.py pairs every arm with fp32 at the same seed and K (mean difference of eval_loss, its sd,
# 95 % t-interval) into DIR/paired.md and DIR/paired.png. Every run logs grad_rel_error 10 times.
# Cost: a small model (emb 64, 2 layers, vocab 4096: 0.65 M parameters; seq 32, one sequence per microbatch) so
# that K=1024 fits: per seed and arm 300 steps at K=32, 60 at K=256 and 20 at K=1024 (9600 + 15360 + 20480
# microbatches), 26-28 + 38-42 + 52-56 CPU-seconds on the 2-core EPYC of docs/numerics.md: 3 arms x 5 seeds is
# about 30 CPU-minutes. Runs already finished are skipped, so the study can be stopped, re-run and grown.
#
# Usage: bench/grad_dtype_study.sh [--seeds N] [--ks "32 256 1024"] [--fp16] [--out DIR] [--data DIR]
#                                    [--jobs J] [key=value ...]
#   --seeds N   seeds 0..N-1 per arm and K (default 5)
#   --ks LIST   the Ks, from 32, 256 and 1024 (default all three; each has its own step count, see below)
#   --fp16      add the arm grad_dtype=float16
#   --out DIR   default runs/grad_dtype_study; DIR/kK/ holds the runs at K; DIR/paired.{md,tsv,png} compare every
#               K in DIR so far, and DIR/cpu.txt sums their CPU time
#   --data DIR  token files of scripts/prepare_data.sh (default data/kjv)
#   --jobs J    trainer runs at once, one thread each (default 2)
#   key=value   overrides for every run, after the study's own (e.g. steps=5 for a smoke test)
# Exit: 0 ok; 1 a run failed; 2 bad usage.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() {
  echo "grad_dtype_study.sh: $*" >&2
  exit 2
}
seeds=5 ks="32 256 1024" fp16=0 out=runs/grad_dtype_study data=data/kjv jobs=2 common=()
while (($#)); do
  case $1 in
  -h | --help) sed -n '/^# Usage:/,/^# Exit:/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" && exit 0 ;;
  --seeds | --ks | --out | --data | --jobs)
    (($# >= 2)) || die "$1 needs a value"
    case $1 in --seeds) seeds=$2 ;; --ks) ks=$2 ;; --out) out=$2 ;; --data) data=$2 ;; --jobs) jobs=$2 ;; esac
    shift
    ;;
  --fp16) fp16=1 ;;
  *=*) common+=("$1") ;;
  *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done
[[ $seeds =~ ^[0-9]+$ ]] && ((seeds >= 2)) || die "--seeds needs at least 2 (an interval needs a spread)"

# Steps per K: roughly equal work per run (K x steps microbatches), more tokens per step at larger K.
declare -A steps_at=([32]=300 [256]=60 [1024]=20)
arms=(--arm "fp32 grad_dtype=float32" --arm "bf16 grad_dtype=bfloat16"
      --arm "bf16sr grad_dtype=bfloat16 grad_accum_rounding=stochastic")
((fp16)) && arms+=(--arm "fp16 grad_dtype=float16")
# 0.65 M parameters, 87 % of them the 4096 x 64 embedding and output layer; bf16 compute, fp32 weights, AdamW.
model=(base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=2 head_dim=16 base_mlp_dim=256
       base_num_decoder_layers=2 max_target_length=32 per_device_batch_size=1 num_threads=1 log_period=10
       eval_steps=32 eval_per_device_batch_size=16 max_num_checkpoints_to_keep=1)

failed=0
for k in $ks; do
  [[ -n ${steps_at[$k]:-} ]] || die "K=$k has no step count here (choose from ${!steps_at[*]})"
  s=${steps_at[$k]} every=$((steps_at[$k] / 10))
  echo "== K=$k: $s steps, $seeds seeds"
  "$repo/bench/corpus_study.sh" --no-default-arms "${arms[@]}" --seeds "$seeds" --jobs "$jobs" --data "$data" \
    --out "$out/k$k" "${model[@]}" "gradient_accumulation_steps=$k" "steps=$s" "eval_interval=$every" \
    "grad_fidelity_period=$every" "checkpoint_period=$((s / 2))" "${common[@]}" || failed=1
done
# The comparison and the CPU time cover every K studied in DIR so far, not only this command's: the study can be
# grown one K or one seed count at a time.
dirs=()
for d in "$out"/k*/; do dirs+=("${d%/}"); done
python3 "$repo/bench/lib/paired_stats.py" --baseline fp32 --md "$out/paired.md" --tsv "$out/paired.tsv" \
  --plot "$out/paired.png" "${dirs[@]}" || failed=1
# The study's CPU time: every trainer run's user + system seconds.
for d in "${dirs[@]}"; do cat "$d"/*.cpu 2>/dev/null || true; done | awk '{ t += $1 + $2; n++ } END { printf "CPU time: %.0f s (%.1f min) over %d runs\n", t, t / 60, n }' |
  tee "$out/cpu.txt"
exit $failed
