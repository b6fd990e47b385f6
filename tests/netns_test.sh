#!/usr/bin/env bash
# Intent: two "nodes" for real: two network namespaces made here, joined by a veth pair, one torchrun agent in each
# (--nnodes 1:2, c10d rendezvous on node A's address), the run directory on the filesystem both see (as a cluster's
# shared filesystem). Each agent runs with its node's address as host name (a UTS namespace of its own), because
# torchrun hands its workers MASTER_ADDR = the host name of the node with group rank 0.
#   (a) the two-node run's losses match a 1-process run with the same global_batch_size within 1e-5;
#   (b) the link is cut mid-run (ip link set ... down): both trainers fail within collective_timeout_s + 2 s with an
#       error naming the peer; no checkpoint is damaged (the survivor resumes from the newest one, no fallback); the
#       survivor's agent (A, which hosts the rendezvous) restarts it alone at WORLD_SIZE=1 with K doubled, and the run
#       finishes with every step once, within 1e-5 of the 1-process run at every step;
#   (c) prints the recovery time: from the cut to the survivor's first step after it (docs/distributed.md);
#   (d) a ZeRO-3 run with the carry sharded (shard_parameters_over_data, shard_gradients_over_data) across the two
#       namespaces matches 1 process within 1e-5.
# Needs root and a working `ip netns`; otherwise exits 77 (ctest: skipped). tc netem is not used (not available).
# Cost: 2 torchrun agents (torch import) and about 4 trainer processes of the tiny model; the recovery itself waits
# collective_timeout_s=4 and torch's fixed 15 s dead-node timeout: about 35 s.
#
# Usage: tests/netns_test.sh TRAINER COMPARE_RUNS
# Exit: 0 pass; 1 fail (the scratch directory is kept); 77 skipped.
set -uo pipefail

skip() { echo "netns_test: SKIPPED: $*"; exit 77; }
((EUID == 0)) || skip "needs root (ip netns)"
command -v ip >/dev/null || skip "no ip (iproute2)"
[[ -x ${TORCHRUN:-${SHADOWGRAD_VENV:-$(dirname "$0")/../.venv}/bin/torchrun} ]] || skip "no torchrun (scripts/build.sh makes .venv with torch)"
command -v unshare >/dev/null || skip "no unshare (util-linux)"
ns_a=sgA$$ ns_b=sgB$$ if_a=sgA$$ if_b=sgB$$
ip netns add "$ns_a" 2>/dev/null || skip "ip netns add does not work here"
ip netns add "$ns_b" || { ip netns del "$ns_a"; skip "ip netns add does not work here"; }

source "$(dirname "${BASH_SOURCE[0]}")/lib/multiprocess_test.sh" netns_test "$@"
torchrun=${TORCHRUN:-${SHADOWGRAD_VENV:-$(dirname "$0")/../.venv}/bin/torchrun}
addr_a=10.231.$((RANDOM % 250)).1
addr_b=${addr_a%.1}.2
cleanup_netns() {
  cleanup
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
}
trap cleanup_netns EXIT
ip link add "$if_a" type veth peer name "$if_b" || fail "cannot make a veth pair"
ip link set "$if_a" netns "$ns_a" && ip link set "$if_b" netns "$ns_b" || fail "cannot move the veth ends"
for side in "$ns_a $if_a $addr_a" "$ns_b $if_b $addr_b"; do
  read -r ns dev addr <<<"$side"
  ip -n "$ns" addr add "$addr/24" dev "$dev" && ip -n "$ns" link set "$dev" up && ip -n "$ns" link set lo up ||
    fail "cannot configure $dev in $ns"
done
echo "node A: $ns_a $addr_a; node B: $ns_b $addr_b"

steps=100
args=("${tiny[@]}" steps=$steps checkpoint_period=10 collective_timeout_s=4 global_batch_size=8)
"$TRAINER" "${args[@]}" run_name=alone >"$tmp/alone.log" 2>&1 || { cat "$tmp/alone.log"; fail "the 1-process run failed"; }

port=$((20000 + RANDOM % 20000))
# node NAME NS ADDR DEV IS_HOST: one torchrun agent in namespace NS; sets agent_NAME.
node() {
  ip netns exec "$2" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$3" \
    env GLOO_SOCKET_IFNAME="$4" "$torchrun" --nnodes 1:2 --nproc_per_node 1 --rdzv_backend c10d \
    --rdzv_endpoint "$addr_a:$port" --rdzv_id netns --rdzv_conf "is_host=$5,last_call_timeout=2" --max_restarts 3 \
    --monitor_interval 0.5 --redirects 1 --tee 1 --no_python "$TRAINER" "${args[@]}" run_name="${run:-two_nodes}" \
    >"$tmp/node_$1${run:+_$run}.log" 2>&1 &
  started+=($!)
  eval "agent_$1=$!"
}
node b "$ns_b" "$addr_b" "$if_b" 0  # the client first: it waits for A's store, so both join the first round
node a "$ns_a" "$addr_a" "$if_a" 1
worker_a=$(trainer_pid "$agent_a")
worker_b=$(trainer_pid "$agent_b")
[[ -n $worker_a && -n $worker_b ]] || { cat "$tmp"/node_*.log; fail "no worker in one of the namespaces"; }
started+=("$worker_a" "$worker_b")
metrics=$runs/two_nodes/metrics.jsonl
steps_done() { local n; n=$(grep -c '"step"' "$metrics" 2>/dev/null); echo "${n:-0}"; }
for _ in $(seq 600); do (($(steps_done) >= 25)) && break; sleep 0.1; done
at=$(steps_done)
((at >= 25 && at < steps)) || { cat "$tmp"/node_*.log; fail "the two-node run is at step $at, not between 25 and $steps"; }
grep -q 'K=2 x 2 sequences x 16 tokens x 2 processes' "$tmp/node_a.log" "$tmp/node_b.log" ||
  fail "the two nodes did not start as 2 processes with K=2"
checkpoints_before=$(ls "$runs/two_nodes/checkpoints")

echo "== (b) cut the link after step $at"
t_cut=$(date +%s.%N)
ip -n "$ns_a" link set "$if_a" down || fail "cannot take $if_a down"
# Exited: gone, or a zombie (node B's agent is stuck talking to the store across the cut link and reaps it late).
exited() { [[ ! -e /proc/$1 || $(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) == Z ]]; }
declare -A failed_after
for _ in $(seq 200); do
  for w in a b; do
    pid_var=worker_$w
    [[ -z ${failed_after[$w]:-} ]] && exited "${!pid_var}" &&
      failed_after[$w]=$(echo "$(date +%s.%N) - $t_cut" | bc)
  done
  [[ -n ${failed_after[a]:-} && -n ${failed_after[b]:-} ]] && break
  sleep 0.1
done
for w in a b; do
  echo "node $w's trainer exited ${failed_after[$w]:-(not yet)} s after the cut: $(grep -m1 'error:' "$tmp/node_$w.log")"
  [[ -n ${failed_after[$w]:-} ]] || fail "node $w's trainer still runs 20 s after the cut"
  (($(echo "${failed_after[$w]} <= 6" | bc))) || fail "node $w's trainer took ${failed_after[$w]} s (collective_timeout_s=4)"
done
grep -q "error: .*\[the others: rank [01]: pid $worker_b on host $addr_b\]" "$tmp/node_a.log" ||
  fail "node A's error does not name its peer (pid $worker_b on host $addr_b)"
grep -q "error: .*\[the others: rank [01]: pid $worker_a on host $addr_a\]" "$tmp/node_b.log" ||
  fail "node B's error does not name its peer (pid $worker_a on host $addr_a)"

wait "$agent_a" || { cat "$tmp/node_a.log"; fail "node A's agent did not finish the run alone"; }
grep -q 'K=4 x 2 sequences x 16 tokens x 1 processes = global batch 8' "$tmp/node_a.log" ||
  fail "node A did not restart alone with K=4"
grep -q 'corrupt\|falling back' "$tmp/node_a.log" && fail "a checkpoint was damaged: $(grep 'corrupt' "$tmp/node_a.log")"
newest=$(echo "$checkpoints_before" | sed -n 's/^step-//p' | sort -n | tail -1)
grep -q "resumed from .*step-$newest" "$tmp/node_a.log" || grep -q "resumed from .*step-$((newest + 10))" "$tmp/node_a.log" ||
  fail "node A did not resume from the newest checkpoint (step-$newest or the one after it)"
[[ -z $(ls -d "$runs/two_nodes/checkpoints"/.tmp-* 2>/dev/null) ]] || fail "a half-written checkpoint was left behind"
got=$(grep -o '"step": [0-9]*' "$metrics" | awk '{print $2}' | tr '\n' ' ')
[[ $got == "$(seq -s ' ' 1 $steps) " ]] || fail "metrics.jsonl steps are not 1..$steps once each: $got"

echo "== (c) recovery time"
resumed=$(grep -o '\[20[0-9-]* [0-9:.]*\] \[info\] run .* 1 processes' "$tmp/node_a.log" | head -1 | cut -c2-24)
[[ -n $resumed ]] || fail "no restart line from node A"
echo "recovery: the survivor's restarted trainer was running $(echo "$(date -d "$resumed" +%s.%N) - $t_cut" | bc) s after the cut (collective_timeout_s=4, last_call_timeout=2)"

echo "== (a) every step's loss against 1 process, same global_batch_size"
out=$("$compare" "$runs/two_nodes" "$runs/alone" --metric loss --rtol 0 --atol 1e-5) ||
  { echo "$out"; fail "the two-node run (shrunk to one after step $at) differs from 1 process by more than 1e-5"; }
echo "parity: $(echo "$out" | tail -1)"

echo "== (d) sharded weights and gradients (ZeRO-3) across the two namespaces: every loss within 1e-5 of 1 process"
args=("${tiny[@]}" steps=10 collective_timeout_s=20 global_batch_size=8)
"$TRAINER" "${args[@]}" run_name=alone10 >"$tmp/alone10.log" 2>&1 || { cat "$tmp/alone10.log"; fail "the 1-process run failed"; }
args+=(shard_optimizer_over_data=true shard_gradients_over_data=true shard_parameters_over_data=true
       grad_reduce_bucket_mb=0.01)
ip -n "$ns_a" link set "$if_a" up || fail "cannot bring $if_a back up"  # (b) cut it
port=$((20000 + RANDOM % 20000))
run=zero2
node b "$ns_b" "$addr_b" "$if_b" 0
node a "$ns_a" "$addr_a" "$if_a" 1
wait "$agent_a" && wait "$agent_b" || { cat "$tmp"/node_*_zero2.log; fail "the two-node ZeRO-3 run failed"; }
grep -q 'x 2 processes' "$tmp/node_a_zero2.log" || fail "the ZeRO-3 run did not start as 2 processes"
grep -q 'gradient reduction: sharded' "$tmp/node_a_zero2.log" || fail "node A did not log a sharded reduction"
out=$("$compare" "$runs/zero2" "$runs/alone10" --metric loss --rtol 0 --atol 1e-5) ||
  { echo "$out"; fail "the two-node ZeRO-3 run differs from 1 process by more than 1e-5"; }
echo "parity (ZeRO-3, two namespaces): $(echo "$out" | tail -1)"
echo "netns_test: PASS"
rm -rf "$tmp"
