#!/usr/bin/env bash
# Intent: build/generate refuses what is not a prompt, exit 2 naming the word, instead of reading up to it (the old
# parser stopped at the first word that was not a number, so "1 2 x 3" became [1, 2]):
#   - a word that is not a whole decimal integer ("x", "2.5", "3x", "0x10"), an id >= vocab_size or negative, an empty
#     prompt, a --stop id outside the vocabulary, a flag CLI11 cannot convert: exit 2, the word on stderr;
#   - the control: "1 2 3" generates (exit 0), and " 1  2 3 " (any whitespace) gives the same ids.
# Cost: 1 trainer run of the tiny model (1 step) and 12 generate runs: ~10 s on 2 cores.
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
rm -rf "$tmp"
echo "generate_cli: PASS"
