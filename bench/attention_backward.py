#!/usr/bin/env python3
"""Causal attention, forward + backward, at fine-tuning lengths: SDPA's CPU flash kernel (the trainer's
attention=autoselected) against the trainer's dot-product path (attention=dot_product: grouped-query scores as one
batched matmul per kv group, the causal mask added in place, softmax, a second batched matmul).

    .venv/bin/python bench/attention_backward.py --lengths 256,512,1024,2048 --pairs 5 --threads 2

One process, the two paths alternating (flash, dot, flash, dot, ...); prints per length the median (range) of each
path's forward+backward milliseconds, the ratio taken pair by pair, and the largest difference between the two
paths' outputs and input gradients. Heads default to SmolLM2-135M's (9 query heads, 3 kv heads, head_dim 64),
batch 1, fp32. Cost: about a minute on 2 cores with the defaults.
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def flash(q, k, v):  # q already scaled, as the trainer passes it
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0, enable_gqa=q.size(1) != k.size(1))


def dot_product(q, k, v):
    # src/model/Decoder.cpp's attention_core with attention=dot_product, q already scaled (scale 1 below).
    B, H, T, D = q.shape
    G = k.size(1)
    R = H // G
    qg = q.reshape(B, G, R * T, D)
    scores = torch.matmul(qg, k.transpose(-2, -1))
    mask = torch.full((T, T), float("-inf"), dtype=q.dtype).triu(1)
    scores = scores.view(B, G, R, T, T) + mask  # the trainer adds in place; autograd here needs the copy
    probs = torch.softmax(scores, -1).view(B, G, R * T, T)
    return torch.matmul(probs, v).view(B, H, T, D)


def timed(fn, q, k, v, dy):
    qs, ks, vs = (t.detach().requires_grad_() for t in (q, k, v))
    start = time.perf_counter()
    out = fn(qs, ks, vs)
    out.backward(dy)
    return time.perf_counter() - start, out.detach(), (qs.grad, ks.grad, vs.grad)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", default="256,512,1024,2048")
    p.add_argument("--heads", type=int, default=9)
    p.add_argument("--kv-heads", type=int, default=3)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    gen = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}, {a.threads} threads, heads {a.heads}/{a.kv_heads}, head_dim {a.head_dim}, "
          "batch 1, fp32, forward + backward\n")
    print("| T | flash ms | dot-product ms | flash / dot-product | max abs diff (out, dq, dk, dv) |")
    print("|---:|---:|---:|---:|---|")
    for T in map(int, a.lengths.split(",")):
        q = torch.randn(1, a.heads, T, a.head_dim, generator=gen) / a.head_dim ** 0.5
        k = torch.randn(1, a.kv_heads, T, a.head_dim, generator=gen)
        v = torch.randn(1, a.kv_heads, T, a.head_dim, generator=gen)
        dy = torch.randn(1, a.heads, T, a.head_dim, generator=gen)
        for fn in (flash, dot_product):  # warm-up
            timed(fn, q, k, v, dy)
        tf, td = [], []
        for _ in range(a.pairs):
            t, out_f, g_f = timed(flash, q, k, v, dy)
            tf.append(t)
            t, out_d, g_d = timed(dot_product, q, k, v, dy)
            td.append(t)
        diffs = [(x - y).abs().max().item() for x, y in zip((out_f, *g_f), (out_d, *g_d))]
        ratios = [f / d for f, d in zip(tf, td)]
        ms = lambda ts: f"{1e3 * statistics.median(ts):.1f} ({1e3 * min(ts):.1f}–{1e3 * max(ts):.1f})"
        print(f"| {T} | {ms(tf)} | {ms(td)} | {statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) "
              f"| {', '.join(f'{d:.1e}' for d in diffs)} |")


if __name__ == "__main__":
    main()
