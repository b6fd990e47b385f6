#!/usr/bin/env python3
"""Where a step's time goes, phase by phase, in the plain PyTorch GA loop and in the same loop with shadowgrad:
bench/peer.py --profile, run for each loop in turn (plain, shadowgrad, ..., --rounds times), prints a Markdown
table of the median seconds per optimizer step of each phase over the steps after --warmup of every round.

  PYTHONPATH=build/python "$SHADOWGRAD_PYTHON" bench/python_profile.py --rounds 2           # the seed decoder
  PYTHONPATH=build/python "$SHADOWGRAD_PYTHON" bench/python_profile.py --model resnet18 --dtype float32 --pdbs 32
Cost: about 1 min per round and loop for the seed model on 2 cores.
"""
import argparse
import datetime
import json
import os
import statistics
import sys

from bench import ROOT, SEED, cpu_name, peer_cmd, peer_lines, run_measured

# (label, peer.py arguments)
LOOPS = {
    "plain": ("plain, torch AdamW", ["--shadowgrad=off", "--optimizer=torch"]),
    "plain-fused": ("plain, shadowgrad.optim.AdamW", ["--shadowgrad=off", "--optimizer=fused"]),
    "shadow": ("shadowgrad bf16, torch AdamW", ["--shadowgrad=bfloat16", "--optimizer=torch"]),
    "shadow-fused": ("shadowgrad bf16, shadowgrad.optim.AdamW", ["--shadowgrad=bfloat16", "--optimizer=fused"]),
}
# (phase key, description); "accumulate" and "fold" are parts of "backward".
PHASES = [
    ("data", "random batch"),
    ("forward", "forward + loss"),
    ("backward", "backward (all of it)"),
    ("accumulate", "&nbsp;&nbsp;of which AccumulateGrad nodes (store into .grad; with shadowgrad + fold hook)"),
    ("fold", "&nbsp;&nbsp;&nbsp;&nbsp;of which shadowgrad's fold (fp32 add, bf16 rounding, free)"),
    ("begin_end", "`begin()` + `end()`"),
    ("clip", "`clip_grad_norm_`"),
    ("step", "optimizer step (`opt.step()` / `acc.step(opt)`)"),
    ("zero_grad", "`zero_grad(set_to_none=True)`"),
]
INSIDE_BACKWARD = {"accumulate", "fold"}


def print_phase_table(labels, steps, apart):
    """Markdown: the median seconds per step of each phase (rows) for each loop (columns). steps[i]: the JSON lines
    of loop i's measured steps (peer.py --profile); apart[i]: its "apart" records."""
    def med(values):
        return statistics.median(values) if values else 0.0

    print("| phase | " + " | ".join(labels) + " |")
    print("|---|" + "---:|" * len(labels))
    for key, label in PHASES:
        cells = [med([s["phases"].get(key, 0.0) for s in rows]) for rows in steps]
        if any(cells):
            print(f"| {label} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    top = [k for k, _ in PHASES if k not in INSIDE_BACKWARD]
    rest = [med([s["seconds"] - sum(s["phases"].get(k, 0.0) for k in top) for s in rows]) for rows in steps]
    print("| rest (loop glue, `loss.item()`, timers) | " + " | ".join(f"{c:.3f}" for c in rest) + " |")
    print("| **whole step** | " + " | ".join(f"**{med([s['seconds'] for s in rows]):.3f}**" for rows in steps) + " |")
    print("| measured apart: one `opt.step()` call with no gradients (Python overhead per call) | " +
          " | ".join(f"{med([x['empty_step_call'] for x in a]) * 1e3:.2f} ms" for a in apart) + " |")
    print("| measured apart: every shadow converted to fp32, one at a time | " +
          " | ".join(f"{med([x['convert_all'] for x in a]):.3f}" if a and "convert_all" in a[0] else ""
                     for a in apart) + " |")
    print(f"\nParameters: {apart[0][0]['parameters'] if apart and apart[0] else '?'}.")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2, help="first steps of each run left out")
    p.add_argument("--loops", default="plain,shadow,shadow-fused", help=f"comma-separated, of {', '.join(LOOPS)}")
    p.add_argument("--model", default="decoder", choices=["decoder", "resnet18"])
    p.add_argument("--image-size", dest="image_size", type=int, default=32)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--pdbs", type=int, default=1)
    p.add_argument("--ga", type=int, default=4)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads; 0 = all cores")
    p.add_argument("--module-path", dest="module_path", default=os.path.join(ROOT, "build", "python"),
                   help="the folder holding the shadowgrad package to measure")
    a = p.parse_args()
    a.threads = a.threads or os.cpu_count()
    loops = a.loops.split(",")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [a.module_path, env.get("PYTHONPATH")]))

    steps = {name: [] for name in loops}
    apart = {name: [] for name in loops}
    loads = []
    for r in range(a.rounds):
        for name in loops:
            loads.append(os.getloadavg()[0])
            cmd = (peer_cmd(a, a.dtype, a.pdbs, a.ga, a.steps) + LOOPS[name][1] +
                   [f"--model={a.model}", f"--image-size={a.image_size}", "--profile"])
            out, _ = run_measured(cmd, env)
            lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            steps[name] += peer_lines(out)[1][a.warmup:]
            apart[name] += [line["apart"] for line in lines if "apart" in line]
            print(f"round {r + 1} {name}: {[round(s['seconds'], 2) for s in steps[name][-(a.steps - a.warmup):]]}",
                  file=sys.stderr, flush=True)

    what = (f"seed decoder (emb {SEED['emb']}, {SEED['layers']} layers, vocab {SEED['vocab']}, seq {SEED['seq']})"
            if a.model == "decoder" else f"torchvision resnet18(num_classes=10), {a.image_size}x{a.image_size} images")
    print(f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, {cpu_name()}, {a.threads} threads, load average "
          f"{min(loads):.1f}-{max(loads):.1f} (1 min, at each run's start). {what}, {a.dtype} compute, "
          f"pdbs={a.pdbs}, K={a.ga}. Median seconds per optimizer step over {a.rounds} round(s) x "
          f"{a.steps - a.warmup} steps.\n")
    print_phase_table([LOOPS[n][0] for n in loops], [steps[n] for n in loops], [apart[n] for n in loops])
    return 0


if __name__ == "__main__":
    sys.exit(main())
