#pragma once
// The CUDA part of shadowgrad, loaded at run time. The CPU binaries (trainer, tests, tools) link libtorch_cpu and
// libc10 alone, so a CPU run maps none of libtorch_cuda, cuBLAS, cuDNN or NCCL (a CUDA wheel's `libtorch` would
// bring them all, ~400 MiB of RSS per process: docs/cuda.md). What needs them lives in libshadowgrad_cuda.so (built
// with a CUDA LibTorch, cmake/Engine.cmake): the one-pass fold kernel (with nvcc), NCCL's process group and the GPU's
// properties. Loading it loads libtorch_cuda, whose static initialisers register CUDA with ATen: at::hasCUDA(),
// CUDA tensors and c10's CUDA allocator work only after cuda_library() has returned non-null.
//
//   if (const CudaLibrary* cuda = cuda_library()) cuda->launch_fold(f, stream);  // first call: dlopen
//   else throw std::runtime_error(cuda_library_error());
#include <chrono>
#include <string>

namespace c10d {
class Store;
class Backend;
} // namespace c10d

namespace shadowgrad::accumulate {

namespace cuda {
struct FoldLaunch;
} // namespace cuda

// Bumped whenever the table changes: a library of another version is refused.
inline constexpr int kCudaLibraryAbi = 1;
inline constexpr const char* kCudaLibraryName = "libshadowgrad_cuda.so";
inline constexpr const char* kCudaLibrarySymbol = "shadowgrad_cuda_library";

struct GpuProperties {
  int major = 0, minor = 0;
  char name[256] = {};
};

// The library's entry points. A null entry is a part the library was built without.
struct CudaLibrary {
  int abi = kCudaLibraryAbi;
  // The fold kernel (cuda/FoldLaunch.h); null when nvcc was missing at build time.
  void (*launch_fold)(const cuda::FoldLaunch& f, void* stream) = nullptr;
  // A c10d::ProcessGroupNCCL on `store` (which it shares: a reference is taken), released from its intrusive_ptr:
  // take it back with c10::intrusive_ptr<c10d::Backend>::reclaim. Throws c10::Error as its constructor does.
  c10d::Backend* (*make_nccl_backend)(c10d::Store* store, int rank, int world,
                                      std::chrono::milliseconds timeout) = nullptr;
  // GPU `index`'s compute capability and name; false when there is no such GPU.
  bool (*gpu_properties)(int index, GpuProperties* out) = nullptr;
};

// Loads libshadowgrad_cuda.so once (the first call; later calls return the same): from the directory of the binary or
// module that holds this code, then its ../lib, then the loader's search path. Null when it is not there (a CPU
// LibTorch, or a build without it) or fails to load; cuda_library_error() then says why.
const CudaLibrary* cuda_library();
std::string cuda_library_error();

} // namespace shadowgrad::accumulate
