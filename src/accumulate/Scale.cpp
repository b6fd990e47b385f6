#include "accumulate/Scale.h"

#include <cstdint>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "accumulate/StochasticRounding.h"

namespace shadowgrad::accumulate {

namespace {

__attribute__((target_clones("avx512f", "avx2", "default"))) void scale_bf16_bits(uint16_t* x, int64_t n, float f) {
  for (int64_t i = 0; i < n; ++i) x[i] = bf16_round_nearest(bf16_to_float(x[i]) * f);
}

} // namespace

void scale_tensor_(at::Tensor& t, double factor) {
  if (t.scalar_type() != at::kBFloat16 || !t.device().is_cpu() || t.layout() != c10::kStrided ||
      !t.is_contiguous() || t.is_neg()) {
    t.mul_(factor);
    return;
  }
  auto* x = reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>());
  const float f = static_cast<float>(factor);
  at::parallel_for(0, t.numel(), int64_t{1} << 16,
                   [&](int64_t begin, int64_t end) { scale_bf16_bits(x + begin, end - begin, f); });
  t.unsafeGetTensorImpl()->bump_version();  // written through a raw pointer; mul_ would bump it
}

} // namespace shadowgrad::accumulate
