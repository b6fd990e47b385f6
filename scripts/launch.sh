#!/usr/bin/env bash
# Usage: scripts/launch.sh --nproc N CONFIG [key=value ...]
# Intent: data-parallel training on one machine. Starts N trainer processes that meet through c10d::TCPStore on
# loopback (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT are set for each), like
# `torchrun --standalone --nproc_per_node N`. Exit code: 0 when every process succeeds; as soon as one fails,
# the others are stopped (SIGTERM, then SIGKILL after LAUNCH_GRACE_S) and its exit code is returned (rank 0's 2, bad
# input such as a refused checkpoint, when the others failed only because rank 0 left).
# Cost: N trainer processes sharing this machine's cores; give each num_threads=<cores/N>.
# Environment: TRAINER (default build/trainer), MASTER_ADDR (default 127.0.0.1), MASTER_PORT (default: a free
# port), LAUNCH_GRACE_S (default 5).
# Multi-node: run the trainer itself on every node with the same variables; see docs/distributed.md.
set -uo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }

usage() { echo "usage: scripts/launch.sh --nproc N CONFIG [key=value ...]" >&2; exit 2; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
nproc=""
if [[ ${1:-} == --nproc ]]; then
  nproc=${2:-}
  shift 2 || usage
elif [[ ${1:-} == --nproc=* ]]; then
  nproc=${1#--nproc=}
  shift
fi
[[ $nproc =~ ^[1-9][0-9]*$ ]] || usage
[[ $# -ge 1 ]] || usage

trainer=${TRAINER:-$root/build/trainer}
[[ -x $trainer ]] || { echo "launch.sh: no trainer binary at $trainer (build with scripts/build.sh)" >&2; exit 2; }

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
    echo $((20000 + RANDOM % 40000))
}
export MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
export MASTER_PORT=${MASTER_PORT:-$(free_port)}
export WORLD_SIZE=$nproc
grace=${LAUNCH_GRACE_S:-5}

pids=()
alive() { kill -0 "$1" 2>/dev/null; }
stop_all() {
  local p i
  for p in "${pids[@]}"; do alive "$p" && { kill -TERM "$p" 2>/dev/null; kill -CONT "$p" 2>/dev/null; }; done
  for ((i = 0; i < grace * 10; i++)); do
    local any=0
    for p in "${pids[@]}"; do alive "$p" && any=1; done
    ((any)) || break
    sleep 0.1
  done
  for p in "${pids[@]}"; do alive "$p" && kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
}
trap 'stop_all; exit 130' INT TERM

for ((r = 0; r < nproc; r++)); do
  RANK=$r LOCAL_RANK=$r "$trainer" "$@" &
  pids+=($!)
done
echo "launch.sh: $nproc processes (pids ${pids[*]}) meeting at $MASTER_ADDR:$MASTER_PORT" >&2

rc=0
for ((left = nproc; left > 0; left--)); do
  finished=""
  wait -n -p finished
  code=$?
  if ((code != 0)); then
    rank="?"
    for r in "${!pids[@]}"; do [[ ${pids[$r]} == "$finished" ]] && rank=$r; done
    echo "launch.sh: rank $rank (pid $finished) exited with code $code; stopping the other processes" >&2
    rc=$code
    # Rank 0 checks the run directory and the checkpoint; when it refuses them (exit 2) the others fail only because
    # it left, and may be reaped first. Report rank 0's code then.
    if [[ $rank != 0 ]]; then
      # Exited: a zombie, or already reaped by bash (which keeps the status for `wait`).
      rank0_exited() { [[ ! -e /proc/${pids[0]} || $(cut -d' ' -f3 "/proc/${pids[0]}/stat" 2>/dev/null) == [ZX] ]]; }
      for ((i = 0; i < 100; i++)); do  # up to 10 s: tearing down the process group can take a while
        rank0_exited && break
        sleep 0.1
      done
      if rank0_exited; then
        wait "${pids[0]}"
        code=$?
        ((code != 2)) || { echo "launch.sh: rank 0 exited with code 2 (bad input)" >&2 && rc=2; }
      fi
    fi
    stop_all
    break
  fi
done
exit $rc
