#!/usr/bin/env bash
# Intent: LoRA runs of the real trainer (docs/lora.md), 1 and 2 processes (ranks started by hand on loopback):
#   - a LoRA run's checkpoint holds only the adapters and their optimizer state: model.pt's tensors are exactly the
#     targeted layer{i}_{wq,wv,w_down}_lora_{a,b} ([r, in], [out, r]), optimizer.pt's AdamW moments are exactly two per
#     adapter with its shape (under ZeRO-1: the ranks' shards cover exactly the adapters' elements, two moments each),
#     and no file carries more tensor bytes than that; the same check on a full fine-tune's checkpoint, 1 process and
#     ZeRO-1, must fail (the check can see a base tensor);
#   - resume is bitwise at the same process count: 3 steps then resumed to 6 give the 6 straight steps' losses bit for
#     bit, on 1 process (a base from scratch, and a Hugging Face base read again from load_parameters_path and held in
#     bfloat16) and on 2 processes (ZeRO-1 on: each rank's optimizer shard);
#   - at another process count the checkpoint carries over: 2 processes then 1 (and 1 then 2) against the straight
#     run, within 1e-5 (the reduction's order differs, so the first steps' losses are not bitwise);
#   - lora_dropout=0.1 resumes bitwise (1 process and 2), its masks are the same at 1 process K=4 and 2 processes K=2
#     (losses within 1e-5), and it changes the losses (a control: dropout that did nothing would pass the rest).
# Cost: about 26 trainer runs of the tiny model (2 layers, 32 wide) of 2-6 steps, 11 of them on 2 processes started by
# hand, and one Python start to build a tiny Hugging Face Llama: ~60 s on 2 cores.
#
# Usage: tests/lora_test.sh TRAINER COMPARE_RUNS
# Environment: SHADOWGRAD_VENV (default: the checkout's .venv), whose Python has torch and transformers.
# Exit: 0 pass; 1 fail (the scratch directory is kept and its path printed).
set -uo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib/multiprocess_test.sh" lora_test "$@"
py=${SHADOWGRAD_VENV:-$repo/.venv}/bin/python
[[ -x $py ]] || fail "no venv Python at $py (scripts/build.sh makes .venv)"

lora=(lora_rank=4 lora_alpha=8 lora_target_modules=q_proj,v_proj,down_proj)
run() {  # run NAME NPROC STEPS key=value...: NPROC=0 is the trainer alone, without any rendezvous variable
  local name=$1 n=$2 steps=$3 rc=0
  shift 3
  if ((n == 0)); then
    "$TRAINER" "${tiny[@]}" "${lora[@]}" steps="$steps" run_name="$name" "$@" >>"$tmp/$name.log" 2>&1 || rc=$?
  else
    ranks "$n" "${tiny[@]}" "${lora[@]}" steps="$steps" run_name="$name" "$@" >>"$tmp/$name.log" 2>&1 ||
      rc=$?
  fi
  ((rc == 0)) || { cat "$tmp/$name.log" >&2; fail "run $name ($n processes) exited $rc"; }
}
losses() { grep -o '"loss": [^,]*' "$runs/$1/metrics.jsonl"; }
bitwise() {  # bitwise A B: every step's loss identical, and 6 of them
  [[ $(losses "$1" | wc -l) == 6 ]] || fail "$1 has not 6 steps"
  cmp -s <(losses "$1") <(losses "$2") || { diff <(losses "$1") <(losses "$2") >&2; fail "$1 vs $2: losses differ"; }
  echo "$1 = $2: 6 losses bit for bit"
}
close() {  # close A B RTOL
  local out rc=0
  out=$("$compare" "$runs/$1" "$runs/$2" --metric loss --rtol "$3") || rc=$?
  echo "$out" | tail -1
  ((rc == 0)) || { echo "$out" >&2; fail "$1 vs $2: loss differs beyond $3"; }
}

# checkpoint_holds STEP_DIR RANK TARGETS...: exit 0 when model.pt and optimizer.pt hold exactly the adapters of a
# 2-layer, 32-wide model (mlp 64, kv 16) at rank RANK and their AdamW moments; prints what it found.
checkpoint_holds() {
  "$py" - "$@" <<'PY'
import glob, sys, warnings, zipfile
import torch
warnings.simplefilter("ignore")
step, r, targets = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
shapes = {"wq": (32, 32), "wk": (16, 32), "wv": (16, 32), "wo": (32, 32), "w_gate": (64, 32), "w_up": (64, 32),
          "w_down": (32, 64)}  # [out, in]
want = {}
for i in range(2):
    for t in targets:
        out, inp = shapes[t]
        want[f"layer{i}_{t}_lora_a"], want[f"layer{i}_{t}_lora_b"] = (r, inp), (out, r)
model = {n: tuple(p.shape) for n, p in torch.jit.load(f"{step}/model.pt").named_parameters()}
adapter_elements = sum(a * b for a, b in want.values())
adapter_bytes = 4 * adapter_elements
def tensor_bytes(path):  # every tensor's storage in the archive, whatever its name
    return sum(i.file_size for i in zipfile.ZipFile(path).infolist() if "/data/" in i.filename)
model_bytes = tensor_bytes(f"{step}/model.pt")
extra = sorted(set(model) - set(want))[:4]
missing = sorted(set(want) - set(model))[:4]
bad = [n for n in want if n in model and model[n] != want[n]]
ok = not extra and not missing and not bad and model_bytes == adapter_bytes
shards = sorted(glob.glob(f"{step}/optimizer-shard-*.pt"))
if shards:  # ZeRO-1: each rank's flat slice [begin, begin + count) of the trained set, its two AdamW moments
    flat = [torch.jit.load(f) for f in shards]
    totals = {m.total for m in flat}
    counts = sum(m.count for m in flat)
    fields_ok = all(p.numel() == m.count for m in flat for _, p in m.named_parameters())
    opt_bytes = sum(tensor_bytes(f) for f in shards)
    print(f"model.pt: {len(model)} tensors, {model_bytes} B of data; {len(shards)} optimizer shards over {totals} "
          f"elements, {opt_bytes} B of data; the adapters: {len(want)} tensors, {adapter_elements} elements, "
          f"{adapter_bytes} B")
    ok &= totals == {adapter_elements} and counts == adapter_elements and fields_ok and opt_bytes == 2 * adapter_bytes
else:
    opt = torch.jit.load(f"{step}/optimizer.pt")
    moments = sorted(tuple(getattr(s, m).shape) for _, s in opt.state.named_children() for m in ("exp_avg", "exp_avg_sq"))
    opt_bytes = tensor_bytes(f"{step}/optimizer.pt")
    print(f"model.pt: {len(model)} tensors, {model_bytes} B of data; optimizer.pt: {len(moments)} moments, {opt_bytes} B "
          f"of data; the adapters: {len(want)} tensors, {adapter_bytes} B")
    ok &= moments == sorted(list(want.values()) * 2)
    ok &= adapter_bytes * 2 <= opt_bytes <= adapter_bytes * 2 + 256  # + step scalars
if not ok:
    print(f"not only the adapters: extra {extra}, missing {missing}, misshapen {bad}")
sys.exit(0 if ok else 1)
PY
}

echo "== a LoRA checkpoint holds the adapters and their AdamW moments, nothing of the base"
run ckpt 0 2 checkpoint_period=2
checkpoint_holds "$runs/ckpt/checkpoints/step-2" 4 wq wv w_down || fail "the LoRA checkpoint holds more"
"$TRAINER" "${tiny[@]}" steps=2 checkpoint_period=2 run_name=ckpt_full >"$tmp/ckpt_full.log" 2>&1 ||
  fail "the full fine-tune ckpt_full exited non-zero"
if checkpoint_holds "$runs/ckpt_full/checkpoints/step-2" 4 wq wv w_down >"$tmp/full_check.log"; then
  fail "control: the checkpoint check passed a full fine-tune's checkpoint"
fi
echo "control: a full fine-tune's checkpoint fails the check ($(head -1 "$tmp/full_check.log"))"

ck=(checkpoint_period=3 learning_rate_schedule_steps=6)
echo "== resume bitwise at the same process count: 3 steps, then resumed to 6, against 6 straight"
run straight1 0 6 "${ck[@]}" gradient_accumulation_steps=4
run resumed1 0 3 "${ck[@]}" gradient_accumulation_steps=4
run resumed1 0 6 "${ck[@]}" gradient_accumulation_steps=4
grep -q 'resum' "$tmp/resumed1.log" || fail "resumed1 did not say it resumed"
bitwise resumed1 straight1
zero=(shard_optimizer_over_data=true gradient_accumulation_steps=2)
run straight2 2 6 "${ck[@]}" "${zero[@]}"
run resumed2 2 3 "${ck[@]}" "${zero[@]}"
run resumed2 2 6 "${ck[@]}" "${zero[@]}"
bitwise resumed2 straight2
# ZeRO-1's checkpoint: each rank's optimizer shard, together the adapters' moments and nothing of the base.
checkpoint_holds "$runs/resumed2/checkpoints/step-6" 4 wq wv w_down || fail "resumed2's ZeRO-1 checkpoint holds more"
ranks 2 "${tiny[@]}" steps=2 checkpoint_period=2 "${zero[@]}" run_name=zero_full >"$tmp/zero_full.log" 2>&1 ||
  fail "the full fine-tune zero_full exited non-zero"
if checkpoint_holds "$runs/zero_full/checkpoints/step-2" 4 wq wv w_down >"$tmp/zero_full_check.log"; then
  fail "control: the check passed a full fine-tune's ZeRO-1 checkpoint"
fi
echo "control: a full fine-tune's ZeRO-1 checkpoint fails the check ($(head -1 "$tmp/zero_full_check.log"))"

echo "== a Hugging Face base (load_parameters_path, held in bfloat16) is read again on resume"
"$py" - "$repo/tests" "$tmp/base" <<'PY' || fail "could not build the tiny Hugging Face Llama"
import sys
sys.path.insert(0, sys.argv[1])
from hf_parity_test import build
build("Llama", {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
                "head_dim": 16}).save_pretrained(sys.argv[2])
PY
hf=("load_parameters_path=$tmp/base" weight_dtype=bfloat16 "${ck[@]}" gradient_accumulation_steps=2)
run hf_straight 0 6 "${hf[@]}"
grep -q 'frozen base values in bfloat16' "$tmp/hf_straight.log" || fail "hf_straight's base is not held in bfloat16"
run hf_resumed 0 3 "${hf[@]}"
run hf_resumed 0 6 "${hf[@]}"
bitwise hf_resumed hf_straight
# The resume's part of the log (after the first run's "done:" line) names the base it read again.
sed '1,/done: 3 steps/d' "$tmp/hf_resumed.log" | grep -q "$tmp/base" || fail "the resume did not read the base again"

echo "== another process count: the checkpoint of 2 processes resumed on 1, and of 1 on 2 (same global batch)"
run p2_to_p1 2 3 "${ck[@]}" gradient_accumulation_steps=2
run p2_to_p1 0 6 "${ck[@]}" gradient_accumulation_steps=4
close p2_to_p1 straight1 1e-5
run p1_to_p2 0 3 "${ck[@]}" gradient_accumulation_steps=4
run p1_to_p2 2 6 "${ck[@]}" gradient_accumulation_steps=2
close p1_to_p2 straight1 1e-5
# The first 3 steps are the straight runs' own (bitwise); what differs after is only the reduction's order.
cmp -s <(losses p1_to_p2 | head -3) <(losses straight1 | head -3) || fail "p1_to_p2's first 3 steps are not straight1's"

echo "== lora_dropout=0.1: resumes bitwise, the same masks at any split, and it changes the losses"
drop=(lora_dropout=0.1 "${ck[@]}")
run drop_straight 0 6 "${drop[@]}" gradient_accumulation_steps=4
run drop_resumed 0 3 "${drop[@]}" gradient_accumulation_steps=4
run drop_resumed 0 6 "${drop[@]}" gradient_accumulation_steps=4
bitwise drop_resumed drop_straight
run drop_p2 2 6 "${drop[@]}" gradient_accumulation_steps=2
close drop_p2 drop_straight 1e-5
run drop_p2_resumed 2 3 "${drop[@]}" gradient_accumulation_steps=2
run drop_p2_resumed 2 6 "${drop[@]}" gradient_accumulation_steps=2
bitwise drop_p2_resumed drop_p2
# Control: with dropout the losses from step 2 on (after the adapters left B=0) differ from the run without it.
cmp -s <(losses drop_straight) <(losses straight1) && fail "control: lora_dropout=0.1 gave the losses of dropout 0"
echo "control: dropout 0.1's losses differ from dropout 0's"
echo "lora_test: all passed"
