# Shared by train.sh, test.sh and build.sh: install missing Debian packages, create the Python venv with the pinned
# torch wheel (LibTorch comes from it), then configure and build. Sourced, not run.
# Cost on a fresh 2-core machine: apt ~10-30 s beside the venv's torch (2.14.1 + torchvision, 5.5 GB from pip's
# local files: 32-67 s on an avx512_bf16 EPYC), the build about 3 min there, 12 min on an AVX2 one before the
# larger unity batches (docs/setup.md).

SHADOWGRAD_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# No Debian torch: LibTorch, torchrun and the Python module's torch all come from the venv's wheel.
# libgloo-dev: headers only, for c10d's ProcessGroupGloo.hpp (the wheel ships none); nothing links libgloo
# (docs/distributed.md, "Gloo").
SHADOWGRAD_PACKAGES=(libgloo-dev libopenblas0-pthread libcli11-dev libspdlog-dev libfmt-dev catch2
                     libyaml-cpp-dev zlib1g-dev cmake g++ make gnuplot-nox clang-14 libclang-rt-14-dev
                     python3-dev python3-venv libsentencepiece-dev
                     sentencepiece iproute2 nlohmann-json3-dev)  # iproute2: `ip netns` for tests/netns_test.sh
# The torch the project builds and tests against. The CUDA build runs on a CPU too, and one build then also proves
# that hardware=cuda compiles and links (docs/setup.md says why this one and not the 2.13.0 CPU build).
SHADOWGRAD_TORCH_PINS=(torch==2.14.1 torchvision==0.29.1 numpy)
# Hugging Face interop (docs/huggingface.md): the parity tests build tiny models with transformers' own classes,
# scripts/prepare_model.sh turns a GGUF into a model directory (gguf, accelerate), and token files are written with a
# model's own tokenizer.json (tokenizers). peft is the reference for LoRA adapters (docs/lora.md). 5.24.0 is the newest transformers pip resolves here (5.25 needs kernels>=0.19).
# The fine-tuner's tools: pyarrow reads the hub's Parquet (prepare_sft.sh, prepare_preference.sh); trl (with datasets)
# is the preference loss's reference in the parity tests; tensorboard writes and reads the event files; lm-eval runs
# benchmarks on an export (scripts/evaluate.sh).
SHADOWGRAD_HF_PINS=(transformers==5.24.0 safetensors==0.8.0 tokenizers==0.23.3 gguf==0.19.0 accelerate==1.16.0 peft==0.21.2
                    pyarrow==26.0.1 trl==1.16.0 datasets==5.2.0 tensorboard==2.21.0 lm-eval==0.4.13)
# SHADOWGRAD_VENV may point several worktrees at one venv.
SHADOWGRAD_VENV="${SHADOWGRAD_VENV:-$SHADOWGRAD_ROOT/.venv}"
SHADOWGRAD_PYTHON="$SHADOWGRAD_VENV/bin/python"
export SHADOWGRAD_ROOT SHADOWGRAD_VENV SHADOWGRAD_PYTHON
# pip installs without compiling bytecode (venv_pip_install): the venv's ~11,000 .py files took 29 s of a fresh
# clone's CPU to compile, 19 s of it before the build could start, and a process imports a small part of them. Each
# module is compiled when first imported instead, and its .pyc written then, unless PYTHONDONTWRITEBYTECODE (set on
# some machines) makes every process compile its imports again: import torch 3.3 s of CPU against 1.6 s.
unset PYTHONDONTWRITEBYTECODE

# Everything installed on return: apt-get where something is missing, beside the venv's torch when this Python can
# make a venv without Debian's python3-venv; then the Hugging Face packages.
install_missing_packages() {
  start_missing_packages "$@"
  ensure_torch_venv
  wait_missing_packages
  ensure_venv
}

# install_missing_packages, then the build (targets as build_shadowgrad), with the Hugging Face packages installing
# while it compiles: nothing in the build needs them, and pip unpacks on one core (test.sh, build.sh, train.sh).
# SHADOWGRAD_BESIDE_TORCH, if set, is a command that needs the Debian packages but not torch: it runs on the core
# pip leaves idle while the venv's torch installs (test.sh builds its fuzz targets there); its failure is ignored.
install_and_build() {
  local torch hf rc=0
  start_missing_packages
  ensure_torch_venv &
  torch=$!
  wait_missing_packages
  # Only while pip installs: with the pins already met there is no idle core to use.
  [ -z "${SHADOWGRAD_BESIDE_TORCH:-}" ] || venv_pins_met || $SHADOWGRAD_BESIDE_TORCH || true
  wait "$torch"
  ensure_venv &
  hf=$!
  build_shadowgrad "$@" || rc=$?
  wait "$hf" || { ((rc)) || rc=$?; }
  return "$rc"
}

# apt-get only when something is missing, and quietly; in the background (wait_missing_packages) when the venv does
# not need Debian's python3-venv.
SHADOWGRAD_APT_PID=""
start_missing_packages() {
  local missing=()
  for pkg in "${SHADOWGRAD_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "installing missing packages: ${missing[*]}" >&2
  if [ -x "$SHADOWGRAD_PYTHON" ] || python3 -c 'import ensurepip, venv' 2>/dev/null; then
    apt_install "${missing[@]}" &
    SHADOWGRAD_APT_PID=$!
  else
    apt_install "${missing[@]}"
  fi
}
wait_missing_packages() {
  [ -n "$SHADOWGRAD_APT_PID" ] || return 0
  local pid=$SHADOWGRAD_APT_PID
  SHADOWGRAD_APT_PID=""
  wait "$pid" || { echo "apt-get could not install the missing packages" >&2; return 1; }
}
apt_install() {
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# The venv with the pinned packages, made once; pip is skipped when the stamp says the pins are met. Torch first
# (ensure_torch_venv; LibTorch for the build comes from it), then the rest.
SHADOWGRAD_VENV_STAMP="$SHADOWGRAD_VENV/.shadowgrad-pins"
venv_pins_met() {
  local pins=("${SHADOWGRAD_TORCH_PINS[@]}" "${SHADOWGRAD_HF_PINS[@]}")
  [ -f "$SHADOWGRAD_VENV_STAMP" ] && [ "$(cat "$SHADOWGRAD_VENV_STAMP")" = "${pins[*]}" ]
}
ensure_torch_venv() {
  venv_pins_met && return 0
  echo "installing ${SHADOWGRAD_TORCH_PINS[*]} into $SHADOWGRAD_VENV" >&2
  [ -x "$SHADOWGRAD_PYTHON" ] || python3 -m venv "$SHADOWGRAD_VENV"
  venv_pip_install "${SHADOWGRAD_TORCH_PINS[@]}"
}
ensure_venv() {
  venv_pins_met && return 0
  echo "installing ${SHADOWGRAD_HF_PINS[*]} into $SHADOWGRAD_VENV" >&2
  venv_pip_install "${SHADOWGRAD_TORCH_PINS[@]}" "${SHADOWGRAD_HF_PINS[@]}"
  local pins=("${SHADOWGRAD_TORCH_PINS[@]}" "${SHADOWGRAD_HF_PINS[@]}")
  echo "${pins[*]}" > "$SHADOWGRAD_VENV_STAMP"
}
venv_pip_install() {
  "$SHADOWGRAD_PYTHON" -m pip install -q --disable-pip-version-check --no-compile "$@" 2> >(grep -v '^WARNING: Location' >&2)
}

# Configure (once) and build in Release into build/. make decides what is out of date.
build_shadowgrad() {
  local jobs
  jobs=$(nproc 2>/dev/null || echo 2)
  if [ ! -f "$SHADOWGRAD_ROOT/build/Makefile" ]; then
    # LibTorch and the Python module's interpreter both come from the venv (CMakeLists.txt, python/CMakeLists.txt).
    cmake -S "$SHADOWGRAD_ROOT" -B "$SHADOWGRAD_ROOT/build" -DCMAKE_BUILD_TYPE=Release \
      -DPython3_EXECUTABLE="$SHADOWGRAD_PYTHON" \
      -DCMAKE_PREFIX_PATH="$("$SHADOWGRAD_PYTHON" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')" \
      >/dev/null
  fi
  cmake --build "$SHADOWGRAD_ROOT/build" -j "$jobs" -- --no-print-directory "$@"
}
