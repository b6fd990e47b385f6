#!/usr/bin/env python3
"""The peer: the training loop a careful PyTorch 2.x user writes instead of shadowgrad.

Same model as shadowgrad's Decoder (pre-norm RMSNorm, grouped-query causal attention with RoPE, gated SiLU MLP,
untied output), same data shapes, and what a 2026 user reaches for: attention through
F.scaled_dot_product_attention(is_causal=True, enable_gqa=...), nn.RMSNorm, torch.optim.AdamW(fused=True) where
this torch has the fused kernel for CPU (else foreach), torch.autocast("cpu", torch.bfloat16) for --dtype bfloat16
(plain fp32 for float32), the usual accumulation of loss / K into .grad, clip_grad_norm_(1.0), and with --compile
the model and its loss wrapped in torch.compile (inductor by default).

Prints JSON lines: first {"config": {...}} (torch version, attention, the optimizer actually used, autocast,
compile), then one line per optimizer step {"step", "seconds", "tokens", "loss"} (with --compile, "compile_s" on a
step during which torch compiled a graph), and with --compile a last line {"compile": {...}}: the steps that
compiled, their wall seconds, torch's own count of compile seconds, and the steady-state step time (the median of
the steps that compiled nothing). Time steady state from the step lines without "compile_s".

  "$SHADOWGRAD_PYTHON" bench/peer.py --dtype bfloat16 --pdbs 1 --ga 4 --steps 8 --threads 2
  "$SHADOWGRAD_PYTHON" bench/peer.py --compile --steps 8      # the same loop under torch.compile
With --shadowgrad bfloat16 (or float32), the same loop accumulates through shadowgrad.ShadowAccumulator instead
of .grad (needs the module built: scripts/build.sh puts it in build/python); bench/python_pairs.py compares the two.
--optimizer fused steps with shadowgrad.optim.AdamW instead of torch.optim.AdamW. --model resnet18 swaps the
decoder for torchvision's ResNet-18 (no weights, num_classes=10) on random --image-size images, --pdbs images per
microbatch ("tokens" in the JSON are then images). --profile adds each phase's seconds to the JSON lines
(bench/python_profile.py tabulates them).
--device cuda runs the same loop on the first GPU: the model and each batch on it (the data is drawn on the CPU, from
the same generator, so both devices see the same tokens), torch.autocast("cuda", torch.bfloat16) for --dtype
bfloat16, torch.cuda.synchronize() before each step's clock starts and before it stops, and the CUDA caching
allocator's peak: "peak_mem_bytes" (torch.cuda.max_memory_allocated since the model and optimizer were made, so
weights, gradients and optimizer state included) on every step line, and a last line {"memory": {...}} with the
allocated and reserved peaks. These keys, and "device" in the config line, appear only with --device cuda: on the
CPU the output is what it always was. (--profile's phases are host clocks and do not synchronize, so on a GPU they
show launch time, not kernel time.) bench/gpu_check.sh runs it this way against the trainer's hardware=cuda.
Cost: one step of the seed model takes a few seconds on 2 cores; --compile adds a first compile of the order of a
minute or more on 2 cores with an empty inductor cache (TORCHINDUCTOR_CACHE_DIR), seconds with a warm one.
"""
import argparse
import collections
import contextlib
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def rope_tables(seq, head_dim, base):
    inv_freq = base ** (-torch.arange(0, head_dim // 2, dtype=torch.float64) / (head_dim // 2))
    angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
    return torch.cat([angles.cos()] * 2, -1).float(), torch.cat([angles.sin()] * 2, -1).float()


def apply_rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = a.heads, a.kv_heads, a.head_dim
        self.rope_in_activation_dtype = a.rope_dtype == "activation"
        self.wq = nn.Linear(a.emb, a.heads * a.head_dim, bias=False)
        self.wk = nn.Linear(a.emb, a.kv_heads * a.head_dim, bias=False)
        self.wv = nn.Linear(a.emb, a.kv_heads * a.head_dim, bias=False)
        self.wo = nn.Linear(a.heads * a.head_dim, a.emb, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.rope_in_activation_dtype:  # as HF Llama does: tables in q/k's dtype, so autocast keeps q, k in bf16
            cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # Causal, scaled by 1/sqrt(head_dim); the kv heads are shared by groups of q heads inside the kernel.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.gate = nn.Linear(a.emb, a.mlp, bias=False)
        self.up = nn.Linear(a.emb, a.mlp, bias=False)
        self.down = nn.Linear(a.mlp, a.emb, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        # The residual stream stays fp32 under autocast (the embedding's output, plus bf16 branch outputs), so the
        # norms run in fp32 on torch's fused RMSNorm kernel, as shadowgrad's do.
        self.attn_norm, self.attn = nn.RMSNorm(a.emb, eps=1e-6), Attention(a)
        self.mlp_norm, self.mlp = nn.RMSNorm(a.emb, eps=1e-6), MLP(a)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Decoder(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embedding = nn.Embedding(a.vocab, a.emb)
        self.blocks = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = nn.RMSNorm(a.emb, eps=1e-6)
        self.output = nn.Linear(a.emb, a.vocab, bias=False)
        cos, sin = rope_tables(a.seq, a.head_dim, 10000.0)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x, self.cos[:T], self.sin[:T])
        return self.output(self.norm(x))


class WithLoss(nn.Module):
    """model(x), then the mean cross entropy against y: the unit that --compile compiles, so that inductor sees
    the loss with the output projection, as a compiled training step that returns its loss does."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, y):
        logits = self.model(x)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))  # autocast runs it in fp32


class Phases:
    """Wall seconds per phase of a step, for --profile; does nothing otherwise. The AccumulateGrad nodes get a
    pre- and a post-hook, so "accumulate" is the time autograd spends storing each gradient into .grad (adding it
    to the one there from earlier microbatches) plus, with shadowgrad, folding it into the shadow (shadowgrad's
    hook was registered first, so it runs inside the window measured)."""

    def __init__(self, enabled, params):
        self.enabled = enabled
        self.seconds = collections.defaultdict(float)
        self._nodes, self._starts = [], {}
        if not enabled:
            return
        for p in params:
            node = p.expand_as(p).grad_fn.next_functions[0][0]
            node.register_prehook(lambda grad_outputs, key=id(node): self._starts.__setitem__(key, time.perf_counter()))
            node.register_hook(lambda grad_inputs, grad_outputs, key=id(node): self._add(
                "accumulate", time.perf_counter() - self._starts.pop(key)))
            self._nodes.append(node)  # the parameter holds its AccumulateGrad node only weakly

    def _add(self, name, seconds):
        self.seconds[name] += seconds

    @contextlib.contextmanager
    def __call__(self, name):
        if not self.enabled:
            yield
            return
        start = time.perf_counter()
        yield
        self._add(name, time.perf_counter() - start)

    def take(self):
        out = {k: round(v, 6) for k, v in self.seconds.items()}
        self.seconds.clear()
        return out


def compile_seconds():
    """Seconds torch.compile has spent in this process so far: dynamo's frame compiles (they include AOTAutograd
    and inductor's forward graph) plus inductor's backward graphs, which are compiled lazily at the first backward.
    From torch._dynamo.utils.compile_times, a private API: None where it is missing or has changed."""
    try:
        import torch._dynamo.utils
        names, values = torch._dynamo.utils.compile_times(repr="csv", aggregate=True)
        times = dict(zip(names, map(float, values)))
    except Exception:
        return None
    if "_compile.compile_inner" not in times and names:
        return None
    return times.get("_compile.compile_inner", 0.0) + times.get("compile_fx.<locals>.bw_compiler", 0.0)


def frames_compiled():
    """How many frames dynamo has compiled (a recompile adds one), from its counters (private, like the above)."""
    import torch._dynamo.utils
    return torch._dynamo.utils.counters["frames"]["ok"]


def resnet18_batches(a, gen):
    """Random images and labels: the step's cost does not depend on the pixels."""
    while True:
        yield (torch.randn(a.pdbs, 3, a.image_size, a.image_size, generator=gen),
               torch.randint(0, 10, (a.pdbs,), generator=gen))


def decoder_batches(a, gen):
    while True:
        seq = torch.randint(0, a.vocab, (a.pdbs, a.seq + 1), generator=gen)
        yield seq[:, :-1], seq[:, 1:]


def make_optimizer(a, model):
    """Returns (optimizer, its description for the JSON). --adamw auto takes torch's fused AdamW where this torch
    has it for the parameters' device (torch 2.14.1 has it for CPU), else the foreach one."""
    options = dict(lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    if a.optimizer == "fused":
        import shadowgrad.optim
        return shadowgrad.optim.AdamW(model.parameters(), **options), "shadowgrad.optim.AdamW"
    kinds = {"fused": dict(fused=True), "foreach": dict(foreach=True), "for-loop": dict(foreach=False, fused=False)}
    tries = ["fused", "foreach"] if a.adamw == "auto" else [a.adamw]
    for kind in tries:
        try:
            opt = torch.optim.AdamW(model.parameters(), **kinds[kind], **options)
        except (RuntimeError, ValueError) as e:  # fused=True on a device without the kernel
            if kind == tries[-1]:
                raise
            print(f"peer.py: torch.optim.AdamW(fused=True) refused ({e}); using foreach=True", file=sys.stderr)
            continue
        args = ", ".join(f"{k}={v}" for k, v in kinds[kind].items())
        return opt, f"torch.optim.AdamW({args})"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16",
                   help="bfloat16: torch.autocast(device, torch.bfloat16) over fp32 weights; float32: no autocast")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="where the model, the batches and the optimizer run; cuda: the first GPU, timed with "
                   "torch.cuda.synchronize(), with the CUDA allocator's peak in the JSON")
    p.add_argument("--pdbs", type=int, default=1, help="sequences per microbatch")
    p.add_argument("--ga", type=int, default=4, help="microbatches per optimizer step")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads; 0 = all cores")
    p.add_argument("--emb", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", dest="kv_heads", type=int, default=8)
    p.add_argument("--head-dim", dest="head_dim", type=int, default=64)
    p.add_argument("--mlp", type=int, default=2048)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--compile", action="store_true",
                   help="wrap the model and its loss in torch.compile; the steps that compile are reported apart")
    p.add_argument("--compile-backend", dest="compile_backend", default="inductor", help="torch.compile(backend=)")
    p.add_argument("--compile-mode", dest="compile_mode", default=None,
                   help="torch.compile(mode=), e.g. max-autotune-no-cudagraphs; default: torch's default")
    p.add_argument("--shadowgrad", choices=["off", "bfloat16", "float32"], default="off",
                   help="accumulate with shadowgrad.ShadowAccumulator(grad_dtype=...) instead of into .grad")
    p.add_argument("--rope-dtype", dest="rope_dtype", choices=["float32", "activation"], default="activation",
                   help="RoPE tables cast to q/k's dtype (HF Llama; the default since 2026-11-30) or kept in fp32 "
                   "(autocast then promotes q, k to fp32 before attention casts them back)")
    p.add_argument("--adamw", choices=["auto", "fused", "foreach", "for-loop"], default="auto",
                   help="which torch.optim.AdamW implementation (--optimizer torch): auto = fused where this torch "
                   "supports it on CPU, else foreach")
    p.add_argument("--model", choices=["decoder", "resnet18"], default="decoder",
                   help="the seed-shaped decoder above, or torchvision's resnet18(num_classes=10) without weights")
    p.add_argument("--image-size", dest="image_size", type=int, default=32, help="resnet18: images are N x N")
    p.add_argument("--optimizer", choices=["torch", "fused"], default="torch",
                   help="torch.optim.AdamW (see --adamw), or shadowgrad.optim.AdamW (the fused update; needs the "
                   "module)")
    p.add_argument("--profile", action="store_true", help="add each phase's wall seconds to the JSON lines")
    a = p.parse_args()

    # bench.py passes the trainer's thread count; 0 = every core, as the trainer's num_threads=0.
    torch.set_num_threads(a.threads if a.threads > 0 else os.cpu_count())
    torch.manual_seed(0)
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit(f"peer.py: --device cuda, but torch {torch.__version__} sees no CUDA device")
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    if a.optimizer == "fused" or a.shadowgrad != "off":  # a shadowgrad on PYTHONPATH comes first (A/B of two builds)
        sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "python"))
    if a.model == "resnet18":
        import torchvision
        model = torchvision.models.resnet18(weights=None, num_classes=10)
        batches, items = resnet18_batches, a.ga * a.pdbs
    else:
        model = Decoder(a)
        batches, items = decoder_batches, a.ga * a.pdbs * a.seq
    if cuda:
        model = model.to(device)  # before the optimizer: its state (and fused=True's check) follow the parameters
    opt, opt_name = make_optimizer(a, model)
    step_loss = WithLoss(model)
    if a.compile:
        step_loss = torch.compile(step_loss, backend=a.compile_backend, mode=a.compile_mode)
    gen = torch.Generator().manual_seed(0)
    data = batches(a, gen)
    bf16 = a.dtype == "bfloat16"
    acc = None
    if a.shadowgrad != "off":
        import shadowgrad
        acc = shadowgrad.ShadowAccumulator(model.parameters(), grad_dtype=getattr(torch, a.shadowgrad))
    phase = Phases(a.profile, list(model.parameters()))
    extra_config = {}
    if cuda:
        extra_config["device"] = f"{device} ({torch.cuda.get_device_name(device)}, CUDA {torch.version.cuda})"
        torch.cuda.reset_peak_memory_stats(device)
    print(json.dumps({"config": {
        "torch": torch.__version__, "python": sys.executable, "threads": torch.get_num_threads(),
        "model": a.model,
        "attention": "F.scaled_dot_product_attention(is_causal=True)" if a.model == "decoder" else None,
        "optimizer": opt_name, "autocast": "bfloat16" if bf16 else None,
        "compile": {"backend": a.compile_backend, "mode": a.compile_mode or "default"} if a.compile else None,
        "inductor_cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR") if a.compile else None,
        "accumulate": f"shadowgrad.ShadowAccumulator(grad_dtype={a.shadowgrad})" if acc else ".grad (loss / K)",
        **extra_config}}), flush=True)

    steps = []
    for step in range(a.steps):
        compiled_before = compile_seconds() if a.compile else None
        frames_before = frames_compiled() if a.compile else 0
        if cuda:
            torch.cuda.synchronize(device)  # the step's clock starts with the GPU idle
        start = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        if acc:
            with phase("begin_end"):
                acc.begin()
        for _ in range(a.ga):
            with phase("data"):
                x, y = next(data)
                if cuda:
                    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with phase("forward"), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = step_loss(x, y)
            with phase("backward"):
                (loss / a.ga).backward()
            loss_sum += loss.detach()
        if acc:
            with phase("begin_end"):
                acc.end()
            with phase("clip"):
                acc.clip_grad_norm_(1.0)
            with phase("step"):
                acc.step(opt)
        else:
            with phase("clip"):
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            with phase("step"):
                opt.step()
            with phase("zero_grad"):
                opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize(device)  # ... and stops when the GPU has finished the step
        seconds = time.perf_counter() - start
        line = {"step": step + 1, "seconds": seconds, "tokens": items, "loss": loss_sum.item() / a.ga}
        if cuda:
            line["peak_mem_bytes"] = torch.cuda.max_memory_allocated(device)
        if a.compile:
            spent = compile_seconds()
            if frames_compiled() != frames_before or (spent or 0.0) > (compiled_before or 0.0):
                line["compile_s"] = round(spent - (compiled_before or 0.0), 3) if spent is not None else None
        if a.profile:
            line["phases"] = phase.take()
            if acc:
                line["phases"]["fold"] = acc._engine.fold_seconds  # the C++ timer (older builds have it too)
        steps.append(line)
        print(json.dumps(line), flush=True)
    if a.compile:
        print(json.dumps({"compile": compile_report(steps)}), flush=True)
    if a.profile:
        print(json.dumps({"apart": measured_apart(opt, acc)}), flush=True)
    if cuda:
        print(json.dumps({"memory": {"device": str(device),
                                     "peak_allocated_bytes": torch.cuda.max_memory_allocated(device),
                                     "peak_reserved_bytes": torch.cuda.max_memory_reserved(device)}}), flush=True)
    return 0


def compile_report(steps):
    """The steps during which torch compiled, apart from the steady state: their wall seconds, torch's own count of
    compile seconds, and the wall seconds beyond what as many steady-state steps take (the cost of compiling as a
    user sees it; it includes each kernel's first run)."""
    compiling = [s for s in steps if "compile_s" in s]
    steady = [s["seconds"] for s in steps if "compile_s" not in s]
    import torch._dynamo.utils
    counters = torch._dynamo.utils.counters
    out = {"steps": [s["step"] for s in compiling], "wall_s": round(sum(s["seconds"] for s in compiling), 3),
           "torch_s": compile_seconds(), "frames": frames_compiled(),
           "graphs": counters["stats"]["unique_graphs"], "graph_breaks": sum(counters["graph_break"].values()),
           "steady_step_s": round(statistics.median(steady), 4) if steady else None,
           "fx_graph_cache": {"hit": counters["inductor"]["fxgraph_cache_hit"],
                              "miss": counters["inductor"]["fxgraph_cache_miss"]}}
    if steady:
        out["beyond_steady_s"] = round(out["wall_s"] - len(compiling) * statistics.median(steady), 3)
    return out


def measured_apart(opt, acc, repeats=3):
    """Costs inside a step that the phases cannot split, each timed on its own after the run (median of
    `repeats`): converting every shadow to its parameter's dtype one at a time (shadowgrad's per-parameter way
    does this inside step()), and one optimizer.step() call when no parameter has a gradient (the Python
    overhead of a call, paid once per parameter by the per-parameter way)."""
    def median_seconds(fn):
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return sorted(times)[len(times) // 2]

    out = {"empty_step_call": median_seconds(opt.step),
           "parameters": sum(len(g["params"]) for g in opt.param_groups)}
    if acc:
        def convert_all():
            for p, shadow in zip(acc.params, acc.shadows):
                shadow.to(p.dtype)  # dropped at once, as step() drops each converted gradient

        out["convert_all"] = median_seconds(convert_all)
    return out


if __name__ == "__main__":
    sys.exit(main())
