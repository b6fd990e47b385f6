#!/usr/bin/env python3
"""Collects one sweep's results into summary.csv and summary.md, and prints the table.

Usage (called by scripts/sweep.sh): sweep_summary.py SWEEP_DIR KEY1,KEY2,... < rows.tsv
Each stdin row: run_name <TAB> status <TAB> value_of_KEY1 <TAB> value_of_KEY2 ...
Metrics come from <run>/summary.json, else from the last line of <run>/metrics.jsonl; '-' when unknown.
Standard library only: the sweep must not need anything the trainer does not.
"""
import csv
import json
import math
import os
import sys

# summary.json key -> (column, metrics.jsonl key used as fallback)
METRICS = [("final_loss", "final_loss", "loss"),
           ("eval_loss", "eval_loss", "eval_loss"),  # the last evaluation; '-' when eval_interval <= 0
           ("avg_tokens_per_s", "tokens_per_s", "tokens_per_s"),
           ("peak_mem_bytes", "peak_mem_bytes", "peak_mem_bytes")]


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def last_metrics_line(path):
    try:
        with open(path) as f:
            lines = [line for line in f if line.strip()]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def fmt(column, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-"
    if not math.isfinite(value):
        return str(value)  # "nan" / "inf": a diverged run should say so, not look unknown
    if column in ("final_loss", "eval_loss"):
        return f"{value:.6g}"
    if column == "tokens_per_s":
        return f"{value:.1f}"
    return str(int(value))


def run_metrics(run_dir):
    summary = read_json(os.path.join(run_dir, "summary.json")) or {}
    last = None
    out = {}
    for summary_key, column, metrics_key in METRICS:
        value = summary.get(summary_key)
        if value is None:
            if last is None:
                last = last_metrics_line(os.path.join(run_dir, "metrics.jsonl")) or {}
            value = last.get(metrics_key)
        out[column] = fmt(column, value)
    return out


def main():
    sweep_dir, keys = sys.argv[1], [k for k in sys.argv[2].split(",") if k]
    columns = keys + [column for _, column, _ in METRICS] + ["status"]
    rows = []
    for line in sys.stdin:
        fields = line.rstrip("\n").split("\t")
        name, status, values = fields[0], fields[1], fields[2:]
        row = dict(zip(keys, values), run=name, status=status)
        row.update(run_metrics(os.path.join(sweep_dir, name)))
        rows.append(row)

    # The CSV also carries the run directory name, the join key for scripts (and plot.sh --sweep).
    with open(os.path.join(sweep_dir, "summary.csv"), "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["run"] + columns)
        for row in rows:
            writer.writerow([row["run"]] + [row[c] for c in columns])

    widths = [max([len(c)] + [len(row[c]) for row in rows]) for c in columns]
    numeric = [c not in keys and c != "status" for c in columns]

    def cells(values):
        padded = [v.rjust(w) if right else v.ljust(w) for v, w, right in zip(values, widths, numeric)]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if right else ("-" * (w + 2)) for w, right in zip(widths, numeric)) + "|"
    table = "\n".join([cells(columns), rule] + [cells([row[c] for c in columns]) for row in rows]) + "\n"
    with open(os.path.join(sweep_dir, "summary.md"), "w") as f:
        f.write(table)
    sys.stdout.write(table)


if __name__ == "__main__":
    main()
