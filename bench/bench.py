#!/usr/bin/env python3
"""Side-by-side benchmark behind bench/bench.sh: the machine's matmul limit, shadowgrad's trainer and the
PyTorch 2.x peer (bench/peer.py) in eager mode and under torch.compile, on the same machine in one invocation.
Prints Markdown.

Every run is a fresh process. The arms run in turn (trainer, peer eager, peer compiled, trainer, ...), so a drift
in the machine's speed hits all of them; each ratio is taken within a round, and the table gives the median and
range over the rounds. tokens/s = tokens / seconds over the steps after the warm-up ones, as each process measured
them (start-up and model init excluded; the peer's steps that compiled are left out too, and its compile time is a
column of its own). Peak memory = the process's max RSS (getrusage, KiB), the same measure for all. The peer runs
under this script's own interpreter (sys.executable: bench/bench.sh gives it $SHADOWGRAD_PYTHON, the venv's).
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import shutil
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_model(name):
    """A model config of configs/ (e.g. seed.yml) as the short names used here: emb, heads, ..., seq."""
    keys = dict(base_emb_dim="emb", base_num_query_heads="heads", base_num_kv_heads="kv_heads", head_dim="head_dim",
                base_mlp_dim="mlp", base_num_decoder_layers="layers", vocab_size="vocab", max_target_length="seq")
    model = {}
    with open(os.path.join(ROOT, "configs", name)) as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() in keys:
                model[keys[key.strip()]] = int(value)
    return model


SEED = read_model("seed.yml")  # the one definition of the seed model


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return line.split()
    return []


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


LOADS = []  # the 1-minute load average at the start of every timed run


def run_measured(cmd, env):
    """Runs cmd with os.wait4 so its own max RSS is known. Returns (stdout, peak MiB)."""
    LOADS.append(os.getloadavg()[0])
    with tempfile.TemporaryFile(mode="w+") as out, tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err.read()[-3000:]}")
        return out.read(), usage.ru_maxrss / 1024.0


def trainer_cmd(a, run_dir, dtype, pdbs, ga, steps, extra=()):
    m = SEED
    return [os.path.join(ROOT, "build", "trainer"), "base.yml",
            f"base_emb_dim={m['emb']}", f"base_num_query_heads={m['heads']}", f"base_num_kv_heads={m['kv_heads']}",
            f"head_dim={m['head_dim']}", f"base_mlp_dim={m['mlp']}", f"base_num_decoder_layers={m['layers']}",
            f"vocab_size={m['vocab']}", f"max_target_length={m['seq']}", "synthetic_min_length_fraction=1",
            f"dtype={dtype}", f"per_device_batch_size={pdbs}", f"gradient_accumulation_steps={ga}",
            f"steps={steps}", f"log_period={steps}", f"num_threads={a.threads}",
            f"base_output_directory={run_dir}", f"run_name=r{time.monotonic_ns()}",
            "enable_checkpointing=false", *extra]  # the peer writes no checkpoint either


def peer_cmd(a, dtype, pdbs, ga, steps):
    m = SEED
    return [sys.executable, os.path.join(ROOT, "bench", "peer.py"), f"--dtype={dtype}", f"--pdbs={pdbs}",
            f"--ga={ga}", f"--steps={steps}", f"--threads={a.threads}", f"--emb={m['emb']}", f"--heads={m['heads']}",
            f"--kv-heads={m['kv_heads']}", f"--head-dim={m['head_dim']}", f"--mlp={m['mlp']}",
            f"--layers={m['layers']}", f"--vocab={m['vocab']}", f"--seq={m['seq']}"]


def thread_env(env):
    """The thread-pool settings the trainer gives itself (apps/ThreadEnvironment.h), given to the peer too, so
    that neither process runs its thread pools differently from the other."""
    env = dict(env, OPENBLAS_THREAD_TIMEOUT=env.get("OPENBLAS_THREAD_TIMEOUT", "4"))
    env.setdefault("OMP_WAIT_POLICY", "passive")
    return env


def shadowgrad_run(a, env, dtype, pdbs, ga, steps, extra=()):
    env = thread_env(env)
    with tempfile.TemporaryDirectory(prefix="sg-bench-") as d:
        _, peak = run_measured(trainer_cmd(a, d, dtype, pdbs, ga, steps, extra), env)
        (run_dir,) = [os.path.join(d, x) for x in os.listdir(d)]
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    kept = rows[a.warmup:]
    return dict(tokens=sum(r["tokens"] for r in kept), seconds=sum(r["step_time_s"] for r in kept),
                step_s=statistics.median(r["step_time_s"] for r in kept), peak_mib=peak,
                phases={k: statistics.median(r.get(k, 0.0) for r in kept)
                        for k in ("data_s", "forward_s", "backward_s", "fold_s", "optimizer_s")})


def peer_lines(out):
    """peer.py's JSON lines: (config, step rows, compile report or None)."""
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    config = next((x["config"] for x in lines if "config" in x), {})
    report = next((x["compile"] for x in lines if "compile" in x and "step" not in x), None)
    return config, [x for x in lines if "step" in x], report


def peer_run(a, env, dtype, pdbs, ga, steps, extra=()):
    """One peer process. A compiled run gets its own empty inductor cache (--compile-cache cold: every run
    compiles from scratch, as a user's first run does) or the invocation's shared one (warm, primed first)."""
    env = thread_env(env)
    compiled = "--compile" in extra
    cache = None
    if compiled:
        cache = getattr(a, "compile_cache_dir", None) or tempfile.mkdtemp(prefix="sg-inductor-")
        env = dict(env, TORCHINDUCTOR_CACHE_DIR=cache)
    try:
        out, peak = run_measured(peer_cmd(a, dtype, pdbs, ga, steps) + list(extra), env)
    finally:
        if cache and not getattr(a, "compile_cache_dir", None):
            shutil.rmtree(cache, ignore_errors=True)
    config, rows, report = peer_lines(out)
    after = rows[a.warmup:]
    kept = [r for r in after if "compile_s" not in r]  # a recompile after the warm-up is left out, and counted
    if not kept:
        raise RuntimeError(f"peer.py {' '.join(extra)}: no steady-state step after the first {a.warmup}; "
                           f"raise --steps ({steps})")
    return dict(tokens=sum(r["tokens"] for r in kept), seconds=sum(r["seconds"] for r in kept),
                step_s=statistics.median(r["seconds"] for r in kept), peak_mib=peak, config=config,
                compile=report, recompiled_steps=len(after) - len(kept))


def prime_compile_cache(a, env, dtype, extra):
    """--compile-cache warm: one compiled run of 2 steps, outside the rounds, fills the shared inductor cache.
    Returns its compile report: the compile time with an empty cache (a user's first run)."""
    env = dict(thread_env(env), TORCHINDUCTOR_CACHE_DIR=a.compile_cache_dir)
    out, _ = run_measured(peer_cmd(a, dtype, 1, 4, 2) + list(extra), env)
    return peer_lines(out)[2]


# The peer table's arms: label, and the kind and extra arguments of the run.
ARMS = {"trainer": ("shadowgrad's trainer", "trainer", ()),
        "peer-eager": ("PyTorch eager", "peer", ()),
        "peer-compile": ("PyTorch torch.compile", "peer", ("--compile",))}


def flops_per_token():
    """6 x matmul parameters + attention (QK^T and PV, forward and backward, full T x T: no causal discount).
    The input embedding is a table lookup, not a matmul, so its parameters are left out of the matmul count."""
    m = SEED
    q, kv = m["heads"] * m["head_dim"], m["kv_heads"] * m["head_dim"]
    per_layer = m["emb"] * (q + 2 * kv) + q * m["emb"] + 3 * m["emb"] * m["mlp"]
    matmul_params = m["layers"] * per_layer + m["vocab"] * m["emb"]
    all_params = matmul_params + m["vocab"] * m["emb"] + (2 * m["layers"] + 1) * m["emb"]
    attention = 12 * m["layers"] * m["seq"] * q
    return 6 * matmul_params + attention, matmul_params, all_params


def spread(values, fmt="{:.0f}"):
    values = sorted(values)
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.median(values))} ({fmt.format(values[0])}–{fmt.format(values[-1])})"


def tps(r):
    return r["tokens"] / r["seconds"]


def compile_cell(r):
    """The compiled peer's compile time: the wall seconds of the steps that compiled beyond as many steady-state
    steps (as a user waits for it), then torch's own count of seconds spent compiling."""
    c = r.get("compile")
    return None if not c or c.get("beyond_steady_s") is None else (c["beyond_steady_s"], c.get("torch_s"))


def peer_section(a, env, ftok, limit_bf16):
    """The trainer against the peer, eager and compiled, and any --variant / --peer-variant rows, in rounds of one
    run each (A B C A B C ...) per dtype. Returns {dtype: trainer runs} for the phase table."""
    m = SEED
    arms = [(key, *ARMS[key]) for key in a.arms]
    arms += [(f"variant:{label}", f"shadowgrad, {label} ({keys})", "trainer", tuple(filter(None, keys.split(","))))
             for label, _, keys in (v.partition(":") for v in a.variant)]
    arms += [(f"peer-variant:{label}", f"PyTorch, {label} ({args})", "peer", tuple(args.split()))
             for label, _, args in (v.partition(":") for v in a.peer_variant)]
    compiled = sorted({extra for _, _, kind, extra in arms if kind == "peer" and "--compile" in extra})
    print(f"## shadowgrad vs the PyTorch peer, eager and compiled (pdbs=1, ga=4, global batch {4 * m['seq']} "
          f"tokens)")
    results = {}
    for dtype in a.dtypes.split(","):
        print("\n| dtype | run | tokens/s | step s | model GF/s | MFU vs bf16 2048³ | peak RSS MiB | compile s |\n"
              "|---|---|---:|---:|---:|---:|---:|---:|", flush=True)
        runs = {key: [] for key, *_ in arms}
        first_compiles = {}
        if a.compile_cache_dir:
            for extra in compiled:
                first_compiles[extra] = prime_compile_cache(a, env, dtype, extra)
        del LOADS[:]
        for _ in range(a.repeats):  # one round = one run of every arm, in order
            for key, _, kind, extra in arms:
                run = shadowgrad_run if kind == "trainer" else peer_run
                runs[key].append(run(a, env, dtype, 1, 4, a.steps, extra))
        for key, label, kind, extra in arms:
            rs = runs[key]
            gfs = [tps(r) * ftok / 1e9 for r in rs]
            mfu = spread([g / limit_bf16 * 100 for g in gfs], "{:.1f}") + " %" if limit_bf16 else "n/a"
            cells = [c for c in map(compile_cell, rs) if c]
            comp = spread([c[0] for c in cells], "{:.1f}") if cells else ""
            print(f"| {dtype} | {label} | {spread([tps(r) for r in rs])} | "
                  f"{spread([r['step_s'] for r in rs], '{:.2f}')} | {spread(gfs)} | {mfu} | "
                  f"{spread([r['peak_mib'] for r in rs])} | {comp} |")

        def ratio(num, den, bold=False):
            speed = [tps(x) / tps(y) for x, y in zip(runs[num[0]], runs[den[0]])]
            rss = [x["peak_mib"] / y["peak_mib"] for x, y in zip(runs[num[0]], runs[den[0]])]
            text = f"ratio {num[1]} / {den[1]}"
            cell = f"{spread(speed, '{:.2f}')}×"
            if bold:
                text, cell = f"**{text}**", f"**{cell}**"
            print(f"| {dtype} | {text} | {cell} | | | | {spread(rss, '{:.2f}')}× | |")

        trainers = [(key, label) for key, label, kind, _ in arms if kind == "trainer"]
        bases = [(key, label) for key, label, kind, _ in arms if key in ("peer-eager", "peer-compile")]
        for t in trainers:
            for b in bases:
                ratio(t, b, bold=t[0] == "trainer")
        if len(bases) == 2:
            ratio(bases[1], bases[0])
        for key, label, kind, _ in arms:
            if key.startswith("peer-variant:") and bases:
                ratio((key, label), bases[0])
        print()
        for key, label, kind, extra in arms:
            if kind != "peer":
                continue
            rs = runs[key]
            c = rs[0]["config"]
            line = (f"- {label}: {c.get('python')}, torch {c.get('torch')}, {c.get('optimizer')}, "
                    f"autocast {c.get('autocast') or 'off'}, attention {c.get('attention')}")
            reports = [r["compile"] for r in rs if r.get("compile")]
            if reports:
                torch_s = [x["torch_s"] for x in reports if x.get("torch_s") is not None]
                line += (f"; compiled at step(s) {reports[0]['steps']} ({a.compile_cache} inductor cache): "
                         f"{spread([x['beyond_steady_s'] for x in reports], '{:.1f}')} s beyond steady state, "
                         f"torch's count {spread(torch_s, '{:.1f}') if torch_s else 'n/a'} s; "
                         f"{reports[0].get('graphs')} graph(s), {reports[0].get('graph_breaks')} graph break(s), "
                         f"FX graph cache hits/misses {reports[0].get('fx_graph_cache')}")
            first = first_compiles.get(extra)
            if first:
                line += (f"; its first compile, with an empty cache (one run before the rounds): "
                         f"{first['wall_s']:.1f} s wall for step(s) {first['steps']}, torch's count "
                         f"{'n/a' if first['torch_s'] is None else format(first['torch_s'], '.1f')} s")
            recompiled = sum(r["recompiled_steps"] for r in rs)
            if recompiled:
                line += f"; **{recompiled} step(s) after the warm-up recompiled** (left out)"
            print(line)
        print(f"\n{dtype}: {a.repeats} alternating rounds of {', '.join(key for key, *_ in arms)}; 1-minute load "
              f"average at the start of each run {spread(LOADS, '{:.1f}')}\n", flush=True)
        if "trainer" in runs:
            results[dtype] = runs["trainer"]
    if results:
        print("### Where shadowgrad's step goes (median seconds per step, from metrics.jsonl)\n")
        print("| dtype | step | data | forward (+loss) | backward (incl. fold) | fold | clip+optimizer |\n"
              "|---|---:|---:|---:|---:|---:|---:|")
        for dtype, sg in results.items():
            ph = {k: statistics.median(r["phases"][k] for r in sg) for k in sg[0]["phases"]}
            print(f"| {dtype} | {statistics.median(r['step_s'] for r in sg):.3f} | {ph['data_s']:.3f} | "
                  f"{ph['forward_s']:.3f} | {ph['backward_s']:.3f} | {ph['fold_s']:.3f} | {ph['optimizer_s']:.3f} |")
        print(flush=True)
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=8, help="optimizer steps per run")
    p.add_argument("--warmup", type=int, default=2, help="first steps of each run left out")
    p.add_argument("--repeats", type=int, default=3, help="alternating rounds (one run of every arm) per dtype")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads for everything; 0 = all cores")
    p.add_argument("--dtypes", default="auto",
                   help="comma list of float32, bfloat16; auto (default): both where the CPU has avx512_bf16 or AMX, "
                   "float32 alone elsewhere, where bf16 matmuls run hundreds of times slower for every arm "
                   "(docs/performance.md, Compute dtype)")
    p.add_argument("--scaling-ks", default="1,2,4,8", help="K values of the scaling table (pdbs=1)")
    p.add_argument("--scaling-steps", type=int, default=0, help="steps per scaling run; 0 = max(warmup+2, steps/2)")
    p.add_argument("--ga-steps", type=int, default=0, help="steps per GA-overhead run; 0 = --steps")
    p.add_argument("--model", default="", help="override the seed model: emb,heads,kv_heads,head_dim,mlp,layers,vocab,seq "
                   "(for a quick smoke test of this script)")
    p.add_argument("--skip", default="", help="comma list of sections to skip: limit,peer,scaling,ga")
    p.add_argument("--arms", default=",".join(ARMS), help=f"the peer table's arms, in round order, of "
                   f"{', '.join(ARMS)}: {'; '.join(f'{k} = {v[0]}' for k, v in ARMS.items())}")
    p.add_argument("--compile-cache", dest="compile_cache", choices=["warm", "cold"], default="warm",
                   help="inductor cache of the compiled peer: warm = one for the whole invocation, filled by one "
                   "run per dtype before the rounds (whose compile time, with an empty cache, is printed apart); "
                   "cold = an empty one for every run (every compile time is a first run's)")
    p.add_argument("--variant", action="append", default=[], metavar="LABEL:KEY=VALUE,...",
                   help="an extra shadowgrad row in the peer table, run in the same alternation (A B C ...), e.g. "
                   "'lowest memory:remat_policy=full,grad_dtype=bfloat16'; may be repeated")
    p.add_argument("--peer-variant", dest="peer_variant", action="append", default=[], metavar="LABEL:ARGS",
                   help="an extra peer row, bench/peer.py with these extra space-separated ARGS, run in the same "
                   "alternation, e.g. 'foreach AdamW:--adamw=foreach' or 'max-autotune:--compile "
                   "--compile-mode=max-autotune-no-cudagraphs'; may be repeated")
    a = p.parse_args()
    a.threads = a.threads or os.cpu_count()
    skip = set(filter(None, a.skip.split(",")))
    a.arms = a.arms.split(",")
    unknown = [x for x in a.arms if x not in ARMS]
    if unknown:
        raise SystemExit(f"--arms: {', '.join(unknown)} not among {', '.join(ARMS)}")
    if a.model:
        SEED.update(zip(("emb", "heads", "kv_heads", "head_dim", "mlp", "layers", "vocab", "seq"),
                        map(int, a.model.split(","))))

    env = dict(os.environ)
    flags = cpu_flags()
    if a.dtypes == "auto":
        a.dtypes = "bfloat16,float32" if {"avx512_bf16", "amx_bf16"} & set(flags) else "float32"
    inherited_coretype = env.get("OPENBLAS_CORETYPE", "(unset)")
    if "avx512_bf16" in flags:
        # The trainer sets this itself when it is unset (re-exec). Here it is set for all three processes, over
        # any inherited value, so fp32 BLAS is the same library in the same, fastest valid mode for each.
        env["OPENBLAS_CORETYPE"] = "COOPERLAKE"
    ftok, mm_params, all_params = flops_per_token()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# shadowgrad benchmark, {now}\n")
    print(f"- machine: {cpu_name()}, {os.cpu_count()} cores, avx512_bf16={'avx512_bf16' in flags}, "
          f"amx_bf16={'amx_bf16' in flags}; {a.threads} threads everywhere; "
          f"OPENBLAS_CORETYPE={env.get('OPENBLAS_CORETYPE', '(unset)')} (inherited: {inherited_coretype})")
    m = SEED
    print(f"- model: emb {m['emb']}, {m['heads']} q heads, {m['kv_heads']} kv heads, head_dim {m['head_dim']}, "
          f"mlp {m['mlp']}, {m['layers']} layers, vocab {m['vocab']}, seq {m['seq']}; {all_params / 1e6:.1f} M "
          f"params ({mm_params / 1e6:.1f} M in matmuls)")
    print(f"- model FLOPs/token = 6 x {mm_params / 1e6:.1f} M + attention = {ftok / 1e6:.0f} MFLOP "
          f"(embedding lookup not counted; 6 x all params + attention would be "
          f"{(ftok + 6 * (all_params - mm_params)) / 1e6:.0f} MFLOP)")
    print(f"- {a.steps} steps per run (scaling: {a.scaling_steps or max(a.warmup + 2, a.steps // 2)}, GA overhead: "
          f"{a.ga_steps or a.steps}), first {a.warmup} left out; with several runs a figure is median (min–max)")
    if "peer" not in skip and (any(ARMS[x][1] == "peer" for x in a.arms) or a.peer_variant):
        version = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                                 check=True, capture_output=True, text=True).stdout.strip()
        print(f"- peer: bench/peer.py under {sys.executable}, torch {version}")
    print(f"- load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n", flush=True)

    limit_bf16 = None
    if "limit" not in skip:
        out = subprocess.run([os.path.join(ROOT, "build", "matmul_bench"), "--threads", str(a.threads),
                              "--model", f"{m['emb']},{m['mlp']},{m['vocab']},{m['seq']},{m['heads']},{m['head_dim']}"],
                             env=env, check=True, capture_output=True, text=True).stdout
        rows = [line.split("\t") for line in out.splitlines() if line and not line.startswith("#")]
        table = {}
        for name, mm, n, k, batch, dtype, gf in rows:
            table.setdefault((name, mm, n, k, batch), {})[dtype] = float(gf)
        print("## Limit: matmul throughput (GF/s)\n")
        print("| shape | M×N×K | bf16 | fp32 |\n|---|---|---:|---:|")
        for (name, mm, n, k, batch), v in table.items():
            size = f"{batch}×" if batch != "0" else ""
            print(f"| {name} | {size}{mm}×{n}×{k} | {v.get('bfloat16', 0):.0f} | {v.get('float32', 0):.0f} |")
            if name.startswith("square"):
                limit_bf16 = v.get("bfloat16")
        print(flush=True)

    if "peer" not in skip:
        a.compile_cache_dir = tempfile.mkdtemp(prefix="sg-inductor-") if a.compile_cache == "warm" else None
        try:
            peer_section(a, env, ftok, limit_bf16)
        finally:
            if a.compile_cache_dir:
                shutil.rmtree(a.compile_cache_dir, ignore_errors=True)

    if "scaling" not in skip:
        for dtype in a.dtypes.split(","):
            print(f"## Scaling with K at pdbs=1 ({dtype}, shadowgrad)\n")
            ks = list(map(int, a.scaling_ks.split(",")))
            runs = {k: [] for k in ks}
            del LOADS[:]
            for _ in range(a.repeats):  # round robin over K, so a drift in machine speed hits every K
                for k in ks:
                    runs[k].append(shadowgrad_run(a, env, dtype, 1, k,
                                                  a.scaling_steps or max(a.warmup + 2, a.steps // 2)))
            print("| K | step s | step s / K | tokens/s | peak RSS MiB |\n|---:|---:|---:|---:|---:|")
            for k in ks:
                rs = runs[k]
                print(f"| {k} | {spread([r['step_s'] for r in rs], '{:.2f}')} | "
                      f"{spread([r['step_s'] / k for r in rs], '{:.2f}')} | {spread([tps(r) for r in rs])} | "
                      f"{spread([r['peak_mib'] for r in rs])} |")
            print(f"\n{a.repeats} rounds; load average at the start of each run {spread(LOADS, '{:.1f}')}\n",
                  flush=True)

    if "ga" not in skip:
        print("## GA overhead at a matched global batch of 4 sequences (shadowgrad)\n")
        print("| dtype | ga=1 pdbs=4 tokens/s | ga=4 pdbs=1 tokens/s | GA overhead |\n|---|---:|---:|---:|")
        variants = [(dtype, ()) for dtype in a.dtypes.split(",")]
        if "bfloat16" in a.dtypes.split(","):  # casting the weights once per microbatch instead of once per step
            variants.append(("bfloat16", ("hoist_weight_cast=false",)))
        del LOADS[:]
        for dtype, extra in variants:
            one, four = [], []
            for _ in range(a.repeats):  # alternating, so a drift in machine speed hits both sides
                one.append(shadowgrad_run(a, env, dtype, 4, 1, a.ga_steps or a.steps, extra))
                four.append(shadowgrad_run(a, env, dtype, 1, 4, a.ga_steps or a.steps, extra))
            overhead = [(1 - tps(f) / tps(o)) * 100 for o, f in zip(one, four)]
            label = " ".join((dtype,) + extra)
            print(f"| {label} | {spread([tps(r) for r in one])} | {spread([tps(r) for r in four])} | "
                  f"{spread(overhead, '{:+.1f}')} % |", flush=True)
        print(f"\n{a.repeats} alternating pairs per row; load average at the start of each run "
              f"{spread(LOADS, '{:.1f}')}\n")
    print(f"- load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
