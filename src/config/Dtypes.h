#pragma once
// The LibTorch dtype of a dtype config value (grad_dtype, dtype, weight_dtype, adam_state_dtype).
#include <c10/core/ScalarType.h>

#include "config/ConfigEnums.h"
#include "util/NativeBf16.h"

namespace shadowgrad::config {

inline c10::ScalarType scalar_type(FloatDtype d) { return d == FloatDtype::bfloat16 ? c10::kBFloat16 : c10::kFloat; }

inline c10::ScalarType scalar_type(GradDtype d) {
  switch (d) {
    case GradDtype::bfloat16: return c10::kBFloat16;
    case GradDtype::float16: return c10::kHalf;
    case GradDtype::float32: break;
  }
  return c10::kFloat;
}

// dtype=auto's rule: bfloat16 where `hardware` computes it natively (util/NativeBf16.h), float32 elsewhere. The
// trainer resolves auto once, before the model exists (train/ComputeDtype.h: it also keeps a resumed run's dtype).
inline FloatDtype resolve_compute_dtype(ComputeDtype d, Hardware hardware) {
  switch (d) {
    case ComputeDtype::float32: return FloatDtype::float32;
    case ComputeDtype::bfloat16: return FloatDtype::bfloat16;
    case ComputeDtype::auto_: break;
  }
  const bool native =
      hardware == Hardware::cuda ? util::cuda_bf16_support(0).native : util::cpu_bf16_support().native;
  return native ? FloatDtype::bfloat16 : FloatDtype::float32;
}

inline ComputeDtype as_compute_dtype(FloatDtype d) {
  return d == FloatDtype::bfloat16 ? ComputeDtype::bfloat16 : ComputeDtype::float32;
}

} // namespace shadowgrad::config
