#pragma once
// The LibTorch dtype of a dtype config value (grad_dtype, dtype, weight_dtype, adam_state_dtype).
#include <c10/core/ScalarType.h>

#include "config/ConfigEnums.h"

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

} // namespace shadowgrad::config
