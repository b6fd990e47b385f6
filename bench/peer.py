#!/usr/bin/python3
"""The peer: the idiomatic PyTorch eager training loop a user would write instead of shadowgrad.

Same model as shadowgrad's Decoder (pre-norm RMSNorm, grouped-query causal attention with RoPE, gated SiLU MLP,
untied output), same data shapes, AdamW, torch.autocast("cpu", bfloat16), and the usual accumulation of
loss / K into .grad. Runs on Debian's python3-torch 1.13 (the same LibTorch as shadowgrad).
Prints one JSON line per optimizer step: {"step", "seconds", "tokens", "loss"}.

  /usr/bin/python3 bench/peer.py --dtype bfloat16 --pdbs 1 --ga 4 --steps 8 --threads 2
With --shadowgrad bfloat16 (or float32), the same loop accumulates through shadowgrad.ShadowAccumulator instead
of .grad (needs the module built: scripts/build.sh puts it in build/python); bench/python_pairs.py compares the two.
Cost: one step of the seed model takes a few seconds on 2 cores.
"""
import argparse
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
    a = p.parse_args()

    # torch.get_num_threads() is 1 by default with this build; give the peer every core, as the trainer has.
    torch.set_num_threads(a.threads if a.threads > 0 else os.cpu_count())
    torch.manual_seed(0)
    model = Decoder(a)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                            foreach=a.foreach)
    gen = torch.Generator().manual_seed(0)
    bf16 = a.dtype == "bfloat16"
    acc = None
    if a.shadowgrad != "off":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "python"))
        import shadowgrad
        acc = shadowgrad.ShadowAccumulator(model.parameters(), grad_dtype=getattr(torch, a.shadowgrad))

    for step in range(a.steps):
        start = time.perf_counter()
        loss_sum = 0.0
        if acc:
            acc.begin()
        for _ in range(a.ga):
            seq = torch.randint(0, a.vocab, (a.pdbs, a.seq + 1), generator=gen)
            x, y = seq[:, :-1], seq[:, 1:]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(x)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))  # autocast: fp32
            (loss / a.ga).backward()
            loss_sum += loss.item()
        if acc:
            acc.end()
            acc.clip_grad_norm_(1.0)
            acc.step(opt)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - start
        print(json.dumps({"step": step + 1, "seconds": seconds, "tokens": a.ga * a.pdbs * a.seq,
                          "loss": loss_sum / a.ga}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
