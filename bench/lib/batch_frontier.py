#!/usr/bin/env python3
"""The fixed-batch frontier of bench/batch_size_study.sh and where growing-batch candidates lie against it.

Usage: batch_frontier.py RESULTS_TSV [--md FILE] [--plot-data DIR] [--reps N] [--goal 0.25]
  RESULTS_TSV has one row per run: arm, batch (0 for a candidate), seed, steps_to_target, examples_to_target (NA
  when the run did not reach the target). Arms named b<B> are the fixed-batch baselines; the others are candidates.
  - The frontier: McCandlish's S = S_min + E_min / B, least squares of steps S against 1 / B over every baseline run
    (all seeds), B_crit = E_min / S_min.
  - For each candidate (mean over its seeds of steps S_c and examples E_c):
      examples saved at equal steps  = 1 - E_c / E_fixed(S_c),  E_fixed(S) = E_min S / (S - S_min)
      steps saved at equal examples  = 1 - S_c / S_fixed(E_c),  S_fixed(E) = S_min E / (E - E_min)
    A candidate faster than S_min steps (or with fewer than E_min examples) is beyond every fixed batch: saved 100 %.
  - 95 % intervals: percentile bootstrap (--reps, default 4000, seeded), resampling seeds with replacement within each
    baseline batch and within each candidate, refitting the frontier every time.
  --plot-data DIR: frontier.dat (the fit's S_min E_min) and one <arm>.dat per arm ("examples steps seed").
Standard library only (run with /usr/bin/python3).
"""
import argparse
import math
import os
import random
import sys


def fit(points):
    """Least squares S = a + b x over (x = 1/B, S); returns (S_min, E_min)."""
    n = len(points)
    sx = sum(x for x, _ in points)
    sy = sum(y for _, y in points)
    sxx = sum(x * x for x, _ in points)
    sxy = sum(x * y for x, y in points)
    b = (n * sxy - sx * sy) / (n * sxx - sx * sx)
    return (sy - b * sx) / n, b


def savings(s_min, e_min, s_c, e_c):
    """(examples saved at equal steps, steps saved at equal examples), as fractions."""
    ex = 1 - e_c / (e_min * s_c / (s_c - s_min)) if s_c > s_min else 1.0
    st = 1 - s_c / (s_min * e_c / (e_c - e_min)) if e_c > e_min else 1.0
    return ex, st


def percentile(xs, q):
    xs = sorted(xs)
    i = q * (len(xs) - 1)
    lo, hi = math.floor(i), math.ceil(i)
    return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)


def mean(xs):
    return sum(xs) / len(xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tsv")
    ap.add_argument("--md")
    ap.add_argument("--plot-data")
    ap.add_argument("--reps", type=int, default=4000)
    ap.add_argument("--goal", type=float, default=0.25)
    a = ap.parse_args()

    rows = []
    with open(a.tsv) as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            r = dict(zip(header, line.rstrip("\n").split("\t")))
            if r["steps_to_target"] == "NA":
                continue
            rows.append((r["arm"], int(r["batch"]), r["seed"], float(r["steps_to_target"]),
                         float(r["examples_to_target"])))
    base = {}
    cands = {}
    for arm, batch, seed, s, e in rows:
        (base.setdefault(batch, []) if batch > 0 else cands.setdefault(arm, [])).append((s, e, seed))
    if len(base) < 3:
        print("batch_frontier.py: fewer than 3 baseline batches reached the target; no fit", file=sys.stderr)
        return 1

    def frontier(groups):
        return fit([(1.0 / b, s) for b, runs in groups.items() for s, _, _ in runs])

    s_min, e_min = frontier(base)
    rng = random.Random(20261202)
    boot = {"s_min": [], "e_min": [], "b_crit": []}
    cboot = {arm: ([], []) for arm in cands}
    for _ in range(a.reps):
        g = {b: [rng.choice(runs) for _ in runs] for b, runs in base.items()}
        bs, be = frontier(g)
        boot["s_min"].append(bs)
        boot["e_min"].append(be)
        boot["b_crit"].append(be / bs if bs > 0 else float("inf"))
        for arm, runs in cands.items():
            pick = [rng.choice(runs) for _ in runs]
            ex, st = savings(bs, be, mean([p[0] for p in pick]), mean([p[1] for p in pick]))
            cboot[arm][0].append(ex)
            cboot[arm][1].append(st)

    def ci(xs):
        return percentile(xs, 0.025), percentile(xs, 0.975)

    out = []
    n_base = sum(len(r) for r in base.values())
    out.append(f"Frontier S = S_min + E_min/B over {n_base} baseline runs ({len(base)} batches): "
               f"S_min = {s_min:.1f} steps [{ci(boot['s_min'])[0]:.1f}, {ci(boot['s_min'])[1]:.1f}], "
               f"E_min = {e_min:.0f} sequences [{ci(boot['e_min'])[0]:.0f}, {ci(boot['e_min'])[1]:.0f}], "
               f"B_crit = {e_min / s_min:.0f} sequences [{ci(boot['b_crit'])[0]:.0f}, {ci(boot['b_crit'])[1]:.0f}] "
               f"(95 % bootstrap intervals, {a.reps} resamples of seeds).")
    out.append("")
    out.append("| arm | seeds reached | steps to target (mean, per seed) | examples to target (mean, per seed) | "
               "examples saved at equal steps [95 %] | steps saved at equal examples [95 %] | goal (>= "
               f"{a.goal:.0%} fewer examples, interval above 0) |")
    out.append("|---|---:|---|---|---|---|---|")
    for b in sorted(base):
        runs = base[b]
        out.append(f"| b{b} (fixed) | {len(runs)} | {mean([r[0] for r in runs]):.1f} ("
                   + ", ".join(f"{r[0]:.1f}" for r in runs) + f") | {mean([r[1] for r in runs]):.0f} ("
                   + ", ".join(f"{r[1]:.0f}" for r in runs) + ") | | | |")
    for arm, runs in sorted(cands.items()):
        sc, ec = mean([r[0] for r in runs]), mean([r[1] for r in runs])
        ex, st = savings(s_min, e_min, sc, ec)
        (ex_lo, ex_hi), (st_lo, st_hi) = ci(cboot[arm][0]), ci(cboot[arm][1])
        goal = "met" if ex >= a.goal and ex_lo > 0 else "not met"
        out.append(f"| {arm} | {len(runs)} | {sc:.1f} (" + ", ".join(f"{r[0]:.1f}" for r in runs)
                   + f") | {ec:.0f} (" + ", ".join(f"{r[1]:.0f}" for r in runs)
                   + f") | {ex:+.1%} [{ex_lo:+.1%}, {ex_hi:+.1%}] | {st:+.1%} [{st_lo:+.1%}, {st_hi:+.1%}] | {goal} |")
    beyond = [arm for arm, runs in cands.items() if mean([r[1] for r in runs]) <= e_min]
    if beyond:
        out.append("")
        out.append(f"{', '.join(sorted(beyond))}: fewer examples than E_min, which no fixed batch reaches the target "
                   "with, so the steps saved at equal examples read 100 %.")
    text = "\n".join(out) + "\n"
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text)
    if a.plot_data:
        os.makedirs(a.plot_data, exist_ok=True)
        with open(os.path.join(a.plot_data, "frontier.dat"), "w") as f:
            f.write(f"{s_min} {e_min}\n")
        with open(os.path.join(a.plot_data, "baselines.dat"), "w") as f:
            for b in sorted(base):
                for s, e, seed in base[b]:
                    f.write(f"{e} {s} {b}\n")
        with open(os.path.join(a.plot_data, "labels.dat"), "w") as f:  # one label per batch, at its seeds' mean
            for b in sorted(base):
                f.write(f"{mean([r[1] for r in base[b]])} {mean([r[0] for r in base[b]])} {b}\n")
        for arm, runs in cands.items():
            with open(os.path.join(a.plot_data, f"{arm}.dat"), "w") as f:
                for s, e, seed in runs:
                    f.write(f"{e} {s} {seed}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
