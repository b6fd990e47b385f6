"""Formats the runs of bench/memory_table.sh as Markdown tables with a PASS/FAIL check per row.

Usage: memory_table.py RUNS_DIR   (exit 1 if any row fails)
"""
import json
import statistics
import sys
from pathlib import Path

MIB = 1048576.0


def load(root, name):
    d = Path(root) / name
    report = json.loads((d / "memory_report.json").read_text())
    steps = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines() if line.strip()]
    # Step 1 creates the optimizer state and warms up oneDNN; time the later steps.
    times = [s["step_time_s"] for s in steps[1:]] or [s["step_time_s"] for s in steps]
    return {"report": report, "step_peaks": [s["peak_mem_bytes"] for s in steps],
            "step_time": statistics.median(times)}


def mib(b):
    return f"{b / MIB:.1f}"


def main(root):
    runs = {n: load(root, n) for n in ["ga1_b4_f32", "ga4_b1_f32", "ga2_b1_f32", "ga2_b1_bf16", "ga1_b4_bf16",
                                      "ga2_b1_bf16_nohoist"]}
    peak = {n: r["report"]["peak_step_bytes"] for n, r in runs.items()}
    n_params = runs["ga1_b4_f32"]["report"]["param_count"]
    rows = []

    a, b = peak["ga1_b4_f32"], peak["ga4_b1_f32"]
    rows.append(("GA saves memory at a matched global batch", "ga=1 pdbs=4", "ga=4 pdbs=1", a, b,
                 f"GA's peak is {100 * (a - b) / a:.1f} % lower", b < 0.9 * a))
    a, b = peak["ga2_b1_f32"], peak["ga4_b1_f32"]
    rows.append(("GA's overhead does not depend on K", "ga=2 pdbs=1", "ga=4 pdbs=1", a, b,
                 f"differ by {100 * abs(b - a) / a:.2f} % (limit 2 %)", abs(b - a) <= 0.02 * a))
    a, b = peak["ga2_b1_f32"], peak["ga2_b1_bf16"]
    need = 0.9 * 2 * n_params
    rows.append(("grad_dtype shrinks the accumulator", "ga=2 pdbs=1 grad_dtype=float32", "ga=2 pdbs=1 grad_dtype=bfloat16", a, b,
                 f"falls by {mib(a - b)} MiB; needs >= 0.9 x 2 B x {n_params} = {mib(need)} MiB", a - b >= need))
    a, b = peak["ga1_b4_f32"], peak["ga1_b4_bf16"]
    rows.append(("grad_dtype=bfloat16 never costs memory", "ga=1 pdbs=4 grad_dtype=float32", "ga=1 pdbs=4 grad_dtype=bfloat16",
                 a, b, f"bfloat16 is {mib(a - b)} MiB lower", b <= a))

    print(f"Seed model: {n_params} parameters; grad_dtype=float32 unless stated; peak = largest single-step peak "
          "(peak_step_bytes) over 3 steps, in MiB.\n")
    print("| what | A | B | peak A | peak B | result | check |")
    print("|---|---|---|---:|---:|---|---|")
    ok = True
    for what, ca, cb, pa, pb, result, passed in rows:
        ok &= passed
        print(f"| {what} | {ca} | {cb} | {mib(pa)} | {mib(pb)} | {result} | {'PASS' if passed else 'FAIL'} |")

    print("\nWhere the memory goes (bytes from memory_report.json, in MiB):\n")
    print("| run | params | optimizer state | shadow tree | peak step | peak step - persistent |")
    print("|---|---:|---:|---:|---:|---:|")
    for n, r in runs.items():
        rep = r["report"]
        persistent = rep["params_bytes"] + rep["optimizer_state_bytes"] + rep["grad_accumulator_bytes"]
        print(f"| {n} | {mib(rep['params_bytes'])} | {mib(rep['optimizer_state_bytes'])} | "
              f"{mib(rep['grad_accumulator_bytes'])} | {mib(rep['peak_step_bytes'])} | "
              f"{mib(rep['peak_step_bytes'] - persistent)} |")

    off, on = runs["ga2_b1_bf16_nohoist"], runs["ga2_b1_bf16"]  # hoisting is the default
    print("\nWeight-cast hoisting (ga=2 pdbs=1 grad_dtype=bfloat16; time = median step_time_s of steps 2-3):\n")
    print("| hoist_weight_cast | peak step (MiB) | cast cache held (MiB) | step time (s) |")
    print("|---|---:|---:|---:|")
    for label, r in (("false", off), ("true", on)):
        rep = r["report"]
        print(f"| {label} | {mib(rep['peak_step_bytes'])} | {mib(rep['weight_cast_cache_bytes'])} | "
              f"{r['step_time']:.3f} |")
    print(f"\nhoisting: peak {mib(on['report']['peak_step_bytes'] - off['report']['peak_step_bytes'])} MiB, "
          f"step time x{on['step_time'] / off['step_time']:.3f}")
    print(f"\nall rows: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
