#pragma once
// dst += src where src has another dtype (an fp32 gradient into a bf16 shadow), without full-size temporaries.
//
//   mixed_add_(shadow_bf16, grad_fp32);   // same result as shadow_bf16.add_(grad_fp32), bit for bit
//
// On CPU, an in-place add with mixed dtypes runs through TensorIterator's type promotion, which makes fp32 copies
// of dst (as input and as output) as large as the whole tensor: for a 32000 x 512 output layer, 125 MiB of
// temporaries to fold a 62.5 MiB gradient, more than the bf16 shadow saves. An fp32 gradient into a bf16/fp16
// shadow (the case of every fold in Python and of fp32 compute) goes through a direct loop with no temporary (for
// bf16, written on the bits so that it vectorises: as fast as the plain fp32 .grad accumulation), and so does a
// bf16 gradient into an fp32 shadow (bf16 compute's fold: add_ would copy the gradient to fp32 first); other
// mixed pairs are added slice by slice, which bounds the temporaries to a few MiB.
#include <ATen/core/Tensor.h>

namespace shadowgrad::accumulate {

// `src_sq_norm`, when set, receives sum(src * src) as squared_norm(src) computes it (SquaredNorm.h), fused into the
// add on the two direct loops (bf16 gradient into fp32, fp32 gradient into bf16).
void mixed_add_(at::Tensor& dst, const at::Tensor& src, double* src_sq_norm = nullptr);
// dst = src rounded into dst's dtype, bit for bit dst.copy_(src) except for a NaN's pattern (0x7FC0, c10::BFloat16's
// and bf16_round_nearest's; 1.13's vectorised copy_ writes 0xFFFF). An fp32 src into a contiguous bf16 dst goes
// through a loop of our own (the first fold of a window into a bf16 shadow), anything else through copy_.
// `src_sq_norm` as for mixed_add_: fused into that loop (one pass over src), measured apart after copy_ otherwise.
void mixed_copy_(at::Tensor& dst, const at::Tensor& src, double* src_sq_norm = nullptr);

} // namespace shadowgrad::accumulate
