#include "accumulate/MixedAdd.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

namespace shadowgrad::accumulate {

namespace {

// 1 Mi elements: fp32 temporaries of 4 MiB each, and enough work per slice for the intra-op threads.
constexpr int64_t kSlice = int64_t{1} << 20;

// d[i] = T(float(d[i]) + s[i]): the fp32 sum rounded once to nearest-even, as add_ computes it, with no temporary.
template <typename T>
void add_float_into(T* d, const float* s, int64_t n) {
  at::parallel_for(0, n, int64_t{1} << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) d[i] = T(static_cast<float>(d[i]) + s[i]);
  });
}

} // namespace

void mixed_add_(at::Tensor& dst, const at::Tensor& src) {
  const int64_t n = dst.numel();
  if (dst.scalar_type() == src.scalar_type() || !dst.device().is_cpu() || !src.device().is_cpu() ||
      !dst.is_contiguous() || src.sizes() != dst.sizes()) {
    dst.add_(src);
    return;
  }
  if (src.scalar_type() == at::kFloat && src.is_contiguous() && !src.is_neg() && !src.is_conj()) {
    if (dst.scalar_type() == at::kBFloat16)
      return add_float_into(dst.data_ptr<at::BFloat16>(), src.data_ptr<float>(), n);
    if (dst.scalar_type() == at::kHalf) return add_float_into(dst.data_ptr<at::Half>(), src.data_ptr<float>(), n);
  }
  at::Tensor d = dst.view({-1});
  at::Tensor s = src.reshape({-1});
  // Element-wise, so each slice computes exactly what the whole add would (fp32 math, rounded once into dst).
  for (int64_t start = 0; start < n; start += kSlice) {
    const int64_t len = std::min(kSlice, n - start);
    d.narrow(0, start, len).add_(s.narrow(0, start, len));
  }
}

} // namespace shadowgrad::accumulate
