#!/usr/bin/env bash
# Usage: scripts/launch.sh --nproc N CONFIG [key=value ...]
# Intent: data-parallel training on one machine: N trainer processes under torchrun (from the venv's torch, .venv), which
# sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for each and stops the others when one fails
# (SIGTERM; SIGKILL after torchrun's fixed 30 s). It restarts nothing: call torchrun itself for --max_restarts and
# several nodes (docs/distributed.md). SIGINT/SIGTERM to launch.sh reach each trainer once, through torchrun.
# Exit code: 0 when every process succeeds; else the failed trainer's own code (2 bad input, 3 non-finite, 130/143
# stopped by SIGINT/SIGTERM, 1 other), read from torchrun's "failed (exitcode: N)" line, since torchrun itself
# exits 1 for any failure; 2 for a bad command line.
# Cost: N trainer processes sharing this machine's cores (each takes cores/N threads: OMP_NUM_THREADS, below), plus
# torchrun's start (it imports torch: 1-5 s here).
# Environment: TRAINER (default build/trainer), TORCHRUN (default .venv/bin/torchrun, or $SHADOWGRAD_VENV/bin/torchrun), MASTER_PORT (the rendezvous
# port; default: a free one, so that launches can run side by side, which torchrun --standalone's fixed 29400
# does not allow).
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
torchrun=${TORCHRUN:-${SHADOWGRAD_VENV:-$root/.venv}/bin/torchrun}
[[ -x $trainer ]] || { echo "launch.sh: no trainer binary at $trainer (build with scripts/build.sh)" >&2; exit 2; }
[[ -x $torchrun ]] || { echo "launch.sh: no torchrun at $torchrun (scripts/build.sh makes .venv with torch)" >&2; exit 2; }

port=${MASTER_PORT:-$(python3 "$(dirname "$0")/lib/free_port.py")}
# Each trainer's share of the CPUs this script may use (nproc counts the affinity mask), at least 1; torchrun would set
# 1 (and warn). The trainer's num_threads=0 takes it; a num_threads key, or an OMP_NUM_THREADS given here, wins.
cores=$(nproc)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$((cores / nproc > 0 ? cores / nproc : 1))}
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT

# --redirects 1 --tee 1: torchrun's default crashes on Python 3.11 (docs/distributed.md); stdout is teed with a
# "[default<rank>]:" prefix, stderr passes through. Like --standalone, but on a free port. In a session of its own,
# so that a Ctrl-C reaches torchrun once, from here (it passes it on to each trainer).
setsid "$torchrun" --nnodes 1 --nproc_per_node "$nproc" --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$port" \
  --rdzv_id "launch-$$" --monitor_interval 0.5 --redirects 1 --tee 1 --no_python "$trainer" "$@" \
  2> >(trap '' INT TERM; exec tee "$errors" >&2) &  # tee outlives a Ctrl-C: the trainers' stderr goes through it
agent=$!
signalled=0
trap 'signalled=130; kill -INT "$agent" 2>/dev/null' INT
trap 'signalled=143; kill -TERM "$agent" 2>/dev/null' TERM
while kill -0 "$agent" 2>/dev/null; do wait "$agent"; done
wait "$agent"
rc=$?
wait  # for tee
((rc == 0)) && exit 0
((signalled)) && exit "$signalled"
code=$(sed -n 's/.*failed (exitcode: \(-\{0,1\}[0-9]*\)).*/\1/p' "$errors" | tail -n 1)
[[ -n $code ]] || exit "$rc"  # torchrun itself failed (rendezvous)
((code < 0)) && code=$((128 - code))  # killed by signal -code
exit "$code"
