#pragma once
// The bit-level rounding rules of the fold, written once for the CPU loops and the CUDA fold kernel alike
// (accumulate/cuda/FoldKernel.cu): fp32 <-> bf16/fp16 conversions, branch-free so that CPU loops vectorise, and the
// counter-based random bits of stochastic rounding. The same source on both sides is what makes the CPU and the GPU
// fold give the same bits for the same seed. No dependencies, so nvcc compiles it without LibTorch's headers.
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SHADOWGRAD_HOST_DEVICE __host__ __device__
#else
#define SHADOWGRAD_HOST_DEVICE
#endif

namespace shadowgrad::accumulate {

// 32 uniform random bits for element `e` under `key`: Chris Wellons' lowbias32 hash (two 32-bit multiplies,
// so the element loops vectorise) of the element index mixed with the key.
SHADOWGRAD_HOST_DEVICE inline uint32_t random_bits(uint64_t key, uint64_t e) {
  uint32_t x = uint32_t(e) ^ uint32_t(key) ^ (uint32_t(e >> 32) * 0x9E3779B9u);
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x + uint32_t(key >> 32);
}

SHADOWGRAD_HOST_DEVICE inline uint32_t float_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}

// fp32 -> bf16 bits, stochastically: the top 16 bits of (bits + 16 random bits). The carry handles negative
// numbers, exponent steps and subnormals alike; only NaN is treated first (a NaN with a low payload would
// otherwise carry into Inf or wrap to -0).
SHADOWGRAD_HOST_DEVICE inline uint16_t bf16_round_stochastic(float x, uint32_t r) {
  const uint32_t b = float_bits(x);
  const uint32_t rounded = (b + (r >> 16)) >> 16;
  return uint16_t((b & 0x7FFFFFFFu) > 0x7F800000u ? (b >> 16) | 0x0040u : rounded);  // NaN: quiet, sign kept
}

// fp32 -> fp16 bits, stochastically. Normal range: 13 mantissa bits are dropped, by the same carry as bf16's;
// at 2^16 and above the result is Inf. Below 2^-14 (fp16 subnormals, spacing 2^-24) the value is rounded to a
// multiple of 2^-24 with 32 random bits, so gradients far below the smallest subnormal survive in expectation.
// Written without branches (both candidates, then a select) so that loops over it vectorise.
SHADOWGRAD_HOST_DEVICE inline uint16_t fp16_round_stochastic(float x, uint32_t r) {
  const uint32_t b = float_bits(x);
  const uint32_t sign = (b >> 16) & 0x8000u, a = b & 0x7FFFFFFFu;
  const uint32_t t = (a + (r >> 19)) & ~0x1FFFu;  // exact in fp16 now, unless it is 2^16 or more
  const uint32_t normal = t >= 0x47800000u ? 0x7C00u : (t >> 13) - 0x1C000u;
  // |x| = m * 2^(e - 150) with the 24-bit significand m and biased exponent e (1 for fp32 subnormals), so
  // |x| / 2^-24 = m >> (126 - e), and 126 - e >= 14 in this range.
  const uint32_t exp = a >> 23;
  const uint64_t m = exp ? (a & 0x7FFFFFu) | 0x800000u : a;
  const uint32_t shift = 126u - (exp ? exp : 1u);                 // wraps (huge) outside this range: unused
  const uint64_t fixed = shift >= 56 ? 0 : (m << 32) >> shift;     // |x| / 2^-24, with 32 fraction bits
  const uint32_t subnormal = uint32_t((fixed + r) >> 32);          // up with probability fraction / 2^32;
                                                                   // 1024 gives 2^-14's bits: exact
  const uint32_t mag = a > 0x7F800000u ? 0x7E00u : a >= 0x38800000u ? normal : subnormal;
  return uint16_t(sign | mag);
}

SHADOWGRAD_HOST_DEVICE inline float float_from_bits(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
#endif
}

// bf16 bits -> fp32: exact (bf16 is fp32's top half).
SHADOWGRAD_HOST_DEVICE inline float bf16_to_float(uint16_t bits) { return float_from_bits(uint32_t(bits) << 16); }

// fp32 -> bf16 bits, round to nearest even, bit for bit c10::BFloat16: every NaN becomes 0x7FC0 (c10's
// round_to_nearest_even drops its sign). The one copy of this rule: MixedAdd and src/kernels call it.
SHADOWGRAD_HOST_DEVICE inline uint16_t bf16_round_nearest(float x) {
  const uint32_t b = float_bits(x);
  const uint32_t rounded = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
  return uint16_t((b & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC0u : rounded);
}

// fp16 bits -> fp32 and fp32 -> fp16 bits (round to nearest even), bit for bit c10::Half's conversions, but
// without branches, so loops over them vectorise (c10's do not, in 1.13).
SHADOWGRAD_HOST_DEVICE inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, em = h & 0x7FFFu;
  const uint32_t normal = ((em << 13) + 0x38000000u + (em >= 0x7C00u ? 0x38000000u : 0u))  // Inf/NaN: exponent 255
                          | (em > 0x7C00u ? 0x400000u : 0u);                                   // NaN: quiet
  const uint32_t subnormal = float_bits(float(int32_t(em)) * 5.9604644775390625e-8f);       // em * 2^-24, exact
  return float_from_bits(sign | (em < 0x400u ? subnormal : normal));
}

// Fabian Giesen's float_to_half_fast3_rtne, with selects for its branches.
SHADOWGRAD_HOST_DEVICE inline uint16_t fp16_round_nearest(float x) {
  const uint32_t b = float_bits(x);
  const uint32_t sign = (b >> 16) & 0x8000u, a = b & 0x7FFFFFFFu;
  const uint32_t special = a > 0x7F800000u ? 0x7E00u : 0x7C00u;                 // NaN, or Inf (|x| >= 2^16)
  const uint32_t subnormal = float_bits(float_from_bits(a) + 0.5f) - 0x3F000000u;  // the FPU rounds: RNE
  const uint32_t normal = (a + 0xC8000FFFu + ((a >> 13) & 1u)) >> 13;            // rebias by -112 << 23, RNE
  return uint16_t(sign | (a >= 0x47800000u ? special : a < 0x38800000u ? subnormal : normal));
}

} // namespace shadowgrad::accumulate
