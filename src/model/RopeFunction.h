#pragma once
// Rotary position embedding as one autograd node over kernels/Rope.h: it reads the projection in its [B,T,H,D]
// layout, rotates (half-split), scales, and writes [B,H,T,D] contiguous; backward writes [B,T,H,D]. It replaces
// transpose, cat, neg, two muls, an add, the queries' mul_ by 1/sqrt(D) and the copy that reshape made.
//
//   auto q = rope(q_proj.view({B, T, H, D}), rope_cos, rope_sin, 1.0 / std::sqrt(D));   // [B,H,T,D]
//   // == (x * cos[:T] + cat(-x2, x1) * sin[:T]) * scale, with x = q_proj.view({B, T, H, D}).transpose(1, 2)
//
// positions (optional, [B,T] int64): token (b, t) takes the tables' row positions[b, t] instead of row t (packed
// sequences, whose positions restart at 0 in each example).
// cos and sin: [>= T, D] tables in x's dtype. fp32 or bf16 CPU tensors use the kernel (in fp32 bit for bit the ATen
// expression); anything else (fp16, other devices) the ATen expression.
#include <ATen/core/Tensor.h>

namespace shadowgrad::model {

at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, double scale,
                const at::Tensor& positions = {});

} // namespace shadowgrad::model
