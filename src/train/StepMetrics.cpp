#include "train/StepMetrics.h"

#include <cmath>

#include "train/TrainStep.h"

namespace shadowgrad::train {

JsonNumbers step_metrics(const StepStats& st, int64_t peak_mem_bytes, int64_t skipped_steps) {
  JsonNumbers out{{"step", double(st.step + 1)},
          {"loss", st.loss},
          {"grad_norm", st.grad_norm},
          {"lr", st.lr},
          {"tokens", double(st.tokens)},
          {"global_batch_size", double(st.global_batch)},
          {"step_time_s", st.seconds},
          {"tokens_per_s", st.input_tokens / st.seconds},  // real (non-padding) input tokens
          {"target_tokens", double(st.tokens)},
          {"input_tokens", double(st.input_tokens)},
          {"padding_fraction", st.padding_fraction},
          {"peak_mem_bytes", double(peak_mem_bytes)},
          {"skipped_steps", double(skipped_steps)},
          {"data_s", st.data_s},
          {"forward_s", st.forward_s},
          {"backward_s", st.backward_s},
          {"fold_s", st.fold_s},
          {"optimizer_s", st.optimizer_s}};
  if (st.no_targets) out.push_back({"no_target_skip", 1.0});
  // Only on the steps that measure them (see FoldNumerics in TrainStep.h).
  if (!std::isnan(st.grad_rel_error)) out.push_back({"grad_rel_error", st.grad_rel_error});
  if (!std::isnan(st.underflow_fraction)) out.push_back({"fp16_underflow_fraction", st.underflow_fraction});
  // gradient_noise_scale (NoiseScale.h): absent on steps without an estimate (one microbatch in all, a skipped step).
  if (st.noise) {
    out.push_back({"grad_sq_norm_micro", st.noise->grad_sq_norm_micro});
    out.push_back({"grad_sq_norm_global", st.noise->grad_sq_norm_global});
    out.push_back({"gns_tokens", st.noise->gns_tokens});
    if (!std::isnan(st.grad_sq_norm_global_fp32)) out.push_back({"grad_sq_norm_global_fp32", st.grad_sq_norm_global_fp32});
  }
  if (st.preference)  // use_dpo: TRL's quantities, each a mean over the global batch's pairs
    for (const auto& [name, value] : st.preference->metrics("")) out.push_back({name, value});
  return out;
}

} // namespace shadowgrad::train
