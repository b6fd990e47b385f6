#pragma once
// Clipping's scaling pass over a bf16 shadow, with the factor kept in fp32.
//
//   scale_tensor_(shadow, max_norm / norm);   // x = round(float(x) * float(factor))
//
// LibTorch 1.13's mul_ of a bf16 tensor by a scalar rounds the scalar to bf16 first, so a tree clipped with it
// missed max_norm by up to 0.4 % (bf16 keeps 8 significant bits). Other dtypes, devices and non-contiguous tensors
// take mul_.
#include <ATen/core/Tensor.h>

namespace shadowgrad::accumulate {

// t *= factor in place. A contiguous CPU bf16 t: float(x) * float(factor), rounded once to nearest even;
// otherwise t.mul_(factor).
void scale_tensor_(at::Tensor& t, double factor);

} // namespace shadowgrad::accumulate
