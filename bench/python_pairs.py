#!/usr/bin/python3
"""What shadowgrad saves a PyTorch user: bench/peer.py's plain GA loop (loss / K into .grad, torch.optim.AdamW)
against the same loop with shadowgrad.ShadowAccumulator(grad_dtype=...), in alternating pairs (plain, shadowgrad,
plain, ...) in one invocation. Prints a Markdown table: peak RSS (the process's max RSS from getrusage) and
tokens/s (tokens / seconds over the steps after --warmup, as each process timed them), each as the median and range
over the pairs, plus the median of the per-pair differences and ratios, and the load average seen.

  PYTHONPATH=build/python /usr/bin/python3 bench/python_pairs.py --pairs 5                     # scripts/bench_python.sh
  ... --optimizer fused        # the shadowgrad loop steps with shadowgrad.optim.AdamW (the plain loop keeps torch's)
  ... --model resnet18 --dtype float32 --pdbs 32         # torchvision's ResNet-18, 32x32 images; "tokens" = images
  ... --module-path DIR        # the shadowgrad package in DIR instead of build/python (A/B of two builds)
Cost: one pair of 6-step runs of the seed model takes about 1 min on 2 cores (more under load).
"""
import argparse
import datetime
import json
import os
import sys

from bench import ROOT, SEED, cpu_name, peer_cmd, run_measured, spread


def run(a, env, mode, optimizer):
    cmd = (peer_cmd(a, a.dtype, a.pdbs, a.ga, a.steps) +
           [f"--shadowgrad={mode}", f"--optimizer={optimizer}", f"--model={a.model}", f"--image-size={a.image_size}"])
    load = os.getloadavg()[0]
    out, peak = run_measured(cmd, env)
    rows = [json.loads(line) for line in out.splitlines() if line.startswith('{"step"')][a.warmup:]
    return dict(peak_mib=peak, tps=sum(r["tokens"] for r in rows) / sum(r["seconds"] for r in rows),
                loss=rows[-1]["loss"], load=load)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2, help="first steps of each run left out of tokens/s")
    p.add_argument("--dtype", default="bfloat16", help="autocast compute dtype of the model")
    p.add_argument("--grad-dtype", dest="grad_dtype", default="bfloat16", help="shadowgrad's grad_dtype")
    p.add_argument("--optimizer", choices=["torch", "fused"], default="torch",
                   help="the shadowgrad loop's optimizer: torch.optim.AdamW or shadowgrad.optim.AdamW")
    p.add_argument("--model", choices=["decoder", "resnet18"], default="decoder")
    p.add_argument("--image-size", dest="image_size", type=int, default=32, help="resnet18's images are N x N")
    p.add_argument("--pdbs", type=int, default=1, help="sequences (images) per microbatch")
    p.add_argument("--ga", type=int, default=4)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads; 0 = all cores")
    p.add_argument("--module-path", dest="module_path", default=os.path.join(ROOT, "build", "python"),
                   help="the folder holding the shadowgrad package to measure")
    p.add_argument("--model-shape", dest="model_shape", default="", help="override the seed decoder: emb,heads,"
                   "kv_heads,head_dim,mlp,layers,vocab,seq (a quick smoke test of this script)")
    a = p.parse_args()
    a.threads = a.threads or os.cpu_count()
    if a.model_shape:
        SEED.update(zip(("emb", "heads", "kv_heads", "head_dim", "mlp", "layers", "vocab", "seq"),
                        map(int, a.model_shape.split(","))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [a.module_path, env.get("PYTHONPATH")]))

    plain, shadow = [], []
    for i in range(a.pairs):
        plain.append(run(a, env, "off", "torch"))
        shadow.append(run(a, env, a.grad_dtype, a.optimizer))
        print(f"pair {i + 1}: plain {plain[-1]}  shadowgrad {shadow[-1]}", file=sys.stderr, flush=True)

    m = SEED
    what = (f"Seed model (emb {m['emb']}, {m['heads']} heads, mlp {m['mlp']}, {m['layers']} layers, vocab "
            f"{m['vocab']}, seq {m['seq']})" if a.model == "decoder" else
            f"torchvision resnet18(num_classes=10), no weights, {a.image_size}x{a.image_size} random images")
    unit, rate = ("tokens/s", "{:.0f}") if a.model == "decoder" else ("images/s", "{:.1f}")
    opt = "shadowgrad.optim.AdamW" if a.optimizer == "fused" else "torch.optim.AdamW"
    loads = [r["load"] for r in plain + shadow]
    print(f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, {cpu_name()}, {a.threads} threads, {a.pairs} "
          f"alternating pairs, load average {min(loads):.1f}-{max(loads):.1f} (1 min, at each run's start). {what}, "
          f"{a.dtype} compute, pdbs={a.pdbs}, K={a.ga}, clip 1.0; plain loop with torch.optim.AdamW(foreach=True), "
          f"shadowgrad loop with {opt}; {a.steps} steps per run ({a.warmup} warm-up steps left out of {unit}).\n")
    print(f"| loop | peak RSS MiB | {unit} | last loss |")
    print(f"|---|---:|---:|---:|")
    print(f"| plain (`loss / K` into `.grad`), torch.optim.AdamW | {spread([r['peak_mib'] for r in plain])} | "
          f"{spread([r['tps'] for r in plain], rate)} | {spread([r['loss'] for r in plain], '{:.4f}')} |")
    print(f"| shadowgrad, grad_dtype={a.grad_dtype}, {opt} | {spread([r['peak_mib'] for r in shadow])} | "
          f"{spread([r['tps'] for r in shadow], rate)} | "
          f"{spread([r['loss'] for r in shadow], '{:.4f}')} |")
    saved = [p_["peak_mib"] - s["peak_mib"] for p_, s in zip(plain, shadow)]
    ratio = [s["tps"] / p_["tps"] for p_, s in zip(plain, shadow)]
    print(f"| per pair: plain − shadowgrad RSS, shadowgrad / plain {unit} | {spread(saved, '{:.1f}')} | "
          f"{spread(ratio, '{:.3f}')} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
