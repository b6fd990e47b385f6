# Shared by train.sh, test.sh and build.sh: install missing Debian packages, then configure and build.
# Sourced, not run. Cost: a first install downloads ~1 GB of packages; a first build takes ~5 min on 2 cores.

SHADOWGRAD_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SHADOWGRAD_PACKAGES=(libtorch-dev libgloo-dev libopenblas0-pthread libcli11-dev libspdlog-dev libfmt-dev catch2
                     libyaml-cpp-dev zlib1g-dev cmake g++ make gnuplot-nox clang-14 libclang-rt-14-dev
                     python3-dev pybind11-dev python3-torch python3-torchvision libsentencepiece-dev
                     sentencepiece iproute2)  # iproute2: `ip netns` for tests/netns_test.sh

# apt-get only when something is missing, and quietly.
install_missing_packages() {
  local missing=()
  for pkg in "${SHADOWGRAD_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing missing packages: ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Configure (once) and build in Release into build/. make decides what is out of date.
build_shadowgrad() {
  local jobs
  jobs=$(nproc 2>/dev/null || echo 2)
  if [ ! -f "$SHADOWGRAD_ROOT/build/Makefile" ]; then
    # The Python module must be built for the interpreter that imports Debian's torch (python/CMakeLists.txt).
    cmake -S "$SHADOWGRAD_ROOT" -B "$SHADOWGRAD_ROOT/build" -DCMAKE_BUILD_TYPE=Release \
      -DPython3_EXECUTABLE=/usr/bin/python3 >/dev/null
  fi
  cmake --build "$SHADOWGRAD_ROOT/build" -j "$jobs" -- --no-print-directory "$@"
}
