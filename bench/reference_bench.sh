#!/usr/bin/env bash
# Intent: what the preference reference pass costs (docs/preference.md, "The reference").
#   1. pairs/s of the pass against a training step's forward at the same microbatch: build/reference_bench on random
#      pairs (64 pairs of 16 + 24 + 24 tokens, microbatches of 4, packed) at a small shape (emb 256, 4 layers, vocab
#      4096, fp32), ROUNDS times;
#   2. the start-up fingerprint of the starting weights at the TinyLlama-1.1B shape (emb 2048, 22 layers, 32 heads / 4
#      kv, MLP 5632, vocab 32000; fp32, 4.4 GB), 3 times, with the earlier byte-by-byte FNV-1a once.
# Cost: part 1 ~10 s a round on 2 cores; part 2 ~1 min (building the 1.1 B model's random weights is most of it) and
# 4.4 GB of memory.
#
# Usage: bench/reference_bench.sh [--rounds N] [--skip-1b] [key=value ...]   (the keys go to part 1's model)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bench=$repo/build/reference_bench
rounds=3 skip_1b=0 overrides=()
while (($#)); do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --skip-1b) skip_1b=1; shift ;;
    -h | --help) sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) overrides+=("$1"); shift ;;
  esac
done
[[ -x $bench ]] || { echo "build first: scripts/build.sh (needs $bench)" >&2; exit 1; }
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; $(date -u '+%F %H:%M UTC')"

small=(base_emb_dim=256 base_num_query_heads=4 base_num_kv_heads=2 head_dim=64 base_mlp_dim=704
       base_num_decoder_layers=4 vocab_size=4096 max_target_length=64 per_device_batch_size=4 num_threads=0
       dtype=float32)
for ((r = 1; r <= rounds; r++)); do
  echo "== round $r: the pass against the training forward"
  "$bench" tiny.yml "${small[@]}" "${overrides[@]}" --pairs 64 --prompt 16 --answer 24
done

((skip_1b)) && exit 0
echo "== the fingerprint of the starting weights at the TinyLlama-1.1B shape"
"$bench" tiny.yml base_emb_dim=2048 base_num_query_heads=32 base_num_kv_heads=4 head_dim=64 base_mlp_dim=5632 \
  base_num_decoder_layers=22 vocab_size=32000 max_target_length=2048 num_threads=0 dtype=float32 --hash-only
