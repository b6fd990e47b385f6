#!/usr/bin/env bash
# Intent: end-to-end test of scripts/sweep.sh with the real trainer: a 2x2 sweep (gradient_accumulation_steps x
# grad_dtype) on a tiny model must give four `ok` rows, and running it again must skip all four; an incomplete run
# resumes; one SIGINT stops a sweep (exit 130, the run under way `interrupted`) and a re-run finishes it; two sweeps
# started at once on one directory share the four runs instead of running any twice.
# Cost: four 3-step trainer runs of a 2-layer, 32-wide model, a re-run that trains nothing, one resumed run, a
# stopped and resumed 3-run sweep, and four more runs split between two concurrent sweeps: about a minute on 2 CPU
# cores.
#
# Usage: tests/sweep_test.sh [TRAINER]   (or TRAINER=path; default <repo>/build/trainer)
# Exit: 0 pass; 1 fail (the sweep directory is kept and its path printed).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export TRAINER=${1:-${TRAINER:-$repo/build/trainer}}
[[ -x $TRAINER ]] || { echo "sweep_test: no trainer binary at $TRAINER" >&2 && exit 1; }

tmp=$(mktemp -d)
out=$tmp/sw
fail() {
  echo "sweep_test: FAIL: $*" >&2
  echo "sweep_test: sweep directory kept at $out" >&2
  exit 1
}

sweep() {
  "$repo/scripts/sweep.sh" tiny.yml gradient_accumulation_steps=1,2 grad_dtype=float32,bfloat16 \
    steps=3 checkpoint_period=2 --out "$out"
}

echo "== first sweep"
rc=0
first=$(sweep 2>&1) || rc=$?
echo "$first"
((rc == 0)) || fail "first sweep exited $rc"

[[ -f $out/summary.csv && -f $out/summary.md ]] || fail "no summary.csv / summary.md in $out"
ok_rows=$(awk -F, 'NR > 1 && $NF == "ok"' "$out/summary.csv" | wc -l)
((ok_rows == 4)) || fail "expected 4 ok rows in summary.csv, got $ok_rows"
# Every ok row must carry a final loss: a sweep that cannot find its numbers is not a working sweep.
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "final_loss") c = i; next } $c == "-" { exit 1 }' \
  "$out/summary.csv" || fail "a row has no final_loss"
for run in gradient_accumulation_steps-{1,2}_grad_dtype-{float32,bfloat16}; do
  [[ -f $out/$run/summary.json ]] || fail "missing $out/$run/summary.json"
  [[ -f $out/$run.log ]] || fail "missing log $out/$run.log"
done

echo "== second sweep (must skip every run)"
rc=0
second=$(sweep 2>&1) || rc=$?
echo "$second"
((rc == 0)) || fail "second sweep exited $rc"
skipped=$(grep -c ': skipped' <<<"$second" || true)
((skipped == 4)) || fail "expected 4 skipped runs on re-run, got $skipped"
ok_rows=$(awk -F, 'NR > 1 && $NF == "ok"' "$out/summary.csv" | wc -l)
((ok_rows == 4)) || fail "expected 4 ok rows after re-run, got $ok_rows"

echo "== third sweep after an interruption (must resume the one incomplete run from its checkpoint)"
victim=gradient_accumulation_steps-2_grad_dtype-bfloat16
cp "$out/$victim/summary.json" "$tmp/uninterrupted.json"
# As if killed after step 2's checkpoint: no step-3 checkpoint, no summary.json.
rm -rf "$out/$victim/summary.json" "$out/$victim/checkpoints/step-3"
rc=0
third=$(sweep 2>&1) || rc=$?
echo "$third"
((rc == 0)) || fail "third sweep exited $rc"
grep -q "$victim: resuming" <<<"$third" || fail "the incomplete run was not resumed"
skipped=$(grep -c ': skipped' <<<"$third" || true)
((skipped == 3)) || fail "expected 3 skipped runs, got $skipped"
grep -q "resumed from .*step-2" "$out/$victim.log" || fail "the trainer's log does not show a resume from step-2"
final() { grep -o '"final_loss": [^,}]*' "$1"; }
[[ $(final "$tmp/uninterrupted.json") == $(final "$out/$victim/summary.json") ]] ||
  fail "resumed final loss $(final "$out/$victim/summary.json") != uninterrupted $(final "$tmp/uninterrupted.json")"

echo "== one SIGINT to a 3-run sweep: the run under way checkpoints, nothing new starts, exit 130"
out=$tmp/stopped
set -m  # job control: the background sweep gets its own process group and may trap SIGINT
# Its first run is held before step 4 (SHADOWGRAD_TEST_HOLD, src/train/Signals.h) until the SIGINT the sweep
# forwards: the signal lands there, whatever the machine's load.
SHADOWGRAD_TEST_HOLD=step-4 "$repo/scripts/sweep.sh" tiny.yml gradient_accumulation_steps=1,2,4 steps=6 \
  checkpoint_period=1000 log_period=1 --out "$out" >"$tmp/stopped.out" 2>&1 &
sweep_pid=$!
set +m
first_run=$out/gradient_accumulation_steps-1
for _ in $(seq 12000); do  # until the first run says it holds (at most 120 s)
  grep -qs 'test hold: at step-4,' "$first_run.log" && break
  kill -0 "$sweep_pid" 2>/dev/null || break
  sleep 0.01
done
grep -qs 'test hold: at step-4,' "$first_run.log" || { cat "$tmp/stopped.out"; fail "the first run never held at step 4"; }
kill -INT "$sweep_pid"
rc=0
wait "$sweep_pid" || rc=$?
cat "$tmp/stopped.out"
((rc == 130)) || fail "stopped sweep exited $rc, expected 130"
grep -q "gradient_accumulation_steps-1,.*interrupted$" "$out/summary.csv" || fail "the run under way is not 'interrupted'"
grep -q "stopped by SIGINT during run 1 of 3 (gradient_accumulation_steps-1; checkpointed)" "$tmp/stopped.out" ||
  fail "the stop message does not name the interrupted run"
[[ ! -e $out/gradient_accumulation_steps-2 ]] || fail "a new run was started after the signal"
[[ -d $first_run/checkpoints/step-4 ]] || fail "the interrupted run left no checkpoint of step 4"
[[ ! -f $first_run/summary.json ]] || fail "the interrupted run wrote summary.json"

echo "== the same sweep again resumes the interrupted run and finishes all three"
rc=0
resumed=$("$repo/scripts/sweep.sh" tiny.yml gradient_accumulation_steps=1,2,4 steps=6 checkpoint_period=1000 log_period=1 --out "$out" 2>&1) ||
  rc=$?
echo "$resumed"
((rc == 0)) || fail "resumed sweep exited $rc"
grep -q "gradient_accumulation_steps-1: resuming" <<<"$resumed" || fail "the interrupted run was not resumed"
ok_rows=$(awk -F, 'NR > 1 && $NF == "ok"' "$out/summary.csv" | wc -l)
((ok_rows == 3)) || fail "expected 3 ok rows after the resumed sweep, got $ok_rows"

echo "== two sweeps started at once on one directory: each configuration runs once, never twice at the same time"
out=$tmp/sw2
sweep >"$tmp/a.out" 2>&1 &
a=$!
sweep >"$tmp/b.out" 2>&1 &
b=$!
rc_a=0 rc_b=0
wait "$a" || rc_a=$?
wait "$b" || rc_b=$?
cat "$tmp/a.out" "$tmp/b.out" | grep '^\[' || true
((rc_a == 0 && rc_b == 0)) || fail "concurrent sweeps exited $rc_a and $rc_b"
runs_done=$(cat "$tmp/a.out" "$tmp/b.out" | grep -c ': ok in' || true)
((runs_done == 4)) || fail "4 configurations were trained $runs_done times in all by the two sweeps"
for run in gradient_accumulation_steps-{1,2}_grad_dtype-{float32,bfloat16}; do
  [[ -f $out/$run/summary.json ]] || fail "missing $out/$run/summary.json"
  [[ $(grep -c 'done:' "$out/$run.log") == 1 ]] || fail "$run.log does not show exactly one finished run"
  grep -q 'in use by another trainer' "$out/$run.log" && fail "$run was started while another trainer held it"
done

echo "== a sweep whose runs all fail: its summary gives each run's error line"
rc=0
failing=$("$repo/scripts/sweep.sh" tiny.yml head_dim=15,17 steps=1 --out "$tmp/failing" 2>&1) || rc=$?
echo "$failing"
((rc == 1)) || fail "a failing sweep exited $rc, expected 1"
grep -q "2 of 2 runs failed:" <<<"$failing" || fail "no failure summary"
for d in 15 17; do
  grep -q "head_dim-$d: error: head_dim ($d) must be even for RoPE" <<<"$failing" || fail "no reason for head_dim=$d"
done

echo "== plot.sh on a sweep directory points to --sweep"
rc=0
plotted=$("$repo/scripts/plot.sh" "$tmp/failing" 2>&1) || rc=$?
((rc == 2)) && grep -q "scripts/plot.sh --sweep $tmp/failing" <<<"$plotted" || fail "plot.sh gave: $plotted (exit $rc)"

rm -rf "$tmp"
echo "sweep_test: PASS"
