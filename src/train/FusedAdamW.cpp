#include "train/FusedAdamW.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include <ATen/Parallel.h>
#include <c10/util/string_utils.h>

#include "accumulate/StochasticRounding.h"

namespace shadowgrad::train {

namespace {

struct Coefficients {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, sqrt_bias_correction2, eps, step_size;
};

using accumulate::bf16_to_float;

// The element loop, compiled for AVX-512, AVX2 and baseline x86-64; the loader picks one for this CPU.
// Order of operations as in torch::optim::AdamW::step.
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
                                                                             int64_t n, Coefficients c) {
  SG_ADAMW_LOOP(grad[i])
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void adamw_bf16(float* __restrict p,
                                                                              const uint16_t* __restrict grad,
                                                                              float* __restrict m,
                                                                              float* __restrict v, int64_t n,
                                                                              Coefficients c) {
  SG_ADAMW_LOOP(bf16_to_float(grad[i]))
}

// Moments kept in bf16 (adam_state_dtype): loaded to fp32, updated as above, and stored back with stochastic
// rounding (accumulate/StochasticRounding.h), so small updates are not lost to round-to-nearest (llm.c keeps its
// moments the same way). The bits hash (step, parameter, moment, element): reproducible, independent of threads.
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
    Coefficients c, int64_t offset, uint64_t key_m, uint64_t key_v) {
  SG_ADAMW_LOOP_BF16_STATE(grad[i])
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void adamw_bf16_bf16_state(
    float* __restrict p, const uint16_t* __restrict grad, uint16_t* __restrict m, uint16_t* __restrict v, int64_t n,
    Coefficients c, int64_t offset, uint64_t key_m, uint64_t key_v) {
  SG_ADAMW_LOOP_BF16_STATE(bf16_to_float(grad[i]))
}

#undef SG_ADAMW_LOOP
#undef SG_ADAMW_LOOP_BF16_STATE

// Seeds the rounding bits of the moments; changing it changes every bf16-state run's bits.
constexpr uint64_t kMomentRoundingSeed = 0x5ad0a5a7e5eedULL;

at::Tensor in_dtype(const at::Tensor& t, c10::ScalarType dtype) {
  return t.scalar_type() == dtype && t.is_contiguous() ? t : t.to(dtype).contiguous();  // e.g. after load()
}

bool fusable(const at::Tensor& p, const at::Tensor& grad, const torch::optim::AdamWOptions& o) {
  return !o.amsgrad() && p.device().is_cpu() && p.scalar_type() == at::kFloat && p.is_contiguous() &&
         grad.layout() == c10::kStrided && grad.is_contiguous() && grad.numel() == p.numel() &&
         (grad.scalar_type() == at::kFloat || grad.scalar_type() == at::kBFloat16);
}

} // namespace

at::Tensor FusedAdamW::step(LossClosure closure) {
  at::NoGradGuard no_grad;
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
    for (auto& p : group.params()) {
      const auto& grad = p.grad();
      if (!grad.defined()) continue;
      if (!fusable(p, grad, o)) {  // nothing has been updated yet: hand the whole step to the stock AdamW
        if (state_dtype_ != at::kFloat)
          throw std::invalid_argument("FusedAdamW: bf16 moments (adam_state_dtype=bfloat16) need fp32 contiguous CPU "
                                      "parameters with an fp32 or bf16 gradient, and amsgrad off");
        torch::optim::AdamW::step();
        return loss;
      }
    }
  }
  size_t position = 0;  // the parameter's place over all groups: part of its rounding seed
  for (auto& group : param_groups_) {
    auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    for (auto& p : group.params()) {
      const size_t param_position = position++;
      const auto& grad = p.grad();
      if (!grad.defined()) continue;
      const auto key = c10::guts::to_string(p.unsafeGetTensorImpl());
      auto it = state_.find(key);
      if (it == state_.end()) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(at::zeros_like(p, p.options().dtype(state_dtype_), at::MemoryFormat::Contiguous));
        fresh->exp_avg_sq(at::zeros_like(p, p.options().dtype(state_dtype_), at::MemoryFormat::Contiguous));
        it = state_.emplace(key, std::move(fresh)).first;
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*it->second);
      state.exp_avg(in_dtype(state.exp_avg(), state_dtype_));
      state.exp_avg_sq(in_dtype(state.exp_avg_sq(), state_dtype_));
      state.step(state.step() + 1);
      const double bias_correction1 = 1 - std::pow(beta1, double(state.step()));
      const double bias_correction2 = 1 - std::pow(beta2, double(state.step()));
      const Coefficients c{float(1 - o.lr() * o.weight_decay()), float(beta1), float(1 - beta1), float(beta2),
                           float(1 - beta2), float(std::sqrt(bias_correction2)), float(o.eps()),
                           float(o.lr() / bias_correction1)};
      float* pp = p.data_ptr<float>();
      const bool bf16 = grad.scalar_type() == at::kBFloat16;
      const void* g = grad.data_ptr();
      if (state_dtype_ == at::kBFloat16) {
        auto* m = static_cast<uint16_t*>(state.exp_avg().data_ptr());
        auto* v = static_cast<uint16_t*>(state.exp_avg_sq().data_ptr());
        const uint64_t key_m = accumulate::rounding_key(kMomentRoundingSeed, {uint64_t(state.step()), param_position, 1});
        const uint64_t key_v = accumulate::rounding_key(kMomentRoundingSeed, {uint64_t(state.step()), param_position, 2});
        at::parallel_for(0, p.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
          if (bf16)
            adamw_bf16_bf16_state(pp + begin, static_cast<const uint16_t*>(g) + begin, m + begin, v + begin,
                                  end - begin, c, begin, key_m, key_v);
          else
            adamw_f32_bf16_state(pp + begin, static_cast<const float*>(g) + begin, m + begin, v + begin, end - begin,
                                 c, begin, key_m, key_v);
        });
        continue;
      }
      float* m = state.exp_avg().data_ptr<float>();
      float* v = state.exp_avg_sq().data_ptr<float>();
      at::parallel_for(0, p.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
        if (bf16)
          adamw_bf16(pp + begin, static_cast<const uint16_t*>(g) + begin, m + begin, v + begin, end - begin, c);
        else
          adamw_f32(pp + begin, static_cast<const float*>(g) + begin, m + begin, v + begin, end - begin, c);
      });
    }
  }
  return loss;
}

} // namespace shadowgrad::train
