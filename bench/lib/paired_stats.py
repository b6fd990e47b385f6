#!/usr/bin/env python3
"""Paired comparison of a seeded study's arms against a baseline arm: is an arm's held-out loss different from the
baseline's by more than seed noise?

Usage: paired_stats.py [--baseline fp32] [--last 3] [--pool-k] [--md FILE] [--tsv FILE] [--plot FILE.png] STUDY_DIR...
  Each STUDY_DIR holds run directories named ARM-seedS (bench/corpus_study.sh --seeds). Runs are grouped by
  gradient_accumulation_steps (K, from the run's config.yml) and arm. For every arm and K, each seed's run is
  paired with the baseline's run at the same seed and K, and two differences are taken (arm minus baseline):
    - the final eval_loss;
    - the mean eval_loss of the last L evaluations (--last), less sensitive to the last step's noise.
  Reported per arm and K: the number of pairs n, the mean difference, its sample sd, and the 95 % t-interval
  mean +- t(0.975, n-1) sd / sqrt(n). An interval that contains 0 reads "no difference detectable at +-X", X being
  its half-width. Beside each arm: the mean grad_rel_error (grad_fidelity_period) over all its runs' measured steps.
  --pool-k: one group whatever K (for arms whose K differs or changes, e.g. bench/batch_size_study.sh);
  --md: the table in Markdown; --tsv: every pair's differences; --plot: a PNG of every seed's difference (gnuplot).
Standard library only (any python3): the study must not need anything the trainer does not.
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile


# --- statistics -----------------------------------------------------------------------------------------------

def mean(xs):
    return sum(xs) / len(xs)


def sample_sd(xs):
    """Standard deviation with the n - 1 denominator (0 for a single value)."""
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _betacf(a, b, x):
    """Continued fraction of the incomplete beta function, by the modified Lentz method (Numerical Recipes in C,
    2nd ed., section 6.4, betacf)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            return h
    raise ArithmeticError("incomplete beta: continued fraction did not converge")


def betainc(a, b, x):
    """Regularised incomplete beta I_x(a, b) (Numerical Recipes, betai)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t, df):
    """P(T <= t) for Student's t with df degrees of freedom: 1 - I_{df/(df+t^2)}(df/2, 1/2) / 2 for t >= 0."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p, df):
    """The t with P(T <= t) = p, by bisection on t_cdf (to 1e-12). Checked in tests against the NIST/SEMATECH
    e-Handbook's table of t critical values (section 1.3.6.7.2)."""
    if not 0.5 <= p < 1.0:
        raise ValueError("t_quantile: p must be in [0.5, 1)")
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def paired(baseline, arm, level=0.95):
    """Differences arm - baseline, paired by position. Returns n, mean, sd, half-width and the interval; with fewer
    than 2 pairs the sd and interval are NaN (no spread can be estimated)."""
    if len(baseline) != len(arm) or not arm:
        raise ValueError("paired: need two equally long, non-empty lists")
    diffs = [a - b for a, b in zip(arm, baseline)]
    n, m = len(diffs), mean(diffs)
    if n < 2:
        nan = float("nan")
        return {"n": n, "mean": m, "sd": nan, "half": nan, "lo": nan, "hi": nan, "diffs": diffs}
    sd = sample_sd(diffs)
    half = t_quantile(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": m, "sd": sd, "half": half, "lo": m - half, "hi": m + half, "diffs": diffs}


def verdict(st):
    """The table's words for an interval: 'no difference detectable at +-X' when it contains 0."""
    if math.isnan(st["half"]):
        return "one pair: no interval"
    if st["lo"] <= 0.0 <= st["hi"]:
        return "no difference detectable at ±%.2g" % st["half"]
    return "%s by %.2g (95 %%: %.2g to %.2g)" % ("higher" if st["mean"] > 0 else "lower", abs(st["mean"]),
                                                 abs(st["lo"]) if st["mean"] > 0 else abs(st["hi"]),
                                                 abs(st["hi"]) if st["mean"] > 0 else abs(st["lo"]))


# --- reading a study ---------------------------------------------------------------------------------------------

RUN_NAME = re.compile(r"^(?P<arm>.+)-seed(?P<seed>\d+)$")


def read_run(path, last):
    """eval_loss series, grad_rel_error and fp16_underflow_fraction values, and K, of one finished run."""
    if not os.path.isfile(os.path.join(path, "summary.json")):
        return None
    evals, rel, under = [], [], []
    with open(os.path.join(path, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if isinstance(row.get("eval_loss"), (int, float)):
                evals.append(row["eval_loss"])
            if isinstance(row.get("grad_rel_error"), (int, float)):
                rel.append(row["grad_rel_error"])
            if isinstance(row.get("fp16_underflow_fraction"), (int, float)):
                under.append(row["fp16_underflow_fraction"])
    if not evals:
        raise ValueError("%s logged no eval_loss (the study needs eval_interval > 0)" % path)
    k = 1
    with open(os.path.join(path, "config.yml")) as f:
        for line in f:
            m = re.match(r"^gradient_accumulation_steps:\s*(\d+)", line)
            if m:
                k = int(m.group(1))
    return {"k": k, "final": evals[-1], "last": mean(evals[-last:]), "rel": rel, "under": under}


def read_studies(dirs, last, pool_k=False):
    """{(K, arm): {seed: run}} over every ARM-seedS run directory of the given study directories; with pool_k every
    run is put under K = 0 (arms whose K differs, or changes during the run, compared with each other)."""
    runs = {}
    for d in dirs:
        for name in sorted(os.listdir(d)):
            m = RUN_NAME.match(name)
            if not m or not os.path.isdir(os.path.join(d, name)):
                continue
            run = read_run(os.path.join(d, name), last)
            if run is not None:
                if pool_k:
                    run["k"] = 0
                runs.setdefault((run["k"], m.group("arm")), {})[int(m.group("seed"))] = run
    return runs


def compare(runs, baseline):
    """One row per (K, arm other than the baseline): the paired statistics of both measures."""
    rows = []
    for (k, arm), by_seed in sorted(runs.items()):
        base = runs.get((k, baseline))
        if arm == baseline or base is None:
            continue
        seeds = sorted(set(by_seed) & set(base))
        if not seeds:
            continue
        rel = [v for s in seeds for v in by_seed[s]["rel"]]
        under = [v for s in seeds for v in by_seed[s]["under"]]
        rows.append({"k": k, "arm": arm, "seeds": seeds,
                     "base_final": [base[s]["final"] for s in seeds],
                     "final": paired([base[s]["final"] for s in seeds], [by_seed[s]["final"] for s in seeds]),
                     "last": paired([base[s]["last"] for s in seeds], [by_seed[s]["last"] for s in seeds]),
                     "rel": mean(rel) if rel else None, "under": mean(under) if under else None})
    return rows


# --- output ----------------------------------------------------------------------------------------------------

def markdown(rows, baseline, last):
    out = ["| K | arm − %s | seeds | %s final eval_loss | Δ final eval_loss: mean (sd) | 95 %% interval | "
           "Δ mean of last %d evals: mean (sd) | 95 %% interval | grad_rel_error |" % (baseline, baseline, last),
           "|---:|---|---:|---:|---:|---|---:|---|---:|"]
    def interval(st):
        if math.isnan(st["half"]):
            return "– (one pair)"
        return "[%+.2g, %+.2g]: %s" % (st["lo"], st["hi"], verdict(st))

    for r in rows:
        f, l = r["final"], r["last"]
        rel = "%.3g" % r["rel"] if r["rel"] is not None else "–"
        if r["under"] is not None:
            rel += " (fp16 underflow %.3g %%)" % (100 * r["under"])
        out.append("| %d | %s | %d | %.4f (sd %.2g) | %+.2g (%.2g) | %s | %+.2g (%.2g) | %s | %s |" % (
            r["k"], r["arm"], f["n"], mean(r["base_final"]), sample_sd(r["base_final"]), f["mean"], f["sd"],
            interval(f), l["mean"], l["sd"], interval(l), rel))
    return "\n".join(out) + "\n"


def tsv(rows):
    out = ["K\tarm\tseed\tdiff_final_eval_loss\tdiff_last_evals_mean"]
    for r in rows:
        for s, df, dl in zip(r["seeds"], r["final"]["diffs"], r["last"]["diffs"]):
            out.append("%d\t%s\t%d\t%.6g\t%.6g" % (r["k"], r["arm"], s, df, dl))
    return "\n".join(out) + "\n"


def plot(rows, baseline, png):
    """One panel per K: every seed's difference of final eval_loss (a point per seed and arm, arms side by side),
    and each arm's mean with its 95 % interval as an error bar at the right, above the label 'mean'."""
    gnuplot = shutil.which(os.environ.get("GNUPLOT", "gnuplot"))
    if gnuplot is None:
        print("paired_stats.py: no gnuplot (apt-get install gnuplot-nox); skipping %s" % png, file=sys.stderr)
        return
    ks = sorted({r["k"] for r in rows})
    arms = sorted({r["arm"] for r in rows})
    with tempfile.TemporaryDirectory() as tmp:
        script = ["set terminal pngcairo noenhanced size %d,520" % (420 * len(ks) + 80),
                  "set output '%s'" % png.replace("'", "''"),
                  "set multiplot layout 1,%d title 'final eval_loss: arm minus %s at the same seed (points), "
                  "mean and 95 %% t-interval (bars)'" % (len(ks), baseline),
                  "set grid", "set key below", "set xlabel 'seed'", "set ylabel 'difference of final eval_loss'"]
        for k in ks:
            at_k = [(i, r) for i, arm in enumerate(arms) for r in rows if r["k"] == k and r["arm"] == arm]
            mean_x = max(s for _, r in at_k for s in r["seeds"]) + 1.5
            cmds = ["0 with lines lc rgb 'black' notitle"]
            for i, r in at_k:
                off = (i - (len(arms) - 1) / 2.0) * 0.15
                dat = os.path.join(tmp, "k%d_%d.dat" % (k, i))
                with open(dat, "w") as f:
                    for s, d in zip(r["seeds"], r["final"]["diffs"]):
                        f.write("%g %.8g 0\n" % (s + off, d))
                    half = 0.0 if math.isnan(r["final"]["half"]) else r["final"]["half"]
                    f.write("\n\n%g %.8g %.8g\n" % (mean_x + off, r["final"]["mean"], half))
                cmds.append("'%s' index 0 using 1:2 with points pt 7 ps 1.2 lc %d title '%s'" % (dat, i + 1, r["arm"]))
                cmds.append("'%s' index 1 using 1:2:3 with yerrorbars pt 5 ps 1.2 lc %d notitle" % (dat, i + 1))
            seeds = sorted({s for _, r in at_k for s in r["seeds"]})
            tics = ", ".join(["'%d' %d" % (s, s) for s in seeds] + ["'mean' %g" % mean_x])
            script += ["set title 'K = %d'" % k, "set xrange [-0.7:%g]" % (mean_x + 0.7),
                       "set xtics (%s)" % tics, "plot " + ", ".join(cmds)]
        script.append("unset multiplot")
        subprocess.run([gnuplot], input="\n".join(script) + "\n", text=True, check=True)
    print("wrote %s" % png)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+", metavar="STUDY_DIR")
    ap.add_argument("--baseline", default="fp32")
    ap.add_argument("--last", type=int, default=3)
    ap.add_argument("--md")
    ap.add_argument("--tsv")
    ap.add_argument("--plot")
    ap.add_argument("--pool-k", action="store_true",
                    help="compare arms whatever their gradient_accumulation_steps (K is reported as 0)")
    a = ap.parse_args(argv)
    if a.last < 1:
        ap.error("--last must be >= 1")
    rows = compare(read_studies(a.dirs, a.last, a.pool_k), a.baseline)
    if not rows:
        print("paired_stats.py: no arm has runs at the same seeds as '%s' in %s" % (a.baseline, " ".join(a.dirs)),
              file=sys.stderr)
        return 1
    table = markdown(rows, a.baseline, a.last)
    print(table, end="")
    if a.md:
        with open(a.md, "w") as f:
            f.write(table)
    if a.tsv:
        with open(a.tsv, "w") as f:
            f.write(tsv(rows))
    if a.plot:
        plot(rows, a.baseline, a.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
