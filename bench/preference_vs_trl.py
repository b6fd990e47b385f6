#!/usr/bin/env python3
"""Speed and memory of preference tuning against TRL 1.16 (issue 55 §9, docs/preference.md "Against TRL").

Intent: the trainer (use_dpo=true, LoRA) and TRL's DPOTrainer with peft, on the same pre-tokenized pairs and the same
work: SmolLM2-135M-Instruct, LoRA r=16 (alpha 32, no dropout) on all seven projections, sigmoid DPO (beta 0.1),
AdamW (lr 1e-4, no weight decay), K=4 microbatches of 1 pair, sequences cut at 256 tokens (keep_start on both), no
activation recomputation on either side (TRL's default gradient_checkpointing=True is turned off, our remat_policy
stays none), fp32 where the CPU has no native bf16 (dtype=auto on ours, bf16=True on TRL's where it has), the
reference log-probs precomputed on both sides (ours always; precompute_ref_log_probs=True for TRL), --threads
intra-op threads each. The first --n-pairs pairs of --pairs (a pair file; by default the real run's training pairs,
bench/preference_real.sh) are read here and given to both as {"prompt_ids", "chosen_ids", "rejected_ids"}: ours
through scripts/prepare_preference.sh's pre-tokenized form, TRL's through a DPOTrainer whose _prepare_dataset returns
them as they are (tests/lib/trl_reference.py does the same). --steps x 4 must be a whole number of passes over the
pairs, so that both sides process each pair the same number of times.

What is counted:
- tokens: the real (unpadded) tokens of every sequence processed in the training steps, prompt + answer, both
  sequences of each pair: passes x sum over pairs of (2 x prompt + chosen + rejected). TRL's attention_mask sums
  over its microbatches and our input_tokens sums are checked against it.
- seconds: the training steps only. Ours: the sum of metrics.jsonl's step_time_s (data, forward, backward, update).
  TRL's: the sum over optimizer steps of on_step_begin -> on_step_end (forward, backward, update; its batches are
  collated before on_step_begin, so that is left out in its favour). Start-up, model loading and the reference pass
  are outside both.
- memory: the peak RSS of each whole process (/usr/bin/time's %M), the reference pass and start-up included.
Rounds alternate (ours, TRL, ours, TRL, ...); each pair of rounds gives a ratio of tokens/s (ours / TRL's) and of
peak RSS (ours / TRL's); the median and range of those ratios are the result, against the issue's goals (>= 1.5x
TRL's tokens/s at <= 0.7x its peak RSS).

--full-1b: full-parameter DPO's memory at the Llama-3.2-1B shape (1.24 B parameters, random weights; memory does not
depend on their values). Ours is measured: one optimizer step of K=2 x 1 pair of 64-token sequences at the leanest
full fine-tuning settings (docs/lora.md "What fits in 24 GiB": grad_dtype=bfloat16 adam_state_dtype=bfloat16
remat_policy=full hoist_weight_cast=false), fp32 master weights. TRL's default (a second full model as the reference,
fp32 AdamW) does not fit this 23 GiB machine, so it is derived: bytes per parameter x parameters, the per-parameter
costs being those of torch's AdamW in fp32 (weights 4, gradients 4, two moments 8) plus the reference copy's 4, with
and without it; the start-up and activations are not added, so it is a lower bound.

Cost: on the AVX2-only 2-core EPYC at load 4-10 (2026-12-07), one pair of rounds at the defaults (8 pairs, 4 steps)
took 8-15 min (ours 79-181 s, TRL's 436-800 s a process); --rounds 3 took 38 min. --full-1b: 99 s, 12.1 GiB peak.

Usage: .venv/bin/python bench/preference_vs_trl.py [--out DIR] [--bin DIR] [--config YML] [--model DIR]
           [--pairs FILE.pair] [--n-pairs N] [--steps N] [--rounds N] [--threads N]
       .venv/bin/python bench/preference_vs_trl.py --full-1b [--out DIR] [--bin DIR] [--config YML] [--threads N]
  defaults: runs/preference_vs_trl, build/, models/SmolLM2-135M-Instruct, runs/preference_real/data/train.pair,
  8 pairs, 4 steps, 3 pairs of rounds, 2 threads, base.yml (--config: one that matches an older copy of the
  trainer). Finished rounds (OUT/rounds.jsonl) are kept and skipped on a re-run.
Exit: 0 done (whether or not the goals are met); 2 bad usage or missing inputs.
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def read_pair_file(path):
    """The pair file of docs/data.md: [(prompt, chosen, rejected)] token lists."""
    blob = open(path, "rb").read()
    if blob[:8] != b"SGPAIR\0\0":
        raise SystemExit(f"{path}: not a pair file")
    n_pairs, n_tokens = struct.unpack_from("<QQ", blob, 16)
    tokens = struct.unpack_from(f"<{n_tokens}I", blob, 64)
    offs = struct.unpack_from(f"<{3 * n_pairs + 1}Q", blob, 64 + 4 * n_tokens)
    return [tuple(list(tokens[offs[3 * i + j]:offs[3 * i + j + 1]]) for j in range(3)) for i in range(n_pairs)]


def native_bf16():
    flags = open("/proc/cpuinfo").read()
    return " avx512_bf16" in flags or " amx_bf16" in flags


def timed(cmd, time_file, log_file, env=None):
    """Runs cmd under /usr/bin/time; returns (peak RSS MiB, wall s)."""
    with open(log_file, "w") as log:
        rc = subprocess.call(["/usr/bin/time", "-f", "%M %e", "-o", time_file, *cmd], stdout=log,
                             stderr=subprocess.STDOUT, env=env)
    if rc != 0:
        raise SystemExit(f"{' '.join(cmd[:2])} ... exited {rc}; see {log_file}")
    kib, wall = open(time_file).read().split()[-2:]
    return int(kib) / 1024, float(wall)


def thread_env(threads):
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false",
               TQDM_DISABLE="1")
    return env


# --- the two sides ---------------------------------------------------------------------------------------------------

def run_ours(a, pair_file, name):
    run_dir = os.path.join(a.out, "runs", name)
    subprocess.call(["rm", "-rf", run_dir])
    cmd = [os.path.join(a.bin, "trainer"), a.config, f"load_parameters_path={a.model}", "dataset_type=preference",
           "use_dpo=true", "dpo_beta=0.1", "dpo_loss_type=sigmoid", f"dataset_path={pair_file}",
           "max_target_length=256", "lora_rank=16", "lora_alpha=32", "lora_target_modules=all-linear",
           "per_device_batch_size=1", "gradient_accumulation_steps=4", f"steps={a.steps}", "learning_rate=1e-4",
           "adam_weight_decay=0", "dtype=auto", f"num_threads={a.threads}", "gradient_noise_scale=false",
           "enable_checkpointing=false", "log_period=1", f"base_output_directory={os.path.join(a.out, 'runs')}",
           f"run_name={name}"]
    rss, wall = timed(cmd, os.path.join(a.out, f"{name}.time"), os.path.join(a.out, f"{name}.log"),
                      thread_env(a.threads))
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    rows = [r for r in rows if "step_time_s" in r]
    return {"side": "ours", "peak_rss_mib": rss, "process_wall_s": wall, "steps": len(rows),
            "step_seconds": sum(r["step_time_s"] for r in rows), "counted_tokens": sum(r["input_tokens"] for r in rows),
            "first_loss": rows[0]["loss"], "last_loss": rows[-1]["loss"]}


def run_trl(a, rows_file, name):
    cmd = [PYTHON, os.path.abspath(__file__), "--trl-worker", rows_file, os.path.join(a.out, f"{name}.json"),
           "--model", a.model, "--steps", str(a.steps), "--threads", str(a.threads)]
    rss, wall = timed(cmd, os.path.join(a.out, f"{name}.time"), os.path.join(a.out, f"{name}.log"),
                      thread_env(a.threads))
    result = json.load(open(os.path.join(a.out, f"{name}.json")))
    result.update(side="trl", peak_rss_mib=rss, process_wall_s=wall)
    return result


def trl_worker(a):
    """One TRL DPOTrainer + peft run in this process; writes the step timings to the result file."""
    import torch
    torch.set_num_threads(a.threads)
    import datasets
    import peft
    import transformers
    from trl.trainer.dpo_trainer import DPOConfig, DPOTrainer
    transformers.utils.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    datasets.disable_caching()

    class Pretokenized(DPOTrainer):
        tokens = 0

        def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
            return dataset

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if model.training:
                self.tokens += int(inputs["attention_mask"].sum())
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    class Clock(transformers.TrainerCallback):
        def __init__(self):
            self.begin, self.spans, self.losses = None, [], []

        def on_step_begin(self, args, state, control, **kwargs):
            self.begin = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.spans.append(time.perf_counter() - self.begin)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                self.losses.append(logs["loss"])

    rows = [json.loads(l) for l in open(a.trl_worker[0])]
    bf16 = native_bf16()
    model = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    tok = transformers.AutoTokenizer.from_pretrained(a.model)
    config = DPOConfig(output_dir=os.path.join(os.path.dirname(a.trl_worker[1]), "trl-out"),
                       per_device_train_batch_size=1, gradient_accumulation_steps=4, max_steps=a.steps,
                       learning_rate=1e-4, weight_decay=0.0, warmup_steps=0, lr_scheduler_type="cosine",
                       bf16=bf16, fp16=False, use_cpu=True, gradient_checkpointing=False,
                       precompute_ref_log_probs=True, beta=0.1, loss_type=["sigmoid"], max_length=256,
                       truncation_mode="keep_start", report_to="none", save_strategy="no", logging_steps=1,
                       disable_tqdm=True, dataloader_num_workers=0, seed=0)
    lora = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=TARGETS, task_type="CAUSAL_LM")
    clock = Clock()
    t0 = time.perf_counter()
    trainer = Pretokenized(model=model, args=config, train_dataset=datasets.Dataset.from_list(rows),
                           processing_class=tok, peft_config=lora, callbacks=[clock])
    t1 = time.perf_counter()
    trainer.train()
    t2 = time.perf_counter()
    json.dump({"steps": len(clock.spans), "step_seconds": sum(clock.spans), "step_spans": clock.spans,
               "counted_tokens": trainer.tokens, "init_and_reference_s": t1 - t0, "train_call_s": t2 - t1,
               "first_loss": clock.losses[0] if clock.losses else None,
               "last_loss": clock.losses[-1] if clock.losses else None, "bf16": bf16},
              open(a.trl_worker[1], "w"))


# --- the speed and memory rounds -------------------------------------------------------------------------------------

def prepare_pairs(a):
    pairs = read_pair_file(a.pairs)[: a.n_pairs]
    if len(pairs) < a.n_pairs:
        raise SystemExit(f"{a.pairs} holds {len(pairs)} pairs, fewer than --n-pairs {a.n_pairs}")
    if (a.steps * 4) % a.n_pairs:
        raise SystemExit(f"--steps {a.steps} x K=4 = {a.steps * 4} pairs is not a whole number of passes over "
                         f"--n-pairs {a.n_pairs}")
    if any(len(p) + max(len(c), len(r)) > 256 for p, c, r in pairs):
        raise SystemExit("a sequence of the first --n-pairs pairs is longer than 256 tokens; both sides would cut it, "
                         "but the token count here assumes none is cut")
    rows_file = os.path.join(a.out, "pairs.jsonl")
    with open(rows_file, "w") as f:
        for p, c, r in pairs:
            f.write(json.dumps({"prompt_ids": p, "chosen_ids": c, "rejected_ids": r}) + "\n")
    pair_file = os.path.join(a.out, "pairs.pair")
    subprocess.check_call([os.path.join(ROOT, "scripts", "prepare_preference.sh"), rows_file, pair_file],
                          stdout=subprocess.DEVNULL)
    passes = a.steps * 4 // a.n_pairs
    tokens = passes * sum(2 * len(p) + len(c) + len(r) for p, c, r in pairs)
    return rows_file, pair_file, tokens


def rounds(a):
    os.makedirs(a.out, exist_ok=True)
    rows_file, pair_file, tokens = prepare_pairs(a)
    done_file = os.path.join(a.out, "rounds.jsonl")
    key = {"pairs": os.path.abspath(a.pairs), "n_pairs": a.n_pairs, "steps": a.steps, "threads": a.threads,
           "model": os.path.abspath(a.model)}
    done = [json.loads(l) for l in open(done_file)] if os.path.exists(done_file) else []
    done = [d for d in done if d["key"] == key]
    cpu = next((l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True)
                .stdout.splitlines() if l.startswith("Model name")), "?")
    print(f"{cpu}, {os.cpu_count()} cores, native bf16: {native_bf16()}; {a.n_pairs} pairs x "
          f"{a.steps * 4 // a.n_pairs} passes = {tokens} tokens per run (prompt + answer, both sequences)", flush=True)
    for i in range(a.rounds):
        for side in ("ours", "trl"):
            if any(d["round"] == i and d["side"] == side for d in done):
                continue
            load = open("/proc/loadavg").read().split()[:3]
            name = f"{side}-{i}"
            r = run_ours(a, pair_file, name) if side == "ours" else run_trl(a, rows_file, name)
            r.update(key=key, round=i, tokens=tokens, tokens_per_s=tokens / r["step_seconds"],
                     load_before=" ".join(load), date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
            if r["steps"] != a.steps:
                raise SystemExit(f"{name}: {r['steps']} steps, not {a.steps}")
            with open(done_file, "a") as f:
                f.write(json.dumps(r) + "\n")
            done.append(r)
            print(f"round {i} {side}: {r['tokens_per_s']:.1f} tokens/s ({r['step_seconds']:.1f} s of steps; counted "
                  f"tokens {r['counted_tokens']}), peak RSS {r['peak_rss_mib']:.0f} MiB, process "
                  f"{r['process_wall_s']:.0f} s, loss {r['first_loss']:.4f} -> {r['last_loss']:.4f}, load "
                  f"{r['load_before']}", flush=True)
    by = {(d["round"], d["side"]): d for d in done}
    speed, memory = [], []
    for i in range(a.rounds):
        ours, trl = by[(i, "ours")], by[(i, "trl")]
        speed.append(ours["tokens_per_s"] / trl["tokens_per_s"])
        memory.append(ours["peak_rss_mib"] / trl["peak_rss_mib"])

    def summary(name, xs, unit):
        return (f"{name}: median {statistics.median(xs):.2f}{unit} (range {min(xs):.2f}-{max(xs):.2f}) over "
                f"{len(xs)} pairs; per pair {', '.join(f'{x:.2f}' for x in xs)}")
    print(summary("tokens/s, ours / TRL's", speed, "x"))
    print(summary("peak RSS, ours / TRL's", memory, "x"))
    for side in ("ours", "trl"):
        t = [by[(i, side)]["tokens_per_s"] for i in range(a.rounds)]
        m = [by[(i, side)]["peak_rss_mib"] for i in range(a.rounds)]
        print(f"{side}: tokens/s median {statistics.median(t):.1f} ({min(t):.1f}-{max(t):.1f}); peak RSS median "
              f"{statistics.median(m):.0f} MiB ({min(m):.0f}-{max(m):.0f})")
    met_speed, met_memory = statistics.median(speed) >= 1.5, statistics.median(memory) <= 0.7
    print(f"goal >= 1.5x tokens/s: {'met' if met_speed else 'NOT met'}; goal <= 0.7x peak RSS: "
          f"{'met' if met_memory else 'NOT met'}")


# --- full-parameter DPO at a 1 B shape -------------------------------------------------------------------------------

LLAMA_1B = ("base_emb_dim=2048 base_num_query_heads=32 base_num_kv_heads=8 head_dim=64 base_mlp_dim=8192 "
            "base_num_decoder_layers=16 vocab_size=128256 rope_max_timescale=500000 rope_type=llama3 "
            "rope_low_freq_factor=1 rope_high_freq_factor=4 rope_original_max_position=8192 rope_factor=32 "
            "logits_via_embedding=true normalization_layer_epsilon=1e-5").split()
LLAMA_1B_PARAMS = 128256 * 2048 + 16 * (2048 * 2048 * 2 + 2048 * 512 * 2 + 3 * 2048 * 8192 + 2 * 2048) + 2048


def full_1b(a):
    import random
    os.makedirs(a.out, exist_ok=True)
    avail = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemAvailable")) / 1024 ** 2
    if avail < 14:
        raise SystemExit(f"--full-1b needs ~12 GiB; MemAvailable is {avail:.1f} GiB (wait for other jobs)")
    rng = random.Random(0)
    rows_file = os.path.join(a.out, "pairs-1b.jsonl")
    with open(rows_file, "w") as f:
        for _ in range(2):
            f.write(json.dumps({k: [rng.randrange(128256) for _ in range(32)]
                                for k in ("prompt_ids", "chosen_ids", "rejected_ids")}) + "\n")
    pair_file = os.path.join(a.out, "pairs-1b.pair")
    subprocess.check_call([os.path.join(ROOT, "scripts", "prepare_preference.sh"), rows_file, pair_file],
                          stdout=subprocess.DEVNULL)
    name = "ours-full-1b"
    subprocess.call(["rm", "-rf", os.path.join(a.out, "runs", name)])
    cmd = [os.path.join(a.bin, "trainer"), a.config, *LLAMA_1B, "dataset_type=preference", "use_dpo=true",
           f"dataset_path={pair_file}", "max_target_length=64", "per_device_batch_size=1",
           "gradient_accumulation_steps=2", "steps=1", "learning_rate=1e-5", "dtype=auto", f"num_threads={a.threads}",
           "grad_dtype=bfloat16", "adam_state_dtype=bfloat16", "remat_policy=full", "hoist_weight_cast=false",
           "gradient_noise_scale=false", "enable_checkpointing=false",
           f"base_output_directory={os.path.join(a.out, 'runs')}", f"run_name={name}"]
    rss, wall = timed(cmd, os.path.join(a.out, f"{name}.time"), os.path.join(a.out, f"{name}.log"),
                      thread_env(a.threads))
    gib = 1024 ** 3
    n = LLAMA_1B_PARAMS
    print(f"Llama-3.2-1B shape, {n / 1e9:.3f} B parameters, full-parameter DPO, 1 step of K=2 x 1 pair (64-token "
          f"sequences):")
    print(f"  ours, measured: peak RSS {rss / 1024:.2f} GiB ({wall:.0f} s), fp32 master weights, "
          f"grad_dtype=bfloat16 adam_state_dtype=bfloat16 remat_policy=full hoist_weight_cast=false, reference "
          f"log-probs precomputed (no second model)")
    print(f"  TRL default (a second model as the reference), derived: fp32 weights 4 + gradients 4 + AdamW moments 8 "
          f"+ reference copy 4 = 20 bytes/param = {20 * n / gib:.2f} GiB before activations and start-up")
    print(f"  TRL with precompute_ref_log_probs=True, derived: 16 bytes/param = {16 * n / gib:.2f} GiB")
    print(f"  ours / TRL default: at most {rss / 1024 / (20 * n / gib):.2f}x")
    with open(os.path.join(a.out, "full_1b.json"), "w") as f:
        json.dump({"params": n, "ours_peak_rss_mib": rss, "ours_wall_s": wall,
                   "trl_default_derived_gib": 20 * n / gib, "trl_precompute_derived_gib": 16 * n / gib,
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, f)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/preference_vs_trl")
    p.add_argument("--bin", default=os.path.join(ROOT, "build"))
    p.add_argument("--config", default="base.yml", help="the trainer's config (one matching --bin's trainer)")
    p.add_argument("--model", default="models/SmolLM2-135M-Instruct")
    p.add_argument("--pairs", default="runs/preference_real/data/train.pair")
    p.add_argument("--n-pairs", type=int, default=8)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--full-1b", action="store_true")
    p.add_argument("--trl-worker", nargs=2, metavar=("ROWS", "RESULT"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.trl_worker:
        return trl_worker(a)
    if not os.path.isfile(os.path.join(a.bin, "trainer")):
        p.error(f"no trainer in {a.bin} (scripts/build.sh, or --bin DIR)")
    if a.full_1b:
        return full_1b(a)
    if not os.path.isfile(os.path.join(a.model, "model.safetensors")):
        p.error(f"no {a.model} (scripts/prepare_model.sh)")
    if not os.path.isfile(a.pairs):
        p.error(f"no {a.pairs} (bench/preference_real.sh makes it, or --pairs FILE.pair)")
    rounds(a)


if __name__ == "__main__":
    main()
