#!/usr/bin/env bash
# Intent: does a global batch that grows during the run pay, on real text, measured the way its advocates claim it
# works (docs/batch-size.md)? Two studies on the KJV token files of scripts/prepare_data.sh (vocab 1024), same small
# model (2 layers, width 64, 32-token windows, about 200 k parameters, fp32 compute, one thread a run):
#
# --study tokens (the default): Merrill et al. 2025's bar, at equal tokens. Every run trains --tokens tokens
#   (train_tokens; 0.26 M by default, a fifth of an epoch) with a constant LR then a linear decay to 0 over the last 20 %
#   (lr_schedule_type=wsd, measured in tokens, so a growing batch decays at the same point in data), and is scored by
#   its final held-out loss (512 validation windows).
#   - phase 0, LR calibration (one seed): LR x {0.5, 1, 2, 4} of lr(B) = LR16 sqrt(B/16) for --small, --large and the
#     ramp (batch_size_lr_scaling sqrt and none), x {2, 4} for the other batches of --batches;
#   - phase 1 (--seeds, paired by seed): fixed --small, fixed --large, the ramp between them, and
#     batch_size_policy=gns from --small with margins --margins and >= --spacing steps between changes; each at the LR
#     phase 0 found best (gns: the ramp's); bench/lib/paired_stats.py compares the final held-out losses;
#   - phase 2: every candidate against the fixed-batch points (final loss against steps) and against the ceiling
#     computed from the small batch's measured noise-scale trajectory (bench/lib/batch_tokens.py).
#   The ramp (--ramp; by default derived from phase 0's --small run): doubles from --small when that run's measured
#   B_simple passed the batch, up to --large.
# --study frontier: the earlier study (2026-12-02): steps and examples to a target eval loss for fixed batches 8..512
#   and two growing candidates, bf16, LR rule lr(B) = LR8 sqrt(B/8) capped at 1e-2, constant; fits McCandlish's
#   S = S_min + E_min/B (bench/lib/batch_frontier.py). Its options are listed under "frontier" below.
# Cost: --study tokens, default arguments: 20 phase-0 runs and 15 in phase 1 (3 seeds; seed 0 reuses phase 0), each
# 262 144 tokens and about 20 s of CPU (fp32, one thread, AMD EPYC): about 12 CPU-minutes, under 10 minutes on a
# quiet 2-core machine. Measured 2026-12-03 on a 2-core AMD EPYC shared with two helpers compiling C++: 37 runs (the
# default ones, and x8 for the batch of 16 and the sqrt ramp) in 55 minutes, 4-8 runs at a time under nice -n 15,
# 5-8 minutes each. --study frontier: 27 runs, 9 min 10 s on a quiet 2-core Xeon. Finished runs are skipped (one
# directory per run; DIR/RUN.done marks it finished).
#
# Usage: bench/batch_size_study.sh [--study tokens|frontier] [--data DIR] [--out DIR] [--seeds "0 1 2"] [--jobs N]
#                                   [--report-only] [key=value ...]
#   tokens:   [--phases "0 1 2"] [--tokens N] [--batches "16 32 64 128"] [--lr16 LR] [--mults L] [--middle-mults L]
#             [--small B] [--large B] [--ramp SCHEDULE] [--margins "2 4 8"] [--spacing N] [--nice N]
#   frontier: [--batches "8 ... 512"] [--candidates "sched gns"] [--schedule S] [--target LOSS] [--lr8 LR] [--fit-only]
#   --study S         tokens (default) or frontier
#   --data DIR        token files from scripts/prepare_data.sh --vocab-size 1024 (default data/kjv1024; made if missing)
#   --out DIR         where the runs and results go (default runs/batch_size_tokens, or runs/batch_size_study)
#   --seeds LIST      seeds (init_weights_seed = data_shuffle_seed) of phase 1 / of every frontier arm (default "0 1 2")
#   --jobs N          runs at a time, one thread each (default 4 for tokens: at nice 15 on a busy machine each run gets
#                     a small share, so more of them get more done; 2 for frontier)
#   --phases LIST     which phases to run or report (default "0 1 2"; phase 1 needs phase 0's runs, 2 needs 0 and 1)
#   --tokens N        tokens every run trains (default 262144 = 8192 windows of 32, 22 % of an epoch)
#   --batches LIST    fixed global batches of phase 0, in sequences, multiples of 8 (default "16 32 64 128")
#   --lr16 LR         lr(16) of the rule lr(B) = LR16 sqrt(B/16) that phase 0 scales by --mults (default 2.8e-3)
#   --mults L         phase 0's LR multipliers for --small, --large and the ramp (default "0.5 1 2 4"; when the
#                     best is at the edge, a run with e.g. --phases 0 --mults 8 --middle-mults "" adds those runs)
#   --middle-mults L  the LR multipliers phase 0 tries for the batches of --batches other than --small and --large,
#                     which only phase 2's fixed points use (default "2 4", where the ends' best LRs lie)
#   --small B, --large B  phase 1's fixed batches and the ramp's ends (default 16 and 128)
#   --ramp S          the ramp's batch_size_schedule (default: derived from phase 0's --small run, see above)
#   --margins LIST    gns_batch_margin values of phase 1's gns arms (default "2 4 8")
#   --spacing N       their gns_min_steps_between_changes (default 50)
#   --nice N          niceness of every run (default 15: the machine is shared)
#   --report-only     do not train; report the runs in --out
#   --fit-only        (frontier) the same as --report-only
#   key=value         overrides for every run (after the study's own settings)
# Writes (tokens) DIR/results.md (every table), DIR/phase0.tsv and DIR/phase0.md; (frontier) DIR/results.md,
# DIR/results.tsv, DIR/frontier.md and the plots.
# Exit: 0 ok; 1 a run failed or a phase lacks the runs it needs; 2 bad usage.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
study=tokens
for ((i = 1; i <= $#; i++)); do
  if [[ ${!i} == --study ]]; then
    j=$((i + 1))
    study=${!j:-}
  fi
done
case $study in
tokens) exec "$repo/bench/lib/batch_tokens_study.sh" "$@" ;;
frontier) ;;
*)
  echo "batch_size_study.sh: --study must be tokens or frontier, not '$study'" >&2
  exit 2
  ;;
esac

die() {
  echo "batch_size_study.sh: $*" >&2
  exit 2
}
data=data/kjv1024 out=runs/batch_size_study batches="8 16 32 64 128 256 512" target=4.0 lr8=2e-3 fit_only=0 jobs=2
seeds="0 1 2" candidates="sched gns" schedule=0:8,16k:16,25.6k:32,38.4k:64,64k:128,96k:256
common=()
while (($#)); do
  case $1 in
  -h | --help) sed -n '/^# Usage:/,/^# Exit:/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" && exit 0 ;;
  --study) shift ;;
  --report-only) fit_only=1 ;;
  --data | --out | --batches | --target | --lr8 | --jobs | --seeds | --candidates | --schedule)
    (($# >= 2)) || die "$1 needs a value"
    case $1 in
    --data) data=$2 ;; --out) out=$2 ;; --batches) batches=$2 ;; --target) target=$2 ;; --lr8) lr8=$2 ;; --jobs) jobs=$2 ;;
    --seeds) seeds=$2 ;; --candidates) candidates=$2 ;; --schedule) schedule=$2 ;;
    esac
    shift
    ;;
  --fit-only) fit_only=1 ;;
  *=*) common+=("$1") ;;
  *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done

if ((fit_only == 0)); then
  [[ -f $data/train.bin ]] || "$repo/scripts/prepare_data.sh" --out "$data" --vocab-size 1024
  vocab=$(wc -l <"$data/tokenizer.vocab")
  trainer=${TRAINER:-$repo/build/trainer}
  [[ -x $trainer ]] || "$repo/scripts/build.sh" trainer >&2
fi
seq_len=32
mkdir -p "$out"

for c in $candidates; do [[ $c == sched || $c == gns ]] || die "unknown candidate $c (sched or gns)"; done

# The scaled-down setup (docs/batch-size.md says why): 2 layers, width 64, 32-token windows, vocab 1024, bf16
# compute, one thread. Evaluation on the same 128 validation windows of 32 tokens for every run, every 512 training
# sequences (eval_interval_sequences: the same points in data whatever the batch, which may change).
# One run, stopped (SIGTERM: the trainer finishes its step and exits 143) at its first evaluation at or below the
# target; $out/$name.done marks a finished run, so a re-run skips it.
reached() { grep -o '"eval_loss": [0-9.eE+-]*' "$1" 2>/dev/null | awk -v t="$target" '$2 + 0 <= t { f = 1 } END { exit !f }'; }
# Every run's budget: 40000 sequences (1.3M tokens, about one epoch), whatever its batch does.
spent() { tail -1 "$1" 2>/dev/null | grep -o '"tokens_seen": [0-9]*' | awk -v L="$seq_len" '$2 / L >= 40000 { f = 1 } END { exit !f }'; }
# run_one NAME SEED key=value...: the arm's own keys after the common ones.
run_one() {
  local name=$1 seed=$2 pid rc=0
  shift 2
  echo "$name: $*" >&2
  rm -rf "${out:?}/$name" "$out/$name.done"
  nice -n 10 "$trainer" "$repo/configs/base.yml" base_output_directory="$out" run_name="$name" \
    dataset_type=tokens dataset_path="$data/train.bin" eval_dataset_path="$data/val.bin" \
    tokenizer_path="$data/tokenizer.model" vocab_size="$vocab" \
    base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=4 head_dim=16 base_mlp_dim=256 \
    base_num_decoder_layers=2 max_target_length=$seq_len init_weights_seed="$seed" data_shuffle_seed="$seed" \
    dtype=bfloat16 num_threads=1 learning_rate_schedule_steps=100000 \
    warmup_steps_fraction=0 cosine_learning_rate_final_fraction=1 eval_interval_sequences=512 eval_steps=16 \
    eval_per_device_batch_size=8 enable_checkpointing=false log_period=50 gradient_noise_scale=true \
    gns_ema_decay=0.95 "$@" "${common[@]}" >"$out/$name.log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if reached "$out/$name/metrics.jsonl" || spent "$out/$name/metrics.jsonl"; then kill -TERM "$pid" 2>/dev/null || true; fi
  done
  wait "$pid" || rc=$?
  if ((rc != 0 && rc != 143)); then
    echo "batch_size_study.sh: run $name failed (exit $rc); see $out/$name.log" >&2
    return 1
  fi
  reached "$out/$name/metrics.jsonl" || echo "batch_size_study.sh: run $name did not reach $target in 40000 sequences" >&2
  touch "$out/$name.done"
}
# A fixed batch B: K = B / 8, lr(B) = LR8 sqrt(B / 8) capped at 1e-2, at most 40000 sequences (at least 100 steps).
run_fixed() {
  local B=$1 seed=$2 lr steps
  lr=$(awk -v l="$lr8" -v b="$B" 'BEGIN { x = l * sqrt(b / 8); printf "%.4g", (x > 1e-2 ? 1e-2 : x) }')
  steps=$(awk -v b="$B" 'BEGIN { s = int(40000 / b); print (s < 100 ? 100 : s) }')
  run_one "b$B-s$seed" "$seed" per_device_batch_size=8 gradient_accumulation_steps=$((B / 8)) steps="$steps" \
    learning_rate="$lr"
}
# A candidate: the LR rule through batch_size_lr_scaling=sqrt from LR8 at 8 sequences, capped at 1e-2.
run_candidate() {
  local arm=$1 seed=$2 grow=(learning_rate="$lr8" batch_size_lr_scaling=sqrt batch_size_lr_max=1e-2 steps=5000)
  # steps=5000 is never reached: the run stops at the target or after 40000 sequences (spent).
  case $arm in
  sched) run_one "sched-s$seed" "$seed" per_device_batch_size=8 batch_size_schedule="$schedule" "${grow[@]}" ;;
  gns) run_one "gns-s$seed" "$seed" per_device_batch_size=4 global_batch_size=8 batch_size_policy=gns \
    global_batch_size_max=256 "${grow[@]}" ;;
  esac
}

# --jobs N runs at a time (each one thread); the first seed of every arm before the second.
if ((fit_only == 0)); then
  failed=0
  for seed in $seeds; do
    for arm in $batches $candidates; do
      if [[ $arm =~ ^[0-9]+$ ]]; then
        ((arm % 8 == 0)) || die "global batch $arm is not a multiple of 8 (per_device_batch_size)"
        name=b$arm-s$seed
      else
        name=$arm-s$seed
      fi
      [[ -f $out/$name.done ]] && continue
      while (($(jobs -rp | wc -l) >= jobs)); do wait -n || failed=1; done
      if [[ $arm =~ ^[0-9]+$ ]]; then run_fixed "$arm" "$seed" & else run_candidate "$arm" "$seed" & fi
    done
  done
  while (($(jobs -rp | wc -l) > 0)); do wait -n || failed=1; done
  ((failed == 0)) || exit 1
fi

# Steps to the target: the first evaluation at or below it, linearly interpolated with the evaluation before (in
# steps; examples likewise in tokens_seen / 32, exact when the batch changes between the two).
# gns: gns_tokens at the step the target is reached, and its median over steps 21..target (the EMA has settled after
# ~20 steps), also in sequences (divided by the window length).
results=$out/results.tsv
printf "arm\tbatch\tseed\tsteps_to_target\texamples_to_target\tgns_tokens_median\tgns_seq_median\tgns_tokens_at_target\tgns_seq_at_target\ttrain_s\tfinal_batch\n" >"$results"
for seed in $seeds; do
  for arm in $batches $candidates; do
    if [[ $arm =~ ^[0-9]+$ ]]; then name=b$arm-s$seed B=$arm label=b$arm; else name=$arm-s$seed B=0 label=$arm; fi
    m=$out/$name/metrics.jsonl
    [[ -f $m ]] || continue
    awk -v arm="$label" -v B="$B" -v seed="$seed" -v target="$target" -v L="$seq_len" '
      function field(name,   re, s) {
        re = "\"" name "\": [^,}]*"
        if (!match($0, re)) return ""
        s = substr($0, RSTART, RLENGTH); sub(/^[^:]*: /, "", s); return s
      }
      {
        step = field("step"); t += field("step_time_s"); seen = field("tokens_seen") / L
        if (!hit) batch = field("global_batch_size")
        g = field("gns_tokens"); if (g != "" && g != "null" && !hit) { last_g = g + 0; if (step > 20) gns[++n] = g + 0 }
        e = field("eval_loss")
        if (e == "" || hit) next
        if (e + 0 <= target) {
          f = (prev_step == "" ? 1 : (prev_e - target) / (prev_e - e))
          s = (prev_step == "" ? step : prev_step + (step - prev_step) * f)
          x = (prev_step == "" ? seen : prev_seen + (seen - prev_seen) * f)
          hit = 1; hit_t = t
        }
        prev_step = step; prev_e = e + 0; prev_seen = seen
      }
      END {
        if (!hit) { s = "NA"; x = "NA"; hit_t = t }
        med = "NA"
        if (n > 0) {  # insertion sort (mawk has no asort)
          for (i = 2; i <= n; i++) { v = gns[i]; for (j = i - 1; j >= 1 && gns[j] > v; j--) gns[j + 1] = gns[j]; gns[j + 1] = v }
          med = (n % 2 ? gns[(n + 1) / 2] : (gns[n / 2] + gns[n / 2 + 1]) / 2)
        }
        at = (hit && last_g != "" ? last_g : "NA")
        printf "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\n", arm, B, seed, s, x, med,
               (med == "NA" ? "NA" : med / L), at, (at == "NA" ? "NA" : at / L), hit_t, batch
      }' "$m" >>"$results"
  done
done
cat "$results" >&2

# The frontier and the candidates against it, with intervals (bench/lib/batch_frontier.py).
frontier_rc=0
/usr/bin/python3 "$repo/bench/lib/batch_frontier.py" "$results" --md "$out/frontier.md" --plot-data "$out/plot" ||
  frontier_rc=$?
read -r s_min e_min <"$out/plot/frontier.dat" 2>/dev/null || { s_min=NA e_min=NA; }
b_crit=$(awk -v s="$s_min" -v e="$e_min" 'BEGIN { if (s == "NA" || s <= 0) print "NA"; else printf "%.4g", e / s }')
{
  echo "# Batch-size study: $(date -u '+%Y-%m-%d %H:%M UTC'), $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
  echo
  echo "Target eval loss $target; lr(B) = $lr8 * sqrt(B/8) capped at 1e-2; sequences of $seq_len tokens; seeds $seeds."
  echo "Candidates: sched = batch_size_schedule=$schedule; gns = batch_size_policy=gns from 8 to 256 sequences."
  echo
  echo "| arm | seed | steps to target | examples to target | batch at target | B_simple at target (seq) | B_simple median (seq) | train s |"
  echo "|---|---|---|---|---|---|---|---|"
  awk -F'\t' 'NR > 1 { printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $3, $4, $5, $11, $9, $7, $10 }' "$results"
  echo
  cat "$out/frontier.md" 2>/dev/null
} >"$out/results.md"
cat "$out/results.md"

# Plots: steps against examples to the target (every seed; the fitted hyperbola; the candidates), and gns_tokens
# against sequences seen for the first seed of every arm.
if command -v gnuplot >/dev/null && [[ -f $out/plot/baselines.dat ]]; then
  cand_plots="" pt=5
  for c in $candidates; do
    [[ -s $out/plot/$c.dat ]] || continue
    cand_plots+=", '$out/plot/$c.dat' using 1:2 with points pt $pt ps 2 lw 2 title '$c (per seed)'"
    pt=$((pt + 4))
  done
  gnuplot <<EOF
set terminal pngcairo noenhanced size 900,600
set output '$out/steps_vs_examples.png'
set title 'steps vs examples to eval loss $target (labels: fixed global batch); B_crit = $b_crit'
set xlabel 'examples (sequences) to target'
set ylabel 'optimizer steps to target'
set logscale xy
set grid
set key below
Smin = $s_min
Emin = $e_min
f(E) = (E > Emin ? Smin * (1 + 1 / (E / Emin - 1)) : 1/0)
set samples 400
plot '$out/plot/baselines.dat' using 1:2 with points pt 7 ps 1.2 title 'fixed batch (per seed)', \
     '$out/plot/labels.dat' using 1:2:(sprintf('%d', \$3)) with labels offset 2,0.8 notitle, \
     f(x) with lines lw 2 title '(S/S_min - 1)(E/E_min - 1) = 1'${cand_plots}
EOF
  plots=""
  first=${seeds%% *}
  for arm in $batches $candidates; do
    if [[ $arm =~ ^[0-9]+$ ]]; then name=b$arm-s$first; else name=$arm-s$first; fi
    m=$out/$name/metrics.jsonl
    [[ -f $m ]] || continue
    awk -v L="$seq_len" '{ if (match($0, /"gns_tokens": [^,}]*/)) { v = substr($0, RSTART + 14, RLENGTH - 14);
      match($0, /"tokens_seen": [0-9]+/); s = substr($0, RSTART + 15, RLENGTH - 15); if (v != "null") print s / L, v / L } }' \
      "$m" >"$out/gns_$name.dat"
    [[ -s $out/gns_$name.dat ]] && plots+="'$out/gns_$name.dat' using 1:2 with lines lw 2 title '$name', "
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
((frontier_rc == 0)) && [[ $b_crit != NA ]] || exit 1
