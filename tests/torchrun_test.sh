#!/usr/bin/env bash
# Intent: the trainer under torchrun (the venv's torch), the way users run it, on loopback:
#   - 2 processes under torchrun (c10d rendezvous on one node, as --standalone but on a free port) give bitwise the
#     losses of the same 2 ranks started by hand with RANK/WORLD_SIZE/MASTER_*, and within 1e-5 of 1 process with the
#     same global_batch_size;
#   - --max_restarts 1: kill -9 of one worker mid-run; the agent restarts the group, which resumes from the latest
#     checkpoint and finishes with every step once, bitwise equal to the uninterrupted run (same K, same world size);
#   - elastic shrink: two agents with --nnodes 1:2 --max_restarts 3 and c10d rendezvous on one endpoint; kill -9 of
#     the agent that does not host the rendezvous and of its worker (walking the process tree); the survivor's agent
#     restarts it at WORLD_SIZE=1 with K doubled (from global_batch_size), it resumes from the latest checkpoint and
#     finishes; every step once in metrics.jsonl, every loss within 1e-5 of an uninterrupted 1-process run;
#   - elastic grow: one agent starts alone, a second joins mid-run (the lone worker held stopped until then); torchrun
#     restarts the group at WORLD_SIZE=2 with K halved; it resumes where the lone worker stopped (the trainer
#     checkpoints on the agent's SIGTERM), every step once, within 1e-5 of 1 process.
# Cost: 6 torchrun agents (each imports torch: 1-5 s), about 16 trainer processes of the 2-layer, 32-wide model, and
# torch's fixed 15 s before the rendezvous drops a dead node. Alone on a quiet 2-core EPYC (2026-12-06): ctest
# torchrun (pair, restarts, shrink) 33 s, 18 s of CPU; torchrun_grow 13 s, 10 s of CPU. ctest label "slow".
#
# Usage: tests/torchrun_test.sh TRAINER COMPARE_RUNS      (TORCHRUN overrides .venv/bin/torchrun; TORCHRUN_CASES,
#   default "pair restarts shrink grow", picks the cases)
# Exit: 0 pass; 1 fail (the scratch directory is kept and its path printed); 77 skipped (no torchrun).
set -uo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib/multiprocess_test.sh" torchrun_test "$@"
torchrun=${TORCHRUN:-${SHADOWGRAD_VENV:-$(dirname "$0")/../.venv}/bin/torchrun}
[[ -x $torchrun ]] || { echo "torchrun_test: SKIPPED: no $torchrun (scripts/build.sh makes .venv with torch)"; exit 77; }
# --redirects 1 --tee 1: the default crashes on Python 3.11 (docs/distributed.md).
agent_flags=(--nproc_per_node 1 --monitor_interval 0.5 --redirects 1 --tee 1)
gbs=(global_batch_size=8)

steps_in() { local n; n=$(grep -c '"step"' "$runs/$1/metrics.jsonl" 2>/dev/null); echo "${n:-0}"; }
# every_step_once NAME N: metrics.jsonl holds steps 1..N, each once, in order.
every_step_once() {
  local got
  got=$(grep -o '"step": [0-9]*' "$runs/$1/metrics.jsonl" | awk '{print $2}' | tr '\n' ' ')
  [[ $got == "$(seq -s ' ' 1 "$2") " ]] || fail "$1: metrics.jsonl steps are not 1..$2 once each: $got"
}
# parity A B RTOL LABEL: every step's loss; prints compare_runs' summary line.
parity() {
  local out rc=0
  out=$("$compare" "$runs/$1" "$runs/$2" --metric loss --rtol "$3") || rc=$?
  echo "parity: $4: $(echo "$out" | tail -1)"
  ((rc == 0)) || { echo "$out" >&2; fail "$4: losses differ beyond rtol $3"; }
}
# poll_until COMMAND...: 0 as soon as COMMAND succeeds, checked every 0.1 s; 1 if it has not within 60 s.
poll_until() {
  for _ in $(seq 600); do
    "$@" && return 0
    sleep 0.1
  done
  return 1
}
step_reached() { (($(steps_in "$1") >= $2)); }
# wait_for_step NAME STEP: until metrics.jsonl has STEP rows (at most 60 s).
wait_for_step() { poll_until step_reached "$1" "$2" || fail "$1 never reached step $2"; }
# elastic_agent VAR RDZV_ID IS_HOST RUN_NAME key=value...: one --nnodes 1:2 agent in the background, its pid in VAR
# and its log in $tmp/VAR.log. is_host says which agent serves the rendezvous store (both match 127.0.0.1);
# last_call_timeout: how long a round that has its minimum of nodes waits for more (torch's default, 30 s, kept
# the lone agent of the grow case idle that long before its first step).
elastic_agent() {
  local var=$1 id=$2 host=$3 name=$4
  shift 4
  # host "": torchrun decides (the agent that binds the endpoint first hosts it).
  local conf=last_call_timeout=2
  [[ -n $host ]] && conf="is_host=$host,$conf"
  # TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, as docs/distributed.md tells elastic users: with the shared store, an
  # agent joining a later round waits for a MASTER_ADDR that rank 0, holding its first round's, never writes again.
  # PYTHONUNBUFFERED=1: the agent tees its worker's lines into a file, which Python buffers 8 KB at a time, so a
  # line the cases grep for mid-run could still be in the buffer (seen: an empty log after 311 steps).
  PYTHONUNBUFFERED=1 TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 "$torchrun" --nnodes 1:2 --rdzv_backend c10d \
    --rdzv_endpoint "127.0.0.1:$port" --rdzv_id "$id" --max_restarts 3 --rdzv_conf "$conf" "${agent_flags[@]}" --no_python \
    "$TRAINER" "${tiny[@]}" "$@" run_name="$name" >"$tmp/$var.log" 2>&1 &
  started+=($!)
  printf -v "$var" %s "$!"
}

case_pair() {
  echo "== torchrun, 2 processes on one node: bitwise the losses of 2 ranks started by hand; 1 process within 1e-5"
  "$TRAINER" "${tiny[@]}" "${gbs[@]}" steps=6 run_name=p1 >"$tmp/p1.log" 2>&1 ||
    { cat "$tmp/p1.log"; fail "p1 failed"; }
  port=$(free_port)
  for r in 0 1; do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$TRAINER" "${tiny[@]}" "${gbs[@]}" \
      steps=6 run_name=by_hand >"$tmp/by_hand.$r.log" 2>&1 &
    started+=($!)
  done
  wait "${started[@]}" || fail "the hand-started ranks failed: $(cat "$tmp"/by_hand.*.log)"
  "$torchrun" --nnodes 1 --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$(free_port)" \
    --rdzv_id standalone --monitor_interval 0.5 --redirects 1 --tee 1 --no_python \
    "$TRAINER" "${tiny[@]}" "${gbs[@]}" steps=6 run_name=torchrun2 >"$tmp/torchrun2.log" 2>&1 ||
    { cat "$tmp/torchrun2.log"; fail "torchrun with 2 processes failed"; }
  grep -q 'K=2 x 2 sequences x 16 tokens x 2 processes = global batch 8' "$tmp/torchrun2.log" ||
    fail "torchrun's rank 0 did not derive K=2"
  parity torchrun2 by_hand 0 "torchrun 2x2 against 2 ranks by hand (bitwise)"
  "$compare" "$runs/torchrun2" "$runs/by_hand" --metric loss --rtol 0 --atol 0 >/dev/null || fail "not bitwise"
  parity torchrun2 p1 1e-5 "torchrun 2x2 against 1 process K=4"
}

case_restarts() {
  echo "== --max_restarts 1: kill -9 of rank 1's worker mid-run; the group restarts and resumes, every step once"
  long=(steps=100 checkpoint_period=10 collective_timeout_s=5)
  "$TRAINER" "${tiny[@]}" "${long[@]}" gradient_accumulation_steps=2 run_name=straight >"$tmp/straight.log" 2>&1 ||
    { cat "$tmp/straight.log"; fail "the uninterrupted 1-process run failed"; }
  "$torchrun" --nnodes 1 --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$(free_port)" \
    --rdzv_id restarts --max_restarts 1 --monitor_interval 0.5 --redirects 1 --tee 1 --no_python \
    "$TRAINER" "${tiny[@]}" "${long[@]}" run_name=restarted >"$tmp/restarted.log" 2>&1 &
  agent=$!
  started+=($agent)
  victim=$(trainer_pid "$agent" 1)
  [[ -n $victim ]] || fail "no rank 1 worker under torchrun (pid $agent)"
  wait_for_step restarted 12
  at=$(steps_in restarted)
  kill -KILL "$victim"
  echo "killed rank 1 (pid $victim) after step $at"
  wait "$agent" || { cat "$tmp/restarted.log"; fail "torchrun did not recover from the killed worker"; }
  grep -q 'resumed from .*step-[1-9]' "$tmp/restarted.log" ||
    fail "the restarted group did not resume from a checkpoint"
  every_step_once restarted 100
  parity restarted straight 1e-5 "2x1, rank 1 killed and the group restarted by torchrun, against 1x2 straight"
}

case_shrink() {
  echo "== elastic shrink: 2 agents (--nnodes 1:2), kill -9 of the non-host agent and its worker;" \
    "the survivor goes on alone"
  shrink=(steps=100 checkpoint_period=10 collective_timeout_s=5 "${gbs[@]}")
  "$TRAINER" "${tiny[@]}" "${shrink[@]}" run_name=alone >"$tmp/alone.log" 2>&1 ||
    { cat "$tmp/alone.log"; fail "the uninterrupted 1-process run failed"; }
  port=$(free_port)
  # The client first: it waits for the store; both join the first round.
  elastic_agent agent_b shrink 0 shrunk "${shrink[@]}"
  elastic_agent agent_a shrink 1 shrunk "${shrink[@]}"
  worker_b=$(trainer_pid "$agent_b")
  [[ -n $worker_b ]] || fail "no worker under agent b"
  wait_for_step shrunk 12
  grep -q 'K=2 x 2 sequences x 16 tokens x 2 processes' "$tmp/agent_a.log" "$tmp/agent_b.log" ||
    fail "the first round did not have 2 processes with K=2"
  rank_b=$(tr '\0' '\n' <"/proc/$worker_b/environ" | sed -n 's/^RANK=//p')
  at=$(steps_in shrunk)
  t0=$(date +%s.%N)
  kill -KILL "$agent_b" "$worker_b"
  echo "killed agent b (pid $agent_b) and its worker (pid $worker_b, rank $rank_b of 2) after step $at"
  wait "$agent_a" || { cat "$tmp/agent_a.log"; fail "the surviving agent did not finish the run"; }
  resumed=$(grep -o '\[20[0-9-]* [0-9:.]*\] \[info\] run .* 1 processes' "$tmp/agent_a.log" | head -1 | cut -c2-24)
  [[ -n $resumed ]] || { cat "$tmp/agent_a.log"; fail "no restart line from the surviving agent"; }
  echo "the survivor was training alone again $(echo "$(date -d "$resumed" +%s.%N) - $t0" | bc) s after the kill"
  grep -q 'K=4 x 2 sequences x 16 tokens x 1 processes = global batch 8' "$tmp/agent_a.log" ||
    { cat "$tmp/agent_a.log"; fail "the survivor did not restart alone with K=4"; }
  grep -q 'resumed from .*step-[1-9]' "$tmp/agent_a.log" || fail "the survivor did not resume from a checkpoint"
  every_step_once shrunk 100
  parity shrunk alone 1e-5 "2 nodes x K=2, shrunk to 1 x K=4 by torchrun, against 1 x K=4 straight"
}

# sigterm_pending PID: a SIGTERM waits for PID, which is stopped and cannot take it yet (process-wide or its main
# thread's pending set, /proc/PID/status).
sigterm_pending() {
  local mask
  for mask in $(sed -n 's/^\(ShdPnd\|SigPnd\):[[:space:]]*//p' "/proc/$1/status" 2>/dev/null); do
    (((16#$mask & 0x4000) != 0)) && return 0
  done
  return 1
}

case_grow() {
  echo "== elastic grow: one agent starts alone (K=8), a second joins; the group restarts at WORLD_SIZE=2 with K=4"
  grow=(steps=100 checkpoint_period=10 collective_timeout_s=5 global_batch_size=16)
  "$TRAINER" "${tiny[@]}" "${grow[@]}" run_name=alone16 >"$tmp/alone16.log" 2>&1 ||
    { cat "$tmp/alone16.log"; fail "the uninterrupted 1-process run with global_batch_size=16 failed"; }
  port=$(free_port)
  elastic_agent grow_a grow "" grown "${grow[@]}"  # alone first: it hosts
  # The lone worker is held stopped after step 3 until the second agent has joined and the first has asked it to
  # stop (SIGTERM pending): so it is mid-run when the group grows, however long the second agent takes to import
  # torch, without a long run to cover that time (600 steps at K=32 did: 47 s of CPU, 2026-12-06).
  worker=$(trainer_pid "$grow_a")
  [[ -n $worker ]] || fail "no worker under the first agent"
  wait_for_step grown 3
  kill -STOP "$worker" || fail "the lone worker (pid $worker) finished before it could be held"
  at=$(steps_in grown)
  ((at < 100)) || fail "the lone worker finished all 100 steps before it could be held"
  elastic_agent grow_b grow "" grown "${grow[@]}"
  if ! poll_until sigterm_pending "$worker"; then
    kill -CONT "$worker"
    cat "$tmp/grow_b.log"
    fail "the first agent never asked its worker to stop when the second joined"
  fi
  kill -CONT "$worker"
  echo "the lone worker, held after step $at, was asked to stop when the second agent joined"
  wait "$grow_a" || { cat "$tmp/grow_a.log"; fail "the first agent failed after the second joined"; }
  wait "$grow_b" || { cat "$tmp/grow_b.log"; fail "the second agent failed"; }
  # Read once the agents have finished: the agent tees its worker's file, which the held worker may not have written yet.
  grep -q 'K=8 x 2 sequences x 16 tokens x 1 processes' "$tmp/grow_a.log" || fail "the first agent did not start alone"
  grep -q 'K=4 x 2 sequences x 16 tokens x 2 processes = global batch 16' "$tmp/grow_a.log" "$tmp/grow_b.log" ||
    { cat "$tmp/grow_a.log"; fail "the group did not grow to 2 processes with K=4"; }
  # The worker takes the SIGTERM at the end of the step it was in: its checkpoint is step $at or the next.
  from=$(grep -h -o 'resumed from [^ ]*step-[0-9]*' "$tmp/grow_a.log" "$tmp/grow_b.log" | head -1 | sed 's/.*step-//')
  [[ -n $from ]] && ((from == at || from == at + 1)) ||
    { cat "$tmp/grow_a.log"; fail "the grown group resumed from step '${from}', not where the lone worker stopped ($at)"; }
  echo "grew to 2 processes, resumed from step $from"
  every_step_once grown 100
  parity grown alone16 1e-5 "1 x K=8 grown to 2 x K=4 by torchrun, against 1 x K=8 straight"
}

# TORCHRUN_CASES picks the cases (ctest torchrun and torchrun_grow split them, so they run side by side).
for case in ${TORCHRUN_CASES:-pair restarts shrink grow}; do
  declare -F "case_$case" >/dev/null || fail "no case $case (pair restarts shrink grow)"
  "case_$case"
done
echo "torchrun_test: PASS"
rm -rf "$tmp"
