#!/usr/bin/env bash
# Installs missing Debian packages and builds everything in Release into build/.
# Cost: first time ~5 min on 2 cores (plus package download); afterwards only what changed.
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }
source "$(dirname "$0")/lib/setup.sh"
install_and_build "$@"
