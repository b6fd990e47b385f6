#!/usr/bin/env bash
# Intent: run the trainer once per combination of swept config values and tabulate loss, throughput and peak
# memory, e.g. to see what gradient_accumulation_steps and grad_dtype cost.
# Cost: one full trainer run per combination, one after another (the product of the value counts), so a 2x3
# sweep costs six runs. Finished runs are skipped when the sweep is re-run, so an interrupted sweep resumes; a run
# another sweep of the same DIR is running at that moment is skipped too (never run twice at once).
#
# Usage: scripts/sweep.sh CONFIG key=v1,v2,... [key2=a,b ...] [fixed=value ...] [--out DIR]
#   Keys with commas are swept (Cartesian product, first key outermost); keys without are set in every run.
#   Runs go to DIR/<run name> (default DIR: runs/sweep-<config stem>-<swept keys>-<hash of the arguments>),
#   each run's output to DIR/<run name>.log, and the table to DIR/summary.csv and DIR/summary.md.
#   TRAINER=path overrides the trainer binary (default <repo>/build/trainer, built by scripts/build.sh if absent).
#   Stop: one Ctrl-C (SIGINT), or SIGTERM to the sweep, lets the run under way checkpoint, starts nothing new,
#   writes the summary with that run marked `interrupted`, and exits 130 (143). Re-running the same command resumes
#   the interrupted run from its checkpoint and goes on with the rest.
# Exit: 0 every run ok; 1 some run failed (the others still ran); 2 bad usage; 130 / 143 stopped by SIGINT / SIGTERM.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

usage() {
  sed -n '/^# Usage:/,/^# Exit:/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}
die() {
  echo "sweep.sh: $*" >&2
  exit 2
}

config="" out="" sweep_keys=() sweep_vals=() fixed=()
while (($#)); do
  case $1 in
  -h | --help) usage && exit 0 ;;
  --out)
    (($# >= 2)) || die "--out needs a directory"
    out=$2
    shift
    ;;
  --out=*) out=${1#--out=} ;;
  -*) die "unknown option $1 (see --help)" ;;
  *=*)
    key=${1%%=*} value=${1#*=}
    [[ $key =~ ^[A-Za-z_][A-Za-z0-9_.]*$ ]] || die "bad key in '$1'"
    [[ $key != base_output_directory && $key != run_name ]] || die "$key is chosen by the sweep; use --out"
    [[ " ${sweep_keys[*]} ${fixed[*]%%=*} " != *" $key "* ]] || die "key $key given twice"
    if [[ $value == *,* ]]; then
      [[ ,$value, != *,,* ]] || die "empty value in '$1'"
      sweep_keys+=("$key") sweep_vals+=("$value")
    else
      fixed+=("$1")
    fi
    ;;
  *)
    [[ -z $config ]] || die "two configs given ($config, $1)"
    config=$1
    ;;
  esac
  shift
done
[[ -n $config ]] || { usage >&2 && exit 2; }

# The default directory name is stable for the same arguments, so re-running the same command resumes the sweep.
if [[ -z $out ]]; then
  stem=$(basename "${config%.*}")
  hash=$(printf '%s\n' "$config" "${sweep_keys[@]}" "${sweep_vals[@]}" "${fixed[@]}" | sha1sum | cut -c1-8)
  keys_part=$(IFS=-; echo "${sweep_keys[*]}")
  out="runs/sweep-$stem${keys_part:+-$keys_part}-$hash"
fi
mkdir -p "$out"
sweep_dir=$(cd "$out" && pwd)

# Skipping finished runs is only sound if they ran with the same config and fixed overrides.
args_file="$sweep_dir/sweep.args"
args_now=$(printf '%s\n' "config=$config" "${fixed[@]}")
if [[ -f $args_file ]]; then
  [[ $(cat "$args_file") == "$args_now" ]] ||
    die "$sweep_dir was swept with other fixed arguments ($(tr '\n' ' ' <"$args_file")); use another --out"
else
  echo "$args_now" >"$args_file"
fi

trainer=${TRAINER:-$repo/build/trainer}
if [[ ! -x $trainer ]]; then
  [[ -z ${TRAINER:-} ]] || die "TRAINER=$trainer is not an executable"
  echo "sweep.sh: $trainer missing; building with scripts/build.sh" >&2
  "$repo/scripts/build.sh" >&2
  [[ -x $trainer ]] || die "scripts/build.sh did not produce $trainer"
fi

# Cartesian product; each combination is a tab-separated list of key=value.
combos=("")
for i in "${!sweep_keys[@]}"; do
  IFS=, read -ra values <<<"${sweep_vals[$i]}"
  next=()
  for combo in "${combos[@]}"; do
    for v in "${values[@]}"; do next+=("${combo:+$combo$'\t'}${sweep_keys[$i]}=$v"); done
  done
  combos=("${next[@]}")
done

# "gradient_accumulation_steps=2<TAB>grad_dtype=bfloat16" -> "gradient_accumulation_steps-2_grad_dtype-bfloat16"
run_name() {
  local name=${1//$'\t'/_}
  name=${name//=/-}
  name=${name//[^A-Za-z0-9._-]/-}
  echo "${name:-run}"
}

rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
# One signal stops the sweep. The trainer runs in its own session, so a terminal's Ctrl-C reaches it only through
# this forward (once: a second SIGINT would make it exit without its checkpoint).
stop="" child=""
on_signal() {
  stop=$1
  [[ -z $child ]] || kill -"$1" "$child" 2>/dev/null || true
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
failed=0 busy=0 n=0 interrupted_run="" failures=()
for combo in "${combos[@]}"; do
  [[ -z $stop ]] || break
  n=$((n + 1))
  IFS=$'\t' read -ra overrides <<<"$combo"
  name=$(run_name "$combo")
  run_dir=$sweep_dir/$name
  progress="[$n/${#combos[@]}] $name"
  status=ok
  # One sweep at a time per configuration (flock on DIR/.<run name>.lock, inherited by the trainer): a sweep started
  # twice on the same DIR skips what the other is running now, so the two share the work instead of doubling it.
  exec 4>"$sweep_dir/.$name.lock"
  if ! flock -n 4; then
    echo "$progress: skipped (another sweep is running it now)"
    status="running in another sweep"
    busy=$((busy + 1))
  elif [[ -f $run_dir/summary.json ]]; then
    echo "$progress: skipped (summary.json exists)"
  else
    # A run dir without summary.json is a failed or interrupted run. With a checkpoint the trainer resumes it
    # (resume=true, the default); without one it is removed, so the run starts clean whatever its config.yml says.
    log="$sweep_dir/$name.log"
    if compgen -G "$run_dir/checkpoints/step-*" >/dev/null; then
      echo "$progress: resuming the incomplete run from its latest checkpoint"
      exec 3>>"$log"  # keep the interrupted attempt's log above the resumed one
    else
      [[ ! -e $run_dir ]] || { echo "$progress: removing incomplete run dir (no checkpoint)" && rm -rf "$run_dir"; }
      exec 3>"$log"
    fi
    start=$SECONDS
    rc=0
    setsid "$trainer" "$config" "${fixed[@]}" "${overrides[@]}" "base_output_directory=$sweep_dir" "run_name=$name" \
      >&3 2>&3 &
    child=$!
    # A trapped signal ends `wait` early; wait again until the trainer has checkpointed and exited.
    while :; do
      rc=0
      wait "$child" || rc=$?
      kill -0 "$child" 2>/dev/null || break
    done
    child=""
    exec 3>&-
    if [[ -n $stop ]] && ((rc == 130 || rc == 143)); then
      status=interrupted
      interrupted_run=$name
    elif ((rc != 0)); then
      status="failed (exit $rc)"
      # The reason is the trainer's last "error:" line (exit 2 and 1 print one), else its log's last line.
      reason=$(grep -E 'error: ' "$log" | tail -n 1 || true)
      [[ -n $reason ]] || reason=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1 || true)
      failures+=("$name: ${reason:-(empty log)}")
    elif [[ ! -f $run_dir/summary.json ]]; then
      status="failed (no summary.json)"
    fi
    echo "$progress: $status in $((SECONDS - start))s, log $log"
  fi
  exec 4>&-
  [[ $status == ok || $status == interrupted || $status == "running in another sweep" ]] || failed=$((failed + 1))
  values=()
  for kv in "${overrides[@]}"; do values+=("${kv#*=}"); done
  { printf '%s' "$name" && printf '\t%s' "$status" "${values[@]}" && echo; } >>"$rows"
done

echo
python3 "$repo/scripts/lib/sweep_summary.py" "$sweep_dir" "$(IFS=,; echo "${sweep_keys[*]}")" <"$rows"
echo
echo "summary: $sweep_dir/summary.md and summary.csv"
((busy == 0)) || echo "sweep.sh: $busy runs were being run by another sweep; re-run when it is done to tabulate them"
if [[ -n $stop ]]; then
  if [[ -n $interrupted_run ]]; then
    echo "sweep.sh: stopped by SIG$stop during run $n of ${#combos[@]} ($interrupted_run; checkpointed);" \
      "rerun the same command to resume" >&2
  else
    echo "sweep.sh: stopped by SIG$stop after run $n of ${#combos[@]}; rerun the same command to resume" >&2
  fi
  [[ $stop == INT ]] && exit 130
  exit 143
fi
if ((failed)); then
  echo "sweep.sh: $failed of ${#combos[@]} runs failed:" >&2
  for f in "${failures[@]+"${failures[@]}"}"; do echo "  $f" >&2; done
  exit 1
fi
