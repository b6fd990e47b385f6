#!/usr/bin/env python3
"""Memory levers on the seed model, measured: remat_policy at pdbs 1, 4 and 8 (tracked peak bytes, peak RSS, step
time), the largest pdbs each policy fits in the memory `none` needs at pdbs=1, then each lever's saving at the
benchmark's configuration (pdbs=1, K=4, bf16 compute), added one at a time, next to bench/peer.py's peak RSS.
Behind bench/memory_levers.sh; prints Markdown.

Peak bytes = memory_report.json's peak_step_bytes (the tracking allocator's largest single-step peak: live tensors
only). Peak RSS = the process's max RSS from wait4 (everything: LibTorch's own baseline, cached allocator blocks,
oneDNN scratch; for the peer the Python interpreter too). Step time = median step_time_s after the first step, one
run each: indicative only (the speed cost of a recipe comes from bench.py's alternating pairs).
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (run_measured, trainer_cmd, peer_cmd, SEED)

MIB = 1048576.0


def sg(a, env, pdbs, ga, steps, keys):
    with tempfile.TemporaryDirectory(prefix="sg-mem-") as d:
        _, rss = bench.run_measured(bench.trainer_cmd(a, d, "bfloat16", pdbs, ga, steps, keys), env)
        (run_dir,) = [os.path.join(d, x) for x in os.listdir(d)]
        with open(os.path.join(run_dir, "memory_report.json")) as f:
            report = json.load(f)
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    times = [r["step_time_s"] for r in rows[1:]] or [r["step_time_s"] for r in rows]
    return dict(peak=report["peak_step_bytes"], rss=rss, step_s=statistics.median(times), report=report)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=3, help="optimizer steps per run (the first is left out of times)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--pdbs", default="1,4,8")
    p.add_argument("--policies", default="none,minimal,full")
    p.add_argument("--skip", default="", help="comma list of sections to skip: remat,levers")
    p.add_argument("--model", default="", help="override the seed model (as bench.py --model), for a smoke test")
    a = p.parse_args()
    a.threads = a.threads or os.cpu_count()
    a.warmup = 1
    if a.model:
        bench.SEED.update(zip(("emb", "heads", "kv_heads", "head_dim", "mlp", "layers", "vocab", "seq"),
                              map(int, a.model.split(","))))
    skip = set(filter(None, a.skip.split(",")))
    env = dict(os.environ)
    if "avx512_bf16" in bench.cpu_flags():
        env["OPENBLAS_CORETYPE"] = "COOPERLAKE"
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# shadowgrad memory levers, {now}\n")
    print(f"- machine: {bench.cpu_name()}, {os.cpu_count()} cores; {a.threads} threads; model {bench.SEED}; "
          f"dtype=bfloat16; {a.steps} steps per run")
    print(f"- load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n", flush=True)

    if "remat" not in skip:
        pdbs_list = list(map(int, a.pdbs.split(",")))
        policies = a.policies.split(",")
        print("## remat_policy (K=1, grad_dtype=float32; peak bytes = tracked live tensors)\n")
        print("| remat_policy | pdbs | peak MiB | peak RSS MiB | step s | s per sequence |\n|---|---:|---:|---:|---:|---:|")
        res = {}
        for pdbs in pdbs_list:
            for policy in policies:  # the policies alternate at each pdbs
                r = sg(a, env, pdbs, 1, a.steps, (f"remat_policy={policy}",))
                res[policy, pdbs] = r
                print(f"| {policy} | {pdbs} | {r['peak'] / MIB:.1f} | {r['rss']:.0f} | {r['step_s']:.2f} | "
                      f"{r['step_s'] / pdbs:.3f} |", flush=True)
        if 1 in pdbs_list and len(pdbs_list) >= 2:
            budget = res["none", 1]["peak"]
            print(f"\nLargest pdbs within none's pdbs=1 peak ({budget / MIB:.1f} MiB), from the line through the "
                  f"measured peaks (persistent + pdbs x per-sequence), then checked with one run:\n")
            print("| remat_policy | MiB per sequence | predicted largest pdbs | checked run: pdbs, peak MiB, fits |\n"
                  "|---|---:|---:|---|")
            hi = max(pdbs_list)
            for policy in policies:
                per_seq = (res[policy, hi]["peak"] - res[policy, 1]["peak"]) / (hi - 1)
                fixed = res[policy, 1]["peak"] - per_seq
                n = max(1, int((budget - fixed) // per_seq)) if per_seq > 0 else hi
                check = ""
                if n not in pdbs_list:
                    r = sg(a, env, n, 1, a.steps, (f"remat_policy={policy}",))
                    check = f"{n}, {r['peak'] / MIB:.1f}, {'yes' if r['peak'] <= budget else 'NO'}"
                else:
                    check = f"{n}, {res[policy, n]['peak'] / MIB:.1f} (above), " \
                            f"{'yes' if res[policy, n]['peak'] <= budget else 'NO'}"
                print(f"| {policy} | {per_seq / MIB:.1f} | {n} | {check} |", flush=True)
        print()

    if "levers" not in skip:
        print("## Levers at the benchmark's configuration (pdbs=1, K=4), added one at a time\n")
        levers = [("defaults", ()),
                  ("+ grad_dtype=bfloat16", ("grad_dtype=bfloat16",)),
                  ("+ adam_state_dtype=bfloat16", ("adam_state_dtype=bfloat16",)),
                  ("+ remat_policy=full", ("remat_policy=full",)),
                  ("+ hoist_weight_cast=false", ("hoist_weight_cast=false",)),
                  ("+ cpu_allocator_cache_mib=0", ("cpu_allocator_cache_mib=0",))]
        print("| configuration | peak MiB | saves MiB | peak RSS MiB | saves RSS MiB | optimizer state MiB | "
              "shadow MiB | step s |\n|---|---:|---:|---:|---:|---:|---:|---:|")
        keys, prev = (), None
        for label, extra in levers:
            keys = keys + extra
            r = sg(a, env, 1, 4, a.steps, keys)
            rep = r["report"]
            saves = "" if prev is None else f"{(prev['peak'] - r['peak']) / MIB:.1f}"
            saves_rss = "" if prev is None else f"{prev['rss'] - r['rss']:.0f}"
            print(f"| {label} | {r['peak'] / MIB:.1f} | {saves} | {r['rss']:.0f} | {saves_rss} | "
                  f"{rep['optimizer_state_bytes'] / MIB:.1f} | {rep['grad_accumulator_bytes'] / MIB:.1f} | "
                  f"{r['step_s']:.2f} |", flush=True)
            prev = r
        out, peer_rss = bench.run_measured(bench.peer_cmd(a, "bfloat16", 1, 4, a.steps), env)
        c = bench.peer_lines(out)[0]
        print(f"| bench/peer.py (PyTorch {c.get('torch')} eager, autocast bf16, {c.get('optimizer')}) | | | "
              f"{peer_rss:.0f} | | | | |")
        print(f"\nlowest-memory row / peer peak RSS: {prev['rss'] / peer_rss:.2f}x (one run each; bench.py "
              f"--variant measures it in alternating pairs)\n")
    print(f"- load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
