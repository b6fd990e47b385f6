# Shared by the study and benchmark scripts (fold_bench.sh, rounding_outcome.sh, numerics_study.sh; bench*.sh,
# memory_levers.sh): the arguments each takes besides its own options, and the trainer it runs. Sourced, not run.

# other_argument SCRIPT ARG: -h/--help prints SCRIPT's "# Usage:" header block and exits 0; key=value is appended
# to the caller's `overrides` array; anything else exits 2, naming the argument.
other_argument() {
  case $2 in
  -h | --help) sed -n '/^# Usage:/,/^set -e/s/^# \{0,1\}//p' "$1" | grep -v '^set' && exit 0 ;;
  *=*) overrides+=("$2") ;;
  *) echo "$(basename "$1"): unknown argument $2 (see --help)" >&2 && exit 2 ;;
  esac
}

# study_trainer: prints $TRAINER, or build/trainer after building it if it is missing.
study_trainer() {
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  [[ -n ${TRAINER:-} ]] && echo "$TRAINER" && return
  [[ -x $root/build/trainer ]] || "$root/scripts/build.sh" >/dev/null
  echo "$root/build/trainer"
}

# help_with_python SCRIPT PY ARG...: when the first ARG is -h or --help, prints SCRIPT's header comment, then the
# Python script's own --help (its options), and exits. For the wrappers of bench/*.py.
help_with_python() {
  [[ ${3:-} == -h || ${3:-} == --help ]] || return 0
  sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$1"
  exec python3 "$2" --help
}

# pair_args SCRIPT ARG...: the options of the alternating-pairs benchmarks (fold_bench.sh, gns_bench.sh): --pairs N,
# --steps N, --out DIR, key=value overrides and --help. Sets pairs, steps, out (a fresh temporary directory when not
# given; created) and overrides; the caller sets the defaults of pairs and steps first.
pair_args() {
  local script=$1
  shift
  out="" overrides=()
  while (($#)); do
    case $1 in
    --pairs) pairs=$2 && shift ;;
    --steps) steps=$2 && shift ;;
    --out) out=$2 && shift ;;
    *) other_argument "$script" "$1" ;;
    esac
    shift
  done
  out=${out:-$(mktemp -d -t "$(basename "$script" .sh).XXXXXX")}
  mkdir -p "$out"
}
