#pragma once
// torch::optim::AdamW with the update done in one pass over memory per parameter.
//
//   auto opt = std::make_unique<FusedAdamW>(params, torch::optim::AdamWOptions(3e-4).weight_decay(0.1));
//   opt->step();   // same state (AdamWParamState: step, exp_avg, exp_avg_sq), same save()/load() as AdamW
//
// torch::optim::AdamW::step runs about ten whole-tensor ops per parameter (decay, two moment updates, sqrt,
// divide, add eps, addcdiv) and reads or writes ~21 floats per element; here each element is read once
// (p, grad, exp_avg, exp_avg_sq) and written once (p, exp_avg, exp_avg_sq): 7 words. Same formula and order of
// operations; results agree with AdamW to float rounding (the compiler may fuse multiply-adds differently).
// fp32 contiguous CPU parameters with an fp32 or bf16 .grad take the fused path; anything else (amsgrad,
// other dtypes, CUDA) falls back to the stock AdamW step.
#include <torch/optim/adamw.h>

namespace shadowgrad::train {

class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  at::Tensor step(LossClosure closure = nullptr) override;
};

} // namespace shadowgrad::train
