#include "kernels/CrossEntropy.h"

#include <algorithm>
#include <cmath>

#include <ATen/Parallel.h>

#include "accumulate/StochasticRounding.h"
#include "kernels/FastExp.h"

namespace shadowgrad::kernels {

namespace {

constexpr int kLanes = 16;  // one AVX-512 register of floats; GCC maps the lane arrays onto it

inline float load(float v) { return v; }
inline float load(uint16_t bits) { return accumulate::bf16_to_float(bits); }
inline void store(float& out, float v) { out = v; }
inline void store(uint16_t& out, float v) { out = accumulate::bf16_round_nearest(v); }

// One row: returns its loss. Lane-wise partial max and sum, reduced in lane order: the same bits on every run.
template <class T>
__attribute__((always_inline)) inline float row_cross_entropy(T* __restrict row, int64_t vocab, int64_t target) {
  float lane_max[kLanes], lane_sum[kLanes];
  for (int j = 0; j < kLanes; ++j) lane_max[j] = -INFINITY, lane_sum[j] = 0.0f;
  const int64_t body = vocab - vocab % kLanes;
  for (int64_t i = 0; i < body; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float v = load(row[i + j]);
      lane_max[j] = v > lane_max[j] ? v : lane_max[j];
    }
  float max = -INFINITY;
  for (int j = 0; j < kLanes; ++j) max = lane_max[j] > max ? lane_max[j] : max;
  for (int64_t i = body; i < vocab; ++i) max = load(row[i]) > max ? load(row[i]) : max;

  for (int64_t i = 0; i < body; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane_sum[j] += fast_exp(load(row[i + j]) - max);
  float sum = 0.0f;
  for (int j = 0; j < kLanes; ++j) sum += lane_sum[j];
  for (int64_t i = body; i < vocab; ++i) sum += fast_exp(load(row[i]) - max);
  // A NaN never wins a comparison, so the max skips it; its exponential makes the sum, and so the loss, NaN.
  const float lse = max + std::log(sum);

  const float target_logit = load(row[target]);
  for (int64_t i = 0; i < vocab; ++i) store(row[i], fast_exp(load(row[i]) - lse));
  store(row[target], fast_exp(target_logit - lse) - 1.0f);
  return lse - target_logit;
}

// Rows [begin, end). Compiled for AVX-512, AVX2 and baseline x86-64 (the loader picks one for this CPU); it is
// called inside the parallel_for, because a lambda's body would not inherit the clone's target.
template <class T>
__attribute__((always_inline)) inline void row_block(T* logits, const int64_t* targets, float* row_loss, int64_t begin, int64_t end, int64_t vocab,
                      int64_t ignore) {
  for (int64_t r = begin; r < end; ++r) {
    T* row = logits + r * vocab;
    if (targets[r] == ignore) {
      std::fill(row, row + vocab, T(0));
      row_loss[r] = 0.0f;
    } else {
      row_loss[r] = row_cross_entropy(row, vocab, targets[r]);
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
