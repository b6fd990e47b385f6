#!/usr/bin/env python3
"""Where a training step's time goes: the step-time budget behind bench/step_budget.sh.

For each configuration (the seed model and SmolLM2-135M, full fine-tuning and LoRA rank 16 on all linear layers),
one trainer process runs --steps steps (K=4 microbatches of 1 row each): the first is a warm-up, the middle ones
are timed unprofiled (metrics.jsonl's step_time_s and its phases), the last is profiled (profiler=trace, with input
shapes). The profiled step's op time is split by self time into GEMM, attention, elementwise, casts and copies, the
fold, the loss, the optimizer (clipping and the update) and the rest (autograd's engine, views, allocation); each
matmul shape's achieved rate is set against build/matmul_bench at the same shape and dtype. Beside the times, what
no host changes: the calls per step of add_, copy_, fill_, to/_to_copy, mul and the matmuls, the casts (copies that
change the floating dtype), and the bytes the innermost ops read and wrote (each op's tensor inputs and outputs, as
profiler=trace records them), per part and in all.

    bench/step_budget.sh                                 # all four, dtype=auto (bf16 only where the CPU has it)
    bench/step_budget.sh --models smollm2 --modes lora --dtypes float32,bfloat16 --steps 4

The profiler costs time of its own (a profiled step runs slower than an unprofiled one), so the unprofiled step
time is printed beside each split: read the split as fractions, the unprofiled time as the step.
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {
    # name: trainer keys; tokens per microbatch row
    "seed": ["seed.yml"],
    "smollm2": ["base.yml", "load_parameters_path=models/SmolLM2-135M-Instruct", "max_target_length=256"],
}
MODES = {"full": [], "lora": ["lora_rank=16", "lora_alpha=32", "lora_target_modules=all-linear"]}

GEMM = {"aten::mm", "aten::addmm", "aten::_addmm_activation", "aten::addmm_"}
ATTENTION_GEMM = {"aten::bmm", "aten::baddbmm"}  # only the dot-product attention runs batched matmuls
ATTENTION = ("scaled_dot_product", "flash_attention", "aten::_softmax", "aten::softmax", "softmax_backward")
CASTS = {"aten::copy_", "aten::_to_copy", "aten::to", "aten::clone", "aten::contiguous", "aten::_copy_from",
         "aten::_copy_from_and_resize"}
FRAMEWORK = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::view", "aten::reshape",
             "aten::_reshape_alias", "aten::t", "aten::transpose", "aten::as_strided", "aten::expand", "aten::permute",
             "aten::slice", "aten::select", "aten::detach", "aten::detach_", "aten::unsqueeze", "aten::squeeze",
             "aten::alias", "aten::resolve_conj", "aten::resolve_neg", "aten::narrow", "aten::unflatten",
             "aten::flatten", "aten::linear", "aten::matmul", "aten::_unsafe_view", "aten::set_", "aten::lift_fresh",
             "aten::result_type", "aten::is_nonzero", "aten::item", "aten::_local_scalar_dense", "aten::numpy_T",
             "aten::expand_as", "aten::view_as", "aten::split", "aten::chunk", "aten::unbind", "aten::zeros",
             "aten::ones", "aten::full", "aten::scalar_tensor", "aten::resize_"}
CATEGORIES = ["GEMM", "attention", "elementwise", "casts and copies", "fold", "loss", "optimizer",
              "autograd, views, allocation"]


def category(name, scopes):
    if name in GEMM:
        return "GEMM"
    if name in ATTENTION_GEMM or any(a in name for a in ATTENTION) or any(
            any(a in s for a in ATTENTION) for s in scopes):
        return "attention"
    for scope in [name] + scopes[::-1]:
        if scope == "shadowgrad::fold":
            return "fold"
        if "cross_entropy" in scope or "CrossEntropy" in scope:
            return "loss"
        if scope == "shadowgrad::clip_and_update":
            return "optimizer"
    if name in CASTS:
        return "casts and copies"
    if name in FRAMEWORK or name.startswith("autograd::") or name.startswith("torch::autograd"):
        return "autograd, views, allocation"
    return "elementwise"


def gemm_shape(name, shapes):
    """(batch, M, N, K) of a matmul op from its input shapes, or None."""
    mats = [s for s in shapes if len(s) in (2, 3)]
    if name == "aten::addmm" or name == "aten::_addmm_activation" or name == "aten::addmm_":
        mats = [s for s in shapes[1:3] if len(s) == 2]
    if len(mats) < 2:
        return None
    a, b = mats[0], mats[1]
    if len(a) == 3 and len(b) == 3:
        return (a[0], a[1], b[2], a[2])
    if len(a) == 2 and len(b) == 2:
        return (0, a[0], b[1], a[1])
    return None


MATMULS = GEMM | ATTENTION_GEMM
FLOATS = {"f32", "bf16", "f16", "f64"}
# The op-count rows: a label and the op names it counts (calls of each, nested ones included).
COUNTED = [("add / add_", {"aten::add", "aten::add_"}), ("copy_", {"aten::copy_"}),
           ("fill_ / zero_", {"aten::fill_", "aten::zero_"}), ("to / _to_copy", {"aten::to", "aten::_to_copy"}),
           ("mul / mul_", {"aten::mul", "aten::mul_"}), ("matmuls", MATMULS)]


def is_cast(name, args):
    """A copy that changes the floating dtype: copy_(self, src) of another dtype, or _to_copy to another one."""
    ins, outs = args.get("in", []), args.get("out", [])
    if name == "aten::copy_" and len(ins) >= 2:
        return ins[0] in FLOATS and ins[1] in FLOATS and ins[0] != ins[1]
    if name == "aten::_to_copy" and ins and outs:
        return ins[0] in FLOATS and outs[0] in FLOATS and ins[0] != outs[0]
    return False


# Ops that move data only through the ops they call (_to_copy, clone): with no child they returned their input.
NO_OWN_DATA = {"aten::to", "aten::contiguous"}


def moves_data(name):
    """Views, allocation and autograd's own nodes read and write no tensor data of their own, nor does a to() or
    contiguous() that returned its input (an fp32 weight's to(fp32))."""
    return name not in FRAMEWORK and name not in NO_OWN_DATA and not name.startswith(("autograd::", "torch::autograd"))


class Counts:
    """Host-independent counts of a profiled window: calls per op name, casts, and the bytes the innermost ops read
    and wrote (an op's tensor inputs plus outputs, elements times element size; an op that calls others that move
    data is not counted again, and views, allocation and autograd's nodes move none)."""

    def __init__(self):
        self.calls = collections.Counter()
        self.casts = 0
        self.cast_bytes = 0
        self.leaf_bytes = collections.Counter()  # by category
        self.have_bytes = False

    def add(self, name, args, leaf, cat):
        self.calls[name] += 1
        if "bytes" in args:
            self.have_bytes = True
            if leaf and moves_data(name):
                self.leaf_bytes[cat] += sum(args["bytes"])
            if is_cast(name, args):
                self.casts += 1
                self.cast_bytes += sum(args["bytes"])


def budget(trace_path, steps=1):
    """{category: self us}, {(op, shape): [calls, self us]}, {category: {op: self us}}, op total us, Counts."""
    with open(trace_path) as f:
        events = sorted((e for e in json.load(f) if e.get("ph") == "X"), key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    cats = collections.Counter()
    ops = collections.defaultdict(collections.Counter)
    gemms = collections.defaultdict(lambda: [0, 0.0])
    counts = Counts()
    stack = []  # [end, name, dur, child_us, shapes, scopes, args, children]

    def close(entry):
        end, name, dur, child, shapes, scopes, args, children = entry
        own = max(0.0, dur - child)
        c = category(name, scopes)
        cats[c] += own
        ops[c][name] += own
        counts.add(name, args, children == 0, c)
        shape = gemm_shape(name, shapes) if name in GEMM or name in ATTENTION_GEMM else None
        if shape:
            g = gemms[(name, shape)]
            g[0] += 1
            g[1] += own

    tid = None
    for e in events:
        if e["tid"] != tid:
            while stack:
                entry = stack.pop()
                close(entry)
                if stack:
                    stack[-1][3] += entry[2]
                    stack[-1][7] += moves_data(entry[1])
            tid = e["tid"]
        while stack and stack[-1][0] <= e["ts"]:
            entry = stack.pop()
            close(entry)
            if stack:
                stack[-1][3] += entry[2]
                stack[-1][7] += moves_data(entry[1])
        scopes = [s[1] for s in stack]
        args = e.get("args", {})
        stack.append([e["ts"] + e["dur"], e["name"], e["dur"], 0.0, args.get("shapes", []), scopes, args, 0])
    while stack:
        entry = stack.pop()
        close(entry)
        if stack:
            stack[-1][3] += entry[2]
            stack[-1][7] += moves_data(entry[1])
    scale = 1.0 / steps
    return ({k: v * scale for k, v in cats.items()}, {k: [v[0] * scale, v[1] * scale] for k, v in gemms.items()},
            {k: {n: t * scale for n, t in v.items()} for k, v in ops.items()}, sum(cats.values()) * scale, counts)


def matmul_limits(shapes, dtype, threads, seconds):
    """{(batch, M, N, K): GF/s} from build/matmul_bench at these shapes."""
    if not shapes:
        return {}
    cmd = [os.path.join(ROOT, "build", "matmul_bench"), "--threads", str(threads), "--seconds", str(seconds),
           "--dtypes", dtype]
    for b, m, n, k in shapes:
        cmd += ["--shape", f"{m},{n},{k}" + (f",{b}" if b else "")]
    # The thread-pool settings the trainer gives itself (apps/ThreadEnvironment.h): without them, on a loaded
    # machine, spinning OpenMP threads make the fp32 limit read several times too low.
    env = dict(os.environ, OPENBLAS_THREAD_TIMEOUT=os.environ.get("OPENBLAS_THREAD_TIMEOUT", "4"))
    env.setdefault("OMP_WAIT_POLICY", "passive")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    rates = {}
    for line in out.splitlines():
        if line.startswith("#"):
            continue
        name, m, n, k, b, _, gf = line.split("\t")
        rates[(int(b), int(m), int(n), int(k))] = float(gf)
    return rates


def run_trainer(a, model, mode, dtype, workdir):
    run_name = f"{model}-{mode}-{dtype}-{time.monotonic_ns()}"
    cmd = [a.trainer, *MODELS[model], *MODES[mode], *a.keys, f"dtype={dtype}",
           "per_device_batch_size=1", f"gradient_accumulation_steps={a.k}", f"steps={a.steps}", "log_period=1",
           "synthetic_min_length_fraction=1", "enable_checkpointing=false", "profiler=trace",
           f"skip_first_n_steps_for_profiler={a.steps - 1}", "profiler_steps=1", f"num_threads={a.threads}",
           f"base_output_directory={workdir}", f"run_name={run_name}"]
    log = os.path.join(workdir, run_name + ".log")
    with open(log, "w") as f:
        rc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        sys.exit(f"trainer exited {rc} ({' '.join(cmd)}); its log: {log}")
    run_dir = os.path.join(workdir, run_name)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rows = [r for r in rows if "step_time_s" in r]
    with open(os.path.join(run_dir, "config.yml")) as f:
        resolved = next((line.split(":", 1)[1].strip() for line in f if line.startswith("dtype:")), dtype)
    return rows, os.path.join(run_dir, "profile.trace.json"), resolved


def report(a, model, mode, dtype, rows, trace, resolved):
    timed = rows[1:-1] or rows[:1]
    step = statistics.median(r["step_time_s"] for r in timed)
    tokens = statistics.median(r["tokens_per_s"] for r in timed)
    phases = {p: statistics.median(r.get(p, 0.0) for r in timed) for p in ("forward_s", "backward_s", "fold_s",
                                                                            "optimizer_s")}
    profiled = rows[-1]["step_time_s"]
    cats, gemms, ops, op_total, counts = budget(trace)
    print(f"### {model}, {mode}, dtype={resolved} (K={a.k} x 1 x {rows[-1]['tokens'] // a.k} tokens)\n")
    print(f"Unprofiled step: **{step:.2f} s** ({tokens:.0f} tokens/s; median of steps 2..{len(rows) - 1}: "
          f"forward+loss {phases['forward_s']:.2f} s, backward {phases['backward_s']:.2f} s (fold "
          f"{phases['fold_s']:.2f} s inside), clip+optimizer {phases['optimizer_s']:.2f} s). "
          f"Profiled step: {profiled:.2f} s, of which ops {op_total / 1e6:.2f} s.\n")
    mib = 1024.0 * 1024.0
    print("| part | ms (profiled) | share of op time | scaled to the unprofiled step, ms | MiB moved | "
          "largest ops (ms) |")
    print("|---|---:|---:|---:|---:|---|")
    for c in CATEGORIES:
        us = cats.get(c, 0.0)
        top = sorted(ops.get(c, {}).items(), key=lambda kv: -kv[1])[:3]
        moved = f"{counts.leaf_bytes.get(c, 0) / mib:.0f}" if counts.have_bytes else "-"
        print(f"| {c} | {us / 1e3:.0f} | {100 * us / op_total:.1f} % | {step * 1e3 * us / op_total:.0f} | {moved} | "
              + ", ".join(f"{n.replace('autograd::engine::evaluate_function: ', 'bwd ')} {t / 1e3:.0f}" for n, t in top)
              + " |")
    print()
    print_counts(counts)
    shapes = sorted({s for (_, s) in gemms}, key=lambda s: -sum(v[1] for (n, t), v in gemms.items() if t == s))
    total_gemm = sum(v[1] for v in gemms.values())
    # Shapes that together hold 97 % of the matmul time get their own limit; the rest are summed in one row.
    kept, acc = [], 0.0
    for s in shapes:
        if acc >= 0.97 * total_gemm:
            break
        kept.append(s)
        acc += sum(v[1] for (n, t), v in gemms.items() if t == s)
    limits = matmul_limits(kept, resolved, a.threads, a.matmul_seconds)
    print("| op | batch | M | N | K | calls | ms | achieved GF/s | matmul_bench GF/s | fraction |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    flops_all = 0.0
    for (name, s), (calls, us) in sorted(gemms.items(), key=lambda kv: -kv[1][1]):
        b, m, n, k = s
        flops = 2.0 * max(1, b) * m * n * k * calls
        flops_all += flops
        if s not in limits:
            continue
        rate = flops / (us * 1e-6) / 1e9 if us > 0 else float("nan")
        print(f"| {name} | {b or ''} | {m} | {n} | {k} | {calls:.0f} | {us / 1e3:.0f} | {rate:.1f} | "
              f"{limits[s]:.1f} | {rate / limits[s]:.2f} |")
    rest = sum(v[1] for (name, s), v in gemms.items() if s not in limits)
    if rest:
        print(f"| (other shapes) | | | | | | {rest / 1e3:.0f} | | | |")
    print(f"\nAll matmuls: {flops_all / 1e9:.1f} GFLOP in {total_gemm / 1e3:.0f} ms profiled "
          f"({flops_all / max(total_gemm, 1) / 1e3:.1f} GF/s); over the unprofiled step, "
          f"{flops_all / step / 1e9:.1f} GF/s.\n")


def print_counts(counts):
    """Ops and bytes per step, which do not depend on the host: compare them across hosts and builds."""
    mib = 1024.0 * 1024.0
    rows = [(label, sum(counts.calls[n] for n in names)) for label, names in COUNTED]
    print("Ops per step (every call, nested ones included): " + ", ".join(f"{label} {n}" for label, n in rows)
          + f", all {sum(counts.calls.values())}.")
    if counts.have_bytes:
        print(f"Casts (copies that change the floating dtype): {counts.casts}, {counts.cast_bytes / mib:.0f} MiB. "
              f"Bytes the innermost ops read and wrote: {sum(counts.leaf_bytes.values()) / mib:.0f} MiB per step.\n")
    else:
        print("(This trace records no bytes: a trainer older than the byte counts.)\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="seed,smollm2", help=f"comma list of {sorted(MODELS)}")
    p.add_argument("--modes", default="full,lora", help=f"comma list of {sorted(MODES)}")
    p.add_argument("--dtypes", default="auto", help="comma list of auto, float32, bfloat16 (auto: bf16 only where "
                                                     "the CPU has it natively)")
    p.add_argument("--steps", type=int, default=3, help="steps per run: 1 warm-up, steps-2 timed, 1 profiled (>= 3)")
    p.add_argument("--k", type=int, default=4, help="gradient_accumulation_steps")
    p.add_argument("--keys", default="", help="more trainer keys, space-separated (e.g. max_target_length=32 for a "
                                               "bf16 step on a host without native bf16: op counts do not change)")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="num_threads and matmul_bench --threads")
    p.add_argument("--matmul-seconds", type=float, default=1.0, help="matmul_bench --seconds per shape")
    p.add_argument("--trainer", default=os.path.join(ROOT, "build", "trainer"), help="the trainer binary")
    p.add_argument("--keep", action="store_true", help="keep the run directories (printed)")
    a = p.parse_args()
    a.keys = a.keys.split()
    if a.steps < 3:
        p.error("--steps must be at least 3 (a warm-up, a timed step, a profiled step)")
    for name, known in (("models", MODELS), ("modes", MODES)):
        bad = [x for x in getattr(a, name).split(",") if x not in known]
        if bad:
            p.error(f"--{name}: unknown {bad}; known: {sorted(known)}")
    workdir = tempfile.mkdtemp(prefix="step_budget.")
    try:
        load = os.getloadavg()[0]
        print(f"Step-time budget, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {a.threads} threads, "
              f"load average {load:.1f} at the start" + (f"; keys: {' '.join(a.keys)}" if a.keys else "") + "\n")
        for model in a.models.split(","):
            for mode in a.modes.split(","):
                for dtype in a.dtypes.split(","):
                    rows, trace, resolved = run_trainer(a, model, mode, dtype, workdir)
                    report(a, model, mode, dtype, rows, trace, resolved)
                    sys.stdout.flush()
        print(f"Load average at the end: {os.getloadavg()[0]:.1f}")
    finally:
        if a.keep:
            print(f"runs kept in {workdir}")
        else:
            subprocess.run(["rm", "-rf", workdir])


if __name__ == "__main__":
    main()
