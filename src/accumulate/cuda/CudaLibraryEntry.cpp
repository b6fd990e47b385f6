// libshadowgrad_cuda.so's one exported symbol: the table of CudaLibrary.h. Everything here links libtorch_cuda,
// c10_cuda and NCCL, which the CPU binaries never load (cmake/Engine.cmake builds this file only against a CUDA
// LibTorch; the fold kernel joins it when nvcc is found, SHADOWGRAD_WITH_CUDA_FOLD).
#include <cstring>

#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "accumulate/CudaLibrary.h"
#include "accumulate/cuda/FoldLaunch.h"

namespace shadowgrad::accumulate {
namespace {

c10d::Backend* make_nccl_backend(c10d::Store* store, int rank, int world, std::chrono::milliseconds timeout) {
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  auto shared_store = c10::intrusive_ptr<c10d::Store>::reclaim_copy(store);
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(shared_store, rank, world, opts).release();
}

bool gpu_properties(int index, GpuProperties* out) {
  if (index < 0 || index >= static_cast<int>(c10::cuda::device_count())) return false;
  const auto* props = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(index));
  out->major = props->major;
  out->minor = props->minor;
  std::strncpy(out->name, props->name, sizeof(out->name) - 1);
  return true;
}

const CudaLibrary kLibrary = [] {
  CudaLibrary l;
#ifdef SHADOWGRAD_WITH_CUDA_FOLD
  l.launch_fold = &cuda::launch_fold;
#endif
  l.make_nccl_backend = &make_nccl_backend;
  l.gpu_properties = &gpu_properties;
  return l;
}();

} // namespace
} // namespace shadowgrad::accumulate

extern "C" __attribute__((visibility("default"))) const shadowgrad::accumulate::CudaLibrary* shadowgrad_cuda_library() {
  return &shadowgrad::accumulate::kLibrary;
}
