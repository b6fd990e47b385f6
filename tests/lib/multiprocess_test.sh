# Shared start of the multi-process shell tests (tests/distributed_test.sh, tests/elastic_test.sh). Sourced as
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/multiprocess_test.sh" NAME "$@"
# with the test's own arguments TRAINER COMPARE_RUNS. Sets repo, TRAINER (exported, for scripts/launch.sh),
# compare, launch, tmp (scratch, kept on failure), runs, started (pids that cleanup kills at exit), tiny (the
# 2-layer, 32-wide model every run trains), and defines fail MESSAGE.
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
