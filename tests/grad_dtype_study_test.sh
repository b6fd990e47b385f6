#!/usr/bin/env bash
# Intent: end-to-end test of bench/grad_dtype_study.sh (and so of bench/corpus_study.sh --seeds) on a tiny model
# and a tiny corpus: two seeds of the fp32, bf16 and bf16sr arms must train with both seeds varied together, give
# a paired table with one row per arm, skip every finished run when re-run and a run another process is training,
# and a run trained again must repeat its losses bit for bit (same machine, same thread count).
# Cost: a 200-document text tokenized with a 32-piece SentencePiece model, then seven 3-step trainer runs of a
# 2-layer, 32-wide model: about 10 s of CPU on 2 cores.
#
# Usage: tests/grad_dtype_study_test.sh [BUILD_DIR]   (default <repo>/build; needs its trainer and tokenize)
# Exit: 0 pass; 1 fail (the study directory is kept and its path printed).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build}
export TRAINER=$build/trainer
[[ -x $TRAINER && -x $build/tokenize ]] || { echo "grad_dtype_study_test: no trainer/tokenize in $build" >&2 && exit 1; }

tmp=$(mktemp -d)
fail() {
  echo "grad_dtype_study_test: FAIL: $*" >&2
  echo "grad_dtype_study_test: files kept in $tmp" >&2
  exit 1
}

# A corpus of 200 short documents (blank-line separated) from a 12-word vocabulary, the same every time.
awk 'BEGIN { srand(7); split("in the beginning god created heaven and earth was without form void", w, " ")
             for (d = 0; d < 200; d++) { for (l = 0; l < 3; l++) { s = ""; for (i = 0; i < 9; i++) s = s w[int(rand() * 12) + 1] " "
                                                                 print s }
                                         print "" } }' >"$tmp/corpus.txt"
"$build/tokenize" "$tmp/corpus.txt" --out-dir "$tmp/data" --vocab-size 32 --val-fraction 0.1 >"$tmp/tokenize.log" 2>&1 ||
  fail "tokenize failed: $(tail -3 "$tmp/tokenize.log")"

study() {
  "$repo/bench/grad_dtype_study.sh" --seeds 2 --ks 32 --data "$tmp/data" --out "$tmp/study" --jobs 2 \
    base_emb_dim=32 base_num_query_heads=2 base_num_kv_heads=1 head_dim=16 base_mlp_dim=64 max_target_length=16 \
    gradient_accumulation_steps=4 steps=3 eval_interval=1 eval_steps=2 eval_per_device_batch_size=4 \
    grad_fidelity_period=1 checkpoint_period=2
}

echo "== the study, 2 seeds"
study >"$tmp/first.log" 2>&1 || fail "the study exited $? ($(tail -5 "$tmp/first.log"))"
cat "$tmp/first.log"
k=$tmp/study/k32
for arm in fp32 bf16 bf16sr; do
  for seed in 0 1; do
    run=$k/$arm-seed$seed
    [[ -f $run/summary.json ]] || fail "no $run/summary.json"
    # Both seeds vary together; the eval set does not depend on them.
    grep -q "^init_weights_seed: $seed$" "$run/config.yml" || fail "$run: init_weights_seed is not $seed"
    grep -q "^data_shuffle_seed: $seed$" "$run/config.yml" || fail "$run: data_shuffle_seed is not $seed"
  done
done
eval_losses() { grep -o '"eval_loss": [^,}]*' "$1/metrics.jsonl"; }
[[ $(eval_losses "$k/fp32-seed0") != "$(eval_losses "$k/fp32-seed1")" ]] || fail "seeds 0 and 1 gave the same eval_loss"
[[ $(grep -c '^| 4 | ' "$tmp/study/paired.md") == 2 ]] || fail "paired.md should have 2 rows at K=4: $(cat "$tmp/study/paired.md")"
grep -q '^| 4 | bf16sr | 2 |' "$tmp/study/paired.md" || fail "no bf16sr row over 2 seeds in paired.md"
[[ $(wc -l <"$tmp/study/paired.tsv") == 5 ]] || fail "paired.tsv should hold a header and 4 pairs"
! command -v gnuplot >/dev/null || [[ -s $tmp/study/paired.png ]] || fail "no paired.png although gnuplot is installed"
grep -q '^CPU time: [0-9]* s .* over 6 runs$' "$tmp/study/cpu.txt" || fail "cpu.txt: $(cat "$tmp/study/cpu.txt")"

echo "== re-run: every run skipped; then one run deleted and trained again: the same losses, bit for bit"
cp -r "$k/bf16sr-seed1" "$tmp/before"
rm -rf "$k/bf16sr-seed1"
# While another process holds the run's study lock, a second study leaves that run alone.
flock "$k/.bf16sr-seed1.lock" bash -c "$(declare -f study); repo=$repo tmp=$tmp; study" >"$tmp/locked.log" 2>&1 || true
grep -q '^\[bf16sr-seed1\] being trained by another process: skipped$' "$tmp/locked.log" ||
  fail "a locked run was not skipped: $(cat "$tmp/locked.log")"
[[ ! -e $k/bf16sr-seed1 ]] || fail "the locked run was trained"
study >"$tmp/second.log" 2>&1 || fail "the re-run exited $? ($(tail -5 "$tmp/second.log"))"
[[ $(grep -c 'finished earlier: skipped' "$tmp/second.log") == 5 ]] || fail "expected 5 skipped runs: $(cat "$tmp/second.log")"
[[ $(grep -c '\] training:' "$tmp/second.log") == 1 ]] || fail "expected exactly one run trained again"
fields() { grep -o '"\(loss\|grad_norm\|eval_loss\|grad_rel_error\)": [^,}]*' "$1/metrics.jsonl"; }
[[ -n $(fields "$tmp/before") ]] || fail "no losses in metrics.jsonl"
diff <(fields "$tmp/before") <(fields "$k/bf16sr-seed1") || fail "the re-trained run's losses differ from the first"
echo "grad_dtype_study_test: pass"
rm -rf "$tmp"
