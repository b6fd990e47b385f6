#include "accumulate/SquaredNorm.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "accumulate/StochasticRounding.h"

namespace shadowgrad::accumulate {

namespace {

constexpr int kLanes = 16;

float reduce_lanes(const float* acc) {
  // Pairwise, in a fixed order.
  float l8[8];
  for (int k = 0; k < 8; ++k) l8[k] = acc[k] + acc[k + 8];
  float l4[4];
  for (int k = 0; k < 4; ++k) l4[k] = l8[k] + l8[k + 4];
  return (l4[0] + l4[2]) + (l4[1] + l4[3]);
}

} // namespace

__attribute__((target_clones("avx512f", "avx2", "default"))) float block_sq_sum(const float* x, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) acc[k] += x[i + k] * x[i + k];
  for (int k = 0; i + k < n; ++k) acc[k] += x[i + k] * x[i + k];
  return reduce_lanes(acc);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) float block_sq_sum_bf16(const uint16_t* bits,
                                                                                     int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const float v = bf16_to_float(bits[i + k]);
      acc[k] += v * v;
    }
  for (int k = 0; i + k < n; ++k) {
    const float v = bf16_to_float(bits[i + k]);
    acc[k] += v * v;
  }
  return reduce_lanes(acc);
}

double sum_blocks(const std::vector<float>& parts) {
  double total = 0;
  for (float p : parts) total += double(p);
  return total;
}

double squared_norm(const at::Tensor& t) {
  const auto type = t.scalar_type();
  if (!t.device().is_cpu() || (type != at::kFloat && type != at::kBFloat16 && type != at::kHalf) || t.is_neg()) {
    const double norm = at::linalg_vector_norm(t, 2, c10::nullopt, false, at::kFloat).item<double>();
    return norm * norm;
  }
  at::Tensor c = t.contiguous();
  if (type == at::kHalf) c = c.to(at::kFloat);  // rare (fp16 compute); exact widening
  const int64_t n = c.numel();
  std::vector<float> parts(norm_blocks(n));
  at::parallel_for(0, int64_t(parts.size()), 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t begin = b * kNormBlock, len = std::min(kNormBlock, n - begin);
      parts[b] = c.scalar_type() == at::kFloat
                     ? block_sq_sum(c.data_ptr<float>() + begin, len)
                     : block_sq_sum_bf16(reinterpret_cast<const uint16_t*>(c.data_ptr<at::BFloat16>()) + begin, len);
    }
  });
  return sum_blocks(parts);
}

} // namespace shadowgrad::accumulate
