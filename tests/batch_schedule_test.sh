#!/usr/bin/env bash
# Intent: a global batch that grows (batch_size_schedule, batch_size_policy=gns) across process counts, with the real
# trainer on loopback (docs/batch-size.md):
#   - resume at another process count in the middle of a schedule: 2 processes (ranks started by hand) to just after
#     a change, then 1 process to the end, and 1 process to a change then 2 to the end; K is re-derived from the
#     scheduled global batch, every step's global_batch_size is the schedule's, every loss within 1e-5 of 1 process
#     straight;
#   - batch_size_policy=gns with 2 processes takes the same decisions as 1 process, losses within 1e-5;
#   - under torchrun (skipped without it): two agents (--nnodes 1:2), the non-host agent and its worker killed with
#     kill -9 after the first change; the survivor restarts alone with K doubled, resumes, crosses the next change,
#     and finishes with every step once, every loss within 1e-5 of 1 process straight.
# Cost: about 12 trainer processes of the 2-layer, 32-wide model and (with torchrun) 2 agents and torch's 15 s wait
# for a dead node: about 1 min on 2 shared cores.
#
# Usage: tests/batch_schedule_test.sh TRAINER COMPARE_RUNS      (TORCHRUN overrides torchrun from PATH)
# Exit: 0 pass; 1 fail (the scratch directory is kept and its path printed).
set -uo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib/multiprocess_test.sh" batch_schedule_test "$@"
tiny+=(learning_rate_schedule_steps=12 collective_timeout_s=20)
# pdbs 2: K = 1, 2, 4 at 2 processes; 2, 4, 8 at 1.
sched=(batch_size_schedule=0:4,4s:8,8s:16)

# train NAME NPROC STEPS key=value...: ranks started by hand (RANK/WORLD_SIZE/MASTER_*), one thread each.
train() {
  local name=$1 n=$2 steps=$3 port r pids=()
  shift 3
  port=$(free_port)
  for ((r = 0; r < n; r++)); do
    if ((n == 1)); then
      "$TRAINER" "${tiny[@]}" run_name="$name" steps="$steps" "$@" >"$tmp/$name.$steps.$r.log" 2>&1 &
    else
      RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$TRAINER" "${tiny[@]}" \
        run_name="$name" steps="$steps" "$@" >"$tmp/$name.$steps.$r.log" 2>&1 &
    fi
    pids+=($!)
    started+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { cat "$tmp/$name.$steps".*.log >&2; fail "run $name ($n processes, to step $steps) failed"; }; done
}
column() { grep -o "\"$2\": [0-9.e+-]*" "$runs/$1/metrics.jsonl" | awk '{print $2}' | tr '\n' ' '; }
parity() {
  local out rc=0
  out=$("$compare" "$runs/$1" "$runs/$2" --metric loss --rtol 1e-5) || rc=$?
  ((rc == 0)) || { echo "$out" >&2; fail "$3: losses differ by more than 1e-5"; }
  [[ $(column "$1" global_batch_size) == "$(column "$2" global_batch_size)" ]] ||
    fail "$3: global_batch_size differs: $(column "$1" global_batch_size) vs $(column "$2" global_batch_size)"
  echo "parity: $3: $(echo "$out" | tail -1)"
}

echo "== a schedule resumed at another process count: K re-derived, the scheduled global batch kept"
train straight 1 12 "${sched[@]}"
want="4 4 4 4 8 8 8 8 16 16 16 16 "
[[ $(column straight global_batch_size) == "$want" ]] || fail "straight: global_batch_size is $(column straight global_batch_size)"
train shrink 2 5 "${sched[@]}"
grep -q 'global batch 4 -> 8 sequences from step 5 (K=2)' "$tmp/shrink.5.0.log" || fail "2 processes did not derive K=2 at 8"
train shrink 1 12 "${sched[@]}"
grep -q 'resumed from .*step-5' "$tmp/shrink.12.0.log" || fail "shrink did not resume from step-5"
grep -q 'global batch 8 -> 16 sequences from step 9 (K=8)' "$tmp/shrink.12.0.log" || fail "1 process did not derive K=8 at 16"
parity shrink straight "2 processes to step 5 (just after the change to 8), then 1 process"
train grow 1 4 "${sched[@]}"
train grow 2 12 "${sched[@]}"
grep -q 'resumed from .*step-4' "$tmp/grow.12.0.log" || fail "grow did not resume from step-4"
parity grow straight "1 process to step 4 (the change to 8 is next), then 2 processes"

echo "== batch_size_policy=gns with 2 processes: rank 0's decisions, the same as 1 process"
gns=(global_batch_size=4 batch_size_policy=gns gns_batch_margin=0.01 gns_ema_decay=0.5 gns_min_steps_between_changes=3
  global_batch_size_max=16)
train gns1 1 12 "${gns[@]}"
train gns2 2 12 "${gns[@]}"
grep -q 'batch_size_policy=gns: gns_tokens' "$tmp/gns2.12.0.log" || fail "gns2 logged no decision"
[[ $(column gns1 global_batch_size) != "4 4 4 4 4 4 4 4 4 4 4 4 " ]] || fail "gns1 never grew"
parity gns2 gns1 "gns policy, 2 processes against 1"

torchrun=${TORCHRUN:-$(command -v torchrun || true)}
if [[ -z $torchrun || ! -x $torchrun ]]; then
  echo "batch_schedule_test: torchrun case SKIPPED: no torchrun on PATH (set TORCHRUN)"
  echo "batch_schedule_test: PASS (without torchrun)"
  exit 0
fi

echo "== torchrun, two agents, one killed between two changes: the survivor keeps the scheduled batch"
long=(steps=60 checkpoint_period=5 batch_size_schedule=0:4,8s:8,40s:16)
"$TRAINER" "${tiny[@]}" "${long[@]}" run_name=alone >"$tmp/alone.log" 2>&1 || { cat "$tmp/alone.log"; fail "alone failed"; }
port=$(free_port)
agent() {
  "$torchrun" --nnodes 1:2 --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$port" --rdzv_id shrink --max_restarts 3 \
    --rdzv_conf "is_host=$2,last_call_timeout=2" --nproc_per_node 1 --monitor_interval 0.5 --redirects 1 --tee 1 \
    --no_python "$TRAINER" "${tiny[@]}" "${long[@]}" run_name=shrunk >"$tmp/$1.log" 2>&1 &
  started+=($!)
  printf -v "$1" %s "$!"
}
agent agent_b 0
agent agent_a 1
worker_b=$(trainer_pid "$agent_b")
[[ -n $worker_b ]] || fail "no worker under agent b"
for _ in $(seq 600); do (($(grep -c '"step"' "$runs/shrunk/metrics.jsonl" 2>/dev/null || echo 0) >= 12)) && break; sleep 0.1; done
kill -KILL "$agent_b" "$worker_b"
echo "killed agent b and its worker after step $(grep -c '"step"' "$runs/shrunk/metrics.jsonl")"
wait "$agent_a" || { cat "$tmp/agent_a.log"; fail "the surviving agent did not finish"; }
grep -q 'the global batch continues at 8 sequences' "$tmp/agent_a.log" || { cat "$tmp/agent_a.log"; fail "no restart at 8"; }
grep -q 'global batch 8 -> 16 sequences from step 41 (K=8)' "$tmp/agent_a.log" || fail "the survivor did not reach 16 with K=8"
got=$(grep -o '"step": [0-9]*' "$runs/shrunk/metrics.jsonl" | awk '{print $2}' | tr '\n' ' ')
[[ $got == "$(seq -s ' ' 1 60) " ]] || fail "shrunk: steps are not 1..60 once each: $got"
parity shrunk alone "2 agents, one killed after the change to 8, the survivor alone through the change to 16"
echo "batch_schedule_test: PASS"
