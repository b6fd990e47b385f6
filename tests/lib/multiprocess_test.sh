# Shared start of the multi-process shell tests (tests/distributed_test.sh, tests/elastic_test.sh). Sourced as
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/multiprocess_test.sh" NAME "$@"
# with the test's own arguments TRAINER COMPARE_RUNS. Sets repo, TRAINER (exported, for scripts/launch.sh),
# compare, launch, tmp (scratch, kept on failure), runs, started (pids that cleanup kills at exit), tiny (the
# 2-layer, 32-wide model every run trains), and defines fail MESSAGE, trainer_pid ROOT [RANK], wait_for_hold, free_port and
# ranks N ARGS (N trainers started by hand), run_case and close_runs.
test_name=$1
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export TRAINER=${2:-$repo/build/trainer}
compare=${3:-$repo/build/compare_runs}
[[ -x $TRAINER && -x $compare ]] || { echo "$test_name: need TRAINER and COMPARE_RUNS binaries" >&2; exit 1; }
launch=$repo/scripts/launch.sh
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT

tmp=$(mktemp -d)
runs=$tmp/runs
started=()
# SIGCONT too: a test may leave a rank stopped (SIGSTOP), which SIGKILL alone would not reap until continued.
cleanup() { for p in "${started[@]}"; do kill -KILL "$p" 2>/dev/null; kill -CONT "$p" 2>/dev/null; done; }
trap cleanup EXIT
fail() {
  echo "$test_name: FAIL: $*" >&2
  echo "$test_name: scratch directory kept at $tmp" >&2
  exit 1
}

tiny=(tiny.yml log_period=1 dtype=float32 synthetic_min_length_fraction=0.2 base_output_directory=$runs)

# trainer_pid ROOT [RANK]: the pid of the trainer (with RANK=rank, if given) among ROOT's descendants (a launcher's
# workers, whose pids no launcher prints), waiting up to 30 s; empty if none.
trainer_pid() {
  local p tries trainer_exe
  trainer_exe=$(readlink -f "$TRAINER")
  descendants() { local c; for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }
  for ((tries = 0; tries < 300; tries++)); do
    for p in $(descendants "$1"); do
      [[ $(readlink "/proc/$p/exe" 2>/dev/null) == "$trainer_exe" ]] || continue
      [[ -z ${2:-} ]] || tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$2" || continue
      echo "$p"
      return
    done
    sleep 0.1
  done
}

# wait_for_hold LOG POINT N PID: until LOG holds N lines "test hold: at POINT," (trainers started with
# SHADOWGRAD_TEST_HOLD=POINT, src/train/Signals.h, wait there for a stop signal), or PID has exited, or 120 s pass;
# fails (with LOG) unless all N said so. A signal sent then lands at POINT, whatever the machine's load.
wait_for_hold() {
  local i
  for ((i = 0; i < 12000; i++)); do
    (($(grep -c "test hold: at $2," "$1") >= $3)) && return 0
    kill -0 "$4" 2>/dev/null || break
    sleep 0.01
  done
  (($(grep -c "test hold: at $2," "$1") >= $3)) || { cat "$1" >&2; fail "not $3 trainer(s) held at $2"; }
}

free_port() { python3 "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/free_port.py"; }
# ranks N key=value...: N trainers on loopback started by hand with the variables torchrun sets (RANK, LOCAL_RANK,
# WORLD_SIZE, MASTER_ADDR, MASTER_PORT), their output to stdout. No launcher: a torchrun start imports torch, 3 s of
# CPU, and these runs test the trainer (tests/torchrun_test.sh, signals_test.sh and distributed_test.sh's hung rank
# test the launchers). Sets rank_codes (each rank's exit code); returns the lowest failing rank's code, or 0.
ranks() {
  local n=$1 r port pids=() code first=0
  shift
  port=$(free_port)
  for ((r = 0; r < n; r++)); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$TRAINER" "$@" &
    pids+=($!)
    started+=($!)
  done
  rank_codes=()
  for r in "${!pids[@]}"; do
    code=0
    wait "${pids[$r]}" || code=$?
    rank_codes+=("$code")
    ((first)) || first=$code
  done
  return "$first"
}

# run_case NAME NPROC STEPS key=value...: one run of the tiny model with the test's own keys ("${case_keys[@]}", set by
# the test), by the trainer alone (NPROC=0) or on NPROC ranks; its output goes to $tmp/NAME.log, a failure ends the test.
run_case() {
  local name=$1 n=$2 steps=$3 rc=0
  shift 3
  if ((n == 0)); then
    "$TRAINER" "${tiny[@]}" "${case_keys[@]}" steps="$steps" run_name="$name" "$@" >>"$tmp/$name.log" 2>&1 || rc=$?
  else
    ranks "$n" "${tiny[@]}" "${case_keys[@]}" steps="$steps" run_name="$name" "$@" >>"$tmp/$name.log" 2>&1 || rc=$?
  fi
  ((rc == 0)) || { cat "$tmp/$name.log" >&2; fail "run $name ($n processes) exited $rc"; }
}
# close_runs A B METRIC RTOL: compare_runs on one metric of two runs, its verdict printed; a miss ends the test.
close_runs() {
  local out rc=0
  out=$("$compare" "$runs/$1" "$runs/$2" --metric "$3" --rtol "$4") || rc=$?
  echo "$out" | tail -1
  ((rc == 0)) || { echo "$out" >&2; fail "$1 vs $2: $3 differs beyond $4"; }
}
