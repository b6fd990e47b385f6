#!/usr/bin/env bash
# Intent: a real instruction set, offline: the Jargon File (Debian's dict-jargon, public domain) as question/answer
# pairs of uneven length ("what does TERM mean?" -> the entry's first paragraph), with a held-out split, a
# SentencePiece tokenizer trained on them (build/tokenize), and the two SFT files for dataset_type=sft.
# Cost: apt-get of ~0.6 MB the first time; ~2300 entries; tokenizer training and encoding take ~20 s on 2 cores.
#
# Usage: bench/prepare_jargon_sft.sh [--out DIR] [--vocab-size N]
#   --out DIR         where train.jsonl, val.jsonl, tokenizer.model, train.sft and val.sft go (default data/jargon)
#   --vocab-size N    SentencePiece pieces (default 2048); the trainer then needs vocab_size=N
# Prints the trainer command to use.
# Exit: 0 ok; 1 failure; 2 bad usage.
set -euo pipefail
source "$(dirname "$0")/../scripts/lib/setup.sh"
die() { echo "prepare_jargon_sft.sh: $*" >&2; exit 2; }
out=data/jargon vocab=2048
while (($#)); do
  case $1 in
  -h | --help) sed -n '/^# Usage:/,/^# Exit:/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" && exit 0 ;;
  --out | --vocab-size)
    (($# >= 2)) || die "$1 needs a value"
    case $1 in --out) out=$2 ;; --vocab-size) vocab=$2 ;; esac
    shift ;;
  *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done
install_missing_packages dict-jargon
build_shadowgrad tokenize
mkdir -p "$out"
python3 "$SHADOWGRAD_ROOT/scripts/lib/jargon_sft.py" "$out"
# The tokenizer learns from every pair (prompts and answers); its train.bin/val.bin are not used here.
"$SHADOWGRAD_ROOT/build/tokenize" "$out/corpus.txt" --out-dir "$out/tok" --vocab-size "$vocab" >/dev/null
for split in train val; do
  "$SHADOWGRAD_ROOT/scripts/prepare_sft.sh" "$out/$split.jsonl" "$out/$split.sft" --tokenizer "$out/tok/tokenizer.model"
done
echo "train: build/trainer base.yml dataset_type=sft dataset_path=$out/train.sft eval_dataset_path=$out/val.sft" \
     "vocab_size=$vocab eval_interval=50 dtype=float32"
