#!/usr/bin/env python3
"""What shadowgrad saves a PyTorch user: bench/peer.py's plain GA loop (loss / K into .grad, torch.optim.AdamW:
fused=True where this torch has it for CPU, see --adamw) against the same loop with
shadowgrad.ShadowAccumulator(grad_dtype=...), in alternating pairs (plain, shadowgrad, plain, ...) in one invocation.
Prints a Markdown table: peak RSS (the process's max RSS from getrusage) and tokens/s (tokens / seconds over the
steps after --warmup, as each process timed them), each as the median and range over the pairs, plus the median of
the per-pair differences and ratios, and the load average seen.

  PYTHONPATH=build/python "$SHADOWGRAD_PYTHON" bench/python_pairs.py --pairs 5            # bench/bench_python.sh
  ... --variants fused         # the shadowgrad loop steps with shadowgrad.optim.AdamW (the plain loop keeps torch's)
  ... --variants torch,fused   # rounds of three runs: plain, shadowgrad + torch's AdamW, shadowgrad + the fused one
  ... --variants torch@DIR,torch   # the shadowgrad package in DIR against build/python's (A/B of two builds)
  ... --model resnet18 --pdbs 32       # torchvision's ResNet-18 on 32x32 images; "tokens" are then images
  ... --profile                # also the seconds of each phase of a step (bench/python_profile.py's table)
  ... --adamw foreach          # torch.optim.AdamW's implementation in every loop (default auto: fused on CPU)
The runs use this script's interpreter (sys.executable), so run it with the venv's python.
Cost: one pair of 6-step runs of the seed model takes about 1 min on 2 cores (more under load).
"""
import argparse
import datetime
import json
import os
import sys

from bench import ROOT, SEED, cpu_name, peer_cmd, peer_lines, run_measured, spread
from python_profile import print_phase_table

OPTIMIZERS = {"torch": "torch.optim.AdamW", "fused": "shadowgrad.optim.AdamW"}


def run(a, module_path, mode, optimizer):
    cmd = (peer_cmd(a, a.dtype, a.pdbs, a.ga, a.steps) + [f"--shadowgrad={mode}", f"--optimizer={optimizer}",
                                                          f"--adamw={a.adamw}", f"--model={a.model}",
                                                          f"--image-size={a.image_size}"] +
           (["--profile"] if a.profile else []))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [module_path, env.get("PYTHONPATH")]))
    load = os.getloadavg()[0]
    out, peak = run_measured(cmd, env)
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    config, steps, _ = peer_lines(out)
    rows = steps[a.warmup:]
    return dict(peak_mib=peak, tps=sum(r["tokens"] for r in rows) / sum(r["seconds"] for r in rows),
                loss=rows[-1]["loss"], load=load, rows=rows, apart=[line["apart"] for line in lines if "apart" in line],
                config=config)


def parse_variant(text, default_path):
    """"fused" or "torch@/some/dir": the shadowgrad loop's optimizer, and where its shadowgrad package is."""
    optimizer, _, path = text.partition("@")
    if optimizer not in OPTIMIZERS:
        raise SystemExit(f"--variants: {optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
    return dict(optimizer=optimizer, path=path or default_path,
                label=f"shadowgrad, {OPTIMIZERS[optimizer]}" + (f" (package in {path})" if path else ""))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2, help="first steps of each run left out of tokens/s")
    p.add_argument("--dtype", default="bfloat16", help="autocast compute dtype of the model")
    p.add_argument("--grad-dtype", dest="grad_dtype", default="bfloat16", help="shadowgrad's grad_dtype")
    p.add_argument("--variants", default="torch", help="comma-separated shadowgrad loops, each run after the plain "
                   "one in every round: torch (torch.optim.AdamW) or fused (shadowgrad.optim.AdamW), optionally "
                   "@DIR for a shadowgrad package in DIR")
    p.add_argument("--model", choices=["decoder", "resnet18"], default="decoder")
    p.add_argument("--image-size", dest="image_size", type=int, default=32, help="resnet18's images are N x N")
    p.add_argument("--pdbs", type=int, default=1, help="sequences (images) per microbatch")
    p.add_argument("--ga", type=int, default=4)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads; 0 = all cores")
    p.add_argument("--profile", action="store_true", help="peer.py --profile: also print the phase table")
    p.add_argument("--adamw", choices=["auto", "fused", "foreach", "for-loop"], default="auto",
                   help="peer.py --adamw: torch.optim.AdamW's implementation wherever the loops use it")
    p.add_argument("--model-shape", dest="model_shape", default="", help="override the seed decoder: emb,heads,"
                   "kv_heads,head_dim,mlp,layers,vocab,seq (a quick smoke test of this script)")
    a = p.parse_args()
    a.threads = a.threads or os.cpu_count()
    if a.model_shape:
        SEED.update(zip(("emb", "heads", "kv_heads", "head_dim", "mlp", "layers", "vocab", "seq"),
                        map(int, a.model_shape.split(","))))
    variants = [parse_variant(v, os.path.join(ROOT, "build", "python")) for v in a.variants.split(",")]

    plain, shadow = [], [[] for _ in variants]
    for i in range(a.pairs):
        plain.append(run(a, "", "off", "torch"))
        for v, runs in zip(variants, shadow):
            runs.append(run(a, v["path"], a.grad_dtype, v["optimizer"]))
        print(f"round {i + 1}: plain {plain[-1]['tps']:.1f}/s {plain[-1]['peak_mib']:.0f} MiB; " +
              "; ".join(f"{v['optimizer']} {r[-1]['tps']:.1f}/s {r[-1]['peak_mib']:.0f} MiB"
                        for v, r in zip(variants, shadow)), file=sys.stderr, flush=True)

    m = SEED
    what = (f"Seed model (emb {m['emb']}, {m['heads']} heads, mlp {m['mlp']}, {m['layers']} layers, vocab "
            f"{m['vocab']}, seq {m['seq']})" if a.model == "decoder" else
            f"torchvision resnet18(num_classes=10), no weights, {a.image_size}x{a.image_size} random images")
    unit, rate = ("tokens/s", "{:.0f}") if a.model == "decoder" else ("images/s", "{:.1f}")
    loads = [r["load"] for r in plain + sum(shadow, [])]
    c = plain[0]["config"]
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {cpu_name()}, {a.threads} threads, "
          f"torch {c.get('torch')} ({c.get('python')}), {a.pairs} rounds "
          f"of alternating runs (plain, then each shadowgrad loop), load average {min(loads):.1f}-{max(loads):.1f} "
          f"(1 min, at each run's start). {what}, {a.dtype} compute, pdbs={a.pdbs}, K={a.ga}, clip 1.0, "
          f"grad_dtype={a.grad_dtype}; the plain loop steps with {c.get('optimizer')}; {a.steps} steps "
          f"per run ({a.warmup} warm-up steps left out of {unit}).\n")
    print(f"| loop | peak RSS MiB | {unit} | last loss |")
    print(f"|---|---:|---:|---:|")
    for label, runs in [(f"plain (`loss / K` into `.grad`), {c.get('optimizer')}", plain)] + \
            [(v["label"], r) for v, r in zip(variants, shadow)]:
        print(f"| {label} | {spread([r['peak_mib'] for r in runs])} | {spread([r['tps'] for r in runs], rate)} | "
              f"{spread([r['loss'] for r in runs], '{:.4f}')} |")
    for v, runs in zip(variants, shadow):
        saved = [p_["peak_mib"] - s["peak_mib"] for p_, s in zip(plain, runs)]
        ratio = [s["tps"] / p_["tps"] for p_, s in zip(plain, runs)]
        print(f"| per pair, {v['label']}: plain − shadowgrad RSS, shadowgrad / plain {unit} | "
              f"{spread(saved, '{:.1f}')} | **{spread(ratio, '{:.3f}')}** | |")
    if a.profile:
        print()
        print_phase_table(["plain, torch.optim.AdamW"] + [v["label"] for v in variants],
                          [sum((r["rows"] for r in runs), []) for runs in [plain] + shadow],
                          [sum((r["apart"] for r in runs), []) for runs in [plain] + shadow])
    return 0


if __name__ == "__main__":
    sys.exit(main())
