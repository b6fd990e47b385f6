#include "kernels/RmsNorm.h"

#include <cmath>
#include <vector>

#include <ATen/Parallel.h>

#include "accumulate/StochasticRounding.h"
#include "kernels/Convert.h"

namespace shadowgrad::kernels {

namespace {

constexpr int64_t kBlockRows = 32;  // rows per task and per partial dw: fixed, so dw's sum order is too


// Sum over a row of f(i), vectorised (omp simd): its order is fixed per build and CPU, so every run gives the same
// bits, whatever the thread count.
template <class F>
__attribute__((always_inline)) inline float row_sum(int64_t dim, F f) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < dim; ++i) sum += f(i);
  return sum;
}

template <class T>
__attribute__((always_inline)) inline void forward_rows(const T* __restrict x, const float* __restrict w,
                                                        T* __restrict y, float* __restrict rstd, int64_t begin,
                                                        int64_t end, int64_t dim, float eps) {
  for (int64_t r = begin; r < end; ++r) {
    const T* xr = x + r * dim;
    T* yr = y + r * dim;
    const float mean_square = row_sum(dim, [&](int64_t i) { return load(xr[i]) * load(xr[i]); }) / float(dim);
    const float s = 1.0f / std::sqrt(mean_square + eps);
    rstd[r] = s;
    for (int64_t i = 0; i < dim; ++i) store(yr[i], (load(xr[i]) * s) * w[i]);
  }
}

// dx for rows [begin, end), and their sum of g * n into dw_block (zeroed here).
template <class T>
__attribute__((always_inline)) inline void backward_rows(const T* __restrict g, const T* __restrict x,
                                                         const float* __restrict w, const float* __restrict rstd,
                                                         T* __restrict dx, float* __restrict dw_block, int64_t begin,
                                                         int64_t end, int64_t dim) {
  for (int64_t i = 0; i < dim; ++i) dw_block[i] = 0.0f;
  for (int64_t r = begin; r < end; ++r) {
    const T* gr = g + r * dim;
    const T* xr = x + r * dim;
    T* dxr = dx + r * dim;
    const float s = rstd[r];
    const float mean_hn =
        row_sum(dim, [&](int64_t i) { return (load(gr[i]) * w[i]) * (load(xr[i]) * s); }) / float(dim);
    for (int64_t i = 0; i < dim; ++i) {
      const float n = load(xr[i]) * s, gi = load(gr[i]);
      store(dxr[i], s * (gi * w[i] - n * mean_hn));
      dw_block[i] += gi * n;
    }
  }
}

#define SG_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

SG_CLONES void forward_f32(const float* x, const float* w, float* y, float* rstd, int64_t b, int64_t e, int64_t dim,
                           float eps) {
  forward_rows(x, w, y, rstd, b, e, dim, eps);
}
SG_CLONES void forward_bf16(const uint16_t* x, const float* w, uint16_t* y, float* rstd, int64_t b, int64_t e,
                            int64_t dim, float eps) {
  forward_rows(x, w, y, rstd, b, e, dim, eps);
}
SG_CLONES void backward_f32(const float* g, const float* x, const float* w, const float* rstd, float* dx,
                            float* dw_block, int64_t b, int64_t e, int64_t dim) {
  backward_rows(g, x, w, rstd, dx, dw_block, b, e, dim);
}
SG_CLONES void backward_bf16(const uint16_t* g, const uint16_t* x, const float* w, const float* rstd, uint16_t* dx,
                             float* dw_block, int64_t b, int64_t e, int64_t dim) {
  backward_rows(g, x, w, rstd, dx, dw_block, b, e, dim);
}
SG_CLONES void add_rows_in_order(const float* blocks, float* dw, int64_t count, int64_t dim) {
  for (int64_t i = 0; i < dim; ++i) dw[i] = 0.0f;
  for (int64_t b = 0; b < count; ++b)
    for (int64_t i = 0; i < dim; ++i) dw[i] += blocks[b * dim + i];
}

#undef SG_CLONES

template <class T, class Fn>
void backward_blocks(const T* g, const T* x, const float* w, const float* rstd, T* dx, float* dw, int64_t rows,
                     int64_t dim, Fn rows_fn) {
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  std::vector<float> partial(size_t(blocks * dim));
  at::parallel_for(0, blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b)
      rows_fn(g, x, w, rstd, dx, partial.data() + b * dim, b * kBlockRows, std::min(rows, (b + 1) * kBlockRows), dim);
  });
  add_rows_in_order(partial.data(), dw, blocks, dim);
}

} // namespace

void rms_norm_forward(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim, float eps) {
  at::parallel_for(0, rows, kBlockRows, [&](int64_t b, int64_t e) { forward_f32(x, w, y, rstd, b, e, dim, eps); });
}

void rms_norm_forward(const uint16_t* x, const float* w, uint16_t* y, float* rstd, int64_t rows, int64_t dim,
                      float eps) {
  at::parallel_for(0, rows, kBlockRows, [&](int64_t b, int64_t e) { forward_bf16(x, w, y, rstd, b, e, dim, eps); });
}

void rms_norm_backward(const float* g, const float* x, const float* w, const float* rstd, float* dx, float* dw,
                       int64_t rows, int64_t dim) {
  backward_blocks(g, x, w, rstd, dx, dw, rows, dim, backward_f32);
}

void rms_norm_backward(const uint16_t* g, const uint16_t* x, const float* w, const float* rstd, uint16_t* dx,
                       float* dw, int64_t rows, int64_t dim) {
  backward_blocks(g, x, w, rstd, dx, dw, rows, dim, backward_bf16);
}

} // namespace shadowgrad::kernels
