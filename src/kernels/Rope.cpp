#include "kernels/Rope.h"

#include <ATen/Parallel.h>

#include "kernels/Convert.h"

namespace shadowgrad::kernels {

namespace {

constexpr int64_t kGrainRows = 256;  // rows of head_dim elements per task

// Row r of x (and of grad_x) is (b, t, h) in [B,T,H] order; its image in y (grad_y) is row (b, h, t) of [B,H,T].
inline int64_t transposed_row(int64_t r, const RopeShape& s) {
  const int64_t h = r % s.heads, t = (r / s.heads) % s.length, b = r / (s.heads * s.length);
  return (b * s.heads + h) * s.length + t;
}

// The cos/sin table row of x's row r: its position, gathered when the sequence is packed.
inline int64_t table_row(int64_t r, const RopeShape& s) {
  const int64_t bt = r / s.heads;  // b * length + t
  return s.positions ? s.positions[bt] : bt % s.length;
}

// x * cos + cat(-x2, x1) * sin, then the scale: the products, sum and scaling of the ATen expression, in its order.
template <class T>
__attribute__((always_inline)) inline void forward_rows(const T* __restrict x, const T* __restrict cos,
                                                        const T* __restrict sin, T* __restrict y, RopeShape s,
                                                        float scale, int64_t begin, int64_t end) {
  const int64_t D = s.head_dim, half = D / 2;
  for (int64_t r = begin; r < end; ++r) {
    const int64_t t = table_row(r, s);
    const T* in = x + r * D;
    const T *c = cos + t * D, *sn = sin + t * D;
    T* out = y + transposed_row(r, s) * D;
    for (int64_t d = 0; d < half; ++d) {
      const float x1 = load(in[d]), x2 = load(in[d + half]);
      store(out[d], (x1 * load(c[d]) - x2 * load(sn[d])) * scale);
      store(out[d + half], (x2 * load(c[d + half]) + x1 * load(sn[d + half])) * scale);
    }
  }
}

// The scale first (autograd's order: the scaling's backward runs before the rotation's), then the transposed
// rotation: g * cos, plus cat's gradient of g * sin with the halves swapped and the first negated.
template <class T>
__attribute__((always_inline)) inline void backward_rows(const T* __restrict grad_y, const T* __restrict cos,
                                                         const T* __restrict sin, T* __restrict grad_x, RopeShape s,
                                                         float scale, int64_t begin, int64_t end) {
  const int64_t D = s.head_dim, half = D / 2;
  for (int64_t r = begin; r < end; ++r) {
    const int64_t t = table_row(r, s);
    const T* gy = grad_y + (s.grad_y_in_x_order ? r : transposed_row(r, s)) * D;
    const T *c = cos + t * D, *sn = sin + t * D;
    T* gx = grad_x + r * D;
    for (int64_t d = 0; d < half; ++d) {
      const float g1 = load(gy[d]) * scale, g2 = load(gy[d + half]) * scale;
      store(gx[d], g1 * load(c[d]) + g2 * load(sn[d + half]));
      store(gx[d + half], g2 * load(c[d + half]) - g1 * load(sn[d]));
    }
  }
}

// Compiled for AVX-512, AVX2 and baseline x86-64; called inside the parallel_for, whose lambda would not inherit
// the clone's target.
__attribute__((target_clones("avx512f", "avx2", "default"))) void forward_f32(const float* x, const float* cos,
                                                                               const float* sin, float* y,
                                                                               RopeShape s, float scale,
                                                                               int64_t begin, int64_t end) {
  forward_rows(x, cos, sin, y, s, scale, begin, end);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void forward_bf16(const uint16_t* x,
                                                                                const uint16_t* cos,
                                                                                const uint16_t* sin, uint16_t* y,
                                                                                RopeShape s, float scale,
                                                                                int64_t begin, int64_t end) {
  forward_rows(x, cos, sin, y, s, scale, begin, end);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void backward_f32(const float* grad_y,
                                                                                const float* cos, const float* sin,
                                                                                float* grad_x, RopeShape s,
                                                                                float scale, int64_t begin,
                                                                                int64_t end) {
  backward_rows(grad_y, cos, sin, grad_x, s, scale, begin, end);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void backward_bf16(const uint16_t* grad_y,
                                                                                 const uint16_t* cos,
                                                                                 const uint16_t* sin,
                                                                                 uint16_t* grad_x, RopeShape s,
                                                                                 float scale, int64_t begin,
                                                                                 int64_t end) {
  backward_rows(grad_y, cos, sin, grad_x, s, scale, begin, end);
}

int64_t rows(const RopeShape& s) { return s.batch * s.length * s.heads; }

} // namespace

void rope_forward(const float* x, const float* cos, const float* sin, float* y, RopeShape shape, float scale) {
  at::parallel_for(0, rows(shape), kGrainRows,
                   [&](int64_t b, int64_t e) { forward_f32(x, cos, sin, y, shape, scale, b, e); });
}

void rope_forward(const uint16_t* x, const uint16_t* cos, const uint16_t* sin, uint16_t* y, RopeShape shape,
                  float scale) {
  at::parallel_for(0, rows(shape), kGrainRows,
                   [&](int64_t b, int64_t e) { forward_bf16(x, cos, sin, y, shape, scale, b, e); });
}

void rope_backward(const float* grad_y, const float* cos, const float* sin, float* grad_x, RopeShape shape,
                   float scale) {
  at::parallel_for(0, rows(shape), kGrainRows,
                   [&](int64_t b, int64_t e) { backward_f32(grad_y, cos, sin, grad_x, shape, scale, b, e); });
}

void rope_backward(const uint16_t* grad_y, const uint16_t* cos, const uint16_t* sin, uint16_t* grad_x,
                   RopeShape shape, float scale) {
  at::parallel_for(0, rows(shape), kGrainRows,
                   [&](int64_t b, int64_t e) { backward_bf16(grad_y, cos, sin, grad_x, shape, scale, b, e); });
}

} // namespace shadowgrad::kernels
