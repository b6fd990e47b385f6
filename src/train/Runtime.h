#pragma once
// Process-level setup the trainer needs before the first step: threads, the allocator cache, the device.
#include <cstdint>
#include <optional>
#include <string>

#include <c10/core/Device.h>

#include "config/ConfigEnums.h"

namespace shadowgrad::train {

// What decides the intra-op thread count, read from the process (thread_inputs) or given by a test.
struct ThreadInputs {
  int64_t requested = 0;               // the num_threads key: > 0 is taken as it is
  int affinity_cores = 1;              // the CPUs this process may run on (sched_getaffinity, so taskset counts)
  int local_world_size = 1;            // trainer processes on this host, sharing those CPUs (LOCAL_WORLD_SIZE)
  std::optional<int> omp_num_threads;  // OMP_NUM_THREADS, when the environment sets it to a count
};
ThreadInputs thread_inputs(int64_t requested);
// num_threads when > 0; else an explicit OMP_NUM_THREADS (torchrun sets 1 for several processes); else the
// process's CPUs divided among the processes of this host (at least 1). So num_threads=0 never gives two processes
// more threads than cores, where a parallel region waits for a descheduled thread (docs/performance.md).
int choose_threads(const ThreadInputs& in);

// Sets LibTorch's intra-op threads to choose_threads(thread_inputs(requested)). Returns the count in use.
int configure_threads(int64_t requested);

// Caps the tracking CPU allocator's block cache (a no-op when the allocator is not installed).
void configure_allocator_cache(int64_t mib);

// Throws InputError for cuda when this LibTorch has no CUDA or sees no GPU.
c10::Device resolve_device(config::Hardware hardware);
// Throws InputError (exit 2) at start-up for what cannot run on `device` in this build, instead of failing at the
// first step: stochastic rounding of CUDA shadows needs the CUDA fold kernel (nvcc at build time); bf16 Adam moments
// are a CPU kernel's (src/optim).
void require_device_support(config::GradRounding rounding, config::FloatDtype adam_state_dtype, config::Hardware hardware);

} // namespace shadowgrad::train
