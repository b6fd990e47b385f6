#pragma once
// Rotary position embedding (half-split convention), fused with the [B,T,H,D] -> [B,H,T,D] layout change and an
// optional scale (attention's 1/sqrt(D) on the queries). With x1 = x[..., :D/2] and x2 = x[..., D/2:]:
//   forward:  y[b,h,t] = scale * (x * cos[t] + cat(-x2, x1) * sin[t])     x read as [B,T,H,D], y written [B,H,T,D]
//   backward: the transposed map, read as [B,H,T,D] and written [B,T,H,D]: with g = scale * gy[b,h,t],
//             gx1 = g1 * cos1 + g2 * sin2 and gx2 = g2 * cos2 - g1 * sin1 (halves of g, cos[t], sin[t]).
// fp32 math in the order of the ATen expression it replaces, each output rounded once into the storage type: in
// fp32 the result is bit for bit the ATen expression's (this file is built with -ffp-contract=off). cos and sin
// are [>= T, D] row-major tables in the storage type. With `positions` set ([B,T] int64, packed sequences), token
// (b, t) reads the tables' row positions[b*T + t] instead of row t. Element-wise: the result does not depend on the thread count.
//
//   kernels::RopeShape s{B, T, H, D};
//   kernels::rope_forward(x.data_ptr<float>(), cos.data_ptr<float>(), sin.data_ptr<float>(), y.data_ptr<float>(),
//                         s, 0.125f);
#include <cstdint>

namespace shadowgrad::kernels {

struct RopeShape {
  int64_t batch, length, heads, head_dim;  // head_dim even
  const int64_t* positions = nullptr;      // [batch, length] table rows, or null: row t for position t
  // rope_backward: grad_y stored in x's [B,T,H,D] order (as SDPA's backward hands it, a transposed view), not
  // [B,H,T,D]: read where it lies, with no contiguous copy first.
  bool grad_y_in_x_order = false;
};

void rope_forward(const float* x, const float* cos, const float* sin, float* y, RopeShape shape, float scale);
void rope_backward(const float* grad_y, const float* cos, const float* sin, float* grad_x, RopeShape shape,
                   float scale);
// The same for bf16, given as 16-bit patterns.
void rope_forward(const uint16_t* x, const uint16_t* cos, const uint16_t* sin, uint16_t* y, RopeShape shape,
                  float scale);
void rope_backward(const uint16_t* grad_y, const uint16_t* cos, const uint16_t* sin, uint16_t* grad_x,
                   RopeShape shape, float scale);

} // namespace shadowgrad::kernels
