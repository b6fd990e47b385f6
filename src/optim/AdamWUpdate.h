#pragma once
// One AdamW update of one parameter in a single pass over memory: the loop behind the trainer's FusedAdamW
// (train/FusedAdamW.h) and Python's shadowgrad.optim.AdamW (python/csrc/bindings.cpp). Part of the installed
// engine (cmake/Engine.cmake) so that both share this one copy.
//
//   auto c = AdamWStep::make(lr, beta1, beta2, eps, weight_decay, step);   // step counts from 1
//   if (adamw_fusable(p, grad, exp_avg, exp_avg_sq)) adamw_update_(p, grad, exp_avg, exp_avg_sq, c);
//
// The stock step (torch.optim.AdamW's single-tensor path, torch::optim::AdamW::step) runs about ten whole-tensor
// ops per parameter and reads or writes ~21 floats per element; here each element of p, grad, exp_avg and
// exp_avg_sq is read once and p, exp_avg, exp_avg_sq written once. Same formula and order of operations, so the
// results agree with the stock step to fp32 rounding (the compiler may fuse multiply-adds differently). A bf16
// grad (the shadow tree) is widened element by element: no converted copy.
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace shadowgrad::optim {

// The scalars of one step, computed in double as torch.optim.AdamW computes them, then rounded to float.
// grad_scale (the clip factor; 1: none) multiplies each gradient element as it is read, rounded into the gradient's
// dtype as accumulate::scale_tensor_ rounds it: the same update as scaling the gradient first, without that pass.
struct AdamWStep {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, sqrt_bias_correction2, eps, step_size;
  float grad_scale = 1.0f;
  static AdamWStep make(double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step,
                        double grad_scale = 1.0);
};

// Whether adamw_update_ takes these tensors: p fp32, contiguous, on the CPU; grad strided, contiguous, fp32 or
// bf16, with p's number of elements; the moments contiguous CPU tensors with p's number of elements, both fp32 or
// both bf16. Undefined moments (not created yet) are not checked: create them contiguous.
bool adamw_fusable(const at::Tensor& p, const at::Tensor& grad, const at::Tensor& exp_avg = {},
                   const at::Tensor& exp_avg_sq = {});

// p, exp_avg and exp_avg_sq updated in place (adamw_fusable must hold). bf16 moments are stored with stochastic
// rounding whose bits hash (key, element): key_m and key_v (accumulate::rounding_key) make a resumed run round
// exactly as an unbroken one; they are unused for fp32 moments. The result does not depend on the thread count.
void adamw_update_(const at::Tensor& p, const at::Tensor& grad, const at::Tensor& exp_avg,
                   const at::Tensor& exp_avg_sq, const AdamWStep& c, uint64_t key_m = 0, uint64_t key_v = 0);

} // namespace shadowgrad::optim
