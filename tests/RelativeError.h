#pragma once
// The relative errors the numerical tests compare with, in one place: the tests are compiled in batches (CMake's
// unity build), where two files' private copies of one helper would collide.
#include <algorithm>

#include <ATen/ATen.h>

namespace relative_error {

// max |a - b| / max |b|, in at least fp32 (bf16 inputs are widened first): a relative error that tiny entries
// cannot inflate.
inline double rel_diff(const at::Tensor& a, const at::Tensor& b) {
  const auto dtype = at::promote_types(at::promote_types(a.scalar_type(), b.scalar_type()), at::kFloat);
  const at::Tensor wa = a.to(dtype), wb = b.to(dtype);
  return (wa - wb).abs().max().item<double>() / std::max(wb.abs().max().item<double>(), 1e-30);
}

// ||a - b|| / ||b||: the error of a whole tensor, as a norm.
inline double rel_norm_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).norm().item<double>() / std::max(b.norm().item<double>(), 1e-30);
}

} // namespace relative_error
