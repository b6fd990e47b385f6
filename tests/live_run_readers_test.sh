#!/usr/bin/env bash
# Intent: build/generate and build/export_hf read a run that a trainer may be writing, and leave it whole
# (src/checkpoint/WeightsLoader.h):
#   - a crafted checkpoints/.tmp-step-N (a trainer's checkpoint in the making) survives both tools byte for byte;
#     the control: the trainer's own resume, which tidies such a directory away, does remove it;
#   - with a trainer writing a checkpoint every step into the same run, both tools are run over and over: each exits 0,
#     and the trainer finishes every step and checkpoint (exit 0, its last step-N loadable);
#   - the weights: generate from the latest checkpoint and from an explicit --step agree with themselves.
# Cost: 3 trainer runs of the tiny model (2 layers, 32 wide), the last one 60 steps, and about 20 tool runs: ~30 s on
# 2 loaded cores.
#
# Usage: tests/live_run_readers_test.sh TRAINER GENERATE EXPORT_HF
# Exit: 0 pass; 1 fail (the scratch directory is kept and its path printed).
set -uo pipefail

trainer=$1 generate=$2 export_hf=$3
tmp=$(mktemp -d)
runs=$tmp/runs
run=$runs/live
bg=
cleanup() { [[ -z $bg ]] || kill -KILL "$bg" 2>/dev/null; }
trap cleanup EXIT
fail() {
  echo "live_run_readers: FAIL: $*" >&2
  echo "live_run_readers: scratch directory kept at $tmp" >&2
  exit 1
}
tiny=(tiny.yml dtype=float32 base_output_directory=$runs run_name=live checkpoint_period=1
      max_num_checkpoints_to_keep=2)

"$trainer" "${tiny[@]}" steps=3 >"$tmp/train1.log" 2>&1 || { cat "$tmp/train1.log" >&2; fail "first run"; }

# A checkpoint in the making, as a trainer leaves it between its first write and its rename.
crafted=$run/checkpoints/.tmp-step-4
mkdir -p "$crafted"
cp "$run/checkpoints/step-3/model.pt" "$crafted/model.pt"
sum=$(sha256sum "$crafted/model.pt" | cut -d' ' -f1)
whole() { [[ -f $crafted/model.pt && $(sha256sum "$crafted/model.pt" | cut -d' ' -f1) == "$sum" ]]; }

out=$("$generate" "$run" --prompt-ids "1 2 3" --max-new 4 2>"$tmp/gen.err") || { cat "$tmp/gen.err" >&2; fail "generate"; }
whole || fail "generate removed or changed $crafted"
echo "generate beside $crafted: '$out', the directory whole"
"$export_hf" "$run" "$tmp/hf-out" >"$tmp/export.log" 2>&1 || { cat "$tmp/export.log" >&2; fail "export_hf"; }
whole || fail "export_hf removed or changed $crafted"
echo "export_hf beside $crafted: written, the directory whole"
same=$("$generate" "$run" --step 3 --prompt-ids "1 2 3" --max-new 4 2>"$tmp/gen3.err") ||
  { cat "$tmp/gen3.err" >&2; fail "generate --step 3"; }
[[ $same == "$out" ]] || fail "generate --step 3 gave '$same', the latest (step 3) gave '$out'"
# The control: a trainer resuming the run does tidy it away, so the check above can see a removal.
"$trainer" "${tiny[@]}" steps=4 >"$tmp/train2.log" 2>&1 || { cat "$tmp/train2.log" >&2; fail "resumed run"; }
grep -q "removing the incomplete checkpoint directory $crafted" "$tmp/train2.log" ||
  fail "control: the resumed trainer did not remove $crafted"

echo "== a trainer writing a checkpoint every step, with generate and export_hf run beside it"
steps=400
"$trainer" "${tiny[@]}" steps=$steps >"$tmp/train3.log" 2>&1 &
bg=$!
reads=0
while kill -0 "$bg" 2>/dev/null; do
  if ls "$run/checkpoints" | grep -q '^step-'; then
    "$generate" "$run" --prompt-ids "5 6" --max-new 2 >"$tmp/live_gen.log" 2>&1 ||
      { cat "$tmp/live_gen.log" >&2; fail "generate beside the live run"; }
    "$export_hf" "$run" "$tmp/hf-live" >"$tmp/live_export.log" 2>&1 ||
      { cat "$tmp/live_export.log" >&2; fail "export_hf beside the live run"; }
    reads=$((reads + 1))
  fi
done
rc=0
wait "$bg" || rc=$?
bg=
((rc == 0)) || { tail -20 "$tmp/train3.log" >&2; fail "the live trainer exited $rc with readers beside it"; }
grep -q "cannot write checkpoint" "$tmp/train3.log" && fail "the live trainer lost a checkpoint write"
[[ -f $run/checkpoints/step-$steps/manifest.yml ]] || fail "the live trainer's last checkpoint step-$steps is missing"
"$generate" "$run" --step $steps --prompt-ids "5 6" --max-new 2 >/dev/null 2>&1 || fail "step-$steps does not load"
((reads > 0)) || fail "no read happened while the trainer ran"
echo "live run: $reads generate + export_hf pairs beside it, trainer exit 0, step-$steps complete"
rm -rf "$tmp"
echo "live_run_readers: PASS"
