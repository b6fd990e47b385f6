#pragma once
// Squared L2 norms for the gradient noise scale (docs/batch-size.md), with a result that does not depend on the
// thread count: the elements are summed in fixed blocks of kNormBlock, each block in fp32 over 16 lanes, and the
// block sums are added in block order in double. The fold (MixedAdd.h) uses the same blocks when it fuses the norm
// into its add, so a fused and a separate measurement of the same tensor give the same bits.
//
//   double sq = squared_norm(grad);            // any float dtype; fp32 math
//   std::vector<float> parts(norm_blocks(n));  // a fused loop writes one fp32 partial per block, then:
//   double sq = sum_blocks(parts);
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace shadowgrad::accumulate {

inline constexpr int64_t kNormBlock = int64_t{1} << 16;

inline int64_t norm_blocks(int64_t n) { return (n + kNormBlock - 1) / kNormBlock; }

// The 16-lane fp32 sum of squares of x[0..n) (one block), lanes added in a fixed order.
float block_sq_sum(const float* x, int64_t n);
float block_sq_sum_bf16(const uint16_t* bits, int64_t n);
// The block partials in order, in double.
double sum_blocks(const std::vector<float>& parts);

// sum(t * t) in fp32 per block (see above). CPU float32/bfloat16/float16 tensors take the blocked loop; others
// (another device) go through at::linalg_vector_norm (thread-count dependent there).
double squared_norm(const at::Tensor& t);

} // namespace shadowgrad::accumulate
