#include "kernels/SwiGlu.h"

#include <algorithm>

#include <ATen/Parallel.h>

#include "kernels/Convert.h"
#include "kernels/FastExp.h"

namespace shadowgrad::kernels {

namespace {

constexpr int64_t kGrain = 1 << 14;  // elements per task
// bf16 is converted to fp32 in strips and the fp32 loop runs on them: GCC vectorises a loop that mixes 16- and
// 32-bit lanes only half as wide (bf16 forward 1.27 ms -> 0.77 ms on [512 x 2048], the same bits).
constexpr int64_t kStrip = 256;

// As ATen's silu and silu_backward compute them, with fast_exp for std::exp.
__attribute__((always_inline)) inline void forward_block(const float* __restrict gate, const float* __restrict up,
                                                         float* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + fast_exp(-gate[i])) * up[i];
}

__attribute__((always_inline)) inline void backward_block(const float* __restrict grad_out,
                                                          const float* __restrict gate, const float* __restrict up,
                                                          float* __restrict grad_gate, float* __restrict grad_up,
                                                          int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float dy = grad_out[i], g = gate[i];
    const float denom = 1.0f + fast_exp(-g), s = 1.0f / denom;
    grad_up[i] = dy * (g / denom);
    grad_gate[i] = dy * up[i] * s * (1.0f + g * (1.0f - s));
  }
}

__attribute__((always_inline)) inline void widen(const uint16_t* __restrict in, float* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = load(in[i]);
}

__attribute__((always_inline)) inline void narrow(const float* __restrict in, uint16_t* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store(out[i], in[i]);
}

// Compiled for AVX-512, AVX2 and baseline x86-64; called inside the parallel_for, whose lambda would not inherit
// the clone's target.
__attribute__((target_clones("avx512f", "avx2", "default"))) void forward_f32(const float* gate, const float* up,
                                                                               float* out, int64_t n) {
  forward_block(gate, up, out, n);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void forward_bf16(const uint16_t* gate,
                                                                                const uint16_t* up, uint16_t* out,
                                                                                int64_t n) {
  float g[kStrip], u[kStrip], y[kStrip];
  for (int64_t begin = 0; begin < n; begin += kStrip) {
    const int64_t m = std::min(kStrip, n - begin);
    widen(gate + begin, g, m);
    widen(up + begin, u, m);
    forward_block(g, u, y, m);
    narrow(y, out + begin, m);
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void backward_f32(const float* grad_out,
                                                                                const float* gate, const float* up,
                                                                                float* grad_gate, float* grad_up,
                                                                                int64_t n) {
  backward_block(grad_out, gate, up, grad_gate, grad_up, n);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void backward_bf16(const uint16_t* grad_out,
                                                                                 const uint16_t* gate,
                                                                                 const uint16_t* up,
                                                                                 uint16_t* grad_gate,
                                                                                 uint16_t* grad_up, int64_t n) {
  float dy[kStrip], g[kStrip], u[kStrip], dg[kStrip], du[kStrip];
  for (int64_t begin = 0; begin < n; begin += kStrip) {
    const int64_t m = std::min(kStrip, n - begin);
    widen(grad_out + begin, dy, m);
    widen(gate + begin, g, m);
    widen(up + begin, u, m);
    backward_block(dy, g, u, dg, du, m);
    narrow(dg, grad_gate + begin, m);
    narrow(du, grad_up + begin, m);
  }
}

} // namespace

void swiglu_forward(const float* gate, const float* up, float* out, int64_t n) {
  at::parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) { forward_f32(gate + b, up + b, out + b, e - b); });
}

void swiglu_forward(const uint16_t* gate, const uint16_t* up, uint16_t* out, int64_t n) {
  at::parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) { forward_bf16(gate + b, up + b, out + b, e - b); });
}

void swiglu_backward(const float* grad_out, const float* gate, const float* up, float* grad_gate, float* grad_up,
                     int64_t n) {
  at::parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    backward_f32(grad_out + b, gate + b, up + b, grad_gate + b, grad_up + b, e - b);
  });
}

void swiglu_backward(const uint16_t* grad_out, const uint16_t* gate, const uint16_t* up, uint16_t* grad_gate,
                     uint16_t* grad_up, int64_t n) {
  at::parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    backward_bf16(grad_out + b, gate + b, up + b, grad_gate + b, grad_up + b, e - b);
  });
}

} // namespace shadowgrad::kernels
