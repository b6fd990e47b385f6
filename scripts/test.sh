#!/usr/bin/env bash
# Installs missing packages, builds everything, and runs the whole suite through ctest: Catch2, the Python
# unittests (ctest python) and the installed package with its out-of-tree example (ctest package).
# Cost: ~10 min from scratch on 2 cores (build ~5 min, tests ~3 min); CI runs exactly this.
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }
source "$(dirname "$0")/lib/setup.sh"
install_missing_packages
build_shadowgrad
cd "$SHADOWGRAD_ROOT/build"
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "$@"
