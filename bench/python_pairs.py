#!/usr/bin/python3
"""What shadowgrad saves a PyTorch user: bench/peer.py's plain GA loop (loss / K into .grad) against the same loop
with shadowgrad.ShadowAccumulator(grad_dtype=...), on the seed model, in alternating pairs (plain, shadowgrad,
plain, ...) in one invocation. Prints a Markdown table: peak RSS (the process's max RSS from getrusage) and tokens/s
(tokens / seconds over the steps after --warmup, as each process timed them), each as the median and range over the
pairs, plus the median of the per-pair differences and ratios.

  PYTHONPATH=build/python /usr/bin/python3 bench/python_pairs.py --pairs 3     # scripts/bench_python.sh
Cost: one pair of 6-step runs of the seed model takes about 1 min on 2 cores.
"""
import argparse
import datetime
import json
import os
import statistics
import sys

from bench import ROOT, SEED, cpu_name, peer_cmd, run_measured, spread


def run(a, env, mode):
    cmd = peer_cmd(a, a.dtype, a.pdbs, a.ga, a.steps) + [f"--shadowgrad={mode}"]
    out, peak = run_measured(cmd, env)
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")][a.warmup:]
    return dict(peak_mib=peak, tps=sum(r["tokens"] for r in rows) / sum(r["seconds"] for r in rows),
                loss=rows[-1]["loss"])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2, help="first steps of each run left out of tokens/s")
    p.add_argument("--dtype", default="bfloat16", help="autocast compute dtype of the model")
    p.add_argument("--grad-dtype", dest="grad_dtype", default="bfloat16", help="shadowgrad's grad_dtype")
    p.add_argument("--pdbs", type=int, default=1)
    p.add_argument("--ga", type=int, default=4)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads; 0 = all cores")
    p.add_argument("--model", default="", help="override the seed model: emb,heads,kv_heads,head_dim,mlp,layers,"
                   "vocab,seq (a quick smoke test of this script)")
    a = p.parse_args()
    a.threads = a.threads or os.cpu_count()
    if a.model:
        SEED.update(zip(("emb", "heads", "kv_heads", "head_dim", "mlp", "layers", "vocab", "seq"),
                        map(int, a.model.split(","))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(ROOT, "build", "python"), env.get("PYTHONPATH")]))

    plain, shadow = [], []
    for i in range(a.pairs):
        plain.append(run(a, env, "off"))
        shadow.append(run(a, env, a.grad_dtype))
        print(f"pair {i + 1}: plain {plain[-1]}  shadowgrad {shadow[-1]}", file=sys.stderr, flush=True)

    m = SEED
    print(f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, {cpu_name()}, {a.threads} threads, {a.pairs} "
          f"alternating pairs. Seed model (emb {m['emb']}, {m['heads']} heads, mlp {m['mlp']}, {m['layers']} layers, "
          f"vocab {m['vocab']}, seq {m['seq']}), {a.dtype} autocast, pdbs={a.pdbs}, K={a.ga}, AdamW, "
          f"{a.steps} steps per run ({a.warmup} warm-up steps left out of tokens/s).\n")
    print(f"| loop | peak RSS MiB | tokens/s | last loss |")
    print(f"|---|---:|---:|---:|")
    print(f"| plain (`loss / K` into `.grad`) | {spread([r['peak_mib'] for r in plain])} | "
          f"{spread([r['tps'] for r in plain])} | {spread([r['loss'] for r in plain], '{:.4f}')} |")
    print(f"| shadowgrad, grad_dtype={a.grad_dtype} | {spread([r['peak_mib'] for r in shadow])} | "
          f"{spread([r['tps'] for r in shadow])} | {spread([r['loss'] for r in shadow], '{:.4f}')} |")
    saved = [p_["peak_mib"] - s["peak_mib"] for p_, s in zip(plain, shadow)]
    ratio = [s["tps"] / p_["tps"] for p_, s in zip(plain, shadow)]
    print(f"| per pair: plain − shadowgrad RSS, shadowgrad / plain tokens/s | {spread(saved, '{:.1f}')} | "
          f"{spread(ratio, '{:.3f}')} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
