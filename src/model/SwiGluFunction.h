#pragma once
// The gated MLP's silu(gate) * up as one autograd node over kernels/SwiGlu.h: forward in one pass, backward gives
// both gradients in one pass from the saved gate and up (the ATen chain kept gate, up and silu(gate)).
//
//   at::Tensor gated = swiglu(at::linear(h, w_gate), at::linear(h, w_up));   // == at::silu(gate) * up
//
// fp32 or bf16 CPU tensors of one shape and dtype use the kernel; anything else (fp16, other devices) the ATen ops.
#include <ATen/core/Tensor.h>

namespace shadowgrad::model {

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);

} // namespace shadowgrad::model
