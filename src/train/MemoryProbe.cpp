#include "train/MemoryProbe.h"

#include <algorithm>

#include "config/Config.h"
#include "config/Dtypes.h"
#include "data/DataSource.h"
#include "distributed/Environment.h"
#include "memory/MemoryMeter.h"
#include "model/Decoder.h"
#include "train/MicrobatchFit.h"
#include "train/OptimizerFactory.h"
#include "train/Runtime.h"
#include "train/TrainStep.h"

namespace shadowgrad::train {

memory::MemoryReport memory_report(TrainStep& step, const memory::MemoryMeter& meter, int64_t steps) {
  memory::MemoryReport r =
      memory::make_report(step.model()->parameters(), step.optimizer(), step.accumulator(), meter, steps);
  r.weight_cast_cache_bytes = step.model()->weight_cache_bytes();
  return r;
}

memory::MemoryReport probe_memory(const config::Config& config) {
  config::Config cfg = config;
  const c10::Device device = resolve_device(cfg.hardware);
  auto source = data::make_source(data::DataOptions::from_config(cfg));
  configure_threads(cfg.num_threads);
  configure_allocator_cache(cfg.cpu_allocator_cache_mib);
  memory::MemoryMeter meter(device);
  model::Decoder model(model::DecoderOptions::from_config(cfg));
  model->to(device);
  fit_microbatch(cfg, model, *source, device, nullptr, distributed::ProcessEnvironment::from_environment().world_size);
  TrainStep step(StepOptions::from_config(cfg), model, *source, device);
  meter.begin_step();
  step.run(0);
  meter.end_step();
  return memory_report(step, meter, 1);
}

namespace {

// The step peak (tracked bytes, absolute) of one forward + backward at `microbatch`, with the shadow tree allocated
// as in training. The probe's TrainStep and its shadow tree are gone when this returns.
int64_t forward_backward_peak(const config::Config& cfg, model::Decoder& model, const data::DataSource& source,
                              c10::Device device, int64_t microbatch) {
  StepOptions probe = StepOptions::from_config(cfg);
  probe.microbatch = microbatch;
  probe.accumulation_steps = 1;
  probe.fidelity_period = 0;
  probe.noise_scale = false;  // its K=1 note would be logged once per probe, about a step that is not the run's
  TrainStep step(probe, model, source, device);
  memory::MemoryMeter meter(device);
  meter.begin_step();
  step.accumulate_batch(0);
  return meter.end_step();
}

} // namespace

MicrobatchProbe probe_microbatches(const config::Config& cfg, model::Decoder& model, const data::DataSource& source,
                                   c10::Device device, int64_t world_size) {
  MicrobatchProbe out;
  memory::ProbePeaks peaks;
  peaks.small_peak = forward_backward_peak(cfg, model, source, device, peaks.small_batch);
  peaks.large_peak = forward_backward_peak(cfg, model, source, device, peaks.large_batch);
  int64_t elements = 0;
  for (const auto& p : model->parameters()) elements += p.numel();
  // A LoRA run's trainable tensors are its fp32 adapters, whatever weight_dtype holds the frozen base in.
  const auto trained_dtype = cfg.lora_rank > 0 ? c10::kFloat : config::scalar_type(cfg.weight_dtype);
  const int64_t full_state = optimizer_state_bytes_after_update(OptimizerOptions::from_config(cfg), trained_dtype,
                                                                elements);
  const bool sharded = cfg.shard_optimizer_over_data && world_size > 1;
  const int64_t state = sharded ? (full_state + world_size - 1) / world_size : full_state;
  out.model = memory::MicrobatchModel::fit(peaks, state);

  memory::MemoryEstimate& e = out.estimate;
  e.weights = memory::tensor_bytes(model->parameters()) +
              (cfg.lora_rank > 0 ? memory::tensor_bytes(model->buffers()) : 0);  // a LoRA run's frozen base
  e.optimizer_state = state;
  const int64_t shadow_element = int64_t(c10::elementSize(config::scalar_type(cfg.grad_dtype)));
  e.shadow_tree = elements * shadow_element;
  e.per_sequence = out.model.per_sequence;
  e.peak_at_one = out.model.predicted_peak(1);
  e.save_grad_bf16 = shadow_element > 2 ? elements * (shadow_element - 2) : 0;
  const bool bf16_moments_apply =
      cfg.opt_type == config::OptType::adamw && cfg.opt_fused && cfg.weight_dtype == config::FloatDtype::float32;
  e.save_adam_bf16 = bf16_moments_apply && cfg.adam_state_dtype == config::FloatDtype::float32 ? state / 2 : 0;
  return out;
}

int64_t measure_remat_full_saving(const config::Config& cfg, model::Decoder& model, const data::DataSource& source,
                                  c10::Device device) {
  const auto policy = model->options().remat;
  if (policy == model::DecoderOptions::Remat::full) return 0;
  const int64_t now = forward_backward_peak(cfg, model, source, device, 1);
  model->set_remat(model::DecoderOptions::Remat::full);
  int64_t full = 0;
  try {
    full = forward_backward_peak(cfg, model, source, device, 1);
  } catch (...) {
    model->set_remat(policy);
    throw;
  }
  model->set_remat(policy);
  return std::max<int64_t>(0, now - full);
}

} // namespace shadowgrad::train
