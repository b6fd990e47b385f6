#pragma once
// Element loads and stores for the fused loops: fp32 math on fp32 or bf16 (16-bit pattern) storage, one rounding
// to nearest even on store. Branch-free (accumulate/StochasticRounding.h's converters), so loops over them vectorise.
//
//   template <class T> void scale(T* x, int64_t n, float a) {
//     for (int64_t i = 0; i < n; ++i) store(x[i], a * load(x[i]));
//   }
#include <cstdint>

#include "accumulate/StochasticRounding.h"

namespace shadowgrad::kernels {

__attribute__((always_inline)) inline float load(float v) { return v; }
__attribute__((always_inline)) inline float load(uint16_t bits) { return accumulate::bf16_to_float(bits); }
__attribute__((always_inline)) inline void store(float& out, float v) { out = v; }
__attribute__((always_inline)) inline void store(uint16_t& out, float v) { out = accumulate::bf16_round_nearest(v); }

} // namespace shadowgrad::kernels
