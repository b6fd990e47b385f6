#pragma once
// Rounding fp32 values into bf16 or fp16 storage: stochastically (unbiased, so long sums of small addends
// cannot stall) or to nearest with a count of what was lost. The random bits are counter-based: the bits
// for element e are a hash of (key, e), where the key mixes a seed with the counters that make one rounding
// unique (optimizer step, microbatch, parameter...). There is no generator state: two runs give the same
// bits, whatever the thread count, and a resumed run gets the bits the uninterrupted run would have got.
//
//   uint64_t key = rounding_key(seed, {step, microbatch, param_index});
//   round_add_(shadow, grad, key, Rounding::kStochastic);   // shadow = SR(shadow + grad), the sum in fp32
//   round_copy_(state, fp32_values, key, Rounding::kStochastic);  // state = SR(values)
//   // or, inside a loop of your own (e.g. a fused optimizer that keeps bf16 state):
//   uint16_t bits = bf16_round_stochastic(x, random_bits(key, e));
//
// Stochastic rounding of x lands on one of the two representable neighbours, the farther one with
// probability |x - nearer| / spacing, so E[SR(x)] = x. Its error per operation is up to one spacing (twice
// round-to-nearest's), but it has no bias. NaN stays NaN; the largest finite values may round up to Inf.
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

#include <ATen/core/Tensor.h>

#include "../util/Hash.h"  // relative: found both in src/ and in the installed include/shadowgrad/
#include "RoundingBits.h"

namespace shadowgrad::accumulate {

enum class Rounding : int { kNearest, kStochastic };

// "nearest" or "stochastic" (the names of the grad_accum_rounding key); throws std::invalid_argument.
Rounding rounding_from_name(const std::string& name);
const char* rounding_name(Rounding r);

using util::mix64;  // SplitMix64's finaliser

// One 64-bit key from a seed and any number of counters (order matters).
inline uint64_t rounding_key(uint64_t seed, std::initializer_list<uint64_t> counters) {
  uint64_t k = mix64(seed);
  for (uint64_t c : counters) k = mix64(k ^ mix64(c));
  return k;
}

// What a rounding pass lost: nonzero values that became 0, finite values that became +-Inf.
struct RoundingLoss {
  int64_t underflowed = 0;
  int64_t overflowed = 0;
  int64_t elements = 0;  // elements written
  RoundingLoss& operator+=(const RoundingLoss& o) {
    underflowed += o.underflowed;
    overflowed += o.overflowed;
    elements += o.elements;
    return *this;
  }
};

// dst = round(float(dst) + float(src)) into dst's dtype (bfloat16 or float16), element by element, in place:
// no temporary the size of dst. src: float32, bfloat16 or float16, same numel. Element e's random bits are
// random_bits(key, e). With Rounding::kNearest the result is round-to-nearest-even, bit for bit what
// dst.add_(src) gives. Underflow and overflow are counted for float16 (bf16 has fp32's range).
RoundingLoss round_add_(const at::Tensor& dst, const at::Tensor& src, uint64_t key, Rounding rounding);
// dst = round(float(src)).
RoundingLoss round_copy_(const at::Tensor& dst, const at::Tensor& src, uint64_t key, Rounding rounding);
// For r in [0, rows.numel()): dst[rows[r]] = round(float(dst[rows[r]]) + values[r]), dst 2-D [R, D] contiguous,
// values float32 [rows.numel(), D], rows int64 and distinct. Element (row, c) uses random_bits(key, row * D + c),
// the bits round_add_ would use for it.
RoundingLoss round_add_rows_(const at::Tensor& dst, const at::Tensor& rows, const at::Tensor& values, uint64_t key,
                             Rounding rounding);

} // namespace shadowgrad::accumulate
