#!/usr/bin/env bash
# Intent: build/generate refuses what is not a prompt, exit 2 naming the word, instead of reading up to it (the old
# parser stopped at the first word that was not a number, so "1 2 x 3" became [1, 2]):
#   - a word that is not a whole decimal integer ("x", "2.5", "3x", "0x10"), an id >= vocab_size or negative, an empty
#     prompt, a --stop id outside the vocabulary, a flag CLI11 cannot convert: exit 2, the word on stderr;
#   - the control: "1 2 3" generates (exit 0), and " 1  2 3 " (any whitespace) gives the same ids.
# And scripts/generate.sh (through a word-level tokenizer made here) says each error once, in the user's own terms:
#   - a run directory that does not exist: "no such directory", not "no tokenizer found";
#   - --adapter DIR that does not exist: names --adapter, not lora_restore_path (a key the user never typed);
#   - build/generate's own refusal (--step 99) is printed once, not twice;
#   - an adapter directory given as the model: says it is a peft adapter and shows `generate.sh BASE --adapter DIR`
#     with the base its adapter_config.json names (it said "no tokenizer found ... give --tokenizer DIR");
#   - --tokenizer MODEL_DIR/model.safetensors: says --tokenizer takes the model's directory, and names it;
#   - a --prompts file whose line 2 is bad (not a prompt object; longer than the context) exits 2 naming FILE:2
#     and writes nothing to --out; the control: two good lines give two answers.
# Cost: 1 trainer run of the tiny model (1 step), 1 export, 12 generate runs and 8 generate.sh runs: ~30 s on 2 cores.
#
# Usage: tests/generate_cli_test.sh TRAINER GENERATE
# Exit: 0 pass; 1 fail (the scratch directory is kept and its path printed).
set -uo pipefail

trainer=$1 generate=$2
tmp=$(mktemp -d)
fail() {
  echo "generate_cli: FAIL: $*" >&2
  echo "generate_cli: scratch directory kept at $tmp" >&2
  exit 1
}
"$trainer" tiny.yml steps=1 base_output_directory="$tmp" run_name=r >"$tmp/train.log" 2>&1 ||
  { cat "$tmp/train.log" >&2; fail "trainer"; }

refused() {  # refused NEEDLE ARGS...: generate exits 2 with NEEDLE on stderr
  local needle=$1 rc=0
  shift
  "$generate" "$tmp/r" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  ((rc == 2)) || fail "generate $* exited $rc, not 2 (stdout: $(cat "$tmp/out"); stderr: $(cat "$tmp/err"))"
  grep -qF -- "$needle" "$tmp/err" || fail "generate $*: stderr does not name '$needle': $(cat "$tmp/err")"
  echo "exit 2: generate $*: $(tail -1 "$tmp/err")"
}
refused "word 3 'x' is not a token id" --prompt-ids "1 2 x 3"
refused "word 2 '2.5' is not a token id" --prompt-ids "1 2.5"
refused "word 1 '3x' is not a token id" --prompt-ids "3x"
refused "word 1 '0x10' is not a token id" --prompt-ids "0x10"
refused "word 3 is 64, outside the vocabulary [0, 64)" --prompt-ids "1 2 64"
refused "word 2 is -1, outside the vocabulary" --prompt-ids "1 -1"
refused "word 1 '99999999999999999999' is not a token id" --prompt-ids "99999999999999999999"
refused "--prompt-ids is empty" --prompt-ids "   "
refused "--stop 64 is outside the vocabulary" --prompt-ids "1 2" --stop 64
refused "--stop" --prompt-ids "1 2" --stop x

out=$("$generate" "$tmp/r" --prompt-ids "1 2 3" --max-new 5 2>"$tmp/err") || fail "generate '1 2 3': $(cat "$tmp/err")"
[[ $out =~ ^[0-9]+( [0-9]+){4}$ ]] || fail "generate '1 2 3' printed '$out', not 5 ids"
spaced=$("$generate" "$tmp/r" --prompt-ids $' 1\t 2  3 ' --max-new 5 2>&1) || fail "generate ' 1  2 3 ': $spaced"
[[ $spaced == "$out" ]] || fail "the same ids with other whitespace gave '$spaced', not '$out'"
echo "exit 0: generate --prompt-ids '1 2 3' --max-new 5: $out"

# scripts/generate.sh: a word-level tokenizer within the tiny model's 64 ids, with a chat template.
repo=$(cd "$(dirname "$0")/.." && pwd)
export SHADOWGRAD_GENERATE=$generate
"${SHADOWGRAD_VENV:-$repo/.venv}/bin/python" - "$tmp/tok" <<'PY' || fail "making the tokenizer"
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
specials = ["<unk>", "<s>", "</s>"]
words = "the a of cat dog sat on mat what is hello hi and to in it was big small red".split()
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(specials + words)}, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>").save_pretrained(sys.argv[1])
PY
script_refused() {  # script_refused NEEDLE ARGS...: generate.sh exits 2 with NEEDLE on stderr, in one error line
  local needle=$1 rc=0
  shift
  "$repo/scripts/generate.sh" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  ((rc == 2)) || fail "generate.sh $* exited $rc, not 2 (stderr: $(cat "$tmp/err"))"
  grep -qF -- "$needle" "$tmp/err" || fail "generate.sh $*: stderr does not name '$needle': $(cat "$tmp/err")"
  (($(grep -c 'error' "$tmp/err") == 1)) || fail "generate.sh $*: the error is not said once: $(cat "$tmp/err")"
  echo "exit 2: generate.sh $*: $(cat "$tmp/err")"
}
script_refused "$tmp/nope: no such directory" "$tmp/nope" --prompt hi
"$(dirname "$generate")/export_hf" "$tmp/r" "$tmp/hf" >"$tmp/export.log" 2>&1 || fail "export_hf: $(cat "$tmp/export.log")"
script_refused "--adapter $tmp/nope: no such directory" "$tmp/hf" --tokenizer "$tmp/tok" --adapter "$tmp/nope" --prompt hi
! grep -q lora_restore_path "$tmp/err" || fail "--adapter's error names lora_restore_path: $(cat "$tmp/err")"
mkdir "$tmp/adapter"  # as export_hf --adapter writes one: no config.json, no tokenizer
echo '{"peft_type": "LORA", "base_model_name_or_path": "models/Base"}' >"$tmp/adapter/adapter_config.json"
script_refused "$tmp/adapter: a peft adapter directory (adapter_config.json), not a model; give the base model it was trained on and the adapter: generate.sh models/Base --adapter $tmp/adapter" \
  "$tmp/adapter" --prompt hi
script_refused "--tokenizer $tmp/hf/model.safetensors: a file; --tokenizer takes the model's directory (the one holding tokenizer.json): --tokenizer $tmp/hf" \
  "$tmp/hf" --tokenizer "$tmp/hf/model.safetensors" --prompt hi
! grep -qi sentencepiece "$tmp/err" || fail "--tokenizer FILE speaks of SentencePiece: $(cat "$tmp/err")"
script_refused "there is no checkpoint step-99" "$tmp/r" --tokenizer "$tmp/tok" --step 99 --prompt hi
printf '%s\n' '{"prompt": "the cat sat"}' '{"text": "a dog"}' >"$tmp/bad_object.jsonl"
script_refused "$tmp/bad_object.jsonl:2:" "$tmp/r" --tokenizer "$tmp/tok" --prompts "$tmp/bad_object.jsonl" \
  --out "$tmp/answers.jsonl" --max-new 2
[[ ! -e $tmp/answers.jsonl ]] || fail "--prompts with a bad line 2 wrote --out: $(cat "$tmp/answers.jsonl")"
long=$(printf 'the cat sat on the mat %.0s' 1 2 3)  # 18 words, 18 tokens: more than the context's 16
printf '%s\n' '{"prompt": "the cat sat"}' "{\"prompt\": \"$long\"}" >"$tmp/too_long.jsonl"
script_refused "$tmp/too_long.jsonl:2: the prompt has 18 tokens; the context holds 16" "$tmp/r" --tokenizer "$tmp/tok" \
  --prompts "$tmp/too_long.jsonl" --out "$tmp/answers.jsonl" --max-new 2
[[ ! -e $tmp/answers.jsonl ]] || fail "--prompts with a too long line 2 wrote --out: $(cat "$tmp/answers.jsonl")"
printf '%s\n' '{"prompt": "the cat sat"}' '{"prompt": "a dog"}' >"$tmp/good.jsonl"  # the control
"$repo/scripts/generate.sh" "$tmp/r" --tokenizer "$tmp/tok" --prompts "$tmp/good.jsonl" --out "$tmp/answers.jsonl" \
  --max-new 2 2>"$tmp/err" || fail "generate.sh --prompts good.jsonl: $(cat "$tmp/err")"
(($(wc -l <"$tmp/answers.jsonl") == 2)) || fail "two good prompts gave: $(cat "$tmp/answers.jsonl")"
echo "exit 0: generate.sh --prompts good.jsonl: 2 answers"
rm -rf "$tmp"
echo "generate_cli: PASS"
