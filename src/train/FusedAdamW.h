#pragma once
// torch::optim::AdamW with the update done in one pass over memory per parameter.
//
//   auto opt = std::make_unique<FusedAdamW>(params, torch::optim::AdamWOptions(3e-4).weight_decay(0.1));
//   opt->step();   // same state (AdamWParamState: step, exp_avg, exp_avg_sq), same save()/load() as AdamW
//
// torch::optim::AdamW::step runs about ten whole-tensor ops per parameter (decay, two moment updates, sqrt,
// divide, add eps, addcdiv) and reads or writes ~21 floats per element; here each element is read once
// (p, grad, exp_avg, exp_avg_sq) and written once (p, exp_avg, exp_avg_sq): 7 words. The loop is the engine's
// (optim/AdamWUpdate.h, shared with Python's shadowgrad.optim.AdamW); this class keeps torch::optim's state and
// save()/load(). Results agree with AdamW to float rounding (the compiler may fuse multiply-adds differently).
// fp32 contiguous CPU parameters with an fp32 or bf16 .grad take the fused path; anything else (amsgrad,
// other dtypes, CUDA) falls back to the stock AdamW step.
//
// adam_state_dtype=bfloat16 (set_state_dtype): both moments in bf16 with stochastic rounding (see below).
#include <torch/optim/adamw.h>

namespace shadowgrad::train {

class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  at::Tensor step(LossClosure closure = nullptr) override;

  // kBFloat16 keeps exp_avg and exp_avg_sq in bf16 (half their memory), stored with stochastic rounding whose bits
  // are a hash of (step, parameter position, moment, element): a resumed run rounds exactly as an unbroken one.
  // State loaded in another dtype is converted at the next step. Only the fused path supports it.
  void set_state_dtype(c10::ScalarType dtype) { state_dtype_ = dtype; }

  // The next step() reads every gradient multiplied by `factor` (gradient clipping's), rounded into the gradient's
  // dtype, as accumulate::scale_tensor_ would have left it: the same update, bit for bit, without a pass over the
  // gradients of its own. The gradients themselves are not changed. Applies to one step.
  void scale_next_gradients(double factor) { grad_scale_ = factor; }

 private:
  c10::ScalarType state_dtype_ = at::kFloat;
  double grad_scale_ = 1.0;
};

} // namespace shadowgrad::train
