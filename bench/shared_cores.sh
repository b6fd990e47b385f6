#!/usr/bin/env bash
# Tokens/s when the cores are shared (issue 62): base.yml's model quiet, beside one busy process, and as two processes of
# scripts/launch.sh --nproc 2 (default keys), in alternating rounds; prints each round and the ratios' median and
# range. Options and keys go to bench/shared_cores.py (--rounds, --steps, --env NAME=VALUE, key=value), e.g.
#   bench/shared_cores.sh --rounds 5
#   bench/shared_cores.sh num_threads=1 --env OMP_WAIT_POLICY=active
# Cost: about 30 s a round on 2 AVX2 cores in fp32 (three runs of 8 steps), more when the machine is loaded.
set -euo pipefail
source "$(dirname "$0")/lib/args.sh"
help_with_python "$0" "$(dirname "$0")/shared_cores.py" "$@"
source "$(dirname "$0")/../scripts/lib/setup.sh"
build_shadowgrad trainer >&2
exec "$SHADOWGRAD_PYTHON" "$SHADOWGRAD_ROOT/bench/shared_cores.py" "$@"
