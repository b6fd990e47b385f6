#!/usr/bin/env bash
# bench/batch_size_study.sh --study tokens (the default): the equal-tokens study. Its intent, cost and options are in
# bench/batch_size_study.sh's header; run it through that script.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
main=$repo/bench/batch_size_study.sh

die() {
  echo "batch_size_study.sh: $*" >&2
  exit 2
}
data=data/kjv1024 out=runs/batch_size_tokens seeds="0 1 2" jobs=4 phases="0 1 2" tokens=262144
batches="16 32 64 128" lr16=2.8e-3 small=16 large=128 ramp="" margins="2 4 8" spacing=50 niceness=15 report_only=0
middle_mults="2 4" mults="0.5 1 2 4"
common=()
while (($#)); do
  case $1 in
  -h | --help) sed -n '/^# Usage:/,/^# Exit:/s/^# \{0,1\}//p' "$main" && exit 0 ;;
  --study) shift ;;
  --data | --out | --seeds | --jobs | --phases | --tokens | --batches | --lr16 | --small | --large | --ramp | --margins | \
    --spacing | --nice | --middle-mults | --mults)
    (($# >= 2)) || die "$1 needs a value"
    case $1 in
    --data) data=$2 ;; --out) out=$2 ;; --seeds) seeds=$2 ;; --jobs) jobs=$2 ;; --phases) phases=$2 ;;
    --tokens) tokens=$2 ;; --batches) batches=$2 ;; --lr16) lr16=$2 ;; --small) small=$2 ;; --large) large=$2 ;;
    --ramp) ramp=$2 ;; --margins) margins=$2 ;; --spacing) spacing=$2 ;; --nice) niceness=$2 ;;
    --middle-mults) middle_mults=$2 ;; --mults) mults=$2 ;;
    esac
    shift
    ;;
  --report-only | --fit-only) report_only=1 ;;
  --candidates | --schedule | --target | --lr8) die "$1 belongs to --study frontier" ;;
  *=*) common+=("$1") ;;
  *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done
for B in $batches $small $large; do ((B % 8 == 0 && B >= 16)) || die "global batch $B is not a multiple of 8 of at least 16"; done
((large > small)) || die "--large ($large) must exceed --small ($small)"
has_phase() { [[ " $phases " == *" $1 "* ]]; }

seq_len=32
py=/usr/bin/python3
lib=$repo/bench/lib
mkdir -p "$out/phase0" "$out/phase1"
if ((report_only == 0)); then
  [[ -f $data/train.bin ]] || "$repo/scripts/prepare_data.sh" --out "$data" --vocab-size 1024
  vocab=$(wc -l <"$data/tokenizer.vocab")
  trainer=${TRAINER:-$repo/build/trainer}
  [[ -x $trainer ]] || "$repo/scripts/build.sh" trainer >&2
fi

# lr(B) = LR16 sqrt(B / 16) x MULT.
lr_of() { awk -v l="$lr16" -v b="$1" -v m="$2" 'BEGIN { printf "%.4g", l * sqrt(b / 16) * m }'; }
# The cap on steps (train_tokens ends every run first): the smallest batch's step count, and some.
cap_steps=$((tokens / (16 * seq_len) + 100))

# run_one DIR NAME SEED key=value...: one run of the study's setup, in DIR/NAME, logged to DIR/NAME.log; skipped when
# DIR/NAME.done exists. The trainer stops by itself at train_tokens, after a last evaluation.
run_one() {
  local dir=$1 name=$2 seed=$3 rc=0
  shift 3
  [[ -f $dir/$name.done ]] && return 0
  echo "$(date -u +%H:%M:%S) start $dir/$name: $*" >&2
  rm -rf "${dir:?}/$name"
  nice -n "$niceness" "$trainer" "$repo/configs/base.yml" base_output_directory="$dir" run_name="$name" \
    dataset_type=tokens dataset_path="$data/train.bin" eval_dataset_path="$data/val.bin" \
    tokenizer_path="$data/tokenizer.model" vocab_size="$vocab" \
    base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=4 head_dim=16 base_mlp_dim=256 \
    base_num_decoder_layers=2 max_target_length=$seq_len init_weights_seed="$seed" data_shuffle_seed="$seed" \
    dtype=float32 num_threads=1 per_device_batch_size=8 steps=$cap_steps train_tokens="$tokens" \
    lr_schedule_type=wsd wsd_decay_steps_fraction=0.2 wsd_decay_style=linear warmup_steps_fraction=0 \
    cosine_learning_rate_final_fraction=0 learning_rate_schedule_steps=-1 \
    eval_interval_sequences=8192 eval_steps=64 eval_per_device_batch_size=8 enable_checkpointing=false \
    log_period=100 gradient_noise_scale=true gns_ema_decay=0.95 "$@" "${common[@]}" >"$dir/$name.log" 2>&1 || rc=$?
  if ((rc == 3)); then  # stopped after max_consecutive_nonfinite steps: diverged, a result (phase 0 at 2 x LR)
    echo "batch_size_study.sh: run $dir/$name diverged (exit 3); scored as such" >&2
    touch "$dir/$name.diverged"
  elif ((rc != 0)); then
    echo "batch_size_study.sh: run $dir/$name failed (exit $rc); see $dir/$name.log" >&2
    return 1
  fi
  touch "$dir/$name.done"
  echo "$(date -u +%H:%M:%S) done $dir/$name" >&2
}
# A fixed batch B at LR x MULT.
fixed_args() { echo "global_batch_size=$1 learning_rate=$(lr_of "$1" "$2")"; }
# The ramp from --small, LR x MULT at --small, scaled by SCALING as the batch grows.
ramp_args() { echo "batch_size_schedule=$ramp learning_rate=$(lr_of "$small" "$2") batch_size_lr_scaling=$1"; }
# gns from --small with margin M; LR as the ramp's (SCALING, MULT).
gns_args() {
  echo "global_batch_size=$small batch_size_policy=gns gns_batch_margin=$1 gns_min_steps_between_changes=$spacing" \
    "global_batch_size_max=$large learning_rate=$(lr_of "$small" "$3") batch_size_lr_scaling=$2"
}

# --jobs runs at a time. queue DIR NAME SEED ARGS...
failed=0
queue() {
  [[ -f $1/$2.done ]] && return 0
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || failed=1; done
  run_one "$@" &
}
drain() {
  while (($(jobs -rp | wc -l) > 0)); do wait -n || failed=1; done
  ((failed == 0)) || exit 1
}

p0=$out/phase0
# Phase 0 of the fixed batches: --small (the ramp is derived from its noise scale) and --large first, which phase 1
# needs; the other batches of --batches (only phase 2's fixed points need them) after phase 1.
phase0_fixed() {
  local ms=$1
  shift
  for m in $ms; do
    for B in "$@"; do
      # shellcheck disable=SC2046
      queue "$p0" "b$B-x$m-seed0" 0 $(fixed_args "$B" "$m")
    done
  done
  drain
}
others=""
for B in $batches; do [[ $B == "$small" || $B == "$large" ]] || others+=" $B"; done
has_phase 0 && ((report_only == 0)) && phase0_fixed "$mults" "$small" "$large"
if [[ -z $ramp ]]; then
  if [[ -f $p0/b$small-x1-seed0.done ]]; then
    ramp=$($py "$lib/batch_tokens.py" ramp "$p0/b$small-x1-seed0" --small "$small" --large "$large" --seq-len $seq_len)
  elif has_phase 0 || has_phase 1; then
    echo "batch_size_study.sh: no ramp yet: phase 0's b$small-x1-seed0 has not run (or give --ramp)" >&2
    exit 1
  fi
fi
[[ -n $ramp ]] && echo "ramp: batch_size_schedule=$ramp" >&2
if has_phase 0 && ((report_only == 0)); then
  for scaling in sqrt none; do
    for m in $mults; do
      # shellcheck disable=SC2046
      queue "$p0" "ramp-$scaling-x$m-seed0" 0 $(ramp_args "$scaling" "$m")
    done
  done
  drain
fi

# Phase 0's choice for each arm (the LR multiplier, and the ramp's LR scaling): the lowest final eval loss.
if has_phase 0 || has_phase 1; then
  $py "$lib/batch_tokens.py" calibrate "$p0" --tsv "$out/phase0.tsv" --md "$out/phase0.md" >&2 || exit 1
fi
best() { awk -F'\t' -v a="$1" '$1 == a && $4 == "best" { print $2 }' "$out/phase0.tsv"; }
p1=$out/phase1
if has_phase 1 && ((report_only == 0)); then
  m_small=$(best "b$small") m_large=$(best "b$large") r=$(best ramp)
  r_scaling=${r%% *} r_m=${r##* }
  [[ -n $m_small && -n $m_large && -n $r ]] || die "phase 0 lacks the runs phase 1 needs (b$small, b$large, ramp)"
  echo "phase 1: small x$m_small, large x$m_large, ramp $r_scaling x$r_m" >&2
  for seed in $seeds; do
    # Seed 0 of the fixed and ramp arms is phase 0's run: link it rather than train it again.
    if ((seed == 0)); then
      for pair in "small:b$small-x$m_small" "large:b$large-x$m_large" "ramp:ramp-$r_scaling-x$r_m"; do
        arm=${pair%%:*} src=${pair#*:}
        if [[ -f $p0/$src-seed0.done && ! -e $p1/$arm-seed0 ]]; then
          ln -s "../phase0/$src-seed0" "$p1/$arm-seed0"
          touch "$p1/$arm-seed0.done"
        fi
      done
    fi
    # shellcheck disable=SC2046
    queue "$p1" "small-seed$seed" "$seed" $(fixed_args "$small" "$m_small")
    # shellcheck disable=SC2046
    queue "$p1" "large-seed$seed" "$seed" $(fixed_args "$large" "$m_large")
    # shellcheck disable=SC2046
    queue "$p1" "ramp-seed$seed" "$seed" $(ramp_args "$r_scaling" "$r_m")
    for margin in $margins; do
      # shellcheck disable=SC2046
      queue "$p1" "gns$margin-seed$seed" "$seed" $(gns_args "$margin" "$r_scaling" "$r_m")
    done
  done
  drain
fi

# shellcheck disable=SC2086
has_phase 0 && ((report_only == 0)) && [[ -n $others ]] && phase0_fixed "$middle_mults" $others
[[ -f $out/phase0.tsv ]] && $py "$lib/batch_tokens.py" calibrate "$p0" --tsv "$out/phase0.tsv" --md "$out/phase0.md" >/dev/null

# Reports: paired differences of the final held-out loss (against the small and the large batch), then phase 2.
{
  echo "# Batch-size study at equal tokens: $(date -u '+%Y-%m-%d %H:%M UTC'), $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
  echo
  echo "Every run: $tokens tokens ($((tokens / seq_len)) windows of $seq_len), lr_schedule_type=wsd (constant, then"
  echo "linear to 0 over the last 20 %, in tokens), lr(B) = $lr16 sqrt(B/16) x multiplier; ramp: $ramp."
  echo
  [[ -f $out/phase0.md ]] && { echo "## Phase 0: LR calibration (seed 0)"; echo; cat "$out/phase0.md"; echo; }
  if has_phase 1 && compgen -G "$p1/*-seed*" >/dev/null; then
    echo "## Phase 1: paired by seed"
    echo
    $py "$lib/batch_tokens.py" steps "$p1"
    echo
    echo "Final eval_loss, arm minus small (seed by seed):"
    echo
    $py "$lib/paired_stats.py" --pool-k --baseline small "$p1" || true
    echo
    echo "Final eval_loss, arm minus large:"
    echo
    $py "$lib/paired_stats.py" --pool-k --baseline large "$p1" || true
    echo
  fi
  if has_phase 2 && compgen -G "$p1/*-seed*" >/dev/null; then
    echo "## Phase 2: against the fixed-batch points and the noise-scale ceiling"
    echo
    $py "$lib/batch_tokens.py" frontier "$p0" "$p1" --small "$small" --seq-len $seq_len || true
  fi
} >"$out/results.md"
cat "$out/results.md"
