#!/usr/bin/env bash
# Usage: bench/gpu_check.sh [--quick] [--out DIR] [--build-dir DIR] [--no-build] [--deadline SECONDS] | --help
# Intent: the check of the GPU machine (issue 28, docs/gpu-check.md), in one call of the device tool. It builds
# shadowgrad in Release against that machine's own torch (python3's), with the Debian packages carried as .debs
# (bench/lib/gpu_packages.sh) unpacked beside it; runs the ctest label `cuda`; runs fold_bandwidth --device cuda;
# then runs the trainer (hardware=cuda) and bench/peer.py --device cuda --compile (the same model under torch.compile,
# bf16 autocast) one after the other on the seed model (configs/seed.yml) and on a 1.1B-parameter model (TinyLlama's
# shape: emb 2048, 22 layers, 32 q heads of 64, 4 kv heads, MLP 5632, vocab 32000, seq 2048; bf16), and prints
# tokens/s, the ratio and the peak memory of each. With two GPUs or more it also runs the trainer on 2 of them under
# torchrun with overlap_gradient_reduction=true and =false and prints the gain; with one it says the gain needs two.
# A phase that fails or runs out of time is reported and the others go on. While the build runs, the compiled peer
# runs once per model (2 steps, niced) to fill an inductor cache, so the timed runs compile little; the first
# compile's time is reported too.
#   --quick       tiny models and few steps: a dry run of the script (GPU_CHECK_DEVICE=cpu runs it on a CPU)
#   --out DIR     the summary and the logs (default: $OUT, the device tool's folder, else runs/gpu-check-<time>)
#   --build-dir   the CMake build folder (default build-gpu; configured here against python3's torch)
#   --no-build    use the build folder as it is: no configure, no build
#   --deadline S  start no phase that could end more than S seconds after the start (default 470 on cuda, 0 = none,
#                 the default on cpu); each phase also has its own cap, under `timeout` (ten times longer on cpu)
# Environment: GPU_CHECK_DEVICE (cuda; cpu for a dry run), GPU_CHECK_PYTHON (python3: the GPU machine's torch),
# GPU_CHECK_PKGS (the carried .debs, default build-gpu-pkgs; absent: the system's packages), GPU_CHECK_JOBS (nproc),
# GPU_CHECK_TARGETS (the build's targets instead of those the rest runs), GPU_CHECK_NGPU (the GPU count, instead of nvidia-smi's: 2 runs the overlap phase's code path in a dry run).
# Writes into DIR: gpu_check.md (the summary, also printed last), gpu_check.log (all this script printed) and
# logs.tar.gz (every phase's log, the runs' metrics.jsonl, the peer's JSON lines): 3 files, within the device tool's
# 8, rewritten after each phase so that a run stopped at its limit still brings back what it did.
# Cost: on the H200 machine under 8 min (--deadline 470 s; planned: build ~2-4 min at -j16, the rest ~3 min;
# not yet measured there). --quick on 2 loaded CPU cores: see docs/gpu-check.md.
set -uo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }

t0=$SECONDS
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
device=${GPU_CHECK_DEVICE:-cuda}
py=${GPU_CHECK_PYTHON:-python3}
jobs=${GPU_CHECK_JOBS:-$(nproc)}
pkgs=${GPU_CHECK_PKGS:-$root/build-gpu-pkgs}
quick=0 build_it=1 out=${OUT:-} build="" deadline=""
while (($#)); do
  case $1 in
  --quick) quick=1 ;;
  --out) out=$2 && shift ;;
  --build-dir) build=$2 && shift ;;
  --no-build) build_it=0 ;;
  --deadline) deadline=$2 && shift ;;
  *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2 && exit 2 ;;
  esac
  shift
done
[[ $device == cuda || $device == cpu ]] || { echo "gpu_check.sh: GPU_CHECK_DEVICE is cuda or cpu, not $device" >&2; exit 2; }
[[ -n $deadline ]] || { [[ $device == cuda ]] && deadline=470 || deadline=0; }
scale=1  # each phase's cap is for the H200 machine; a dry run on a small CPU machine gets ten times as long
[[ $device == cpu ]] && scale=10
((deadline > 0)) || deadline=1000000
out=${out:-$root/runs/gpu-check-$(date -u +%Y%m%d-%H%M%S)}
build=${build:-$root/build-gpu}
[[ $build == /* ]] || build=$root/$build
[[ $pkgs == /* ]] || pkgs=$root/$pkgs
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
# Logs and runs live outside $OUT (the device tool brings back 8 files at most) and are packed into logs.tar.gz.
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
logs=$work/logs
mkdir -p "$logs/runs"
exec > >(tee -a "$out/gpu_check.log") 2>&1
tee_pid=$!
trap 'rm -rf "$work"' EXIT
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=$work/inductor TRITON_CACHE_DIR=$work/triton
py=$(command -v "$py") || { echo "gpu_check.sh: no $py"; exit 2; }

# ---------------------------------------------------------------------------------------------------------------
# Phases: each runs under `timeout` with at most its cap, or what the deadline leaves; its line goes to the summary.
rows=()      # summary rows: phase|status|seconds|result
results=()   # comparison rows, Markdown
notes=()     # paragraphs after the tables
reserve=5    # seconds kept for the summary
left() { echo $((deadline - (SECONDS - t0))); }
budget() {
  local cap=$(($1 * scale)) l
  l=$(($(left) - reserve))
  ((l < cap)) && cap=$l
  ((cap < 10)) && cap=0
  echo "$cap"
}
row() { rows+=("$1|$2|$3|$4"); summary >"$out/gpu_check.md"; tar -czf "$out/logs.tar.gz" -C "$work" logs 2>/dev/null; }
# run_phase NAME CAP LOG CMD...: sets ph_status, ph_rc, ph_s; returns CMD's exit code (99 when skipped for want of
# time). The caller writes the phase's row.
run_phase() {
  local name=$1 cap=$2 log=$3 t start
  shift 3
  t=$(budget "$cap")
  if ((t == 0)); then  # the caller's row says so
    ph_status="skipped: out of time ($(left) s left of the ${deadline} s deadline)" ph_rc=99 ph_s=0
    echo "== $name: $ph_status"
    return 99
  fi
  echo "== $name (at most $t s; log ${log#"$work"/})"
  start=$SECONDS
  timeout -k 10 "$t" "$@" >"$log" 2>&1
  ph_rc=$?
  ph_s=$((SECONDS - start))
  if ((ph_rc == 0)); then ph_status=ok
  elif ((ph_rc == 124 || ph_rc == 137)); then ph_status="timed out ($t s)"
  else ph_status="failed (exit $ph_rc)"
  fi
  echo "   $ph_status in $ph_s s"
  return "$ph_rc"
}
# why_failed LOG: the trainer's own `error:` line where there is one (launch.sh prefixes "[rank N] "), else the end.
why_failed() {
  local e
  e=$(grep -m1 'error:' "$1" 2>/dev/null | sed 's/^\[rank [0-9]*\] //')
  [[ -n $e ]] && echo "$e" | tr '|' '/' | cut -c1-300 && return
  tail -n 3 "$1" 2>/dev/null | tr '\n|' ' /' | cut -c1-300
}

summary() {
  local r
  echo "# GPU check, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "- commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "- device: $device_line"
  echo "- torch: $torch_line"
  echo "- mode: GPU_CHECK_DEVICE=$device$( ((quick)) && echo ', --quick (tiny models)'); $((SECONDS - t0)) s so far of a ${deadline} s deadline"
  echo
  echo "| phase | status | s | result |"
  echo "|---|---|---:|---|"
  for r in "${rows[@]}"; do
    IFS='|' read -r a b c d <<<"$r"
    echo "| $a | $b | $c | $d |"
  done
  if ((${#results[@]})); then
    echo
    echo "## shadowgrad's trainer vs the torch.compile'd PyTorch loop (bench/peer.py), same model, same $device"
    echo
    echo "One run of each, trainer first; tokens/s over the steps after the warm-up (and, for the peer, the steps that"
    echo "compiled nothing); peak = the CUDA caching allocator's peak allocated bytes (trainer: peak_mem_bytes of"
    echo "metrics.jsonl; peer: torch.cuda.max_memory_allocated); on a CPU (a dry run) the trainer's is its tracking"
    echo "allocator's and the peer's is n/a. First compile: the peer's compile with an"
    echo "empty inductor cache (the priming run); the timed run compiled from that cache."
    echo
    echo "| model | params | pdbs x K x seq | shadowgrad tok/s | PyTorch compiled tok/s | shadowgrad / PyTorch | shadowgrad peak MiB | PyTorch peak MiB | first compile s |"
    echo "|---|---:|---|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${results[@]}"
  fi
  for r in "${notes[@]}"; do
    echo
    echo "$r"
  done
}

# ---------------------------------------------------------------------------------------------------------------
# Models: "emb heads kv_heads head_dim mlp layers vocab seq", the order of bench/bench.py --model.
seed_model() {
  awk -F': *' '$1 ~ /^(base_emb_dim|base_num_query_heads|base_num_kv_heads|head_dim|base_mlp_dim|base_num_decoder_layers|vocab_size|max_target_length)$/ {v[$1] = $2}
    END {print v["base_emb_dim"], v["base_num_query_heads"], v["base_num_kv_heads"], v["head_dim"], v["base_mlp_dim"],
               v["base_num_decoder_layers"], v["vocab_size"], v["max_target_length"]}' "$root/configs/seed.yml"
}
trainer_keys() {
  local m
  read -r -a m <<<"$1"
  echo "base_emb_dim=${m[0]} base_num_query_heads=${m[1]} base_num_kv_heads=${m[2]} head_dim=${m[3]}" \
    "base_mlp_dim=${m[4]} base_num_decoder_layers=${m[5]} vocab_size=${m[6]} max_target_length=${m[7]}"
}
peer_flags() {
  local m
  read -r -a m <<<"$1"
  echo "--emb=${m[0]} --heads=${m[1]} --kv-heads=${m[2]} --head-dim=${m[3]} --mlp=${m[4]} --layers=${m[5]}" \
    "--vocab=${m[6]} --seq=${m[7]}"
}
# Parameters, as bench/bench.py counts them: embedding + output + per layer (q, k, v, o, the 3 MLP matrices, 2 norms)
# + the final norm.
param_count() {
  local m q kv
  read -r -a m <<<"$1"
  q=$((m[1] * m[3])) kv=$((m[2] * m[3]))
  echo $((2 * m[6] * m[0] + m[5] * (m[0] * (q + 2 * kv) + q * m[0] + 3 * m[0] * m[4] + 2 * m[0]) + m[0]))
}
human() { awk -v n="$1" 'BEGIN {if (n >= 1e9) printf "%.2fB", n / 1e9; else printf "%.1fM", n / 1e6}'; }

# tokens/s and peak MiB of a trainer run (rank 0's metrics.jsonl) or of peer.py's JSON lines, after WARMUP steps.
numbers() {  # trainer|peer FILE WARMUP -> "tokens_per_s peak_mib steps_kept" (n/a where unknown)
  [[ -s $2 ]] && "$py" - "$@" 2>/dev/null <<'EOF' || echo "n/a n/a 0"
import json, sys
kind, path, warmup = sys.argv[1], sys.argv[2], int(sys.argv[3])
lines = []
for line in open(path):
    if line.startswith("{"):
        try:
            lines.append(json.loads(line))
        except ValueError:
            pass
if kind == "trainer":
    steps = [r for r in lines if "step_time_s" in r]
    kept = steps[warmup:]
    seconds, peaks = sum(r["step_time_s"] for r in kept), [r.get("peak_mem_bytes", -1) for r in steps]
else:
    steps = [r for r in lines if "step" in r and "seconds" in r]
    kept = [r for r in steps[warmup:] if "compile_s" not in r]
    seconds = sum(r["seconds"] for r in kept)
    peaks = [r["peak_mem_bytes"] for r in steps if "peak_mem_bytes" in r]
    peaks += [r["memory"]["peak_allocated_bytes"] for r in lines if "memory" in r]
tps = f"{sum(r['tokens'] for r in kept) / seconds:.0f}" if kept and seconds > 0 else "n/a"
peak = f"{max(peaks) / 2**20:.0f}" if peaks and max(peaks) > 0 else "n/a"
print(tps, peak, len(kept))
EOF
}
first_compile() {  # the priming run's compile seconds (wall beyond steady state, else wall), or n/a
  "$py" -c '
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{\"compile\""):
        c = json.loads(line)["compile"]
        print(round(c.get("beyond_steady_s") or c.get("wall_s") or 0, 1)); break
else:
    print("n/a")' "$1" 2>/dev/null || echo n/a
}

# ---------------------------------------------------------------------------------------------------------------
# The runs' shapes. pdbs x K x seq tokens per optimizer step; WARMUP steps of each run are left out.
seed=$(seed_model)
big="2048 32 4 64 5632 22 32000 2048"  # TinyLlama-1.1B's shape
if ((quick)); then
  seed="64 2 2 32 128 2 256 64" big="128 4 2 32 256 2 512 128"
  seed_batch=(2 2 4 1) big_batch=(2 2 4 1)  # pdbs K steps warmup
else
  seed_batch=(8 4 24 8) big_batch=(4 4 10 4)
fi
hardware=$device

echo "gpu_check.sh: device $device, python $py, build $build, out $out, work $work, deadline $deadline s"
device_line="(not read)" torch_line="(not read)"

# Phase: what the machine is. nvidia-smi and torch's own view, into env.txt.
{
  date -u
  uname -a
  echo "nproc: $(nproc)"
  free -g 2>/dev/null | head -n 2
  nvidia-smi 2>&1 | head -n 20
  nvidia-smi -L 2>&1
  "$py" -c 'import torch, sys; print("python", sys.version.split()[0], sys.executable); print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "devices", torch.cuda.device_count())' 2>&1
  for tool in g++ cmake ninja nvcc; do echo "$tool: $(command -v $tool) $($tool --version 2>&1 | grep -m1 -iE 'version|[0-9]+\.[0-9]+')"; done
  "$py" -c 'import sysconfig, os; p = sysconfig.get_paths()["include"]; print("Python.h:", p, os.path.exists(p + "/Python.h"))' 2>&1
} >"$logs/env.txt" 2>&1
ngpu=${GPU_CHECK_NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)}
torch_line=$("$py" -c 'import torch; print(torch.__version__, "(CUDA", str(torch.version.cuda) + ")", torch.__file__.rsplit("/", 2)[0])' 2>/dev/null || echo "python3 has no torch")
if [[ $device == cuda ]]; then
  device_line="$ngpu GPU(s): $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
  if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    notes+=("**torch sees no CUDA device**: the cuda test reports skipped and the GPU runs fail (env.txt in logs.tar.gz).")
  fi
else
  device_line="cpu (a dry run of the script: $(nproc) cores)"
fi
row machine ok $((SECONDS - t0)) "$device_line; torch $torch_line; $(grep -m1 '^g++' "$logs/env.txt" | cut -c1-80)"

# Phase, in the background from here on: the compiled peer, 2 steps per model, fills the inductor cache.
prime() {
  local name model batch
  for name in seed big; do
    model=${!name}
    [[ $name == seed ]] && batch=("${seed_batch[@]}") || batch=("${big_batch[@]}")
    # shellcheck disable=SC2046 # peer_flags is a list of flags
    nice -n 10 "$py" "$root/bench/peer.py" --device "$device" --compile --dtype bfloat16 --pdbs "${batch[0]}" \
      --ga "${batch[1]}" --steps 2 $(peer_flags "$model") >"$logs/prime-$name.jsonl" 2>"$logs/prime-$name.err"
    echo "prime $name: exit $?"
  done
}
prime_cap=$(budget 300)
if ((prime_cap > 0)); then
  timeout -k 10 "$prime_cap" bash -c "$(declare -f prime peer_flags); $(declare -p seed big seed_batch big_batch py root device logs); prime" \
    >"$logs/prime.txt" 2>&1 &
  prime_pid=$!
else
  prime_pid=""
fi

# Phase: the carried Debian packages, unpacked (bench/lib/gpu_packages.sh), and the CMake arguments that use them.
# Inside the build folder: its cache and the binaries' rpath name this folder, so it must outlive the script.
pkgroot=$build/debian-packages
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$py")
prefix=$("$py" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null)
if ((build_it)); then
  if compgen -G "$pkgs/*.deb" >/dev/null; then
    if run_phase packages 30 "$logs/packages.log" bash "$root/bench/lib/gpu_packages.sh" unpack "$pkgs" "$pkgroot"; then
      usr=$pkgroot/usr
      libdir=$usr/lib/x86_64-linux-gnu
      prefix="$prefix;$usr"
      # Each package's CMake config by its folder (-D<name>_DIR): found whatever the compiler's library architecture.
      while IFS= read -r cfg; do
        name=$(basename "$cfg")
        name=${name%Config.cmake} name=${name%-config.cmake}
        [[ $name == Gloo ]] || cmake_args+=("-D${name}_DIR=$(dirname "$cfg")")
      done < <(find "$usr" -name '*Config.cmake' -o -name '*-config.cmake' | grep -v -- '-version\|Version')
      # Headers found without CMake (gloo's, SentencePiece's, zlib's) come last on every include path, as
      # /usr/include would; libraries linked by name (-lsentencepiece) and at run time through -L and an rpath.
      cmake_args+=(-DCMAKE_INCLUDE_PATH="$usr/include" -DCMAKE_LIBRARY_PATH="$libdir"
        -DCMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES="$usr/include"
        -DCMAKE_EXE_LINKER_FLAGS="-L$libdir -Wl,-rpath,$libdir" -DCMAKE_SHARED_LINKER_FLAGS="-L$libdir -Wl,-rpath,$libdir"
        -DCMAKE_MODULE_LINKER_FLAGS="-L$libdir -Wl,-rpath,$libdir")
      export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # for the trainer; an rpath also has it
      row packages ok "$ph_s" "$(tail -n 1 "$logs/packages.log")"
    else
      row packages "$ph_status" "$ph_s" "$(why_failed "$logs/packages.log"); building with the system's packages"
    fi
  else
    row packages "not carried" 0 "no .deb in ${pkgs#"$root"/}: the system's packages (bench/lib/gpu_packages.sh download makes them)"
  fi
  cmake_args+=(-DCMAKE_PREFIX_PATH="$prefix")

  # Phase: configure. Ninja where there is one (a fresh build folder only: the generator cannot change).
  generator=()
  [[ ! -f $build/CMakeCache.txt ]] && command -v ninja >/dev/null && generator=(-G Ninja)
  if run_phase configure 120 "$logs/configure.log" cmake -S "$root" -B "$build" "${generator[@]}" "${cmake_args[@]}"; then
    row configure ok "$ph_s" "$(grep -m1 'shadowgrad: torch' "$logs/configure.log" | sed 's/^-- //'); $(grep -m1 'CUDA fold kernel' "$logs/configure.log" | sed 's/^-- //')"
  else
    row configure "$ph_status" "$ph_s" "$(grep -m2 -A2 'CMake Error' "$logs/configure.log" | tr '\n|' ' /' | cut -c1-300)"
  fi

  # Phase: build what the rest runs: the trainer, compare_runs, fold_bandwidth and whatever the cuda tests run.
  targets=(trainer compare_runs)
  if [[ -f $build/CMakeCache.txt && -n ${GPU_CHECK_TARGETS:-} ]]; then
    read -r -a targets <<<"$GPU_CHECK_TARGETS"
  elif [[ -f $build/CMakeCache.txt ]]; then
    all_targets=$(cmake --build "$build" --target help 2>/dev/null | sed -e 's/^\.\.\. //' -e 's/:.*//' | awk '{print $1}')
    for t in fold_bandwidth $(ctest --test-dir "$build" -L cuda --show-only=json-v1 2>/dev/null | "$py" -c '
import json, os, sys
names = set()
for t in json.load(sys.stdin).get("tests", []):
    for arg in t.get("command", []):
        if arg.startswith(sys.argv[1] + "/"):
            names.add(os.path.basename(arg))
print(" ".join(sorted(names)))' "$build" 2>/dev/null); do
      grep -qx "$t" <<<"$all_targets" && [[ " ${targets[*]} " != *" $t "* ]] && targets+=("$t")
    done
    # Catch2 cases tagged [cuda] are discovered from shadowgrad_tests only once it is built.
    grep -lq '\[cuda\]' "$root"/tests/test_*.cpp 2>/dev/null && grep -qx shadowgrad_tests <<<"$all_targets" &&
      targets+=(shadowgrad_tests)
  fi
  if [[ -f $build/CMakeCache.txt ]]; then
    keep_going=(-k 0)
    [[ -f $build/Makefile ]] && keep_going=(-k)
    if run_phase build 300 "$logs/build.log" nice cmake --build "$build" -j "$jobs" --target "${targets[@]}" -- "${keep_going[@]}"; then
      row build ok "$ph_s" "${targets[*]} (-j$jobs)"
    else
      row build "$ph_status" "$ph_s" "${targets[*]} (-j$jobs): $(grep -m1 -B1 -A3 'error' "$logs/build.log" | tr '\n|' ' /' | cut -c1-300)"
    fi
  else
    row build skipped 0 "not configured"
  fi
else
  row build "not asked (--no-build)" 0 "using $build as it is"
fi
trainer=$build/trainer

# Phase: the GPU tests (they report Skipped without a GPU).
if [[ -f $build/CTestTestfile.cmake ]]; then
  run_phase "ctest -L cuda" 150 "$logs/ctest-cuda.log" ctest --test-dir "$build" -L cuda -j 4 --output-on-failure --timeout 140
  verdicts=$(grep -E '^ *[0-9]+/[0-9]+ Test +#' "$logs/ctest-cuda.log" | sed -E 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: //; s/ \.{2,}(\*\*\*)? */ -> /; s/ +/ /g' | tr '\n' ';' | sed 's/;/; /g')
  row "ctest -L cuda" "$ph_status" "$ph_s" "$(grep -m1 'tests passed' "$logs/ctest-cuda.log"); ${verdicts:-no test ran}"
else
  row "ctest -L cuda" skipped 0 "no build folder with tests"
fi

# The priming runs must be over before anything is timed.
if [[ -n $prime_pid ]]; then
  start=$SECONDS
  wait "$prime_pid"
  rc=$?
  status="exit $rc"
  ((rc == 0)) && status=ok
  ((rc == 124 || rc == 137)) && status="timed out ($prime_cap s): the timed runs compile what it did not"
  row "compile cache (peer, 2 steps per model, during the build)" "$status" \
    "$((SECONDS - start)) (waited)" "$(tr '\n' ' ' <"$logs/prime.txt")"
fi

# Phase: the fold's bandwidth, by the lead's app (JSON lines with fold_gbps, copy_gbps, fraction).
if [[ -x $build/fold_bandwidth ]]; then
  fold_args=(--device "$device")
  ((quick)) && fold_args+=(--numel 1048576 --pairs 2)  # 4 MiB tensors: seconds on a CPU
  run_phase fold_bandwidth 60 "$logs/fold_bandwidth.jsonl" "$build/fold_bandwidth" "${fold_args[@]}"
  fold=$("$py" -c '
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{") and "fold_gbps" in line:
        r = json.loads(line)
        print(", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()), end="; ")' \
    "$logs/fold_bandwidth.jsonl" 2>/dev/null)
  row fold_bandwidth "$ph_status" "$ph_s" "${fold:-$(why_failed "$logs/fold_bandwidth.jsonl")}"
else
  row fold_bandwidth missing 0 "no $build/fold_bandwidth (not a target of this tree, or its build failed); nothing measured"
fi

# Phases: the trainer and the compiled peer on one model. compare LABEL MODEL PDBS K STEPS WARMUP
compare() {
  local label=$1 model=$2 pdbs=$3 ga=$4 steps=$5 warmup=$6 m params tn pn ratio
  read -r -a m <<<"$model"
  params=$(param_count "$model")
  local shape="emb ${m[0]}, ${m[5]} layers, ${m[1]}/${m[2]} heads of ${m[3]}, mlp ${m[4]}, vocab ${m[6]}"
  tn="n/a n/a 0" pn="n/a n/a 0"
  if [[ -x $trainer ]]; then
    # shellcheck disable=SC2046 # trainer_keys is a list of key=value words
    run_phase "trainer, $label" 120 "$logs/trainer-$label.log" "$trainer" "$root/configs/seed.yml" \
      $(trainer_keys "$model") hardware="$hardware" dtype=bfloat16 per_device_batch_size="$pdbs" \
      gradient_accumulation_steps="$ga" steps="$steps" log_period=1 synthetic_min_length_fraction=1 \
      enable_checkpointing=false base_output_directory="$logs/runs" run_name="trainer-$label"
    [[ -f $logs/runs/trainer-$label/metrics.jsonl ]] && tn=$(numbers trainer "$logs/runs/trainer-$label/metrics.jsonl" "$warmup")
    row "trainer, $label" "$ph_status" "$ph_s" "$(human "$params") params; tokens/s, peak MiB, steps kept: $tn$( ((ph_rc && ph_rc != 99)) && echo "; $(why_failed "$logs/trainer-$label.log")")"
  else
    row "trainer, $label" skipped 0 "no $trainer"
  fi
  # shellcheck disable=SC2046 # peer_flags is a list of flags
  run_phase "peer compiled, $label" 150 "$logs/peer-$label.jsonl" "$py" "$root/bench/peer.py" --device "$device" \
    --compile --dtype bfloat16 --pdbs "$pdbs" --ga "$ga" --steps "$steps" $(peer_flags "$model")
  pn=$(numbers peer "$logs/peer-$label.jsonl" "$warmup")
  row "peer compiled, $label" "$ph_status" "$ph_s" "tokens/s, peak MiB, steps kept: $pn$( ((ph_rc && ph_rc != 99)) && echo "; $(why_failed "$logs/peer-$label.jsonl")")"
  read -r -a tn <<<"$tn"
  read -r -a pn <<<"$pn"
  ratio=$(awk -v a="${tn[0]}" -v b="${pn[0]}" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "n/a"}')
  results+=("| $label ($shape) | $(human "$params") | $pdbs x $ga x ${m[7]} | ${tn[0]} | ${pn[0]} | $ratio | ${tn[1]} | ${pn[1]} | $(first_compile "$logs/prime-$label.jsonl") |")
  row "$label: ratio" "" "" "shadowgrad / PyTorch compiled tokens/s = $ratio"
}
compare seed "$seed" "${seed_batch[@]}"

# Phase: LoRA on the big model's shape (docs/lora.md): r=16 on all seven projections, the base frozen in bf16.
if [[ -x $trainer ]]; then
  # shellcheck disable=SC2046 # trainer_keys is a list of key=value words
  run_phase "trainer LoRA r=16, big" 120 "$logs/trainer-lora-big.log" "$trainer" "$root/configs/seed.yml" \
    $(trainer_keys "$big") hardware="$hardware" dtype=bfloat16 weight_dtype=bfloat16 lora_rank=16 lora_alpha=32 \
    per_device_batch_size="${big_batch[0]}" gradient_accumulation_steps="${big_batch[1]}" steps="${big_batch[2]}" \
    log_period=1 synthetic_min_length_fraction=1 enable_checkpointing=false base_output_directory="$logs/runs" \
    run_name=trainer-lora-big
  n="n/a n/a 0"
  [[ -f $logs/runs/trainer-lora-big/metrics.jsonl ]] && n=$(numbers trainer "$logs/runs/trainer-lora-big/metrics.jsonl" "${big_batch[3]}")
  row "trainer LoRA r=16, big" "$ph_status" "$ph_s" "bf16 base, adapters only trained; tokens/s, peak MiB, steps kept: $n$( ((ph_rc && ph_rc != 99)) && echo "; $(why_failed "$logs/trainer-lora-big.log")")"
fi

compare big "$big" "${big_batch[@]}"

# Phase: the overlap of the gradient reduction, which needs two GPUs (NCCL puts no two ranks on one GPU).
if ((ngpu >= 2)) && [[ -x $trainer ]]; then
  torchrun=$(dirname "$py")/torchrun
  if [[ ! -x $torchrun ]]; then
    torchrun=$work/torchrun
    printf '#!/bin/sh\nexec "%s" -m torch.distributed.run "$@"\n' "$py" >"$torchrun" && chmod +x "$torchrun"
  fi
  declare -A overlap_tps
  for overlap in true false; do
    # shellcheck disable=SC2046 # trainer_keys is a list of key=value words
    run_phase "2 GPUs, overlap_gradient_reduction=$overlap" 120 "$logs/overlap-$overlap.log" \
      env TORCHRUN="$torchrun" TRAINER="$trainer" "$root/scripts/launch.sh" --nproc 2 "$root/configs/seed.yml" \
      $(trainer_keys "$big") hardware="$hardware" dtype=bfloat16 per_device_batch_size="${big_batch[0]}" \
      gradient_accumulation_steps="${big_batch[1]}" steps="${big_batch[2]}" log_period=1 synthetic_min_length_fraction=1 \
      enable_checkpointing=false overlap_gradient_reduction="$overlap" base_output_directory="$logs/runs" \
      run_name="overlap-$overlap"
    n="n/a n/a 0"
    [[ -f $logs/runs/overlap-$overlap/metrics.jsonl ]] && n=$(numbers trainer "$logs/runs/overlap-$overlap/metrics.jsonl" "${big_batch[3]}")
    overlap_tps[$overlap]=${n%% *}
    row "2 GPUs, overlap_gradient_reduction=$overlap" "$ph_status" "$ph_s" "big model; tokens/s, peak MiB, steps kept: $n$( ((ph_rc && ph_rc != 99)) && echo "; $(why_failed "$logs/overlap-$overlap.log")")"
  done
  gain=$(awk -v a="${overlap_tps[true]}" -v b="${overlap_tps[false]}" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%+.1f %%", (a / b - 1) * 100; else print "n/a"}')
  notes+=("**Overlap gain** (2 GPUs of $ngpu, big model, one run each): tokens/s with overlap_gradient_reduction=true / false - 1 = $gain (${overlap_tps[true]} vs ${overlap_tps[false]} tokens/s).")
  row "overlap gain" "" "" "$gain"
  # ZeRO-2 on NCCL (docs/distributed.md, "Sharded training"): the same big-model run with the carry sharded.
  # shellcheck disable=SC2046 # trainer_keys is a list of key=value words
  run_phase "2 GPUs, shard_gradients_over_data=true" 120 "$logs/zero2.log" \
    env TORCHRUN="$torchrun" TRAINER="$trainer" "$root/scripts/launch.sh" --nproc 2 "$root/configs/seed.yml" \
    $(trainer_keys "$big") hardware="$hardware" dtype=bfloat16 per_device_batch_size="${big_batch[0]}" \
    gradient_accumulation_steps="${big_batch[1]}" steps="${big_batch[2]}" log_period=1 synthetic_min_length_fraction=1 \
    enable_checkpointing=false shard_optimizer_over_data=true shard_gradients_over_data=true \
    base_output_directory="$logs/runs" run_name="zero2"
  n="n/a n/a 0"
  [[ -f $logs/runs/zero2/metrics.jsonl ]] && n=$(numbers trainer "$logs/runs/zero2/metrics.jsonl" "${big_batch[3]}")
  row "2 GPUs, ZeRO-2" "$ph_status" "$ph_s" "big model; tokens/s, peak MiB, steps kept: $n$( ((ph_rc && ph_rc != 99)) && echo "; $(why_failed "$logs/zero2.log")")"
  # ZeRO-3 on NCCL: the weights' units gathered by NCCL broadcasts into storage the CUDA caching allocator gives back.
  # shellcheck disable=SC2046 # trainer_keys is a list of key=value words
  run_phase "2 GPUs, shard_parameters_over_data=true" 120 "$logs/zero3.log" \
    env TORCHRUN="$torchrun" TRAINER="$trainer" "$root/scripts/launch.sh" --nproc 2 "$root/configs/seed.yml" \
    $(trainer_keys "$big") hardware="$hardware" dtype=bfloat16 per_device_batch_size="${big_batch[0]}" \
    gradient_accumulation_steps="${big_batch[1]}" steps="${big_batch[2]}" log_period=1 synthetic_min_length_fraction=1 \
    enable_checkpointing=false shard_optimizer_over_data=true shard_parameters_over_data=true \
    shard_gradients_over_data=true base_output_directory="$logs/runs" run_name="zero3"
  n="n/a n/a 0"
  [[ -f $logs/runs/zero3/metrics.jsonl ]] && n=$(numbers trainer "$logs/runs/zero3/metrics.jsonl" "${big_batch[3]}")
  row "2 GPUs, ZeRO-3" "$ph_status" "$ph_s" "big model; tokens/s, peak MiB, steps kept: $n$( ((ph_rc && ph_rc != 99)) && echo "; $(why_failed "$logs/zero3.log")")"
else
  notes+=("**Overlap gain: not measured.** It needs 2 GPUs or more (NCCL puts no two ranks on one GPU); this machine has $ngpu.")
  row "overlap gain" "needs 2 GPUs" 0 "found $ngpu"
fi

summary >"$out/gpu_check.md"
tar -czf "$out/logs.tar.gz" -C "$work" logs 2>/dev/null
echo
cat "$out/gpu_check.md"
echo
echo "gpu_check.sh: $((SECONDS - t0)) s; $out: $(find "$out" -maxdepth 1 -type f -printf "%f ")"
exec >&- 2>&-
wait "$tee_pid"  # gpu_check.log complete before the device tool takes $OUT
