#!/usr/bin/env python3
"""peft's adapter format through src/hub (docs/lora.md, "Adapters in and out"), against peft itself, fp32 on the CPU:

- peft writes an adapter (save_pretrained; init_lora_weights=False, so B is not zero; target_modules="all-linear",
  which peft saves as every module's full name; rsLoRA) on a tiny random transformers Llama of tiny.yml's shape;
- our strict reader takes it (the C++ case "peft adapter: peft's own files ..." in tests/test_peft_adapter.cpp) and
  writes it back: the exported adapter holds the same tensors under the same names, bit for bit, and
  PeftModel.from_pretrained lands every one of them (each lora_A/lora_B of the loaded model equals the file's);
- the merged export loads in transformers with no missing or unexpected key and equals peft's merge_and_unload()
  within 1e-6 relative per tensor;
- end to end: the trainer runs LoRA (3 steps, rsLoRA, q/v/down) on the same base through load_parameters_path;
  `export_hf --adapter` writes an adapter peft loads (B trained away from zero), and `export_hf` without it (the base
  read again from load_parameters_path) equals peft's merge_and_unload of that adapter on that base, within 1e-6.
Controls must fail: each merged export against the unmerged base.

Usage: peft_adapter_test.py TESTS_BIN TRAINER EXPORT_HF WORK_DIR     Exit: 0 passed, 1 failed, 77 skipped (no peft).
"""
import os
import shutil
import sys

import torch
import transformers
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_parity_test import build, rel, run  # noqa: E402

try:
    from peft import LoraConfig, PeftModel, get_peft_model
except ImportError:
    print("skipped: no peft in this Python (scripts/lib/setup.sh installs it)")
    sys.exit(77)

TESTS_BIN, TRAINER, EXPORT_HF, WORK = sys.argv[1:5]
TOL = 1e-6


def check_merged(label, merged_dir, reference, base_dir, failures):
    """The merged export against peft's merge_and_unload state dict, and the control against the base."""
    merged, info = transformers.LlamaForCausalLM.from_pretrained(merged_dir, output_loading_info=True)
    if info["missing_keys"] or info["unexpected_keys"]:
        failures.append(f"{label}: missing {info['missing_keys']}, unexpected {info['unexpected_keys']}")
    worst = max(rel(t, reference[n]) for n, t in merged.state_dict().items())
    print(f"{label} against peft's merge_and_unload: max rel err {worst:.2e} (limit {TOL:g})")
    if worst > TOL:
        failures.append(f"{label} differs from merge_and_unload by {worst:.2e}")
    base_sd = transformers.LlamaForCausalLM.from_pretrained(base_dir).state_dict()
    control = max(rel(base_sd[n], reference[n]) for n in reference)
    print(f"  control, the unmerged base against merge_and_unload: max rel err {control:.2e} (must exceed {TOL:g})")
    if control <= TOL:
        failures.append(f"{label}: the control passed: the adapter does not change the weights, so the check proves "
                        "nothing")


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    base = build("Llama", {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16})  # tiny.yml's shape
    base.save_pretrained(os.path.join(WORK, "base"))
    # "all-linear": peft saves it as the list of every adapted module's full name (model.layers.0.self_attn.q_proj).
    lora = LoraConfig(r=4, lora_alpha=8, use_rslora=True, init_lora_weights=False, task_type="CAUSAL_LM",
                      target_modules="all-linear")
    peft_model = get_peft_model(base, lora)
    peft_model.save_pretrained(os.path.join(WORK, "adapter"))

    run([TESTS_BIN, "peft adapter: peft's own files through the reader and both exports for "
         "tests/peft_adapter_test.py", "--warn", "NoTests"], env={**os.environ, "SHADOWGRAD_PEFT_DIR": WORK})

    failures = []
    theirs = load_file(os.path.join(WORK, "adapter", "adapter_model.safetensors"))
    ours = load_file(os.path.join(WORK, "adapter_out", "adapter_model.safetensors"))
    if sorted(theirs) != sorted(ours):
        failures.append(f"names differ: only peft's {sorted(set(theirs) - set(ours))[:3]}, "
                        f"only ours {sorted(set(ours) - set(theirs))[:3]}")
    differing = [n for n in theirs if n in ours and not torch.equal(theirs[n], ours[n])]
    if differing:
        failures.append(f"{len(differing)} tensors differ after the round trip, e.g. {differing[0]}")
    print(f"adapter round trip: {len(ours)} tensors, {len(differing)} differ")

    fresh = transformers.LlamaForCausalLM.from_pretrained(os.path.join(WORK, "base")).float().eval()
    loaded = PeftModel.from_pretrained(fresh, os.path.join(WORK, "adapter_out"))
    landed = 0
    for name, p in loaded.named_parameters():
        if ".lora_A.default." in name or ".lora_B.default." in name:
            key = name.replace(".default", "")
            if key not in ours or not torch.equal(p.detach(), ours[key]):
                failures.append(f"{name}: not the exported tensor after PeftModel.from_pretrained")
            landed += 1
    if landed != len(ours):
        failures.append(f"{landed} adapter tensors in the peft model, {len(ours)} in the file")
    print(f"peft loaded the exported adapter: {landed} of {len(ours)} tensors landed")
    scaling = loaded.base_model.model.model.layers[0].self_attn.q_proj.scaling["default"]
    if abs(scaling - 8 / 4 ** 0.5) > 1e-12:
        failures.append(f"peft's scale of the exported adapter is {scaling}, not alpha/sqrt(r) = 4")

    check_merged("merged export", os.path.join(WORK, "merged"), peft_model.merge_and_unload().state_dict(),
                 os.path.join(WORK, "base"), failures)

    # End to end: the trainer's LoRA run on that base, both exports by export_hf.
    run([TRAINER, "tiny.yml", f"load_parameters_path={os.path.join(WORK, 'base')}", "steps=3", "lora_rank=4",
         "lora_alpha=8", "lora_use_rslora=true", "lora_target_modules=q_proj,v_proj,down_proj", "learning_rate=0.05",
         "checkpoint_period=3", f"base_output_directory={WORK}", "run_name=run"])
    run_dir = os.path.join(WORK, "run")
    run([EXPORT_HF, run_dir, os.path.join(WORK, "run_adapter"), "--adapter"])
    run([EXPORT_HF, run_dir, os.path.join(WORK, "run_merged"), "--dtype", "float32"])
    base = transformers.LlamaForCausalLM.from_pretrained(os.path.join(WORK, "base")).float().eval()
    trained = PeftModel.from_pretrained(base, os.path.join(WORK, "run_adapter"))
    moved = max(p.detach().abs().max().item() for n, p in trained.named_parameters() if ".lora_B." in n)
    print(f"trained adapter through export_hf --adapter: max |B| {moved:.3g} (B starts at zero)")
    if moved == 0:
        failures.append("the trained adapter's B is zero: the run trained nothing, or export_hf wrote the init")
    check_merged("export_hf merged", os.path.join(WORK, "run_merged"), trained.merge_and_unload().state_dict(),
                 os.path.join(WORK, "base"), failures)

    for f in failures:
        print("FAILED:", f)
    if not failures:
        shutil.rmtree(WORK, ignore_errors=True)
    sys.exit(1 if failures else 0)


main()
