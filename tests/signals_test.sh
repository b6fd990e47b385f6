#!/usr/bin/env bash
# Intent: Ctrl-C under a launcher, as a terminal sends it: SIGINT to the whole process group of
#   - `scripts/launch.sh --nproc 2 ...` (MODE=launch): launch.sh passes one SIGINT to torchrun (in a session of its
#     own), which passes it to each trainer;
#   - `torchrun --standalone --nproc_per_node 2 --redirects 1 --tee 1 --no_python TRAINER ...` (MODE=torchrun; with
#     --standalone's c10d rendezvous on a free port instead of its fixed 29400): the workers run in their own
#     session, so only the agent's SIGTERM reaches them.
# (Under launch.sh the run shards its weights, gradients and optimizer state: ZeRO-3 with the carry sharded.) Either way the step under way finishes, rank 0 writes a checkpoint, no trainer exits at once ("exiting now"), and
# re-running the same command resumes from that checkpoint and finishes with every step once. Both trainers are held
# before step 3 (SHADOWGRAD_TEST_HOLD=step-3, src/train/Signals.h) until their signal comes, so it lands there
# whatever the machine's load: the run stops after step 3, with a checkpoint of step 3.
# Cost: two 2-process runs of the tiny model, about 5 s (torchrun: plus its Python start-up, about 5 s more).
#
# Usage: tests/signals_test.sh launch|torchrun TRAINER COMPARE_RUNS
# Exit: 0 pass; 1 fail (the scratch directory is kept); 77 skipped (MODE=torchrun without the venv's torchrun).
set -uo pipefail

mode=${1:-}
shift
[[ $mode == launch || $mode == torchrun ]] || { echo "usage: $0 launch|torchrun TRAINER COMPARE_RUNS" >&2; exit 1; }
torchrun=${TORCHRUN:-${SHADOWGRAD_VENV:-$(dirname "$0")/../.venv}/bin/torchrun}
if [[ $mode == torchrun && ! -x $torchrun ]]; then
  echo "signals_test: SKIPPED: no torchrun at $torchrun (scripts/build.sh makes .venv with torch)"
  exit 77
fi
source "$(dirname "${BASH_SOURCE[0]}")/lib/multiprocess_test.sh" "signals_test ($mode)" "$@"

steps=6
args=("${tiny[@]}" steps=$steps gradient_accumulation_steps=2 checkpoint_period=1000 run_name=group_int)
if [[ $mode == launch ]]; then
  # Under launch.sh the run is sharded (ZeRO-3, carry sharded): a stop then writes each rank's model and optimizer
  # shards; torchrun's mode keeps plain data parallel.
  args+=(shard_optimizer_over_data=true shard_gradients_over_data=true shard_parameters_over_data=true grad_reduce_bucket_mb=0.01)
  cmd=("$launch" --nproc 2 "${args[@]}")
else
  # --standalone's rendezvous, on a free port: --standalone itself always takes port 29400, which another job on a
  # shared machine may hold.
  port=$(python3 "$(dirname "$0")/../scripts/lib/free_port.py")
  cmd=("$torchrun" --nnodes 1 --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$port" --rdzv_id "signals$$"
       --nproc_per_node 2 --redirects 1 --tee 1 --no_python "$TRAINER" "${args[@]}")
fi
metrics=$runs/group_int/metrics.jsonl

echo "== $mode: SIGINT to the process group, both trainers held before step 3"
set -m  # the launcher gets a process group of its own, as a terminal's foreground job does
SHADOWGRAD_TEST_HOLD=step-3 "${cmd[@]}" >"$tmp/first.log" 2>&1 &
pgid=$!
set +m
started+=("$pgid")
wait_for_hold "$tmp/first.log" step-3 2 "$pgid"
kill -INT -- "-$pgid"
rc=0
wait "$pgid" || rc=$?
echo "launcher exited $rc"
done_steps=$(grep -c '"step"' "$metrics")
((rc != 0)) || fail "the launcher exited 0 after SIGINT at step $done_steps of $steps"
((done_steps == 3)) || { cat "$tmp/first.log" >&2; fail "the run stopped after step $done_steps, not 3"; }
grep -q "exiting now" "$tmp/first.log" && { cat "$tmp/first.log" >&2; fail "a trainer exited at once (a burst read as two requests)"; }
grep -q "stopped by SIG" "$tmp/first.log" || { cat "$tmp/first.log" >&2; fail "no trainer says it stopped by a signal"; }
[[ -d $runs/group_int/checkpoints/step-$done_steps ]] ||
  { cat "$tmp/first.log" >&2; fail "no checkpoint at step $done_steps, the last step in metrics.jsonl"; }
if [[ $mode == launch ]]; then
  for f in optimizer-shard-0000{0,1}-of-00002.pt; do
    [[ -f $runs/group_int/checkpoints/step-$done_steps/$f ]] || fail "the ZeRO-3 checkpoint of step $done_steps has no $f"
  done
fi
echo "stopped after step $done_steps with checkpoint step-$done_steps"

echo "== $mode: the same command resumes and finishes"
rc=0
"${cmd[@]}" >"$tmp/again.log" 2>&1 || rc=$?
((rc == 0)) || { cat "$tmp/again.log" >&2; fail "the rerun exited $rc"; }
grep -q "resumed from" "$tmp/again.log" || { cat "$tmp/again.log" >&2; fail "the rerun did not resume"; }
[[ $(grep -o '"step": *[0-9]*' "$metrics" | grep -o '[0-9]*$' | tr '\n' ' ') == "$(seq -s ' ' 1 $steps) " ]] ||
  fail "metrics.jsonl does not hold steps 1..$steps once each: $(grep -o '"step": *[0-9]*' "$metrics" | tr '\n' ' ')"
[[ -f $runs/group_int/summary.json ]] || fail "the rerun wrote no summary.json"
echo "signals_test ($mode): PASS"
rm -rf "$tmp"
