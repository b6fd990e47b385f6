#pragma once
// SwiGLU, the gated MLP's element-wise part, fused: one pass forward, one pass backward, where silu, mul and in
// backward silu_backward and two muls each made a pass (and bf16 rounded between them).
//   forward:  out = silu(gate) * up                    silu(g) = g / (1 + e^-g)
//   backward: grad_up   = grad_out * silu(gate)
//             grad_gate = grad_out * up * s * (1 + gate * (1 - s)),   s = 1 / (1 + e^-gate)
// fp32 math (exp: kernels/FastExp.h, within 2 ulp of std::exp), each output rounded once into the storage type.
// NaN in any input gives NaN out. Element-wise: the result does not depend on the thread count.
//
//   kernels::swiglu_forward(gate.data_ptr<float>(), up.data_ptr<float>(), out.data_ptr<float>(), gate.numel());
#include <cstdint>

namespace shadowgrad::kernels {

void swiglu_forward(const float* gate, const float* up, float* out, int64_t n);
void swiglu_backward(const float* grad_out, const float* gate, const float* up, float* grad_gate, float* grad_up,
                     int64_t n);
// The same for bf16, given as 16-bit patterns.
void swiglu_forward(const uint16_t* gate, const uint16_t* up, uint16_t* out, int64_t n);
void swiglu_backward(const uint16_t* grad_out, const uint16_t* gate, const uint16_t* up, uint16_t* grad_gate,
                     uint16_t* grad_up, int64_t n);

} // namespace shadowgrad::kernels
