#include "optim/AdamWUpdate.h"

#include <cmath>
#include <cstdint>
#include <stdexcept>

#include <ATen/Parallel.h>

#include "accumulate/StochasticRounding.h"

namespace shadowgrad::optim {

namespace {

using accumulate::bf16_to_float;

// The element loop, compiled for AVX-512, AVX2 and baseline x86-64; the loader picks one for this CPU.
// Order of operations as in torch.optim.AdamW's single-tensor step.
#define SG_ADAMW_LOOP(LOAD_GRAD)                                                   \
  for (int64_t i = 0; i < n; ++i) {                                                \
    const float g = LOAD_GRAD;                                                     \
    const float m_new = m[i] * c.beta1 + g * c.one_minus_beta1;                    \
    const float v_new = v[i] * c.beta2 + g * g * c.one_minus_beta2;                \
    const float denom = std::sqrt(v_new) / c.sqrt_bias_correction2 + c.eps;       \
    p[i] = p[i] * c.decay - c.step_size * (m_new / denom);                         \
    m[i] = m_new;                                                                  \
    v[i] = v_new;                                                                  \
  }

__attribute__((target_clones("avx512f", "avx2", "default"))) void adamw_f32(float* __restrict p,
                                                                             const float* __restrict grad,
                                                                             float* __restrict m, float* __restrict v,
                                                                             int64_t n, AdamWStep c) {
  SG_ADAMW_LOOP(grad[i])
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void adamw_bf16(float* __restrict p,
                                                                              const uint16_t* __restrict grad,
                                                                              float* __restrict m,
                                                                              float* __restrict v, int64_t n,
                                                                              AdamWStep c) {
  SG_ADAMW_LOOP(bf16_to_float(grad[i]))
}

// Moments kept in bf16 (the trainer's adam_state_dtype): loaded to fp32, updated as above, and stored back with
// stochastic rounding (accumulate/StochasticRounding.h), so small updates are not lost to round-to-nearest (llm.c
// keeps its moments the same way). The bits hash (key, element): reproducible, independent of threads.
#define SG_ADAMW_LOOP_BF16_STATE(LOAD_GRAD)                                                              \
  for (int64_t i = 0; i < n; ++i) {                                                                     \
    const float g = LOAD_GRAD;                                                                          \
    const float m_new = bf16_to_float(m[i]) * c.beta1 + g * c.one_minus_beta1;                          \
    const float v_new = bf16_to_float(v[i]) * c.beta2 + g * g * c.one_minus_beta2;                      \
    const float denom = std::sqrt(v_new) / c.sqrt_bias_correction2 + c.eps;                            \
    p[i] = p[i] * c.decay - c.step_size * (m_new / denom);                                              \
    m[i] = accumulate::bf16_round_stochastic(m_new, accumulate::random_bits(key_m, uint64_t(offset + i))); \
    v[i] = accumulate::bf16_round_stochastic(v_new, accumulate::random_bits(key_v, uint64_t(offset + i))); \
  }

__attribute__((target_clones("avx512f", "avx2", "default"))) void adamw_f32_bf16_state(
    float* __restrict p, const float* __restrict grad, uint16_t* __restrict m, uint16_t* __restrict v, int64_t n,
    AdamWStep c, int64_t offset, uint64_t key_m, uint64_t key_v) {
  SG_ADAMW_LOOP_BF16_STATE(grad[i])
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void adamw_bf16_bf16_state(
    float* __restrict p, const uint16_t* __restrict grad, uint16_t* __restrict m, uint16_t* __restrict v, int64_t n,
    AdamWStep c, int64_t offset, uint64_t key_m, uint64_t key_v) {
  SG_ADAMW_LOOP_BF16_STATE(bf16_to_float(grad[i]))
}

// The same loops with the gradient scaled as read (AdamWStep::grad_scale): an fp32 product, rounded to bf16 again
// for a bf16 gradient, as accumulate::scale_tensor_ computes it in place.
#define SG_SCALED_F32 grad[i] * c.grad_scale
#define SG_SCALED_BF16 bf16_to_float(accumulate::bf16_round_nearest(bf16_to_float(grad[i]) * c.grad_scale))

__attribute__((target_clones("avx512f", "avx2", "default"))) void adamw_f32_scaled(
    float* __restrict p, const float* __restrict grad, float* __restrict m, float* __restrict v, int64_t n,
    AdamWStep c) {
  SG_ADAMW_LOOP(SG_SCALED_F32)
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void adamw_bf16_scaled(
    float* __restrict p, const uint16_t* __restrict grad, float* __restrict m, float* __restrict v, int64_t n,
    AdamWStep c) {
  SG_ADAMW_LOOP(SG_SCALED_BF16)
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void adamw_f32_bf16_state_scaled(
    float* __restrict p, const float* __restrict grad, uint16_t* __restrict m, uint16_t* __restrict v, int64_t n,
    AdamWStep c, int64_t offset, uint64_t key_m, uint64_t key_v) {
  SG_ADAMW_LOOP_BF16_STATE(SG_SCALED_F32)
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void adamw_bf16_bf16_state_scaled(
    float* __restrict p, const uint16_t* __restrict grad, uint16_t* __restrict m, uint16_t* __restrict v, int64_t n,
    AdamWStep c, int64_t offset, uint64_t key_m, uint64_t key_v) {
  SG_ADAMW_LOOP_BF16_STATE(SG_SCALED_BF16)
}

#undef SG_SCALED_F32
#undef SG_SCALED_BF16
#undef SG_ADAMW_LOOP
#undef SG_ADAMW_LOOP_BF16_STATE

// Elements per task: the blocks are fixed, so the result does not depend on the thread count.
constexpr int64_t kGrain = int64_t{1} << 15;

bool moment_ok(const at::Tensor& moment, const at::Tensor& p) {
  if (!moment.defined()) return true;
  return moment.device().is_cpu() && moment.layout() == c10::kStrided &&
         moment.is_contiguous() && moment.numel() == p.numel() &&
         (moment.scalar_type() == at::kFloat || moment.scalar_type() == at::kBFloat16);
}

} // namespace

AdamWStep AdamWStep::make(double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step,
                          double grad_scale) {
  const double bias_correction1 = 1 - std::pow(beta1, double(step));
  const double bias_correction2 = 1 - std::pow(beta2, double(step));
  return AdamWStep{float(1 - lr * weight_decay), float(beta1),      float(1 - beta1),
                   float(beta2),                 float(1 - beta2),  float(std::sqrt(bias_correction2)),
                   float(eps),                   float(lr / bias_correction1), float(grad_scale)};
}

bool adamw_fusable(const at::Tensor& p, const at::Tensor& grad, const at::Tensor& exp_avg,
                   const at::Tensor& exp_avg_sq) {
  return p.device().is_cpu() && p.scalar_type() == at::kFloat && p.layout() == c10::kStrided && p.is_contiguous() &&
         grad.device().is_cpu() && grad.layout() == c10::kStrided && grad.is_contiguous() && !grad.is_neg() &&
         grad.numel() == p.numel() && (grad.scalar_type() == at::kFloat || grad.scalar_type() == at::kBFloat16) &&
         moment_ok(exp_avg, p) && moment_ok(exp_avg_sq, p) &&
         (!exp_avg.defined() || !exp_avg_sq.defined() || exp_avg.scalar_type() == exp_avg_sq.scalar_type());
}

void adamw_update_(const at::Tensor& p, const at::Tensor& grad, const at::Tensor& exp_avg,
                   const at::Tensor& exp_avg_sq, const AdamWStep& c, uint64_t key_m, uint64_t key_v) {
  if (!exp_avg.defined() || !exp_avg_sq.defined() || !adamw_fusable(p, grad, exp_avg, exp_avg_sq))
    throw std::invalid_argument("adamw_update_: needs an fp32 contiguous CPU parameter, a contiguous fp32 or bf16 "
                                "gradient and contiguous moments (both fp32 or both bf16) of the parameter's size; "
                                "check adamw_fusable() first");
  // Written through raw pointers: bump the version counters as an in-place op would, so that autograd still
  // refuses a backward through a graph that saved one of these tensors before the step.
  for (const at::Tensor* t : {&p, &exp_avg, &exp_avg_sq}) t->unsafeGetTensorImpl()->bump_version();
  float* pp = p.data_ptr<float>();
  const bool bf16_grad = grad.scalar_type() == at::kBFloat16;
  const void* g = grad.data_ptr();
  const bool scaled = c.grad_scale != 1.0f;  // the unscaled loops stay as they were, multiply and all
  if (exp_avg.scalar_type() == at::kBFloat16) {
    auto* m = static_cast<uint16_t*>(exp_avg.data_ptr());
    auto* v = static_cast<uint16_t*>(exp_avg_sq.data_ptr());
    at::parallel_for(0, p.numel(), kGrain, [&](int64_t begin, int64_t end) {
      const auto* g16 = static_cast<const uint16_t*>(g) + begin;
      const auto* g32 = static_cast<const float*>(g) + begin;
      const int64_t n = end - begin;
      if (bf16_grad)
        (scaled ? adamw_bf16_bf16_state_scaled : adamw_bf16_bf16_state)(pp + begin, g16, m + begin, v + begin, n, c,
                                                                         begin, key_m, key_v);
      else
        (scaled ? adamw_f32_bf16_state_scaled : adamw_f32_bf16_state)(pp + begin, g32, m + begin, v + begin, n, c,
                                                                       begin, key_m, key_v);
    });
    return;
  }
  float* m = exp_avg.data_ptr<float>();
  float* v = exp_avg_sq.data_ptr<float>();
  at::parallel_for(0, p.numel(), kGrain, [&](int64_t begin, int64_t end) {
    if (bf16_grad)
      (scaled ? adamw_bf16_scaled : adamw_bf16)(pp + begin, static_cast<const uint16_t*>(g) + begin, m + begin,
                                                v + begin, end - begin, c);
    else
      (scaled ? adamw_f32_scaled : adamw_f32)(pp + begin, static_cast<const float*>(g) + begin, m + begin, v + begin,
                                              end - begin, c);
  });
}

} // namespace shadowgrad::optim
