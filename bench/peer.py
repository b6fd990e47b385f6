#!/usr/bin/python3
"""The peer: the idiomatic PyTorch eager training loop a user would write instead of shadowgrad.

Same model as shadowgrad's Decoder (pre-norm RMSNorm, grouped-query causal attention with RoPE, gated SiLU MLP,
untied output), same data shapes, AdamW, torch.autocast("cpu", bfloat16), and the usual accumulation of
loss / K into .grad. Runs on Debian's python3-torch 1.13 (the same LibTorch as shadowgrad).
Prints one JSON line per optimizer step: {"step", "seconds", "tokens", "loss"}.

  /usr/bin/python3 bench/peer.py --dtype bfloat16 --pdbs 1 --ga 4 --steps 8 --threads 2
With --shadowgrad bfloat16 (or float32), the same loop accumulates through shadowgrad.ShadowAccumulator instead
of .grad (needs the module built: scripts/build.sh puts it in build/python); bench/python_pairs.py compares the two.
--optimizer fused steps with shadowgrad.optim.AdamW instead of torch.optim.AdamW. --model resnet18 swaps the
decoder for torchvision's ResNet-18 (no weights, num_classes=10) on random --image-size images, --pdbs images per
microbatch ("tokens" in the JSON are then images). --profile adds each phase's seconds to the JSON lines
(bench/python_profile.py tabulates them).
Cost: one step of the seed model takes a few seconds on 2 cores.
"""
import argparse
import collections
import contextlib
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).type_as(x)


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
        self.rope_in_activation_dtype = getattr(a, "rope_dtype", "activation") == "activation"
        self.wq = nn.Linear(a.emb, a.heads * a.head_dim, bias=False)
        self.wk = nn.Linear(a.emb, a.kv_heads * a.head_dim, bias=False)
        self.wv = nn.Linear(a.emb, a.kv_heads * a.head_dim, bias=False)
        self.wo = nn.Linear(a.heads * a.head_dim, a.emb, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.rope_in_activation_dtype:  # as HF Llama does: tables in q/k's dtype, so autocast keeps q, k in bf16
            cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.kv_heads != self.heads:
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        att = att.masked_fill(mask[:T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, -1)
        return self.wo(y)


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
        self.attn_norm, self.attn = RMSNorm(a.emb, 1e-6), Attention(a)
        self.mlp_norm, self.mlp = RMSNorm(a.emb, 1e-6), MLP(a)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.attn_norm(x), cos, sin, mask)
        return x + self.mlp(self.mlp_norm(x))


class Decoder(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embedding = nn.Embedding(a.vocab, a.emb)
        self.blocks = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.emb, 1e-6)
        self.output = nn.Linear(a.emb, a.vocab, bias=False)
        cos, sin = rope_tables(a.seq, a.head_dim, 10000.0)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("mask", torch.ones(a.seq, a.seq, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x, self.cos[:T], self.sin[:T], self.mask)
        return self.output(self.norm(x))


class Phases:
    """Wall seconds per phase of a step, for --profile; does nothing otherwise. The AccumulateGrad nodes get a
    pre- and a post-hook, so "accumulate" is the time autograd spends storing each gradient into .grad (adding it
    to the one there from earlier microbatches) plus, with shadowgrad, folding it into the shadow (shadowgrad's C++
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
    options = dict(lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    if a.optimizer == "fused":
        import shadowgrad.optim
        return shadowgrad.optim.AdamW(model.parameters(), **options)
    return torch.optim.AdamW(model.parameters(), foreach=a.foreach, **options)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
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
    p.add_argument("--shadowgrad", choices=["off", "bfloat16", "float32"], default="off",
                   help="accumulate with shadowgrad.ShadowAccumulator(grad_dtype=...) instead of into .grad")
    p.add_argument("--rope-dtype", dest="rope_dtype", choices=["float32", "activation"], default="activation",
                   help="RoPE tables cast to q/k's dtype (HF Llama; the default since 2026-11-30) or kept in fp32 "
                   "(autocast then promotes q, k to fp32)")
    p.add_argument("--foreach", action=argparse.BooleanOptionalAction, default=True,
                   help="AdamW(foreach=...): multi-tensor kernels (the default since 2026-11-30)")
    p.add_argument("--model", choices=["decoder", "resnet18"], default="decoder",
                   help="the seed-shaped decoder above, or torchvision's resnet18(num_classes=10) without weights")
    p.add_argument("--image-size", dest="image_size", type=int, default=32, help="resnet18: images are N x N")
    p.add_argument("--optimizer", choices=["torch", "fused"], default="torch",
                   help="torch.optim.AdamW, or shadowgrad.optim.AdamW (the fused update; needs the module)")
    p.add_argument("--profile", action="store_true", help="add each phase's wall seconds to the JSON lines")
    a = p.parse_args()

    # torch.get_num_threads() is 1 by default with this build; give the peer every core, as the trainer has.
    torch.set_num_threads(a.threads if a.threads > 0 else os.cpu_count())
    torch.manual_seed(0)
    if a.optimizer == "fused" or a.shadowgrad != "off":  # a shadowgrad on PYTHONPATH comes first (A/B of two builds)
        sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "python"))
    if a.model == "resnet18":
        import torchvision
        model = torchvision.models.resnet18(weights=None, num_classes=10)
        batches, items = resnet18_batches, a.ga * a.pdbs
    else:
        model = Decoder(a)
        batches, items = decoder_batches, a.ga * a.pdbs * a.seq
    opt = make_optimizer(a, model)
    gen = torch.Generator().manual_seed(0)
    data = batches(a, gen)
    bf16 = a.dtype == "bfloat16"
    acc = None
    if a.shadowgrad != "off":
        import shadowgrad
        acc = shadowgrad.ShadowAccumulator(model.parameters(), grad_dtype=getattr(torch, a.shadowgrad))
    phase = Phases(a.profile, list(model.parameters()))

    for step in range(a.steps):
        start = time.perf_counter()
        loss_sum = 0.0
        if acc:
            with phase("begin_end"):
                acc.begin()
        for _ in range(a.ga):
            with phase("data"):
                x, y = next(data)
            with phase("forward"), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(x)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))  # autocast: fp32
            with phase("backward"):
                (loss / a.ga).backward()
            loss_sum += loss.item()
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
        seconds = time.perf_counter() - start
        line = {"step": step + 1, "seconds": seconds, "tokens": items, "loss": loss_sum / a.ga}
        if a.profile:
            line["phases"] = phase.take()
            if acc:
                line["phases"]["fold"] = acc._engine.fold_seconds  # the C++ timer (older builds have it too)
        print(json.dumps(line), flush=True)
    if a.profile:
        print(json.dumps({"apart": measured_apart(opt, acc)}), flush=True)
    return 0


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
