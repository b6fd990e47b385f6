#pragma once
// The relative errors the numerical tests compare with, in one place: the tests are compiled in batches (CMake's
// unity build), where two files' private copies of one helper would collide.
#include <algorithm>
#include <vector>

#include <ATen/ATen.h>

namespace relative_error {

// max |a - b| / max |b|, in at least fp32 (bf16 inputs are widened first): a relative error that tiny entries
// cannot inflate.
inline double rel_diff(const at::Tensor& a, const at::Tensor& b) {
  const auto dtype = at::promote_types(at::promote_types(a.scalar_type(), b.scalar_type()), at::kFloat);
  const at::Tensor wa = a.to(dtype), wb = b.to(dtype);
  return (wa - wb).abs().max().item<double>() / std::max(wb.abs().max().item<double>(), 1e-30);
}

// The worst rel_diff over two lists of tensors, pairwise (every parameter of two runs, say).
inline double worst_rel_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, rel_diff(a[i], b[i]));
  return worst;
}

// ||a - b|| / ||b||: the error of a whole tensor, as a norm.
inline double rel_norm_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).norm().item<double>() / std::max(b.norm().item<double>(), 1e-30);
}

} // namespace relative_error
