#include "kernels/SwiGlu.h"

#include <ATen/Parallel.h>

#include "kernels/Convert.h"
#include "kernels/FastExp.h"

namespace shadowgrad::kernels {

namespace {

constexpr int64_t kGrain = 1 << 14;  // elements per task

// As ATen's silu and silu_backward compute them, with fast_exp for std::exp.
template <class T>
__attribute__((always_inline)) inline void forward_block(const T* __restrict gate, const T* __restrict up,
                                                         T* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = load(gate[i]);
    store(out[i], g / (1.0f + fast_exp(-g)) * load(up[i]));
  }
}

template <class T>
__attribute__((always_inline)) inline void backward_block(const T* __restrict grad_out, const T* __restrict gate,
                                                          const T* __restrict up, T* __restrict grad_gate,
                                                          T* __restrict grad_up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float dy = load(grad_out[i]), g = load(gate[i]);
    const float denom = 1.0f + fast_exp(-g), s = 1.0f / denom;
    store(grad_up[i], dy * (g / denom));
    store(grad_gate[i], dy * load(up[i]) * s * (1.0f + g * (1.0f - s)));
  }
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
  forward_block(gate, up, out, n);
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
  backward_block(grad_out, gate, up, grad_gate, grad_up, n);
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
