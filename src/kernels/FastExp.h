#pragma once

#include <cstdint>
#include <cstring>

namespace shadowgrad::kernels {

// expf without branches or a libm call, so that loops over it vectorise (std::exp does not, in a loop GCC must
// keep errno-free and exact). Cephes' expf: x = n ln2 + r with |r| <= ln2/2, a degree-6 polynomial for e^r, and
// 2^n built in the exponent bits. Within 2 ulp of std::exp over the clamped range; inputs below -87.3 give
// 2^-126 (not 0), above 88 give e^88 (not Inf). NaN in gives NaN out.
__attribute__((always_inline)) inline float fast_exp(float x) {
  const float clamped = x < -87.33654f ? -87.33654f : (x > 88.0f ? 88.0f : x);
  const float n = __builtin_floorf(clamped * 1.44269504088896341f + 0.5f);
  const float r = clamped - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const uint32_t scale_bits = uint32_t(int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  const float y = p * scale;
  return x != x ? x : y;  // NaN: the clamp's comparisons are false, but keep the input's NaN explicitly
}

} // namespace shadowgrad::kernels
