#pragma once
// RMSNorm as one autograd node over the fused loops of src/kernels/RmsNorm.h: forward reads x once and writes y
// once (no fp32 copies of x, of x^2 or of the normalised rows), backward likewise. fp32 math throughout, as the
// op chain it replaces: x.to(fp32) * rsqrt(mean(x^2) + eps) * w, rounded once to x's dtype.
#include <ATen/core/Tensor.h>

namespace shadowgrad::model {

// x: [..., dim] in float32 or bfloat16; weight: [dim] in any float dtype (its gradient comes back in that dtype).
// Other dtypes of x, and tensors not on the CPU (hardware=cuda), take the plain op chain.
at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// The op chain it replaces (fused_kernels=false, and other dtypes): x.to(fp32) * rsqrt(mean(x^2) + eps) * w.
at::Tensor rms_norm_op_chain(const at::Tensor& x, const at::Tensor& weight, double eps);

} // namespace shadowgrad::model
