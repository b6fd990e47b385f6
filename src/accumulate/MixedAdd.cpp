#include "accumulate/MixedAdd.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "accumulate/SquaredNorm.h"
#include "accumulate/StochasticRounding.h"

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

// The bf16 case, written branch-free on the bits so that the compiler vectorises it (c10::BFloat16's conversion
// does not vectorise, and was 3x slower than an fp32 add_), rounded by bf16_round_nearest.
__attribute__((target_clones("avx512f", "avx2", "default"))) void add_float_into_bf16_bits(uint16_t* d,
                                                                                           const float* s,
                                                                                           int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t widened = static_cast<uint32_t>(d[i]) << 16;
    float sum;
    std::memcpy(&sum, &widened, sizeof sum);
    sum += s[i];
    d[i] = bf16_round_nearest(sum);
  }
}

// Runs body(begin, len, block) over the fixed norm blocks of [0, n) (SquaredNorm.h), in parallel; when `sq_norm`
// is set, also the sum of squares of `src` block by block, each block read again right after the add while it is
// still in cache: the fold and the gradient noise scale's measurement cost one pass over memory.
template <typename Body, typename Src>
void blocked(int64_t n, const Src* src, double* sq_norm, const Body& body) {
  std::vector<float> parts(sq_norm ? norm_blocks(n) : 0);
  at::parallel_for(0, norm_blocks(n), 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t begin = b * kNormBlock, len = std::min(kNormBlock, n - begin);
      body(begin, len);
      if (!sq_norm) continue;
      if constexpr (std::is_same_v<Src, float>)
        parts[b] = block_sq_sum(src + begin, len);
      else
        parts[b] = block_sq_sum_bf16(src + begin, len);
    }
  });
  if (sq_norm) *sq_norm = sum_blocks(parts);
}

// fp32 into fp32 (fp32 compute, or an fp32 .grad into an fp32 shadow): what add_ computes, one rounding per element.
__attribute__((target_clones("avx512f", "avx2", "default"))) void add_float_into_float(float* d, const float* s,
                                                                                       int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] += s[i];
}

void add_float_into(at::BFloat16* d, const float* s, int64_t n, double* sq_norm) {
  static_assert(sizeof(at::BFloat16) == sizeof(uint16_t));
  blocked(n, s, sq_norm, [&](int64_t begin, int64_t len) {
    add_float_into_bf16_bits(reinterpret_cast<uint16_t*>(d) + begin, s + begin, len);
  });
}

// The first fold of a window into a bf16 shadow (ShadowState::stale): d = bf16(s), as copy_ rounds.
__attribute__((target_clones("avx512f", "avx2", "default"))) void copy_float_into_bf16_bits(uint16_t* d,
                                                                                            const float* s,
                                                                                            int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = bf16_round_nearest(s[i]);
}

// The fold of the default setup (bf16 compute, fp32 shadow): d[i] += float(s[i]). Widening bf16 is exact, so this
// is add_'s result bit for bit, without add_'s fp32 copy of the gradient (a third more memory traffic).
__attribute__((target_clones("avx512f", "avx2", "default"))) void add_bf16_bits_into_float(float* d,
                                                                                           const uint16_t* s,
                                                                                           int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] += bf16_to_float(s[i]);
}

void add_bf16_into_float(float* d, const at::BFloat16* s, int64_t n, double* sq_norm) {
  const auto* bits = reinterpret_cast<const uint16_t*>(s);
  blocked(n, bits, sq_norm, [&](int64_t begin, int64_t len) { add_bf16_bits_into_float(d + begin, bits + begin, len); });
}

bool direct_float_to_bf16(const at::Tensor& dst, const at::Tensor& src) {
  return dst.scalar_type() == at::kBFloat16 && src.scalar_type() == at::kFloat && dst.device().is_cpu() &&
         src.device().is_cpu() && dst.is_contiguous() && src.is_contiguous() && src.sizes() == dst.sizes() &&
         !src.is_neg() && !src.is_conj();
}

} // namespace

void mixed_copy_(at::Tensor& dst, const at::Tensor& src, double* src_sq_norm) {
  if (!direct_float_to_bf16(dst, src)) {
    dst.copy_(src);
    if (src_sq_norm) *src_sq_norm = squared_norm(src);
    return;
  }
  auto* d = reinterpret_cast<uint16_t*>(dst.data_ptr<at::BFloat16>());
  const float* s = src.data_ptr<float>();
  blocked(dst.numel(), s, src_sq_norm,
          [&](int64_t begin, int64_t len) { copy_float_into_bf16_bits(d + begin, s + begin, len); });
}

void mixed_add_(at::Tensor& dst, const at::Tensor& src, double* src_sq_norm) {
  const int64_t n = dst.numel();
  // The fused loops below measure while adding; every other path measures in a pass of its own.
  auto measure_apart = [&] {
    if (src_sq_norm) *src_sq_norm = squared_norm(src);
  };
  if (dst.scalar_type() == at::kFloat && src.scalar_type() == at::kFloat && dst.device().is_cpu() &&
      src.device().is_cpu() && dst.is_contiguous() && src.is_contiguous() && src.sizes() == dst.sizes() &&
      !src.is_neg() && src_sq_norm) {
    float* d = dst.data_ptr<float>();
    const float* f = src.data_ptr<float>();
    return blocked(n, f, src_sq_norm, [&](int64_t begin, int64_t len) { add_float_into_float(d + begin, f + begin, len); });
  }
  if (dst.scalar_type() == src.scalar_type() || !dst.device().is_cpu() || !src.device().is_cpu() ||
      !dst.is_contiguous() || src.sizes() != dst.sizes()) {
    dst.add_(src);
    return measure_apart();
  }
  if (src.scalar_type() == at::kFloat && src.is_contiguous() && !src.is_neg() && !src.is_conj()) {
    if (dst.scalar_type() == at::kBFloat16)
      return add_float_into(dst.data_ptr<at::BFloat16>(), src.data_ptr<float>(), n, src_sq_norm);
    if (dst.scalar_type() == at::kHalf) {
      add_float_into(dst.data_ptr<at::Half>(), src.data_ptr<float>(), n);
      return measure_apart();
    }
  }
  if (src.scalar_type() == at::kBFloat16 && dst.scalar_type() == at::kFloat && src.is_contiguous() && !src.is_neg())
    return add_bf16_into_float(dst.data_ptr<float>(), src.data_ptr<at::BFloat16>(), n, src_sq_norm);
  measure_apart();
  at::Tensor d = dst.view({-1});
  at::Tensor s = src.reshape({-1});
  // Element-wise, so each slice computes exactly what the whole add would (fp32 math, rounded once into dst).
  for (int64_t start = 0; start < n; start += kSlice) {
    const int64_t len = std::min(kSlice, n - start);
    d.narrow(0, start, len).add_(s.narrow(0, start, len));
  }
}

} // namespace shadowgrad::accumulate
