#!/usr/bin/env python3
"""Op-level A/B behind two of shadowgrad's choices, on the venv's torch (the same ATen/oneDNN kernels as the
trainer's LibTorch, from the same wheel): attention softmax in fp32 vs bf16, and cross-entropy over a 32000
vocabulary on full fp32 logits vs chunked (the algorithm of src/train/TokenLoss.cpp). Times forward + backward,
median of 5, in ms.
Cost: about a minute on 2 cores.   "$SHADOWGRAD_PYTHON" bench/micro_ops.py [--threads 2]
"""
import argparse
import os
import time

import torch
import torch.nn.functional as F


def median_ms(f, n=5):
    f()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return sorted(ts)[n // 2] * 1e3


def attention_variants(T=512, H=8, D=64):
    q, k, v = (torch.randn(1, H, T, D).bfloat16().requires_grad_() for _ in range(3))
    mask32 = torch.full((T, T), float("-inf")).triu(1)
    mask16 = mask32.bfloat16()

    def fp32_softmax():  # shadowgrad before: scale T x T, fp32 copy + mask, fp32 softmax, cast back
        s = (q @ k.transpose(-2, -1)).mul_(D ** -0.5)
        ((torch.softmax(s.float() + mask32, -1).bfloat16()) @ v).sum().backward()

    def bf16_softmax():  # shadowgrad now: scale q, mask in place, softmax in bf16 (fp32 accumulation inside)
        s = (q * D ** -0.5) @ k.transpose(-2, -1)
        s.add_(mask16)
        (torch.softmax(s, -1) @ v).sum().backward()

    return {"attention fwd+bwd, fp32 softmax": fp32_softmax, "attention fwd+bwd, bf16 softmax": bf16_softmax}


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, t, rows):
        logits = F.linear(h, w)
        valid, safe = (t != -1).float().unsqueeze(1), t.clamp_min(0).unsqueeze(1)
        loss = torch.zeros(())
        for r in range(0, logits.shape[0], rows):
            c, tt, vv = logits[r:r + rows], safe[r:r + rows], valid[r:r + rows]
            lp = torch.log_softmax(c, -1, dtype=torch.float)
            loss.sub_(lp.gather(1, tt).mul_(vv).sum())
            g = lp.exp_()
            g.scatter_add_(1, tt, -vv).mul_(vv)
            c.copy_(g)
        ctx.save_for_backward(h, w, logits)
        return loss

    @staticmethod
    def backward(ctx, go):
        h, w, gl = ctx.saved_tensors
        return (gl @ w).mul_(go), gl.t() @ (h * go), None, None


def loss_variants(N=512, E=512, V=32000):
    h = torch.randn(N, E).bfloat16().requires_grad_()
    w = (torch.randn(V, E) * 0.02).bfloat16().requires_grad_()
    t = torch.randint(0, V, (N,))

    def full():
        F.cross_entropy(F.linear(h, w).float(), t, reduction="sum").backward()

    out = {"cross-entropy fwd+bwd, full fp32 logits": full}
    for rows in (16, 64, 256):
        out[f"cross-entropy fwd+bwd, chunks of {rows} tokens"] = (
            lambda rows=rows: ChunkedLinearCrossEntropy.apply(h, w, t, rows).backward())
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(a.threads or os.cpu_count())
    print("| op | ms (median of 5) |\n|---|---:|")
    for name, f in {**attention_variants(), **loss_variants()}.items():
        print(f"| {name} | {median_ms(f):.0f} |", flush=True)


if __name__ == "__main__":
    main()
