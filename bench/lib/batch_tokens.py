#!/usr/bin/env python3
"""The equal-tokens batch-size study's arithmetic (bench/batch_size_study.sh --study tokens).

Usage:
  batch_tokens.py ramp RUN --small B --large B [--seq-len 32]
      A batch_size_schedule from a fixed-batch run's measured noise scale: from B_small, the batch doubles (to 2B) at
      the first token count at which the run's B_simple (gns_tokens / seq-len, in sequences) passed B, as
      batch_size_policy=gns with margin 1 would (ignoring the first 20 estimates, at most one doubling a step), up to
      --large. Prints the schedule ("0:32,40960:64,...").
  batch_tokens.py calibrate PHASE0_DIR [--tsv FILE] [--md FILE]
      Runs named bB-xM-seed0 (fixed batch B at LR multiplier M) and ramp-SCALING-xM-seed0: the final eval_loss of each,
      and the best (lowest) choice per arm. TSV rows: arm, choice, final_eval_loss, best|"".
  batch_tokens.py steps PHASE1_DIR
      Per arm (runs ARM-seedS): optimizer steps, the batch it ended at, and the steps it saved against "small".
  batch_tokens.py frontier PHASE0_DIR PHASE1_DIR --small B [--seq-len 32]
      Phase 2: each candidate's mean final loss against the fixed-batch points (phase 0's best LR per batch: final
      loss against steps, interpolated in log steps), and the ceiling on the steps any schedule can save at equal
      examples, computed from the small batch's measured noise-scale trajectory (see ceiling()).
Standard library only (run with /usr/bin/python3).
"""
import argparse
import json
import math
import os
import re
import sys


def metrics(run):
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def summary(run):
    """summary.json of a finished run, or None (a run that diverged writes none)."""
    path = os.path.join(run, "summary.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def final_eval(run):
    s = summary(run)
    v = s.get("eval_loss") if s else None
    return v if isinstance(v, (int, float)) and math.isfinite(v) else math.inf


def mean(xs):
    return sum(xs) / len(xs)


# --- ramp ---------------------------------------------------------------------------------------------------------

def ramp(run, small, large, seq_len, settle=20):
    """As batch_size_policy=gns would with margin 1 and no spacing: the first `settle` estimates (the EMA's length at
    gns_ema_decay=0.95) are not trusted, and the batch doubles at most once a step."""
    points = [(0, small)]
    batch = small
    seen = 0
    for row in metrics(run):
        g = row.get("gns_tokens")
        if not isinstance(g, (int, float)) or not math.isfinite(g):
            continue
        seen += 1
        if seen > settle and batch * 2 <= large and g / seq_len > batch:
            # From the next 1024-token boundary on (a round number; the step that starts at or after it changes).
            at = -(-int(row["tokens_seen"]) // 1024) * 1024
            batch *= 2
            points.append((max(at, points[-1][0] + 1), batch))
    return ",".join("%d:%d" % p for p in points)


# --- calibrate ----------------------------------------------------------------------------------------------------

CAL = re.compile(r"^(?P<arm>b\d+|ramp-(?P<scaling>sqrt|none|linear))-x(?P<mult>[0-9.]+)-seed0$")


def calibrate(d):
    rows = {}
    for name in sorted(os.listdir(d)):
        m = CAL.match(name)
        if not m or not os.path.isdir(os.path.join(d, name)):
            continue
        if not os.path.exists(os.path.join(d, name + ".done")):
            continue
        arm = "ramp" if m.group("scaling") else m.group("arm")
        choice = ("%s %s" % (m.group("scaling"), m.group("mult"))) if m.group("scaling") else m.group("mult")
        s = summary(os.path.join(d, name))
        rows.setdefault(arm, []).append((choice, final_eval(os.path.join(d, name)), s["steps"] if s else None))
    return rows


def calibrate_outputs(rows):
    tsv = []
    md = ["| arm | LR choice: final eval_loss (steps) | best |", "|---|---|---|"]

    def arm_key(a):
        return (1, 0) if a == "ramp" else (0, int(a[1:]))

    for arm in sorted(rows, key=arm_key):
        runs = sorted(rows[arm])
        best = min(runs, key=lambda r: r[1])
        for choice, loss, _ in runs:
            tsv.append("%s\t%s\t%.6g\t%s" % (arm, choice, loss, "best" if (choice, loss) == best[:2] else ""))
        cells = ", ".join("x%s: %s (%s)" % (c, "diverged" if math.isinf(l) else "%.4f" % l, s if s else "–")
                          for c, l, s in runs)
        md.append("| %s | %s | x%s |" % (arm, cells, best[0]))
    return "\n".join(tsv) + "\n", "\n".join(md) + "\n"


# --- phase 1 and 2 ------------------------------------------------------------------------------------------------

RUN = re.compile(r"^(?P<arm>.+)-seed(?P<seed>\d+)$")


def phase1(d):
    """{arm: {seed: run directory}} of finished runs."""
    arms = {}
    for name in sorted(os.listdir(d)):
        m = RUN.match(name)
        path = os.path.join(d, name)
        if m and os.path.isdir(path) and summary(path) is not None:
            arms.setdefault(m.group("arm"), {})[int(m.group("seed"))] = path
    return arms


def batch_path(run):
    """The batches a run used, as 'B0 -> B1 (step s) -> ...', and its last batch."""
    out, last = [], None
    for row in metrics(run):
        b = row.get("global_batch_size")
        if b != last:
            out.append("%d" % b if last is None else "%d (step %d)" % (b, row["step"]))
            last = b
    return " → ".join(out), last


def steps_table(d):
    arms = phase1(d)
    base = arms.get("small", {})
    out = ["| arm | seeds | steps, mean (per seed) | steps saved vs small, mean [min, max] | final eval_loss, mean "
           "(per seed) | batches (seed %s) |" % (min(base) if base else "–"), "|---|---:|---|---|---|---|"]
    order = sorted(arms, key=lambda a: (a not in ("small", "large", "ramp"), ["small", "large", "ramp"].index(a)
                                        if a in ("small", "large", "ramp") else 0, a))
    for arm in order:
        runs = arms[arm]
        steps = {s: summary(r)["steps"] for s, r in runs.items()}
        losses = {s: final_eval(r) for s, r in runs.items()}
        saved = [1 - steps[s] / summary(base[s])["steps"] for s in sorted(runs) if s in base]
        path, _ = batch_path(runs[min(runs)])
        out.append("| %s | %d | %.0f (%s) | %s | %.4f (%s) | %s |" % (
            arm, len(runs), mean(list(steps.values())), ", ".join("%d" % steps[s] for s in sorted(steps)),
            "%+.1f %% [%+.1f, %+.1f]" % (100 * mean(saved), 100 * min(saved), 100 * max(saved)) if saved else "–",
            mean(list(losses.values())), ", ".join("%.4f" % losses[s] for s in sorted(losses)), path))
    return "\n".join(out) + "\n"


def ceiling(run, batch, seq_len):
    """McCandlish et al. 2018's model of a step, with the measured noise scale B_n (B_simple, sequences) standing in
    for B_noise: a step of batch B makes dS_min = 1 / (1 + B_n / B) minimal steps of progress and needs
    dE_min = B_n dS_min minimal examples. Over the fixed-batch run: S_min = sum dS_min, E_min = sum B_n dS_min.
    A schedule B(t) then needs S = S_min + sum B_n / B dS_min steps and E = E_min + sum B dS_min examples; at equal
    examples the fewest steps come from B proportional to sqrt(B_n) (Lagrange; Cauchy-Schwarz gives
    (S - S_min)(E - E_min) >= (sum sqrt(B_n) dS_min)^2, with equality there), so against the fixed run's S steps:
      any schedule:         saved <= 1 - S_min / S                     (no run takes fewer than S_min steps)
      at equal examples:    saved <= (1 - g2) (1 - S_min / S),  g2 = (sum sqrt(B_n) dS_min)^2 / (S_min E_min) <= 1.
    Returns the dict of those numbers."""
    rows = metrics(run)
    s_min = e_min = root = 0.0
    first = last = None
    for row in rows:
        g = row.get("gns_tokens")
        if not isinstance(g, (int, float)) or not math.isfinite(g) or g <= 0:
            continue
        bn = g / seq_len
        w = 1.0 / (1.0 + bn / batch)
        s_min += w
        e_min += w * bn
        root += w * math.sqrt(bn)
        first = bn if first is None else first
        last = bn
    s = len(rows)
    g2 = root * root / (s_min * e_min)
    return {"steps": s, "s_min": s_min, "e_min": e_min, "b_bar": e_min / s_min, "g2": g2,
            "any": 1 - s_min / s, "sqrt": (1 - g2) * (1 - s_min / s), "bn_first": first, "bn_last": last}


def interpolate(points, x):
    """Piecewise-linear y(x) through (x, y) points sorted by x; None outside their range."""
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 != x0 else y0
    return None


def frontier(p0, p1, small, seq_len):
    cal = calibrate(p0)
    fixed = []  # (steps, loss, B) at the best LR of each fixed batch, seed 0
    for arm, runs in cal.items():
        if arm == "ramp":
            continue
        choice, loss, steps = min(runs, key=lambda r: r[1])
        if steps and math.isfinite(loss):
            fixed.append((steps, loss, int(arm[1:])))
    fixed.sort()
    arms = phase1(p1)
    out = ["Fixed-batch points (phase 0, the best LR of each batch, seed 0): " + ", ".join(
        "B=%d: %d steps, %.4f" % (b, s, l) for s, l, b in sorted(fixed, key=lambda f: f[2])) + ".", ""]
    logs = [(math.log(s), l) for s, l, _ in fixed]
    by_loss = sorted((l, math.log(s)) for s, l, _ in fixed)
    # Seed 0 only: the fixed points are seed 0's, and seeds differ by more than the arms do.
    out.append("Each candidate's seed-0 run against them (the fixed points are seed 0 too):")
    out.append("")
    out.append("| arm (seed 0) | steps | final eval_loss | a fixed batch at those steps (interpolated) | "
               "Δ loss vs it | steps a fixed batch needs for that loss | steps saved vs it |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for arm in sorted(arms):
        if arm in ("small", "large") or 0 not in arms[arm]:
            continue
        s = summary(arms[arm][0])["steps"]
        l = final_eval(arms[arm][0])
        at = interpolate(logs, math.log(s))
        need = interpolate(by_loss, l)
        out.append("| %s | %.0f | %.4f | %s | %s | %s | %s |" % (
            arm, s, l, "%.4f" % at if at is not None else "outside", "%+.4f" % (l - at) if at is not None else "–",
            "%.0f" % math.exp(need) if need is not None else "outside",
            "%+.1f %%" % (100 * (1 - s / math.exp(need))) if need is not None else "–"))
    out.append("")
    base = arms.get("small", {})
    if base:
        cs = [ceiling(r, small, seq_len) for _, r in sorted(base.items())]
        out.append("Ceiling from the measured noise scale of the fixed B=%d runs (%d seeds; McCandlish et al. 2018's "
                   "step model with B_simple for B_noise; bench/lib/batch_tokens.py ceiling()):" % (small, len(cs)))
        out.append("")
        out.append("| seed run | steps S | S_min | E_min (sequences) | E_min/S_min | B_simple first → last | g² | "
                   "saved at most, any schedule (1 − S_min/S) | saved at most at equal examples ((1 − g²)(1 − S_min/S)) |")
        out.append("|---|---:|---:|---:|---:|---|---:|---:|---:|")
        for seed, c in zip(sorted(base), cs):
            out.append("| small-seed%d | %d | %.0f | %.0f | %.0f | %.0f → %.0f | %.3f | %.1f %% | %.1f %% |" % (
                seed, c["steps"], c["s_min"], c["e_min"], c["b_bar"], c["bn_first"], c["bn_last"], c["g2"],
                100 * c["any"], 100 * c["sqrt"]))
        out.append("")
        out.append("Mean: any schedule ≤ %.1f %% fewer steps than B=%d; at its examples (equal tokens) ≤ %.1f %%." % (
            100 * mean([c["any"] for c in cs]), small, 100 * mean([c["sqrt"] for c in cs])))
    return "\n".join(out) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("ramp")
    r.add_argument("run")
    r.add_argument("--small", type=int, required=True)
    r.add_argument("--large", type=int, required=True)
    r.add_argument("--seq-len", type=int, default=32)
    c = sub.add_parser("calibrate")
    c.add_argument("dir")
    c.add_argument("--tsv")
    c.add_argument("--md")
    s = sub.add_parser("steps")
    s.add_argument("dir")
    f = sub.add_parser("frontier")
    f.add_argument("phase0")
    f.add_argument("phase1")
    f.add_argument("--small", type=int, required=True)
    f.add_argument("--seq-len", type=int, default=32)
    a = ap.parse_args(argv)
    if a.cmd == "ramp":
        print(ramp(a.run, a.small, a.large, a.seq_len))
    elif a.cmd == "calibrate":
        rows = calibrate(a.dir)
        if not rows:
            print("batch_tokens.py: no finished phase-0 runs in %s" % a.dir, file=sys.stderr)
            return 1
        tsv, md = calibrate_outputs(rows)
        print(md, end="")
        for path, text in ((a.tsv, tsv), (a.md, md)):
            if path:
                with open(path, "w") as fh:
                    fh.write(text)
    elif a.cmd == "steps":
        print(steps_table(a.dir), end="")
    else:
        print(frontier(a.phase0, a.phase1, a.small, a.seq_len), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
