#!/usr/bin/env bash
# Intent: measure the critical batch size on real text and compare it with the online gradient noise scale
# (docs/batch-size.md). Trains a small model on the KJV token files of scripts/prepare_data.sh (vocab 1024) at global
# batches of 8..512 sequences (per_device_batch_size=8, K = 1..64), each until a fixed eval loss is reached (then it is
# stopped; or its step budget runs out), with the LR rule lr(B) = LR8 * sqrt(B / 8) capped at 1e-2, constant (no warmup, no decay). Then fits
# McCandlish's (S/S_min - 1)(E/E_min - 1) = 1 to steps S and examples E to the target, giving B_crit = E_min/S_min,
# and sets it beside the runs' gns_tokens (divided by the sequence length: B_simple in sequences).
# Cost: measured 2026-12-01 on the project's 2-core AMD EPYC, shared (load average ~22): 1 core-minute of CPU in all
# (59 s user+sys for the 7 runs), 16 min of wall time (5 min for B = 8..256, two runs at a time, then 11 min for
# B = 512, whose evaluation runs every step); one thread per run, under nice -n 10. Finished runs are skipped.
#
# Usage: scripts/batch_size_study.sh [--data DIR] [--out DIR] [--batches "8 16 ..."] [--target LOSS] [--lr8 LR]
#                                   [--jobs N] [--fit-only] [key=value ...]
#   --data DIR      token files from scripts/prepare_data.sh --vocab-size 1024 (default data/kjv1024; made if missing)
#   --out DIR       where the runs, results.md and the plots go (default runs/batch_size_study)
#   --batches LIST  global batches in sequences, each 8 x K (default "8 16 32 64 128 256 512")
#   --target LOSS   the eval loss every run must reach (default 4.0)
#   --lr8 LR        learning rate at 8 sequences (default 2e-3)
#   --jobs N        runs at a time, one thread each (default 2)
#   --fit-only      do not train; refit and replot the runs in --out
#   key=value       overrides for every run (after the study's own settings)
# Run time: about 1 core-minute of CPU; 16 min of wall time, measured on the busy shared 2-core machine.
# Writes DIR/results.md, DIR/results.tsv, DIR/steps_vs_examples.png and DIR/gns.png.
# Exit: 0 ok; 1 a run failed or the fit had too few points; 2 bad usage.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() {
  echo "batch_size_study.sh: $*" >&2
  exit 2
}
data=data/kjv1024 out=runs/batch_size_study batches="8 16 32 64 128 256 512" target=4.0 lr8=2e-3 fit_only=0 jobs=2
common=()
while (($#)); do
  case $1 in
  -h | --help) sed -n '/^# Usage:/,/^# Exit:/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" && exit 0 ;;
  --data | --out | --batches | --target | --lr8 | --jobs)
    (($# >= 2)) || die "$1 needs a value"
    case $1 in
    --data) data=$2 ;; --out) out=$2 ;; --batches) batches=$2 ;; --target) target=$2 ;; --lr8) lr8=$2 ;; --jobs) jobs=$2 ;;
    esac
    shift
    ;;
  --fit-only) fit_only=1 ;;
  *=*) common+=("$1") ;;
  *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done

[[ -f $data/train.bin ]] || "$repo/scripts/prepare_data.sh" --out "$data" --vocab-size 1024
vocab=$(wc -l <"$data/tokenizer.vocab")
trainer=${TRAINER:-$repo/build/trainer}
[[ -x $trainer ]] || "$repo/scripts/build.sh" trainer >&2
seq_len=32
mkdir -p "$out"

# The scaled-down setup (docs/batch-size.md says why): 2 layers, width 64, 32-token windows, vocab 1024, bf16
# compute, one thread. Evaluation on the same 128 validation windows of 32 tokens for every run, every 512 training
# sequences (at least every step), so steps-to-target is read at a comparable resolution in examples.
# One run, stopped (SIGTERM: the trainer finishes its step and exits 143) at its first evaluation at or below the
# target; $out/$name.done marks a finished run, so a re-run skips it.
reached() { grep -o '"eval_loss": [0-9.eE+-]*' "$1" 2>/dev/null | awk -v t="$target" '$2 + 0 <= t { f = 1 } END { exit !f }'; }
run_one() {
  local B=$1 K=$(($1 / 8)) name=b$1 lr steps every pid rc=0
  lr=$(awk -v l="$lr8" -v b="$B" 'BEGIN { x = l * sqrt(b / 8); printf "%.4g", (x > 1e-2 ? 1e-2 : x) }')
  # Step budget: 40000 sequences (1.3M tokens), at least 100 steps; evaluation every 512 sequences.
  steps=$(awk -v b="$B" 'BEGIN { s = int(40000 / b); print (s < 100 ? 100 : s) }')
  every=$(awk -v b="$B" 'BEGIN { e = int(512 / b); print (e < 1 ? 1 : e) }')
  echo "batch $B: K=$K lr=$lr at most $steps steps, eval every $every steps" >&2
  rm -rf "${out:?}/$name" "$out/$name.done"
  nice -n 10 "$trainer" "$repo/configs/base.yml" base_output_directory="$out" run_name="$name" \
    dataset_type=tokens dataset_path="$data/train.bin" eval_dataset_path="$data/val.bin" \
    tokenizer_path="$data/tokenizer.model" vocab_size="$vocab" \
    base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=4 head_dim=16 base_mlp_dim=256 \
    base_num_decoder_layers=2 max_target_length=$seq_len per_device_batch_size=8 gradient_accumulation_steps=$K \
    dtype=bfloat16 num_threads=1 steps="$steps" learning_rate="$lr" learning_rate_schedule_steps=100000 \
    warmup_steps_fraction=0 cosine_learning_rate_final_fraction=1 eval_interval="$every" eval_steps=16 \
    eval_per_device_batch_size=8 enable_checkpointing=false log_period=50 gradient_noise_scale=true \
    gns_ema_decay=0.95 "${common[@]}" >"$out/$name.log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 2
    if reached "$out/$name/metrics.jsonl"; then kill -TERM "$pid" 2>/dev/null || true; fi
  done
  wait "$pid" || rc=$?
  if ((rc != 0 && rc != 143)); then
    echo "batch_size_study.sh: run $name failed (exit $rc); see $out/$name.log" >&2
    return 1
  fi
  reached "$out/$name/metrics.jsonl" || echo "batch_size_study.sh: run $name did not reach $target in $steps steps" >&2
  touch "$out/$name.done"
}

# --jobs N runs at a time (each one thread).
if ((fit_only == 0)); then
  failed=0
  for B in $batches; do
    ((B % 8 == 0)) || die "global batch $B is not a multiple of 8 (per_device_batch_size)"
    [[ -f $out/b$B.done ]] && continue
    while (($(jobs -rp | wc -l) >= jobs)); do wait -n || failed=1; done
    run_one "$B" &
  done
  while (($(jobs -rp | wc -l) > 0)); do wait -n || failed=1; done
  ((failed == 0)) || exit 1
fi

# Steps to the target: the first evaluation at or below it, linearly interpolated with the evaluation before.
# gns: gns_tokens at the step the target is reached, and its median over steps 21..target (the EMA has settled after
# ~20 steps), also in sequences (divided by the window length).
results=$out/results.tsv
printf "batch\tK\tsteps_to_target\texamples_to_target\tgns_tokens_median\tgns_seq_median\tgns_tokens_at_target\tgns_seq_at_target\ttrain_s\n" >"$results"
for B in $batches; do
  m=$out/b$B/metrics.jsonl
  [[ -f $m ]] || continue
  awk -v B="$B" -v target="$target" -v L="$seq_len" '
    function field(name,   re, s) {
      re = "\"" name "\": [^,}]*"
      if (!match($0, re)) return ""
      s = substr($0, RSTART, RLENGTH); sub(/^[^:]*: /, "", s); return s
    }
    {
      step = field("step"); t += field("step_time_s")
      g = field("gns_tokens"); if (g != "" && g != "null" && !hit) { last_g = g + 0; if (step > 20) gns[++n] = g + 0 }
      e = field("eval_loss")
      if (e == "" || hit) next
      if (e + 0 <= target) {
        s = (prev_step == "" ? step : prev_step + (step - prev_step) * (prev_e - target) / (prev_e - e))
        hit = 1; hit_t = t
      }
      prev_step = step; prev_e = e + 0
    }
    END {
      if (!hit) { s = "NA"; hit_t = t }
      med = "NA"
      if (n > 0) {  # insertion sort (mawk has no asort)
        for (i = 2; i <= n; i++) { v = gns[i]; for (j = i - 1; j >= 1 && gns[j] > v; j--) gns[j + 1] = gns[j]; gns[j + 1] = v }
        med = (n % 2 ? gns[(n + 1) / 2] : (gns[n / 2] + gns[n / 2 + 1]) / 2)
      }
      at = (hit && last_g != "" ? last_g : "NA")
      printf "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\n", B, B / 8, s, (s == "NA" ? "NA" : s * B), med,
             (med == "NA" ? "NA" : med / L), at, (at == "NA" ? "NA" : at / L), hit_t
    }' "$m" >>"$results"
done
cat "$results" >&2

# Fit (S/S_min - 1)(E/E_min - 1) = 1, i.e. S = S_min (1 + B_crit / B) with E = B S: a least-squares line of S against
# 1/B (S = S_min + E_min * (1/B)), then B_crit = E_min / S_min.
fit=$(awk -F'\t' 'NR > 1 && $3 != "NA" { n++; x = 1 / $1; y = $3; sx += x; sy += y; sxx += x * x; sxy += x * y }
  END {
    if (n < 3) { print "NA NA NA"; exit }
    b = (n * sxy - sx * sy) / (n * sxx - sx * sx); a = (sy - b * sx) / n
    printf "%.4g %.4g %.4g\n", a, b, (a > 0 ? b / a : "NA")
  }' "$results")
read -r s_min e_min b_crit <<<"$fit"
gns_all=$(awk -F'\t' 'NR > 1 && $8 != "NA" { printf "%s%s", (n++ ? ", " : ""), $8 }' "$results")
{
  echo "# Batch-size study: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Target eval loss $target; lr(B) = $lr8 * sqrt(B/8); sequences of $seq_len tokens."
  echo
  echo "| global batch (seq) | K | steps to target | examples to target | B_simple at target (seq) | B_simple median (seq) | train s |"
  echo "|---|---|---|---|---|---|---|"
  awk -F'\t' 'NR > 1 { printf "| %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $8, $6, $9 }' "$results"
  echo
  echo "Fit S = S_min (1 + B_crit/B): S_min = $s_min steps, E_min = $e_min sequences, **B_crit = $b_crit sequences**"
  echo "($(awk -v b="$b_crit" -v L="$seq_len" 'BEGIN { if (b == "NA") print "NA"; else printf "%.0f", b * L }') tokens)."
  echo "Online B_simple (gns_tokens / $seq_len) when each run reached the target, in sequences: $gns_all."
} >"$out/results.md"
cat "$out/results.md"

# Plots: steps against examples to the target (with the fitted hyperbola), and gns_tokens against step per run.
if command -v gnuplot >/dev/null; then
  awk -F'\t' 'NR > 1 && $3 != "NA" { print $4, $3, $1 }' "$results" >"$out/se.dat"
  gnuplot <<EOF
set terminal pngcairo noenhanced size 900,600
set output '$out/steps_vs_examples.png'
set title 'steps vs examples to eval loss $target (labels: global batch in sequences); B_crit = $b_crit'
set xlabel 'examples (sequences) to target'
set ylabel 'optimizer steps to target'
set logscale xy
set grid
Smin = $s_min
Emin = $e_min
f(E) = (E > Emin ? Smin * (1 + 1 / (E / Emin - 1)) : 1/0)
set samples 400
plot '$out/se.dat' using 1:2 with points pt 7 ps 1.5 title 'runs', \
     '' using 1:2:3 with labels offset 1.5,0.8 notitle, \
     f(x) with lines lw 2 title '(S/S_min - 1)(E/E_min - 1) = 1'
EOF
  plots=""
  for B in $batches; do
    m=$out/b$B/metrics.jsonl
    [[ -f $m ]] || continue
    awk -v L="$seq_len" -v B="$B" '{ if (match($0, /"gns_tokens": [^,}]*/)) { v = substr($0, RSTART + 14, RLENGTH - 14);
      match($0, /"step": [0-9]+/); s = substr($0, RSTART + 8, RLENGTH - 8); if (v != "null") print s * B, v / L } }' \
      "$m" >"$out/gns_b$B.dat"
    [[ -s $out/gns_b$B.dat ]] && plots+="'$out/gns_b$B.dat' using 1:2 with lines lw 2 title 'B=$B', "
  done
  if [[ -n $plots ]]; then
    gnuplot <<EOF
set terminal pngcairo noenhanced size 900,600
set output '$out/gns.png'
set title 'online B_simple (gns_tokens / $seq_len, EMA) per run; dashed: B_crit from the fit'
set xlabel 'training sequences seen'
set ylabel 'B_simple (sequences)'
set logscale xy
set grid
set key below
plot ${plots} ($b_crit == $b_crit ? $b_crit : 1/0) with lines dt 2 lw 2 title 'B_crit'
EOF
  fi
  echo "wrote $out/steps_vs_examples.png $out/gns.png" >&2
fi
[[ $b_crit != NA ]] || exit 1
