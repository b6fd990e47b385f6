#include "train/MemoryProbe.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "config/Config.h"
#include "config/Dtypes.h"
#include "data/DataSource.h"
#include "distributed/Environment.h"
#include "memory/MemoryBudget.h"
#include "memory/MemoryMeter.h"
#include "model/Decoder.h"
#include "train/MicrobatchFit.h"
#include "train/OptimizerFactory.h"
#include "train/Runtime.h"
#include "train/TrainStep.h"
#include "util/Errors.h"

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
  refuse_what_cannot_fit(cfg, device, distributed::ProcessEnvironment::from_environment().world_size);
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

// Elements of the decoder's weights (the base: trained, or frozen under LoRA) and of its LoRA adapters, from the
// shapes DecoderImpl's constructor gives them (tests/test_memory_footprint.cpp holds the two together).
struct ElementCounts {
  int64_t base = 0, adapters = 0;
  int64_t never_cast = 0;  // base elements that reach the compute dtype without compute(): the norms and, untied, the
                           // embedding (gathered by row)
};

ElementCounts count_elements(const model::DecoderOptions& o) {
  const int64_t E = o.emb_dim, Q = o.num_query_heads * o.head_dim, KV = o.num_kv_heads * o.head_dim, M = o.mlp_dim;
  const int64_t layer_norms = 2 * E + (o.qk_norm ? 2 * o.head_dim : 0);
  int64_t layer = layer_norms + Q * E + 2 * KV * E + E * Q + 3 * M * E;  // q k v o, gate up down
  if (o.attention_bias) layer += Q + 2 * KV;
  ElementCounts n;
  n.base = o.vocab_size * E * (o.tied_output ? 1 : 2) + E + o.num_layers * layer;
  n.never_cast = o.num_layers * layer_norms + E + (o.tied_output ? 0 : o.vocab_size * E);
  // [in, out] of each projection, in model::Projection's order.
  const int64_t sizes[model::kProjections][2] = {{E, Q}, {E, KV}, {E, KV}, {Q, E}, {E, M}, {E, M}, {M, E}};
  for (model::Projection p : model::kAllProjections)
    if (o.lora.targets(p)) n.adapters += o.num_layers * o.lora.rank * (sizes[int(p)][0] + sizes[int(p)][1]);
  return n;
}

// What backward keeps per token and layer, in activations (lower bounds, read off the decoder's forward):
//   none:    the block's input and its mid-block residual (each norm keeps its input), q k v as the attention core
//            keeps them, the attention's output, and SwiGLU's gate and up;
//   minimal: the same but the attention's output (the core is re-run);
//   full:    the block's input, plus one block's `none` set while that block is re-run in backward.
int64_t activation_elements_per_token(const model::DecoderOptions& o) {
  const int64_t E = o.emb_dim, Q = o.num_query_heads * o.head_dim, KV = o.num_kv_heads * o.head_dim, M = o.mlp_dim;
  const int64_t none = 2 * E + (Q + 2 * KV) + Q + 2 * M;
  switch (o.remat) {
    case model::DecoderOptions::Remat::full: return o.num_layers * E + none;
    case model::DecoderOptions::Remat::minimal: return o.num_layers * (none - Q);
    default: return o.num_layers * none;
  }
}

std::string describe_run(const config::Config& cfg, const model::DecoderOptions& o, const ElementCounts& n) {
  const std::string shape = fmt::format("a {:.3g}-parameter model ({} layers of width {}, vocabulary {})",
                                        double(n.base), o.num_layers, o.emb_dim, o.vocab_size);
  if (!o.lora.enabled())
    return fmt::format("{} trained in full (weight_dtype={}, grad_dtype={}, adam_state_dtype={}, remat_policy={}, "
                       "hoist_weight_cast={})",
                       shape, cfg.weight_dtype, cfg.grad_dtype, cfg.adam_state_dtype, cfg.remat_policy,
                       cfg.hoist_weight_cast);
  return fmt::format("{} with LoRA r={} on {} ({:.3g} adapter parameters; the base frozen in weight_dtype={}; "
                     "remat_policy={})",
                     shape, o.lora.rank, cfg.lora_target_modules, double(n.adapters), cfg.weight_dtype,
                     cfg.remat_policy);
}

} // namespace

memory::Footprint footprint_from_config(const config::Config& cfg, int64_t world_size) {
  const model::DecoderOptions o = model::DecoderOptions::from_config(cfg);
  const ElementCounts n = count_elements(o);
  const bool lora = o.lora.enabled();
  // A LoRA run trains its fp32 adapters; the base, frozen, has no shadow, no optimizer state and no cached cast.
  const int64_t trained = lora ? n.adapters : n.base;
  const auto trained_dtype = lora ? c10::kFloat : o.weight_dtype;
  memory::Footprint f;
  f.weights = n.base * int64_t(c10::elementSize(o.weight_dtype)) + n.adapters * int64_t(c10::elementSize(c10::kFloat));
  f.shadow_tree = trained * int64_t(c10::elementSize(config::scalar_type(cfg.grad_dtype)));
  const int64_t state = optimizer_state_bytes_after_update(OptimizerOptions::from_config(cfg), trained_dtype, trained);
  f.optimizer_state = cfg.shard_optimizer_over_data && world_size > 1 ? (state + world_size - 1) / world_size : state;
  const int64_t compute_size = int64_t(c10::elementSize(o.compute_dtype));
  if (o.hoist_weight_cast && o.compute_dtype != trained_dtype)
    f.weight_casts = (trained - (lora ? 0 : n.never_cast)) * compute_size;
  const int64_t microbatch = cfg.per_device_batch_size == config::kAuto ? 1 : cfg.per_device_batch_size;
  f.activations = microbatch * cfg.max_target_length * activation_elements_per_token(o) * compute_size;
  return f;
}

void refuse_what_cannot_fit(const config::Config& cfg, c10::Device device, int64_t world_size) {
  if (!device.is_cpu()) return;
  const memory::Footprint f = footprint_from_config(cfg, world_size);
  const memory::MemoryHeadroom headroom = memory::read_headroom();
  if (headroom.bytes < 0) return;
  const int64_t sharing = std::max(1, distributed::ProcessEnvironment::from_environment().local_world_size);
  const int64_t available = headroom.bytes / sharing;
  if (f.total() <= available) return;

  // The lean settings, each on top of the run's own config: full fine-tuning at its leanest, LoRA (r=16 unless a rank
  // is set) with the run's base dtype, LoRA with a bf16 base.
  std::vector<std::pair<std::string, config::Config>> variants;
  auto variant = [&](const std::string& overrides, auto&& change) {
    config::Config v = cfg;
    change(v);
    variants.emplace_back(overrides, v);
  };
  const std::string remat = cfg.remat_policy == config::RematPolicy::full ? "" : " remat_policy=full";
  auto lean = [](config::Config& v) {
    v.grad_dtype = config::GradDtype::bfloat16;
    v.adam_state_dtype = config::FloatDtype::bfloat16;
    v.hoist_weight_cast = false;
    v.remat_policy = config::RematPolicy::full;
  };
  const int64_t rank = cfg.lora_rank > 0 ? cfg.lora_rank : 16;
  if (cfg.lora_rank == 0)
    variant("grad_dtype=bfloat16 adam_state_dtype=bfloat16 hoist_weight_cast=false" + remat, lean);
  if (cfg.lora_rank == 0 && cfg.weight_dtype == config::FloatDtype::float32)
    variant(fmt::format("lora_rank={}{}", rank, remat), [&](config::Config& v) {
      v.lora_rank = rank;
      v.remat_policy = config::RematPolicy::full;
    });
  if (cfg.lora_rank == 0 || cfg.weight_dtype != config::FloatDtype::bfloat16)
    variant(fmt::format("{}weight_dtype=bfloat16{}", cfg.lora_rank == 0 ? fmt::format("lora_rank={} ", rank) : "",
                        remat),
            [&](config::Config& v) {
              v.lora_rank = rank;
              v.weight_dtype = config::FloatDtype::bfloat16;
              v.remat_policy = config::RematPolicy::full;
            });
  else if (cfg.remat_policy != config::RematPolicy::full)
    variant("remat_policy=full", [](config::Config& v) { v.remat_policy = config::RematPolicy::full; });
  std::vector<memory::FootprintAlternative> tried;
  for (const auto& [overrides, v] : variants)
    tried.push_back({overrides, footprint_from_config(v, world_size).total()});

  const model::DecoderOptions o = model::DecoderOptions::from_config(cfg);
  throw InputError(memory::does_not_fit_before_build(
      f, describe_run(cfg, o, count_elements(o)), available,
      headroom.source + (sharing > 1 ? fmt::format(" / {} processes", sharing) : ""), tried));
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
