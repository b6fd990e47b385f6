"""What the gradient noise scale's measurement costs the GA engine alone (docs/batch-size.md): K=4 accumulation
windows over the parameter shapes of configs/base.yml's default model (emb 256, 4 layers, mlp 1024, vocab 256: 4.07 M fp32 parameters,
fp32 shadow), with ShadowAccumulator's measurement on (per-microbatch norms fused into the fold, plus the shadow
tree's squared_norm) and off, alternating. Times are the process's CPU seconds at one thread, so other jobs on a
shared machine move them far less than wall time. Prints the median and range of the per-pair ratio.
Cost: about 5 s.

    PYTHONPATH=build/python "$SHADOWGRAD_PYTHON" bench/gns_fold_pairs.py [PAIRS]
"""
import statistics, sys, time, torch, shadowgrad
torch.set_num_threads(1)
torch.manual_seed(0)
# configs/base.yml's default model (emb 256, 4 layers, mlp 1024, vocab 256): ~4.07M parameters.
shapes = [(256, 256)] + [(256, 256)] * 2 * 4 + [(128, 256)] * 2 * 4 + [(1024, 256)] * 3 * 4 + [(256,)] * 9 + [(256, 256)]
params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
grads = [[torch.randn(s) for s in shapes] for _ in range(4)]
acc = shadowgrad.ShadowAccumulator(params, grad_dtype=torch.float32)
def window(measure):
    acc._engine.set_measure_sq_norms(measure)
    t = time.process_time()
    with acc.accumulate():
        for k in range(4):
            loss = sum((p * g).sum() for p, g in zip(params, grads[k]))
            loss.backward()
    if measure:
        acc.squared_norm()
    dt = time.process_time() - t
    acc.zero_()
    return dt
for _ in range(3): window(True); window(False)
ratios, on_t, off_t = [], [], []
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 20):
    a = window(True); b = window(False)
    ratios.append(a / b); on_t.append(a); off_t.append(b)
r = sorted(ratios)
print(f"{sum(p.numel() for p in params)} params, K=4 windows incl. backward of a linear loss; {len(r)} pairs")
print(f"on/off - 1: median {100*(statistics.median(r)-1):+.2f} % [{100*(r[0]-1):+.2f}, {100*(r[-1]-1):+.2f}]")
print(f"window s: on median {statistics.median(on_t):.4f}, off median {statistics.median(off_t):.4f}")
# The fastest window of each arm: the least disturbed by other processes (interference only adds time).
print(f"window s: on min {min(on_t):.4f}, off min {min(off_t):.4f}, on/off - 1 of the minima {100*(min(on_t)/min(off_t)-1):+.2f} %")
