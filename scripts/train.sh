#!/usr/bin/env bash
# Usage: scripts/train.sh [CONFIG] [key=value ...]
# Installs missing packages, builds if needed, and trains with CONFIG (default configs/base.yml).
# Cost: the default config (300 steps x 1024 tokens, dtype=auto) took 202 s on a quiet AVX2 EPYC on 2026-12-03 (fp32,
# 1506 tokens/s; 48 s of it the package and build checks and start-up), first build aside.
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }
source "$(dirname "$0")/lib/setup.sh"
install_and_build trainer
# The config is optional: a first argument of the form key=value is already an override.
config=base.yml
if [ $# -gt 0 ] && [[ "$1" != *=* ]]; then
  config="$1"
  shift
fi
exec "$SHADOWGRAD_ROOT/build/trainer" "$config" "$@"
