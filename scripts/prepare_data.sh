#!/usr/bin/env bash
# Intent: a real English corpus, end to end from apt: the King James Bible (Debian's bible-kjv-text, read through
# bible-kjv's `bible` command) as one document per chapter, turned by build/tokenize into a SentencePiece tokenizer
# and llm.c token files (train.bin, val.bin) for dataset_type=tokens with evaluation.
# Cost: apt-get of ~2.5 MB the first time; ~4.3 MB of text; tokenizer training and encoding take about a minute
# on 2 cores; writes ~3 MB into the output directory.
#
# Usage: scripts/prepare_data.sh [--out DIR] [--vocab-size N] [--val-fraction F] [--text FILE] [--model-dir DIR]
#   --out DIR         where corpus.txt, tokenizer.model, train.bin and val.bin go (default data/kjv)
#   --vocab-size N    SentencePiece pieces (default 4096); the trainer then needs vocab_size=N
#   --val-fraction F  fraction of documents (chapters) held out for eval_dataset_path (default 0.05)
#   --text FILE       tokenize this text instead of the KJV (documents separated by blank lines)
#   --model-dir DIR   encode with a Hugging Face model directory's own tokenizer.json (scripts/hf_tokenize.py)
#                     instead of training a SentencePiece one, for fine-tuning that model (load_parameters_path=DIR)
# Re-running with the same arguments reuses DIR's files. Prints the trainer command to use.
# Exit: 0 ok; 1 failure; 2 bad usage.
set -euo pipefail
source "$(dirname "$0")/lib/setup.sh"

die() {
  echo "prepare_data.sh: $*" >&2
  exit 2
}
out=data/kjv vocab=4096 fraction=0.05 text="" model_dir=""
while (($#)); do
  case $1 in
  -h | --help) sed -n '/^# Usage:/,/^# Exit:/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" && exit 0 ;;
  --out | --vocab-size | --val-fraction | --text | --model-dir)
    (($# >= 2)) || die "$1 needs a value"
    case $1 in --out) out=$2 ;; --vocab-size) vocab=$2 ;; --val-fraction) fraction=$2 ;; --text) text=$2 ;;
      --model-dir) model_dir=$2 ;; esac
    shift
    ;;
  *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done

if [[ -z $text ]]; then
  install_missing_packages bible-kjv bible-kjv-text
else
  install_missing_packages
  [[ -f $text ]] || die "no text file $text"
fi
build_shadowgrad tokenize
mkdir -p "$out"

if [[ -z $text ]]; then
  text=$out/corpus.txt
  if [[ ! -s $text ]]; then
    # `bible` prints "Genesis 1", a blank line, then indented numbered verses; one chapter becomes one document:
    # its heading and its verses (numbers dropped), one per line, chapters separated by a blank line.
    bible -m 8192 -l 100000 "gen1:1-rev22:21" |
      awk '/^[^ ]/ { if (n++) print ""; print; next } /^ +[0-9]+ / { sub(/^ +[0-9]+ /, ""); print }' >"$text.tmp"
    mv "$text.tmp" "$text"
  fi
  echo "corpus: $text ($(grep -c '^$' "$text") chapter breaks, $(wc -c <"$text") bytes)"
fi

if [[ -n $model_dir ]]; then
  [[ -f $model_dir/tokenizer.json ]] || die "$model_dir has no tokenizer.json (scripts/prepare_model.sh makes one)"
  "$SHADOWGRAD_PYTHON" "$SHADOWGRAD_ROOT/scripts/hf_tokenize.py" "$model_dir" "$text" "$out" --val-fraction "$fraction"
  echo "train it: build/trainer base.yml load_parameters_path=$model_dir dataset_type=tokens dataset_path=$out/train.bin eval_dataset_path=$out/val.bin dtype=float32"
  exit 0
fi
if [[ -s $out/train.bin && -s $out/val.bin && -s $out/tokenizer.model && $out/train.bin -nt $text ]]; then
  echo "prepare_data.sh: $out already holds train.bin, val.bin and tokenizer.model (delete them to redo)"
else
  "$SHADOWGRAD_ROOT/build/tokenize" "$text" --out-dir "$out" --vocab-size "$vocab" --val-fraction "$fraction"
fi
