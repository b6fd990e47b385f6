#!/usr/bin/env bash
# Intent: the accumulation-error study of docs/numerics.md. For K in {1,4,16,64,256,1024} microbatches, folds
# each microbatch gradient into fp64 (the reference), fp32, bf16 and fp16 carries (round-to-nearest and
# stochastic) and reports the relative error and the bias against fp64, on the default model's gradients and
# on a constructed stagnation case; then plots error against K (PNG, gnuplot).
# Cost: the stagnation case (16384 elements, K up to 1024, 16 seeds) took about 2 min. The model case runs sum(K)
# microbatch forward+backward passes per seed on configs/base.yml's model (4.1 M parameters) and folds each into
# six trees: sum(K) = 85 passes per seed for the default --model-k; 2 seeds took 50 min on a busy shared 2-core
# machine (2026-11-30), much less on a quiet one. --model-k 1,4,16,64,256,1024 adds 1280 passes per seed.
#
# Usage: bench/numerics_study.sh [--out DIR] [--seeds N] [--model-k LIST] [--stagnation-seeds N] [--k LIST]
#                                  [--cases model,stagnation] [key=value ...]
#   --seeds / --model-k: the model case (default 2 seeds, K = 1,4,16,64); --stagnation-seeds / --k: the
#   stagnation case (default 16 seeds, K = 1,4,16,64,256,1024). key=value overrides go to the model's config
#   (base.yml), e.g. num_threads=1.
#   Writes DIR/model.tsv, DIR/stagnation.tsv, DIR/error_vs_k.png and DIR/bias_vs_k.png (default DIR: runs/numerics).
#   A case whose .tsv exists in DIR is not rerun (delete it to redo it); the plots are always redrawn.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/args.sh"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../scripts/lib/setup.sh"

out=runs/numerics seeds=2 model_ks=1,4,16,64 stagnation_seeds=16 ks=1,4,16,64,256,1024 cases=model,stagnation
overrides=()
while (($#)); do
  case $1 in
  --out) out=$2 && shift ;;
  --seeds) seeds=$2 && shift ;;
  --model-k) model_ks=$2 && shift ;;
  --stagnation-seeds) stagnation_seeds=$2 && shift ;;
  --k) ks=$2 && shift ;;
  --cases) cases=$2 && shift ;;
  *) other_argument "${BASH_SOURCE[0]}" "$1" ;;
  esac
  shift
done

install_missing_packages
build_shadowgrad numerics_study >/dev/null
mkdir -p "$out"
for c in ${cases//,/ }; do
  [[ -s $out/$c.tsv ]] && continue
  if [[ $c == model ]]; then args=(--k "$model_ks" --seeds "$seeds"); else args=(--k "$ks" --seeds "$stagnation_seeds"); fi
  "$SHADOWGRAD_ROOT/build/numerics_study" base.yml "${overrides[@]}" "${args[@]}" --cases "$c" --out "$out" |
    tee "$out/$c.txt"
done

# One panel per case; one line per format. gnuplot's log axes need positive values: fp32's 0 error at K=1 is
# drawn at 1e-12 (the axis floor).
plot() {
  local column=$1 ylabel=$2 png=$3 logy=$4 key=$5
  local panels=""
  for c in model stagnation; do
    [[ -s $out/$c.tsv ]] || continue
    local lines=""
    for f in fp32 bf16-nearest bf16-stochastic fp16-nearest fp16-stochastic; do
      awk -F'\t' -v f="$f" -v col="$column" 'NR > 1 && $2 == f { print $1, $col, $(col + 1) }' "$out/$c.tsv" \
        >"$out/.$c-$f.dat"
      lines+="'$out/.$c-$f.dat' using 1:(\$2 > 1e-12 || !$logy ? \$2 : 1e-12):3 with yerrorlines lw 2 title '$f', "
    done
    panels+="set title '$c'; plot ${lines%, };"$'\n'
  done
  gnuplot <<GP
set terminal pngcairo noenhanced size 1200,500
set output '$png'
set multiplot layout 1,2
set logscale x 2
$( ((logy)) && echo "set logscale y" || echo "unset logscale y")
set xlabel 'K (microbatches folded)'
set ylabel '$ylabel'
set grid
set key $key
$panels
unset multiplot
GP
  rm -f "$out"/.*.dat
  echo "wrote $png"
}
plot 3 'relative error ||acc - exact|| / ||exact|| (mean over seeds)' "$out/error_vs_k.png" 1 "top left"
plot 5 'bias: sum sign(exact)(acc - exact) / sum |exact|' "$out/bias_vs_k.png" 0 "bottom left"
