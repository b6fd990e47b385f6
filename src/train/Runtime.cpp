#include "train/Runtime.h"

#include <thread>

#include <ATen/Parallel.h>
#include <ATen/Context.h>
#include <fmt/format.h>

#include "accumulate/CudaFold.h"
#include "memory/TrackingAllocator.h"
#include "util/Errors.h"

namespace shadowgrad::train {

int configure_threads(int64_t requested) {
  // LibTorch here defaults to one thread; every core is what a user expects from num_threads=0.
  int n = requested > 0 ? static_cast<int>(requested) : static_cast<int>(std::thread::hardware_concurrency());
  at::set_num_threads(std::max(1, n));
  return at::get_num_threads();
}

void configure_allocator_cache(int64_t mib) {
  if (memory::TrackingAllocator::installed()) memory::TrackingAllocator::get().set_cache_limit(mib * 1024 * 1024);
}

c10::Device resolve_device(config::Hardware hardware) {
  if (hardware == config::Hardware::cuda) {
    if (!at::hasCUDA())
#ifdef SHADOWGRAD_WITH_CUDA
      throw InputError("hardware=cuda, but no CUDA device is visible (no GPU, no driver, or CUDA_VISIBLE_DEVICES "
                       "hides them); use hardware=cpu");
#else
      throw InputError("hardware=cuda, but this build's LibTorch has no CUDA; build against a CUDA torch wheel, or "
                       "use hardware=cpu");
#endif
    return c10::Device(c10::kCUDA, 0);
  }
  return c10::Device(c10::kCPU);
}

void require_device_support(config::GradRounding rounding, config::FloatDtype adam_state_dtype, config::Hardware hardware) {
  const bool cuda = hardware == config::Hardware::cuda;
  if (adam_state_dtype == config::FloatDtype::bfloat16 && cuda)
    throw InputError("adam_state_dtype=bfloat16 needs hardware=cpu: the fused AdamW with bf16 moments is a CPU kernel; "
                     "use adam_state_dtype=float32 on CUDA (torch's AdamW steps there)");
  if (rounding == config::GradRounding::stochastic && cuda && !accumulate::cuda_fold_built())
    throw InputError("grad_accum_rounding=stochastic with hardware=cuda needs the CUDA fold kernel, which this build "
                     "lacks (no nvcc when it was configured); rebuild with nvcc on PATH, or use "
                     "grad_accum_rounding=nearest");
}

} // namespace shadowgrad::train
