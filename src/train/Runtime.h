#pragma once
// Process-level setup the trainer needs before the first step: threads, the allocator cache, the device.
#include <string>

#include <c10/core/Device.h>

#include "config/ConfigEnums.h"

namespace shadowgrad::train {

// Sets LibTorch's intra-op threads: `requested`, or every core when 0. Returns the count in use.
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
