#!/usr/bin/env bash
# Usage: bench/lib/gpu_packages.sh download [DIR]      here, where apt works: the .debs the build needs, into DIR
#        bench/lib/gpu_packages.sh unpack DIR ROOT     there, on the GPU machine: each .deb of DIR unpacked into ROOT
# Intent: the GPU machine (docs/gpu-check.md) has no package sources, so the Debian packages that CMake finds
# (CLI11, spdlog, fmt, Catch2, yaml-cpp, zlib, SentencePiece, gloo's headers) travel with the working tree as .debs
# and are unpacked there into a folder of their own (never into /), which bench/gpu_check.sh then hands to CMake
# (CMAKE_PREFIX_PATH, the standard include and link directories, an rpath). The list is setup.sh's, less what the
# GPU machine has or the build does not need there: every -dev package and catch2, plus each one's own runtime
# library (libfmt9, libspdlog1.10, ...), read off apt's dependencies so that a Debian upgrade changes no name here.
# DIR defaults to build-gpu-pkgs/ (ignored by git: .gitignore's build-*/), which the device run carries; download
# writes DIR/MANIFEST (package=version and size) and prints the total.
# Cost: download: about 5 s and 3.2 MB (13 .debs, Debian 12, measured 2026-12-02); unpack: under a second, 12 MB.
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }

root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# Not carried: python3-dev (the GPU machine's Python is 3.12, Debian's headers here are 3.11; its own are there, since
# Triton compiles against them), libclang-rt-14-dev (the fuzzer's), and the build tools (g++, cmake: there already).
skip_dev=(python3-dev libclang-rt-14-dev)
# Runtime libraries no build output links: gloo's (the headers only declare, docs/distributed.md) and the base system's.
skip_runtime=(libgloo0 libc6 libgcc-s1 libstdc++6)

dev_packages() {
  # shellcheck source-path=SCRIPTDIR
  source "$root_dir/scripts/lib/setup.sh"
  local p s
  for p in "${SHADOWGRAD_PACKAGES[@]}"; do
    [[ $p == *-dev || $p == catch2 ]] || continue
    for s in "${skip_dev[@]}"; do [[ $p == "$s" ]] && continue 2; done
    echo "$p"
  done
}

# The runtime library packages that DEV depends on (not other -dev packages: those are in the list already).
runtime_of() {
  local p s
  apt-cache depends --important "$1" | awk '$1 == "Depends:" && $2 !~ /^</ {print $2}' | while read -r p; do
    [[ $p == *-dev || $p == catch2 ]] && continue
    for s in "${skip_runtime[@]}"; do [[ $p == "$s" ]] && continue 2; done
    echo "$p"
  done
}

download() {
  local dir=${1:-$root_dir/build-gpu-pkgs} p version pkgs=()
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  mapfile -t dev < <(dev_packages)
  for p in "${dev[@]}"; do pkgs+=("$p"); mapfile -t -O "${#pkgs[@]}" pkgs < <(runtime_of "$p"); done
  mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)
  rm -f "$dir"/*.deb "$dir/MANIFEST"
  local wanted=()
  for p in "${pkgs[@]}"; do  # the version installed here (the one this machine's builds use), else apt's candidate
    version=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || true)
    [[ -n $version ]] && wanted+=("$p=$version") || wanted+=("$p")
  done
  # apt-get download writes into the current folder; _apt cannot write to every folder, so it may warn and go on as root.
  (cd "$dir" && apt-get download -q "${wanted[@]}" 2>&1) | { grep -v 'couldn.t be accessed by user ._apt.' || true; } >&2
  local failed=0
  for p in "${pkgs[@]}"; do
    local deb
    deb=$(find "$dir" -maxdepth 1 -name "${p}_*.deb" | head -n 1)
    if [[ -z $deb ]]; then echo "gpu_packages.sh: $p was not downloaded" >&2; failed=1; continue; fi
    printf '%s=%s\t%s\n' "$p" "$(dpkg-deb -f "$deb" Version)" "$(stat -c %s "$deb")" >>"$dir/MANIFEST"
  done
  ((failed == 0)) || exit 1
  echo "gpu_packages.sh: ${#pkgs[@]} packages, $(du -cb "$dir"/*.deb | tail -n 1 | cut -f1) bytes of .debs in $dir:"
  echo "  ${pkgs[*]}"
}

# dpkg-deb where there is one; else ar and tar (a .deb is an ar archive holding data.tar.{xz,zst,gz}).
extract_deb() {
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$2"
    return
  fi
  local member
  member=$(ar t "$1" | grep '^data\.tar')
  case $member in
  *.xz) ar p "$1" "$member" | tar -xJ -C "$2" ;;
  *.zst) ar p "$1" "$member" | zstd -dc | tar -x -C "$2" ;;
  *.gz) ar p "$1" "$member" | tar -xz -C "$2" ;;
  *) ar p "$1" "$member" | tar -x -C "$2" ;;
  esac
}

unpack() {
  local dir=$1 root=$2 deb link target n=0
  [[ -d $dir ]] || { echo "gpu_packages.sh: no folder $dir (run '$0 download' here first)" >&2; exit 1; }
  mkdir -p "$root"
  root=$(cd "$root" && pwd)
  for deb in "$dir"/*.deb; do
    [[ -e $deb ]] || { echo "gpu_packages.sh: no .deb in $dir" >&2; exit 1; }
    extract_deb "$deb" "$root"
    n=$((n + 1))
  done
  # Absolute links (zlib1g-dev's libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13) point into the unpacked tree.
  while IFS= read -r link; do
    target=$(readlink "$link")
    [[ -e $root$target ]] && ln -sfn "$root$target" "$link"
  done < <(find "$root" -type l -lname '/*')
  echo "gpu_packages.sh: $n packages unpacked into $root ($(du -sh "$root" | cut -f1))"
}

case ${1:-} in
download) download "${2:-}" ;;
unpack) [[ $# -eq 3 ]] || { echo "usage: $0 unpack DIR ROOT" >&2; exit 2; }; unpack "$2" "$3" ;;
*) echo "usage: $0 download [DIR] | unpack DIR ROOT (see --help)" >&2; exit 2 ;;
esac
