#pragma once
// One element of the fold, written once: dst = round(float(dst) + float(src)) into dst's format, or, for the first
// fold of a window, dst = round(float(src)). The CUDA fold kernel (cuda/FoldKernel.cu) runs exactly this per element;
// on the CPU the vectorised loops of MixedAdd.cpp and StochasticRounding.cpp compute the same bits, and
// tests/test_fold_element.cpp checks this function against them. No LibTorch: nvcc compiles it as it is.
//
//   uint16_t d = fold_element<Bf16Bits, F32Bits>(d_bits, grad, /*overwrite=*/false, random_bits(key, e), stochastic);
#include <cstdint>

#include "RoundingBits.h"

namespace shadowgrad::accumulate {

// The storage formats, each with its widening (exact) and its rounding from fp32.
struct F32Bits {
  using Storage = float;
  static constexpr int kId = 0;
  SHADOWGRAD_HOST_DEVICE static float widen(float v) { return v; }
  SHADOWGRAD_HOST_DEVICE static float round(float x, uint32_t, bool) { return x; }  // fp32 sums need no rounding
};
struct Bf16Bits {
  using Storage = uint16_t;
  static constexpr int kId = 1;
  SHADOWGRAD_HOST_DEVICE static float widen(uint16_t h) { return bf16_to_float(h); }
  SHADOWGRAD_HOST_DEVICE static uint16_t round(float x, uint32_t r, bool stochastic) {
    return stochastic ? bf16_round_stochastic(x, r) : bf16_round_nearest(x);
  }
};
struct Fp16Bits {
  using Storage = uint16_t;
  static constexpr int kId = 2;
  SHADOWGRAD_HOST_DEVICE static float widen(uint16_t h) { return fp16_to_float(h); }
  SHADOWGRAD_HOST_DEVICE static uint16_t round(float x, uint32_t r, bool stochastic) {
    return stochastic ? fp16_round_stochastic(x, r) : fp16_round_nearest(x);
  }
};

template <class Dst, class Src>
SHADOWGRAD_HOST_DEVICE inline typename Dst::Storage fold_element(typename Dst::Storage d, typename Src::Storage s,
                                                                 bool overwrite, uint32_t r, bool stochastic) {
  if constexpr (Dst::kId == Src::kId)
    if (overwrite) return s;  // copy_'s bits, a NaN's payload included
  const float g = Src::widen(s);
  return Dst::round(overwrite ? g : Dst::widen(d) + g, r, stochastic);
}

// What a float16 rounding lost (the CPU kernel's rule, StochasticRounding.cpp): a nonzero sum that became +-0, a
// finite sum that became +-Inf.
SHADOWGRAD_HOST_DEVICE inline bool fp16_underflowed(float sum, uint16_t h) { return (h & 0x7FFFu) == 0 && sum != 0.0f; }
SHADOWGRAD_HOST_DEVICE inline bool fp16_overflowed(float sum, uint16_t h) {
  return (h & 0x7FFFu) == 0x7C00u && (float_bits(sum) & 0x7F800000u) != 0x7F800000u;
}

} // namespace shadowgrad::accumulate
