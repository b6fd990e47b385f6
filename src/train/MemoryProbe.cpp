#include "train/MemoryProbe.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/Config.h"
#include "config/Dtypes.h"
#include "data/DataSource.h"
#include "distributed/Environment.h"
#include "memory/Footprint.h"
#include "memory/MemoryBudget.h"
#include "memory/MemoryMeter.h"
#include "model/Decoder.h"
#include "model/WeightCount.h"
#include "train/MicrobatchFit.h"
#include "train/OptimizerFactory.h"
#include "train/Runtime.h"
#include "train/TrainStep.h"
#include "util/Errors.h"
#include "util/Saturating.h"

namespace shadowgrad::train {

using util::sat_add;
using util::sat_mul;

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

// What backward keeps per token and layer, in activations (lower bounds, read off the decoder's forward):
//   none:    the block's input and its mid-block residual (each norm keeps its input), q k v as the attention core
//            keeps them, the attention's output, and SwiGLU's gate and up;
//   minimal: the same but the attention's output (the core is re-run);
//   full:    the block's input, plus one block's `none` set while that block is re-run in backward.
// Saturating (util/Saturating.h), as the weight counts: a crafted width cannot wrap into a figure that fits.
int64_t activation_elements_per_token(const model::DecoderOptions& o) {
  const int64_t E = o.emb_dim, Q = sat_mul(o.num_query_heads, o.head_dim), KV = sat_mul(o.num_kv_heads, o.head_dim),
                M = o.mlp_dim;
  const int64_t no_core = sat_add(sat_add(sat_mul(2, E), sat_add(Q, sat_mul(2, KV))), sat_mul(2, M));
  const int64_t none = sat_add(no_core, Q);
  switch (o.remat) {
    case model::DecoderOptions::Remat::full: return sat_add(sat_mul(o.num_layers, E), none);
    case model::DecoderOptions::Remat::minimal: return sat_mul(o.num_layers, no_core);
    default: return sat_mul(o.num_layers, none);
  }
}

// lora_dropout, per token: each targeted projection's mask, 1 byte an element, and its own dropped copy of its input
// in the compute dtype, which the adapter's A keeps where without dropout it keeps the input itself (shared by q, k
// and v, and by gate and up). Over the layers whose graph is held at once (one under remat_policy=full); the first
// layer's q, k and v masks are not kept (its input, from the frozen embedding, needs no gradient).
int64_t dropout_bytes_per_token(const model::DecoderOptions& o, int64_t compute_size) {
  if (!o.lora.enabled() || o.lora.dropout <= 0) return 0;
  using model::Projection;
  const int64_t E = o.emb_dim, Q = sat_mul(o.num_query_heads, o.head_dim);
  const int64_t qkv = o.lora.targets(Projection::q) + o.lora.targets(Projection::k) + o.lora.targets(Projection::v);
  const int64_t gate_up = o.lora.targets(Projection::gate) + o.lora.targets(Projection::up);
  const int64_t masks = sat_add(sat_add(sat_mul(qkv + gate_up, E), o.lora.targets(Projection::o) ? Q : 0),
                                o.lora.targets(Projection::down) ? o.mlp_dim : 0);
  const int64_t copies = sat_mul(std::max<int64_t>(qkv - 1, 0) + std::max<int64_t>(gate_up - 1, 0), E);
  const int64_t layer = sat_add(sat_mul(copies, compute_size), masks);
  if (o.remat == model::DecoderOptions::Remat::full) return layer;
  return sat_mul(o.num_layers, layer) - sat_mul(qkv, E);
}

std::string describe_run(const config::Config& cfg, const model::DecoderOptions& o, const model::WeightCount& n) {
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

// ZeRO-3's largest unit (distributed/ParameterShards.h), in elements: a decoder block, the embedding, or the final
// norm with an untied output.
int64_t largest_unit_elements(const model::DecoderOptions& o) {
  const int64_t E = o.emb_dim, Q = o.num_query_heads * o.head_dim, KV = o.num_kv_heads * o.head_dim;
  const int64_t block = sat_add(sat_add(2 * E, sat_mul(sat_add(Q, KV), 2 * E)), sat_mul(3 * E, o.mlp_dim)) +
                        (o.attention_bias ? Q + 2 * KV : 0) + (o.qk_norm ? 2 * o.head_dim : 0);
  const int64_t table = sat_mul(o.vocab_size, E);
  return std::max({block, table, o.tied_output ? E : sat_add(table, E)});
}

} // namespace

memory::Footprint footprint_from_config(const config::Config& cfg, int64_t world_size) {
  const model::DecoderOptions o = model::DecoderOptions::from_config(cfg);
  const model::WeightCount n = model::count_weights(o);
  const bool lora = o.lora.enabled();
  // A LoRA run trains its fp32 adapters; the base, frozen, has no shadow and no optimizer state.
  const int64_t trained = lora ? n.adapters : n.base;
  const auto trained_dtype = lora ? c10::kFloat : o.weight_dtype;
  memory::Footprint f;
  f.weights = n.bytes;
  // shard_parameters_over_data: this process's range of the base, and the two units gathered at once. The model is
  // built unit by unit into that range (train/ModelBuild.h), within the same two units; only where rank 0 probes the
  // microbatch is it built whole first.
  if (cfg.shard_parameters_over_data && world_size > 1) {
    const int64_t base_size = int64_t(c10::elementSize(o.weight_dtype));
    if (probes_microbatch(cfg)) f.whole_at_start = n.bytes;
    f.weights = sat_add(sat_mul(sat_add((n.base + world_size - 1) / world_size, sat_mul(2, largest_unit_elements(o))),
                                base_size),
                        sat_mul(n.adapters, 4));
  }
  f.shadow_tree = sat_mul(trained, int64_t(c10::elementSize(config::scalar_type(cfg.grad_dtype))));
  // shard_gradients_over_data: this process's range of the tree (ShardPlan: ceil(T / N) elements at most).
  if (cfg.shard_gradients_over_data && world_size > 1)
    f.shadow_tree = sat_mul((trained + world_size - 1) / world_size,
                            int64_t(c10::elementSize(config::scalar_type(cfg.grad_dtype))));
  const int64_t state = optimizer_state_bytes_after_update(OptimizerOptions::from_config(cfg), trained_dtype, trained);
  f.optimizer_state = cfg.shard_optimizer_over_data && world_size > 1 ? state / world_size + (state % world_size != 0) : state;
  const int64_t compute_size = int64_t(c10::elementSize(o.compute_dtype));
  if (o.hoist_weight_cast && o.compute_dtype != trained_dtype)
    f.weight_casts = sat_mul(trained - (lora ? 0 : n.never_cast), compute_size);
  // The frozen base's casts are hoisted too where they narrow (an fp32 base under bf16 compute: model::DecoderImpl's
  // frozen()): every base tensor but the norms and an untied embedding, gathered by row.
  if (lora && o.hoist_weight_cast && compute_size < int64_t(c10::elementSize(o.weight_dtype)))
    f.weight_casts = sat_add(f.weight_casts, sat_mul(n.base - n.never_cast, compute_size));
  // Rows of max_target_length a microbatch holds at most: a preference pair is two sequences.
  const int64_t rows = (cfg.per_device_batch_size == config::kAuto ? 1 : cfg.per_device_batch_size) *
                       (cfg.dataset_type == config::DatasetType::preference ? 2 : 1);
  f.activations = sat_mul(sat_mul(rows, cfg.max_target_length),
                          sat_add(sat_mul(activation_elements_per_token(o), compute_size),
                                  dropout_bytes_per_token(o, compute_size)));
  return f;
}

void refuse_what_cannot_fit(const config::Config& cfg, c10::Device device, int64_t world_size) {
  if (!device.is_cpu()) return;
  const memory::Footprint f = footprint_from_config(cfg, world_size);
  if (world_size > 1 && cfg.shard_optimizer_over_data)  // what sharding leaves each process, before it is built
    spdlog::info("memory plan of each of the {} processes: {}", world_size, memory::describe(f));
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
      f, describe_run(cfg, o, model::count_weights(o)), available,
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
  // A LoRA run's frozen base too (its weights, not the RoPE tables and the causal mask among the buffers).
  e.weights = memory::tensor_bytes(model->parameters()) +
              (cfg.lora_rank > 0 ? sat_mul(model::count_weights(model->options()).base,
                                           int64_t(c10::elementSize(model->options().weight_dtype)))
                                 : 0);
  e.optimizer_state = state;
  const int64_t shadow_element = int64_t(c10::elementSize(config::scalar_type(cfg.grad_dtype)));
  e.shadow_tree = (cfg.shard_gradients_over_data && world_size > 1 ? (elements + world_size - 1) / world_size
                                                                    : elements) *
                  shadow_element;
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
