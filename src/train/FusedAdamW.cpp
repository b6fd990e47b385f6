#include "train/FusedAdamW.h"

#include <cstdint>

#include <ATen/ATen.h>
#include <c10/util/string_utils.h>

#include "accumulate/Scale.h"
#include "accumulate/StochasticRounding.h"
#include "optim/AdamWUpdate.h"
#include "util/OptimizerStateKey.h"

namespace shadowgrad::train {

namespace {

// Seeds the rounding bits of the moments; changing it changes every bf16-state run's bits.
constexpr uint64_t kMomentRoundingSeed = 0x5ad0a5a7e5eedULL;

at::Tensor in_dtype(const at::Tensor& t, c10::ScalarType dtype) {
  return t.scalar_type() == dtype && t.is_contiguous() ? t : t.to(dtype).contiguous();  // e.g. after load()
}

// The moments are created (or converted) contiguous in the state dtype below, so only p and grad decide.
bool fusable(const at::Tensor& p, const at::Tensor& grad, const torch::optim::AdamWOptions& o) {
  return !o.amsgrad() && optim::adamw_fusable(p, grad);
}

} // namespace

at::Tensor FusedAdamW::step(LossClosure closure) {
  at::NoGradGuard no_grad;
  const double grad_scale = grad_scale_;
  grad_scale_ = 1.0;
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
        if (grad_scale != 1.0)
          for (auto& g : param_groups_)
            for (auto& q : g.params())
              if (q.grad().defined()) accumulate::scale_tensor_(q.mutable_grad(), grad_scale);
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
      const auto key = util::optimizer_state_key(p);
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
      const auto c = optim::AdamWStep::make(o.lr(), beta1, beta2, o.eps(), o.weight_decay(), state.step(), grad_scale);
      uint64_t key_m = 0, key_v = 0;
      if (state_dtype_ == at::kBFloat16) {
        key_m = accumulate::rounding_key(kMomentRoundingSeed, {uint64_t(state.step()), param_position, 1});
        key_v = accumulate::rounding_key(kMomentRoundingSeed, {uint64_t(state.step()), param_position, 2});
      }
      optim::adamw_update_(p, grad, state.exp_avg(), state.exp_avg_sq(), c, key_m, key_v);
    }
  }
  return loss;
}

} // namespace shadowgrad::train
