#include "kernels/CrossEntropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <ATen/Parallel.h>

#include "accumulate/StochasticRounding.h"
#include "kernels/Convert.h"
#include "kernels/FastExp.h"

namespace shadowgrad::kernels {

namespace {

// Floats ordered as signed integers of the same width (negative values' magnitude bits flipped), so that the row's
// maximum is an integer max reduction, which vectorises without fast-math. A NaN orders above +Inf (or below
// -Inf when its sign bit is set); either way its exponential makes the sum, and so the loss, NaN.
inline int16_t order_key(uint16_t b) { return int16_t(b ^ (uint16_t(int16_t(b) >> 15) & 0x7FFFu)); }
inline int32_t order_key(float f) {
  const uint32_t b = accumulate::float_bits(f);
  return int32_t(b ^ (uint32_t(int32_t(b) >> 31) & 0x7FFFFFFFu));
}
inline float from_key(int16_t k) { return accumulate::bf16_to_float(order_key(uint16_t(k))); }
inline float from_key(int32_t k) {
  return accumulate::float_from_bits(uint32_t(k) ^ (uint32_t(k >> 31) & 0x7FFFFFFFu));
}

// One row: returns its loss. `scratch` (vocab floats, cache-resident) keeps each exp(l - max), so every exponential
// is taken once. The sum is vectorised (omp simd): its order is fixed per build and CPU, so every run gives the same
// bits, whatever the thread count.
template <class T>
__attribute__((always_inline)) inline float row_cross_entropy(T* __restrict row, float* __restrict scratch,
                                                            int64_t vocab, int64_t target) {
  auto best = order_key(row[0]);
  for (int64_t i = 1; i < vocab; ++i) {
    const auto k = order_key(row[i]);
    best = k > best ? k : best;
  }
  const float max = from_key(best);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < vocab; ++i) {
    scratch[i] = fast_exp(load(row[i]) - max);
    sum += scratch[i];
  }
  const float inv_sum = 1.0f / sum, target_logit = load(row[target]);
  for (int64_t i = 0; i < vocab; ++i) store(row[i], scratch[i] * inv_sum);  // softmax, rounded once
  store(row[target], scratch[target] * inv_sum - 1.0f);
  return max + std::log(sum) - target_logit;
}

// Rows [begin, end). Compiled for AVX-512, AVX2 and baseline x86-64 (the loader picks one for this CPU); it is
// called inside the parallel_for, because a lambda's body would not inherit the clone's target.
template <class T>
__attribute__((always_inline)) inline void row_block(T* logits, const int64_t* targets, float* row_loss,
                                                    int64_t begin, int64_t end, int64_t vocab, int64_t ignore) {
  std::vector<float> scratch(static_cast<size_t>(vocab));
  for (int64_t r = begin; r < end; ++r) {
    T* row = logits + r * vocab;
    if (targets[r] == ignore) {
      std::fill(row, row + vocab, T(0));
      row_loss[r] = 0.0f;
    } else {
      row_loss[r] = row_cross_entropy(row, scratch.data(), vocab, targets[r]);
    }
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void row_block_f32(float* logits, const int64_t* targets,
                                                                                 float* row_loss, int64_t begin,
                                                                                 int64_t end, int64_t vocab,
                                                                                 int64_t ignore) {
  row_block(logits, targets, row_loss, begin, end, vocab, ignore);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void row_block_bf16(uint16_t* logits,
                                                                                  const int64_t* targets,
                                                                                  float* row_loss, int64_t begin,
                                                                                  int64_t end, int64_t vocab,
                                                                                  int64_t ignore) {
  row_block(logits, targets, row_loss, begin, end, vocab, ignore);
}

} // namespace

void cross_entropy_rows(float* logits, const int64_t* targets, float* row_loss, int64_t rows, int64_t vocab,
                        int64_t ignore, int64_t grain) {
  at::parallel_for(0, rows, std::max<int64_t>(1, grain), [&](int64_t begin, int64_t end) {
    row_block_f32(logits, targets, row_loss, begin, end, vocab, ignore);
  });
}

void cross_entropy_rows(uint16_t* logits, const int64_t* targets, float* row_loss, int64_t rows, int64_t vocab,
                        int64_t ignore, int64_t grain) {
  at::parallel_for(0, rows, std::max<int64_t>(1, grain), [&](int64_t begin, int64_t end) {
    row_block_bf16(logits, targets, row_loss, begin, end, vocab, ignore);
  });
}

} // namespace shadowgrad::kernels
