#pragma once

#include <cstdint>

namespace shadowgrad::kernels {

// RMSNorm over the rows of x [rows x dim], fp32 math, each output rounded once into the storage type:
//   rstd[r] = 1 / sqrt(mean(x[r]^2) + eps),  y[r] = (x[r] * rstd[r]) * w
// T is float, or uint16_t for bf16 bits. One read of x and one write of y per row.
void rms_norm_forward(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim, float eps);
void rms_norm_forward(const uint16_t* x, const float* w, uint16_t* y, float* rstd, int64_t rows, int64_t dim,
                      float eps);

// Its backward from g = dL/dy: with n = x * rstd and h = g * w,
//   dx = rstd * (h - n * mean(h * n)),  dw = sum over rows of g * n (fp32, rows summed in fixed blocks, blocks in
// order: the same bits for any thread count).
void rms_norm_backward(const float* g, const float* x, const float* w, const float* rstd, float* dx, float* dw,
                       int64_t rows, int64_t dim);
void rms_norm_backward(const uint16_t* g, const uint16_t* x, const float* w, const float* rstd, uint16_t* dx,
                       float* dw, int64_t rows, int64_t dim);

} // namespace shadowgrad::kernels
