#include "train/Runtime.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include <sched.h>

#include <ATen/Parallel.h>
#include <ATen/Context.h>
#include <fmt/format.h>

#include "accumulate/CudaFold.h"
#include "accumulate/CudaLibrary.h"
#include "memory/TrackingAllocator.h"
#include "util/Errors.h"

namespace shadowgrad::train {

namespace {

// A positive count, or nothing ("", "abc", "0", "-2"). OpenMP's lists ("4,2": per nesting level) give their first.
std::optional<int> positive_count(const char* text) {
  if (!text || !*text) return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(text, &end, 10);
  if (end == text || (*end != '\0' && *end != ',') || n <= 0 || n > 1 << 20) return std::nullopt;
  return static_cast<int>(n);
}

int affinity_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1u, std::thread::hardware_concurrency());
}

} // namespace

ThreadInputs thread_inputs(int64_t requested) {
  ThreadInputs in;
  in.requested = requested;
  in.affinity_cores = affinity_cores();
  in.local_world_size = positive_count(std::getenv("LOCAL_WORLD_SIZE")).value_or(1);
  in.omp_num_threads = positive_count(std::getenv("OMP_NUM_THREADS"));
  return in;
}

int choose_threads(const ThreadInputs& in) {
  if (in.requested > 0) return static_cast<int>(in.requested);
  if (in.omp_num_threads) return *in.omp_num_threads;
  return std::max(1, in.affinity_cores / std::max(1, in.local_world_size));
}

int configure_threads(int64_t requested) {
  at::set_num_threads(choose_threads(thread_inputs(requested)));
  return at::get_num_threads();
}

void configure_allocator_cache(int64_t mib) {
  if (memory::TrackingAllocator::installed()) memory::TrackingAllocator::get().set_cache_limit(mib * 1024 * 1024);
}

c10::Device resolve_device(config::Hardware hardware) {
  if (hardware == config::Hardware::cuda) {
    // The CUDA part is loaded here, and only here and for CUDA tensors: a CPU run maps no CUDA library.
    if (!accumulate::cuda_library())
      throw InputError("hardware=cuda, but this build cannot load its CUDA part (" + accumulate::cuda_library_error() +
                       "); build against a CUDA torch wheel, or use hardware=cpu");
    if (!at::hasCUDA())
      throw InputError("hardware=cuda, but no CUDA device is visible (no GPU, no driver, or CUDA_VISIBLE_DEVICES "
                       "hides them); use hardware=cpu");
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
