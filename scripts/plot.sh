#!/usr/bin/env bash
# Intent: draw PNG charts of training runs with gnuplot: loss against step for one or several runs, and for a
# sweep (scripts/sweep.sh) one loss curve per run plus peak-memory bars.
# Cost: about a second per chart; the first use may apt-get install gnuplot-nox (a few MB, needs root).
#
# Usage: scripts/plot.sh [--metric KEY] [--out FILE] [--no-install] RUN...
#        scripts/plot.sh --sweep DIR [--no-install]
#   RUN is a run directory holding metrics.jsonl. One RUN: writes RUN/<KEY>.png (RUN/loss.png by default);
#   runs that logged eval_loss get it drawn beside their training loss (marked points, "NAME eval_loss");
#   several RUNs: one curve each, into --out FILE (required then).
#   --sweep DIR: writes DIR/loss.png (the runs listed in DIR/summary.csv) and DIR/peak_mem.png (from summary.csv).
#   One RUN that logged gns_tokens (gradient_noise_scale, K >= 2): RUN/gns_tokens.png is drawn too, on a log scale.
#   One RUN whose global_batch_size changed (batch_size_schedule, batch_size_policy=gns): RUN/loss_vs_tokens.png too,
#   loss against tokens_seen (steps of different sizes are not comparable on a step axis).
#   --no-install: if gnuplot is missing, do nothing and exit 0 (for the trainer's end-of-run plot).
#   GNUPLOT=path overrides the gnuplot command.
# Exit: 0 charts written (or skipped under --no-install); 2 bad usage or no data; 1 gnuplot failed.
set -euo pipefail

usage() {
  sed -n '/^# Usage:/,/^# Exit:/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}
die() {
  echo "plot.sh: $*" >&2
  exit 2
}

metric=loss out="" sweep="" install=1 runs=() xkey=step
while (($#)); do
  case $1 in
  -h | --help) usage && exit 0 ;;
  --metric | --out | --sweep)
    (($# >= 2)) || die "$1 needs a value"
    case $1 in --metric) metric=$2 ;; --out) out=$2 ;; --sweep) sweep=$2 ;; esac
    shift
    ;;
  --no-install) install=0 ;;
  -*) die "unknown option $1 (see --help)" ;;
  *) runs+=("$1") ;;
  esac
  shift
done

# gnuplot is a plotting convenience, never a reason for a finished run to fail.
gnuplot=${GNUPLOT:-gnuplot}
if ! command -v "$gnuplot" >/dev/null; then
  ((install)) || exit 0
  ((EUID == 0)) || die "gnuplot is missing; install gnuplot-nox (apt-get install gnuplot-nox)"
  echo "plot.sh: installing gnuplot-nox" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq gnuplot-nox >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && apt-get install -y -qq gnuplot-nox >/dev/null; } ||
    die "could not install gnuplot-nox"
  command -v "$gnuplot" >/dev/null || die "no $gnuplot even after installing gnuplot-nox"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A gnuplot string literal: single quotes, with embedded quotes doubled.
gp_str() {
  local s=${1//\'/\'\'}
  printf "'%s'" "$s"
}

# Writes "x value" lines of KEY from a flat-JSON metrics file, x being $xkey (step, or tokens_seen); values that are
# not numbers become NaN (a gap).
extract() {
  local key=$1 file=$2 dest=$3
  awk -v key="$key" -v xk="$xkey" '
    function field(name,   re, s) {
      re = "\"" name "\"[ \t]*:[ \t]*[^,}]*"
      if (!match($0, re)) return ""
      s = substr($0, RSTART, RLENGTH)
      sub(/^[^:]*:[ \t]*/, "", s)
      return s
    }
    {
      step = field(xk); value = field(key)
      if (step == "" || value == "") next
      if (value !~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/) value = "NaN"
      print step, value
    }' "$file" >"$dest"
  [[ -s $dest ]]
}

# plot_curves OUT TITLE NAME1 RUNDIR1 [NAME2 RUNDIR2 ...]: one line per run, metric against step.
plot_curves() {
  local png=$1 title=$2 plots=() eval_plots=() i=0 points=0
  shift 2
  while (($#)); do
    local name=$1 dir=$2 data=$tmp/curve$i.dat
    shift 2
    if [[ ! -f $dir/metrics.jsonl ]]; then
      [[ ! -f $dir/summary.csv ]] || die "$dir has no metrics.jsonl; it is a sweep directory: scripts/plot.sh --sweep $dir"
      die "$dir has no metrics.jsonl"
    fi
    extract "$metric" "$dir/metrics.jsonl" "$data" || die "$dir/metrics.jsonl has no '$metric' values"
    points=$(($(wc -l <"$data") > points ? $(wc -l <"$data") : points))
    plots+=("$(gp_str "$data") using 1:2 title $(gp_str "$name")")
    i=$((i + 1))
    # Runs with evaluation (eval_interval > 0): the held-out loss beside the training loss, as marked points.
    if [[ $metric == loss ]] && extract eval_loss "$dir/metrics.jsonl" "$tmp/curve$i.dat"; then
      eval_plots+=("$(gp_str "$tmp/curve$i.dat") using 1:2 title $(gp_str "$name eval_loss")")
      i=$((i + 1))
    fi
  done
  # Points and a tick per step help read short runs; on long runs they only add ink.
  local style="lines lw 2" xtics="" logscale=""
  # The noise scale spans decades over a run (it grows as the loss falls).
  [[ $metric != gns_tokens ]] || logscale="set logscale y"
  ((points > 60)) || style="linespoints lw 2 pt 7 ps 0.6"
  ((points > 20)) || xtics="set xtics 1"
  # Dash patterns keep curves that lie on top of each other (identical runs) visible.
  local joined=""
  for i in "${!plots[@]}"; do joined+="${plots[$i]} with $style dt $((i % 5 + 1)), "; done
  for i in "${!eval_plots[@]}"; do joined+="${eval_plots[$i]} with linespoints lw 2 pt $((i % 4 + 5)) ps 1.2, "; done
  "$gnuplot" <<EOF || { echo "plot.sh: gnuplot failed for $png" >&2 && exit 1; }
set terminal pngcairo noenhanced size 1000,600
set output $(gp_str "$png")
set title $(gp_str "$title")
set xlabel $(gp_str "$xkey")
set ylabel $(gp_str "$metric")
set grid
set key below
$xtics
$logscale
plot ${joined%, }
EOF
  echo "wrote $png"
}

# sweep_rows CSV: "run<TAB>label<TAB>peak_mem_bytes" per row of a sweep's summary.csv. The label is the swept
# values ("2, bfloat16"), shorter than the run name; the swept keys are the columns between run and final_loss.
sweep_rows() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    { label = ""
      for (i = 2; i < col["final_loss"]; i++) label = label (i > 2 ? ", " : "") $i
      if ($col["status"] != "ok") label = label " (failed)"
      print $1 "\t" (label == "" ? $1 : label) "\t" $col["peak_mem_bytes"] }' "$1"
}

# sweep_keys CSV: the swept keys, comma separated, for titles.
sweep_keys() {
  head -1 "$1" | awk -F, '{ for (i = 2; i <= NF && $i != "final_loss"; i++) printf "%s%s", (i > 2 ? ", " : ""), $i }'
}

# plot_peak_mem CSV OUT: bars of peak_mem_bytes (in MiB) per run, skipping runs where it is unknown.
plot_peak_mem() {
  local csv=$1 png=$2 data=$tmp/peak_mem.dat
  sweep_rows "$csv" | awk -F'\t' '$3 ~ /^[0-9.]+$/ { printf "\"%s\" %.3f\n", $2, $3 / 1048576 }' >"$data"
  if [[ ! -s $data ]]; then
    echo "plot.sh: no peak_mem_bytes in $csv; skipping $png" >&2
    return 0
  fi
  "$gnuplot" <<EOF || { echo "plot.sh: gnuplot failed for $png" >&2 && exit 1; }
set terminal pngcairo noenhanced size 1000,600
set output $(gp_str "$png")
set title $(gp_str "peak memory: $(sweep_keys "$csv")")
set ylabel 'peak memory (MiB)'
set style fill solid 0.6
set boxwidth 0.7
set yrange [0:*]
set offsets 0, 0, graph 0.1, 0
set grid ytics
set xtics rotate by -30 left
unset key
plot $(gp_str "$data") using 0:2:xticlabels(1) with boxes, \
  '' using 0:2:(sprintf('%.1f', \$2)) with labels offset 0,0.8
EOF
  echo "wrote $png"
}

if [[ -n $sweep ]]; then
  ((${#runs[@]} == 0)) || die "--sweep takes no RUN arguments"
  [[ -d $sweep ]] || die "no sweep directory $sweep"
  csv=$sweep/summary.csv
  curves=() title="$metric: $(basename "$sweep")"
  if [[ -f $csv ]]; then
    while IFS=$'\t' read -r name label _; do
      [[ ! -f $sweep/$name/metrics.jsonl ]] || curves+=("$label" "$sweep/$name")
    done < <(sweep_rows "$csv")
    title="$metric: $(sweep_keys "$csv")"
  else
    for d in "$sweep"/*/; do
      [[ ! -f $d/metrics.jsonl ]] || curves+=("$(basename "$d")" "${d%/}")
    done
  fi
  ((${#curves[@]})) || die "no run in $sweep has metrics.jsonl"
  plot_curves "$sweep/$metric.png" "$title" "${curves[@]}"
  if [[ -f $csv ]]; then
    plot_peak_mem "$csv" "$sweep/peak_mem.png"
  else
    echo "plot.sh: no $csv; skipping peak_mem.png" >&2
  fi
  exit 0
fi

((${#runs[@]})) || { usage >&2 && exit 2; }
if ((${#runs[@]} == 1)); then
  run=${runs[0]%/}
  plot_curves "${out:-$run/$metric.png}" "$metric: $(basename "$run")" "$(basename "$run")" "$run"
  if [[ $metric == loss && -z $out ]] && grep -q '"gns_tokens"' "$run/metrics.jsonl"; then
    metric=gns_tokens
    plot_curves "$run/gns_tokens.png" "gradient noise scale B_simple (tokens): $(basename "$run")" "$(basename "$run")" "$run"
    metric=loss
  fi
  batches=$(grep -o '"global_batch_size": [0-9]*' "$run/metrics.jsonl" | sort -u | wc -l)
  if [[ $metric == loss && -z $out ]] && ((batches > 1)); then
    xkey=tokens_seen
    plot_curves "$run/loss_vs_tokens.png" "loss against tokens: $(basename "$run") ($batches global batch sizes)" \
      "$(basename "$run")" "$run"
  fi
else
  [[ -n $out ]] || die "several runs need --out FILE"
  curves=()
  for run in "${runs[@]}"; do curves+=("$(basename "${run%/}")" "${run%/}"); done
  plot_curves "$out" "$metric" "${curves[@]}"
fi
