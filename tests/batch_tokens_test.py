#!/usr/bin/env python3
"""bench/lib/batch_tokens.py (the equal-tokens batch-size study) against numbers computed by hand.

Usage: tests/batch_tokens_test.py REPO     Exit: 0 pass; 1 fail.   Cost: well under a second.
"""
import json
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", "bench", "lib"))
import batch_tokens as bt  # noqa: E402
import paired_stats as ps  # noqa: E402

failures = []


def close(what, got, want, tol):
    if not abs(got - want) <= tol:
        failures.append("%s: got %.10g, want %.10g (tolerance %g)" % (what, got, want, tol))


def write_run(d, name, gns_seq, batch=32, seq_len=32, steps=None, evals=(), k=4):
    """A run directory: one metrics line per step with gns_tokens = gns_seq[i] x seq_len (None: no estimate)."""
    path = os.path.join(d, name)
    os.makedirs(path)
    n = steps or len(gns_seq)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for i in range(n):
            row = {"step": i + 1, "global_batch_size": batch, "tokens_seen": (i + 1) * batch * seq_len}
            if i < len(gns_seq) and gns_seq[i] is not None:
                row["gns_tokens"] = gns_seq[i] * seq_len
            if i == n - 1 and evals:
                row["eval_loss"] = evals[-1]
            f.write(json.dumps(row) + "\n")
    with open(os.path.join(path, "summary.json"), "w") as f:
        json.dump({"steps": n, "eval_loss": evals[-1] if evals else None}, f)
    with open(os.path.join(path, "config.yml"), "w") as f:
        f.write("gradient_accumulation_steps: %d\n" % k)
    return path


with tempfile.TemporaryDirectory() as d:
    # A constant noise scale b: every step makes dS_min = 1 / (1 + b/B), so S_min = n / (1 + b/B) and any schedule
    # saves at most 1 - S_min/S = (b/B) / (1 + b/B); g2 = 1 (sqrt of a constant averages to itself), so a schedule
    # at equal examples saves nothing: a constant B_noise has no better schedule than the fixed batch.
    c = bt.ceiling(write_run(d, "const", [96.0] * 100), 32, 32)
    close("const S_min", c["s_min"], 100 / 4.0, 1e-9)
    close("const E_min", c["e_min"], 100 / 4.0 * 96, 1e-9)
    close("const any", c["any"], 0.75, 1e-12)
    close("const g2", c["g2"], 1.0, 1e-12)
    close("const sqrt", c["sqrt"], 0.0, 1e-12)
    # Two halves, B_n = 32 then 128, at B = 32: dS_min 1/2 (50 steps) and 1/5 (50 steps): S_min = 35, E_min =
    # 25 x 32 + 10 x 128 = 2080; sum sqrt(B_n) dS_min = 25 sqrt(32) + 10 sqrt(128) = 45 sqrt(32) (sqrt(128) =
    # 2 sqrt(32)); g2 = 2025 x 32 / (35 x 2080) = 0.8901099; 1 - S_min/S = 0.65; sqrt ceiling = 0.1098901 x 0.65.
    # A step without an estimate counts as a step, not as progress.
    c = bt.ceiling(write_run(d, "halves", [32.0] * 50 + [128.0] * 50), 32, 32)
    close("halves S_min", c["s_min"], 35.0, 1e-9)
    close("halves E_min", c["e_min"], 2080.0, 1e-9)
    close("halves g2", c["g2"], 2025 * 32 / (35 * 2080.0), 1e-12)
    close("halves any", c["any"], 0.65, 1e-12)
    close("halves sqrt", c["sqrt"], (1 - 2025 * 32 / (35 * 2080.0)) * 0.65, 1e-12)

    # The ramp from a B=32 run (1024 tokens a step): B_simple passes 32 after step 3 (tokens_seen 3072), 64 after
    # step 5 (5120), 128 after step 6 (6144); 512 would pass --large.
    run = write_run(d, "ramp-src", [10, 20, 40, 50, 70, 130, 300, 400])
    got = bt.ramp(run, 32, 256, 32, settle=0)
    if got != "0:32,3072:64,5120:128,6144:256":
        failures.append("ramp: %r" % got)
    if bt.ramp(run, 32, 64, 32, settle=0) != "0:32,3072:64":
        failures.append("ramp capped at 64: %r" % bt.ramp(run, 32, 64, 32, settle=0))
    # Unsettled estimates are ignored (the first 3 here: 40 > 32 after step 3 does not count), and the batch doubles
    # once a step at most: step 4 (50 > 32) -> 64 at 4096, step 5 (70 > 64) -> 128 at 5120, step 6 (130 > 128) -> 256.
    got = bt.ramp(run, 32, 256, 32, settle=3)
    if got != "0:32,4096:64,5120:128,6144:256":
        failures.append("ramp with settling: %r" % got)
    jump = write_run(d, "ramp-jump", [10, 20, 300])  # passes 32, 64 and 128 at once: only one doubling
    if bt.ramp(jump, 32, 256, 32, settle=0) != "0:32,3072:64":
        failures.append("ramp doubles once a step: %r" % bt.ramp(jump, 32, 256, 32, settle=0))

    # Interpolation of the fixed-batch points in log steps.
    close("interpolate", bt.interpolate([(0.0, 4.0), (2.0, 5.0)], 1.0), 4.5, 1e-12)
    if bt.interpolate([(0.0, 4.0), (2.0, 5.0)], 3.0) is not None:
        failures.append("interpolate outside the points should be None")

    # paired_stats --pool-k pairs arms whose K differs (here 4 and 32); without it they are never compared.
    p1 = os.path.join(d, "p1")
    os.makedirs(p1)
    write_run(p1, "small-seed0", [1.0], evals=[4.00], k=4)
    write_run(p1, "small-seed1", [1.0], evals=[4.10], k=4)
    write_run(p1, "large-seed0", [1.0], evals=[4.20], k=32)
    write_run(p1, "large-seed1", [1.0], evals=[4.40], k=32)
    if ps.compare(ps.read_studies([p1], 1), "small"):
        failures.append("without pool_k, K=4 and K=32 runs should not pair")
    rows = ps.compare(ps.read_studies([p1], 1, pool_k=True), "small")
    if len(rows) != 1 or rows[0]["arm"] != "large":
        failures.append("pool_k rows: %r" % [(r["k"], r["arm"]) for r in rows])
    else:
        close("pool_k mean", rows[0]["final"]["mean"], 0.25, 1e-12)

for f in failures:
    print("FAIL: " + f)
print("%d passed, %d failed" % (0 if failures else 1, len(failures)))
sys.exit(1 if failures else 0)
