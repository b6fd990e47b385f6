#pragma once
// y = x W^T (+ b) for a weight that never trains (a LoRA run's frozen base), as one autograd node that keeps only the
// stored weight for backward and casts it to x's dtype again there. at::linear on a cast weight would keep the cast
// copy alive until backward: with a bf16 base and fp32 compute, 4 bytes per base parameter through the whole forward
// instead of the 2 the base is stored in. Nothing is saved for a weight gradient, which is never computed.
//
//   at::Tensor y = frozen_linear(x, weight, bias);   // weight [out, in] in any float dtype; bias [out] or undefined
#include <ATen/core/Tensor.h>

namespace shadowgrad::model {

at::Tensor frozen_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

} // namespace shadowgrad::model
