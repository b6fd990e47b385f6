#pragma once
// y = x W^T (+ b) for a weight that never trains (a LoRA run's frozen base), as one autograd node that keeps only the
// stored weight for backward and casts it to x's dtype again there. at::linear on a cast weight would keep the cast
// copy alive until backward: with a bf16 base and fp32 compute, 4 bytes per base parameter through the whole forward
// instead of the 2 the base is stored in. Nothing is saved for a weight gradient, which is never computed.
//
// adapted_linear does the same for projections that share their input (q, k and v share x; gate and up share h),
// each with a LoRA adapter: y_i = x W_i^T (+ b_i) + scale (x A_i^T) B_i^T, in one node. Its forward runs one GEMM
// for all the A products (the A's stacked) and adds each B product into the base output inside the GEMM (beta 1);
// its backward computes no base weight gradient, and sums the input gradient of every base and the stacked A into
// one buffer through the GEMMs themselves, with no elementwise pass over an [N, out] tensor.
//
//   at::Tensor y = frozen_linear(x, weight, bias);   // weight [out, in] in any float dtype; bias [out] or undefined
//   auto qkv = adapted_linear(h, {{wq, bq, aq, bq_}, {wk, bk, ak, bk_}, {wv, bv, av, bv_}}, scale);
#include <vector>

#include <ATen/core/Tensor.h>

namespace shadowgrad::model {

at::Tensor frozen_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// One projection of adapted_linear: a frozen weight [out, in] (any float dtype, cast to x's per use), its bias [out]
// or undefined (every projection of a call has one, or none does), and the adapter A [r, in], B [out, r] in x's
// dtype (the same r for all).
struct AdaptedProjection {
  at::Tensor weight, bias, a, b;
};

std::vector<at::Tensor> adapted_linear(const at::Tensor& x, const std::vector<AdaptedProjection>& projections,
                                       double scale);

} // namespace shadowgrad::model
