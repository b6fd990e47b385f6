#!/usr/bin/env python3
"""bench/lib/paired_stats.py against numbers computed by hand, and its t quantiles against a published table.

Usage: tests/paired_stats_test.py REPO     Exit: 0 pass; 1 fail.   Cost: well under a second.
"""
import json
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", "bench", "lib"))
import paired_stats as ps  # noqa: E402

failures = []


def close(what, got, want, tol):
    if not abs(got - want) <= tol:
        failures.append("%s: got %.10g, want %.10g (tolerance %g)" % (what, got, want, tol))


# t(0.975, df) from the NIST/SEMATECH e-Handbook of Statistical Methods, section 1.3.6.7.2 (three decimals).
NIST_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
             10: 2.228, 15: 2.131, 20: 2.086, 30: 2.042, 100: 1.984}
for df, t in NIST_T975.items():
    close("t(0.975, %d)" % df, ps.t_quantile(0.975, df), t, 5e-4)
close("t(0.95, 10)", ps.t_quantile(0.95, 10), 1.812, 5e-4)
close("t_cdf(0, 3)", ps.t_cdf(0.0, 3), 0.5, 1e-12)

# By hand: differences 0.01, -0.02, 0.03, 0, 0.005. Mean 0.025 / 5 = 0.005. Deviations 0.005, -0.025, 0.025,
# -0.005, 0; squares sum to 0.0013; sd = sqrt(0.0013 / 4) = 0.018027756. Half-width t(0.975, 4) sd / sqrt(5) =
# 2.776445 x 0.018027756 / 2.236068 = 0.022384. The interval [-0.017384, 0.027384] holds 0.
base = [3.90, 3.95, 3.88, 3.92, 3.91]
arm = [3.91, 3.93, 3.91, 3.92, 3.915]
st = ps.paired(base, arm)
close("n", st["n"], 5, 0)
close("mean", st["mean"], 0.005, 1e-12)
close("sd", st["sd"], 0.018027756, 1e-8)
close("half-width", st["half"], 0.022384, 1e-6)
close("low", st["lo"], -0.017384, 1e-6)
close("high", st["hi"], 0.027384, 1e-6)
if ps.verdict(st) != "no difference detectable at ±0.022":
    failures.append("verdict for an interval holding 0: %r" % ps.verdict(st))

# By hand: differences 0.02, 0.03, 0.025. Mean 0.025, sd = sqrt((0.005^2 + 0.005^2) / 2) = 0.005; half-width
# 4.302653 x 0.005 / sqrt(3) = 0.012421; interval [0.012579, 0.037421]: higher, 0 excluded.
st = ps.paired([4.0, 4.0, 4.0], [4.02, 4.03, 4.025])
close("mean 2", st["mean"], 0.025, 1e-12)
close("sd 2", st["sd"], 0.005, 1e-12)
close("half-width 2", st["half"], 0.012421, 1e-6)
if ps.verdict(st) != "higher by 0.025 (95 %: 0.013 to 0.037)":
    failures.append("verdict for a positive interval: %r" % ps.verdict(st))
if ps.verdict(ps.paired([4.0, 4.0, 4.0], [3.98, 3.97, 3.975])) != "lower by 0.025 (95 %: 0.013 to 0.037)":
    failures.append("verdict for a negative interval: %r" % ps.verdict(ps.paired([4.0] * 3, [3.98, 3.97, 3.975])))

# A study directory read from disk: K from config.yml, the final eval_loss, the mean of the last 2 evaluations,
# grad_rel_error's mean, and pairing by seed (seed 2 of the baseline has no partner and is left out).
with tempfile.TemporaryDirectory() as d:
    def write_run(name, evals, rel=()):
        os.makedirs(os.path.join(d, name))
        open(os.path.join(d, name, "summary.json"), "w").write("{}")
        open(os.path.join(d, name, "config.yml"), "w").write("steps: 3\ngradient_accumulation_steps: 256\n")
        with open(os.path.join(d, name, "metrics.jsonl"), "w") as f:
            for i, e in enumerate(evals):
                row = {"step": i + 1, "loss": 5.0, "eval_loss": e}
                if i < len(rel):
                    row["grad_rel_error"] = rel[i]
                f.write(json.dumps(row) + "\n")
    write_run("fp32-seed0", [5.0, 4.0, 3.0])
    write_run("fp32-seed1", [5.0, 4.2, 3.2])
    write_run("fp32-seed2", [5.0, 4.2, 3.2])
    write_run("bf16-seed0", [5.0, 4.1, 3.1], [0.01, 0.03])
    write_run("bf16-seed1", [5.0, 4.2, 3.3], [0.02])
    os.makedirs(os.path.join(d, "bf16-seed3"))  # unfinished: no summary.json
    rows = ps.compare(ps.read_studies([d], 2), "fp32")
    if len(rows) != 1 or rows[0]["k"] != 256 or rows[0]["arm"] != "bf16" or rows[0]["seeds"] != [0, 1]:
        failures.append("compare: %r" % [(r["k"], r["arm"], r["seeds"]) for r in rows])
    else:
        r = rows[0]
        # final: 3.1 - 3.0 = 0.1 and 3.3 - 3.2 = 0.1; last two: (4.1 + 3.1) / 2 - 3.5 = 0.1 and 3.75 - 3.7 = 0.05
        close("final diff mean", r["final"]["mean"], 0.1, 1e-9)
        close("final diff sd", r["final"]["sd"], 0.0, 1e-9)
        close("last-2 diff mean", r["last"]["mean"], 0.075, 1e-9)
        close("grad_rel_error mean", r["rel"], 0.02, 1e-12)
        table = ps.markdown(rows, "fp32", 2)
        if "| 256 | bf16 | 2 |" not in table:
            failures.append("markdown row: %s" % table)

for f in failures:
    print("paired_stats_test: FAIL: " + f)
print("paired_stats_test: %s" % ("FAIL" if failures else "all checks passed"))
sys.exit(1 if failures else 0)
