#!/usr/bin/env bash
# Intent: LoRA's runs, exports and generation from the command line, the way a user meets them (docs/lora.md):
#   - the adapter's shape and scale are pinned by the checkpoint: a resume with another lora_alpha, lora_use_rslora or
#     lora_target_modules exits 2 naming the old and the new value (not "corrupt", not a silent rescale); the same
#     targets listed in another order resume (the control: the refusals are not of every resume);
#   - paths travel: a run started in one directory with a relative load_parameters_path and lora_restore_path
#     resumes from another directory after the adapter directory is gone (its base from the absolute path
#     hf/source.json recorded, its LoRA keys from its config.yml), and export_hf and generate read it from there too;
#   - crafted adapters: r 10^9 exits 2 in generate BASE --adapter (its weights against what the process may take) and
#     in the trainer (its footprint), before anything is allocated; lora_alpha 1e308 exits 2 in both, naming the file
#     and the field (lora_alpha's own range); r above a target's smaller side is warned about, and r at it is not;
#   - generate --adapter naming no directory says so (not lora_restore_path=...); export_hf onto an existing file, a
#     merged export into an adapter's directory, an adapter into a merged model's, or any export into the run's base
#     exits 2 (an adapter over an adapter is replaced); load_parameters_path=ADAPTER_DIR names lora_restore_path;
#   - the same command again on a finished run logs no relative load_parameters_path as changed.
# The Hugging Face base is our own export of a 1-step tiny.yml run, and the adapter a LoRA run's export_hf --adapter:
# no Python. Cost: 16 trainer runs of the tiny model (1-4 steps), 7 exports, 3 generate: ~15 s on 2 cores.
#
# Usage: tests/lora_cli_test.sh TRAINER EXPORT_HF GENERATE
# Exit: 0 pass; 1 fail (the scratch directory is kept and its path printed).
set -uo pipefail

trainer=$(realpath "$1") export_hf=$(realpath "$2") generate=$(realpath "$3")
tmp=$(mktemp -d)
fail() {
  echo "lora_cli: FAIL: $*" >&2
  echo "lora_cli: scratch directory kept at $tmp" >&2
  exit 1
}
runs=$tmp/runs start=$tmp/start elsewhere=$tmp/elsewhere
mkdir -p "$start" "$elsewhere"
train() {  # train NAME key=value...: the trainer on tiny.yml, its output appended to $tmp/NAME.log; returns its code
  local name=$1
  shift
  "$trainer" tiny.yml log_period=1 dtype=float32 base_output_directory="$runs" run_name="$name" "$@" \
    >>"$tmp/$name.log" 2>&1
}
ok() {  # ok NAME key=value...: the trainer exits 0
  train "$@" || { tail -5 "$tmp/$1.log" >&2; fail "run $1 ($*) exited non-zero"; }
}
refused() {  # refused NAME NEEDLE... -- key=value...: exit 2, each NEEDLE in the last line of its log
  local name=$1 needles=() rc=0
  shift
  while [[ $1 != -- ]]; do needles+=("$1"); shift; done
  shift
  train "$name" "$@" || rc=$?
  local last
  last=$(tail -1 "$tmp/$name.log")
  ((rc == 2)) || fail "resume of $name with $* exited $rc, not 2: $last"
  for n in "${needles[@]}"; do [[ $last == *"$n"* ]] || fail "resume of $name with $*: '$n' not in: $last"; done
  echo "exit 2: $* -> ${last:0:200}"
}

echo "== pinned: lora_alpha, lora_use_rslora, lora_target_modules"
lora=(lora_rank=4 checkpoint_period=2)
ok p steps=2 "${lora[@]}" lora_alpha=8 lora_target_modules=q_proj,v_proj
refused p "lora_alpha=8" "lora_alpha=64" -- steps=3 "${lora[@]}" lora_alpha=64 lora_target_modules=q_proj,v_proj
refused p "lora_use_rslora=false" "lora_use_rslora=true" -- steps=3 "${lora[@]}" lora_alpha=8 \
  lora_target_modules=q_proj,v_proj lora_use_rslora=true
refused p 'lora_target_modules="q_proj,v_proj"' 'lora_target_modules="q_proj"' -- steps=3 "${lora[@]}" lora_alpha=8 \
  lora_target_modules=q_proj
grep -q corrupt "$tmp/p.log" && fail "a refused resume called a checkpoint corrupt: $(grep corrupt "$tmp/p.log")"
ok p steps=3 "${lora[@]}" lora_alpha=8 "lora_target_modules=v_proj, q_proj"
grep -q '"step": 3' "$runs/p/metrics.jsonl" || fail "the resume with the targets reordered did not train step 3"
echo "control: the same targets in another order resume to step 3"

echo "== paths that travel: relative base and adapter, resumed elsewhere with the adapter gone"
cd "$start" || fail "cd $start"
ok seed steps=1
"$export_hf" "$runs/seed" llama --dtype float32 >"$tmp/export_seed.log" 2>&1 || fail "export_hf seed: $(cat "$tmp/export_seed.log")"
ok a steps=1 load_parameters_path=llama lora_rank=4 lora_alpha=8 lora_target_modules=q_proj,v_proj
"$export_hf" "$runs/a" adapter --adapter >"$tmp/export_a.log" 2>&1 || fail "export_hf --adapter: $(cat "$tmp/export_a.log")"
rel=(load_parameters_path=llama lora_restore_path=adapter checkpoint_period=1)
ok r steps=2 "${rel[@]}"
grep -q "adapters from adapter" "$tmp/r.log" || fail "run r did not start from the adapter"
# The same command again: the run is complete, and its relative load_parameters_path is the absolute one it recorded.
before=$(wc -l <"$tmp/r.log")
ok r steps=2 "${rel[@]}"
tail -n +"$((before + 1))" "$tmp/r.log" | grep -q "already complete" || fail "the rerun of the finished run r trained"
tail -n +"$((before + 1))" "$tmp/r.log" | grep "changed keys" | grep -q load_parameters_path &&
  fail "the rerun logs load_parameters_path as changed: $(grep 'changed keys' "$tmp/r.log")"
mv adapter adapter.moved
cd "$elsewhere" || fail "cd $elsewhere"
ok r steps=3 "${rel[@]}"
grep -q "is not read again" "$tmp/r.log" || fail "the resume did not say it left lora_restore_path unread"
grep -q "resumes on $start/llama" "$tmp/r.log" || fail "the resume did not name the recorded base"
refused r "lora_alpha=8" "lora_alpha=64" -- steps=4 "${rel[@]}" lora_alpha=64
echo "resumed from $elsewhere to step 3 with the adapter directory gone"
"$export_hf" "$runs/r" merged --dtype float32 >"$tmp/export_r.log" 2>&1 ||
  fail "export_hf from another directory: $(cat "$tmp/export_r.log")"
[[ -f merged/model.safetensors ]] || fail "export_hf wrote no merged/model.safetensors"
echo "export_hf from another directory: $(head -1 "$tmp/export_r.log")"
out=$("$generate" "$runs/r" --prompt-ids "1 2 3" --max-new 3 2>"$tmp/generate.err") ||
  fail "generate from another directory: $(cat "$tmp/generate.err")"
[[ $out =~ ^[0-9]+( [0-9]+){2}$ ]] || fail "generate printed '$out', not 3 ids"
echo "generate from another directory: $out"
echo "== crafted adapters: r 10^9 and lora_alpha 1e308 exit 2 in every reader, before anything is allocated"
craft() {  # craft DIR FIELD VALUE: a copy of the adapter with one field of adapter_config.json replaced
  rm -rf "$1"
  cp -r "$start/adapter.moved" "$1"
  sed -i "s/\"$2\": [^,]*,/\"$2\": $3,/" "$1/adapter_config.json"
  grep -q "\"$2\": $3," "$1/adapter_config.json" || fail "could not craft $2 in $1/adapter_config.json"
}
gen_refused() {  # gen_refused NEEDLE ARGS...: generate exits 2 with NEEDLE on stderr
  local needle=$1 rc=0
  shift
  "$generate" "$@" --prompt-ids "1 2" --max-new 2 >"$tmp/gen.out" 2>"$tmp/gen.err" || rc=$?
  ((rc == 2)) || fail "generate $* exited $rc, not 2: $(tail -2 "$tmp/gen.err")"
  grep -qF -- "$needle" "$tmp/gen.err" || fail "generate $*: stderr does not name '$needle': $(cat "$tmp/gen.err")"
  echo "exit 2: generate $*: $(tail -1 "$tmp/gen.err" | cut -c1-200)"
}
craft huge r 1000000000
gen_refused "more than this process may take" "$start/llama" --adapter huge
refused huge "the model does not fit" -- steps=1 load_parameters_path="$start/llama" lora_restore_path=huge
craft loud lora_alpha 1e308
gen_refused "lora_alpha = 1e+308: out of the range of lora_alpha" "$start/llama" --adapter loud
refused loud "lora_alpha = 1e+308" "adapter_config.json" -- steps=1 load_parameters_path="$start/llama" \
  lora_restore_path=loud
echo "== what a new user mistypes: --adapter that is no directory, export_hf onto a file, into another export or the"\
  "base, an adapter as load_parameters_path"
gen_refused "--adapter nope: not a directory" "$start/llama" --adapter nope
touch afile
rc=0
"$export_hf" "$runs/r" afile >"$tmp/export_file.log" 2>&1 || rc=$?
((rc == 2)) || fail "export_hf onto a file exited $rc, not 2: $(cat "$tmp/export_file.log")"
grep -q "afile: exists and is not a directory" "$tmp/export_file.log" || fail "export_hf: $(cat "$tmp/export_file.log")"
echo "exit 2: export_hf RUN afile: $(cat "$tmp/export_file.log")"
export_refused() {  # export_refused NEEDLE ARGS...: export_hf exits 2 with NEEDLE in its message
  local needle=$1 rc=0
  shift
  "$export_hf" "$@" >"$tmp/export_refused.log" 2>&1 || rc=$?
  ((rc == 2)) || fail "export_hf $* exited $rc, not 2: $(cat "$tmp/export_refused.log")"
  grep -qF -- "$needle" "$tmp/export_refused.log" || fail "export_hf $*: no '$needle' in: $(cat "$tmp/export_refused.log")"
  echo "exit 2: export_hf $*: $(cut -c1-200 "$tmp/export_refused.log")"
}
rm -rf an_adapter && cp -r "$start/adapter.moved" an_adapter
export_refused "an_adapter: holds a peft adapter (adapter_" "$runs/r" an_adapter
[[ ! -e an_adapter/config.json && ! -e an_adapter/model.safetensors ]] || fail "the refused export wrote into an_adapter"
export_refused "merged: holds a model (" "$runs/r" merged --adapter
export_refused "this is the model directory the run was trained from" "$runs/r" "$start/llama"
"$export_hf" "$runs/r" an_adapter --adapter >"$tmp/export_again.log" 2>&1 ||
  fail "control: an adapter export over an adapter export: $(cat "$tmp/export_again.log")"
refused as_base "load_parameters_path=an_adapter: this is a peft LoRA adapter" "lora_restore_path=an_adapter" -- \
  steps=1 load_parameters_path=an_adapter

echo "== a rank above a target's smaller side is warned about (k_proj is 16 x 32), one at that side is not"
ok wide steps=1 lora_rank=17 lora_target_modules=k_proj
grep -q "LoRA r=17 is above the smaller side of k_proj (16 x 32)" "$tmp/wide.log" || fail "no warning for r=17 on k_proj"
ok side steps=1 lora_rank=16 lora_target_modules=k_proj
grep -q "is above the smaller side" "$tmp/side.log" && fail "control: r=16 on k_proj (16 x 32) was warned about"
echo "r=17 on k_proj warned about; r=16 not"
rm -rf "$tmp"
echo "lora_cli: PASS"
