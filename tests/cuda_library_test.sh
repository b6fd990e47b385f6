#!/usr/bin/env bash
# Intent: against a CUDA torch wheel, the CUDA part is a library of its own, loaded at run time (docs/cuda.md):
#   - build/trainer links none of libtorch_cuda, c10_cuda, NCCL, cuBLAS, cuDNN; libshadowgrad_cuda.so links
#     libtorch_cuda and NCCL, and calls ProcessGroupNCCL's constructor;
#   - a tiny CPU run loads none of them (the dynamic loader's own list, LD_DEBUG=files, re-exec included). The
#     wheel's libtorch_cpu needs libcudart and libcupti (its profiler's): those two are allowed;
#   - a hardware=cuda run loads libshadowgrad_cuda.so and libtorch_cuda (without a GPU it then exits 2).
# Usage: tests/cuda_library_test.sh TRAINER CUDA_LIBRARY      Cost: a few seconds.
set -euo pipefail
trainer=$1 library=$2
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cuda_libs='libtorch_cuda|libc10_cuda|libnccl|libcublas|libcudnn|libcusparse|libcufft|libcurand|libnvrtc|libnvshmem|libshadowgrad_cuda'
fail() { echo "FAIL: $*"; exit 1; }

# (Whole outputs into variables first: grep -q stops reading early, which pipefail would count as a failure.)
trainer_deps=$(ldd "$trainer") library_deps=$(ldd "$library") library_symbols=$(nm -DC "$library")
if linked=$(grep -E "$cuda_libs" <<<"$trainer_deps"); then fail "the trainer links CUDA libraries:"$'\n'"$linked"; fi
grep -q libtorch_cuda.so <<<"$library_deps" || fail "$library does not link libtorch_cuda"
grep -q libnccl <<<"$library_deps" || fail "$library does not link NCCL"
grep -q 'c10d::ProcessGroupNCCL::ProcessGroupNCCL' <<<"$library_symbols" || fail "$library does not call ProcessGroupNCCL"
echo "the trainer links no CUDA library; $(basename "$library") links libtorch_cuda and NCCL"

# Every object the loader maps, as it maps it (LD_DEBUG_OUTPUT appends one file per process id).
loaded() {
  local name=$1
  shift
  local rc=0
  LD_DEBUG=files LD_DEBUG_OUTPUT="$tmp/$name" "$trainer" "$root/configs/tiny.yml" "base_output_directory=$tmp/runs" \
    enable_checkpointing=false "$@" >"$tmp/$name.out" 2>&1 || rc=$?
  echo "$rc" >"$tmp/$name.rc"
  cat "$tmp/$name".[0-9]* | sed -n 's/.*file=\([^ ]*\) \[0\];  \(generating link map\|dynamically loaded\).*/\1/p' |
    sort -u >"$tmp/$name.files"
  grep -q . "$tmp/$name.files" || fail "LD_DEBUG=files listed nothing for the $name run"
}

loaded cpu steps=1
[[ $(cat "$tmp/cpu.rc") == 0 ]] || { cat "$tmp/cpu.out"; fail "the CPU run exited $(cat "$tmp/cpu.rc")"; }
if mapped=$(grep -E "$cuda_libs" "$tmp/cpu.files"); then fail "a CPU run loaded:"$'\n'"$mapped"; fi
echo "a CPU run loads $(wc -l <"$tmp/cpu.files") objects, none of them CUDA's beyond $(grep -oE 'libcudart|libcupti' "$tmp/cpu.files" | sort -u | tr '\n' ' ')"

loaded cuda steps=1 hardware=cuda
grep -q libshadowgrad_cuda "$tmp/cuda.files" || { cat "$tmp/cuda.out"; fail "hardware=cuda did not load libshadowgrad_cuda.so"; }
grep -q libtorch_cuda "$tmp/cuda.files" || fail "hardware=cuda did not load libtorch_cuda"
echo "hardware=cuda loads libshadowgrad_cuda.so and libtorch_cuda (exit $(cat "$tmp/cuda.rc"))"
echo "PASS"
