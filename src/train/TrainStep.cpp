#include "train/TrainStep.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/optim/optimizer.h>

#include "accumulate/StochasticRounding.h"
#include "data/DataSource.h"
#include "data/PairSource.h"
#include "distributed/Communicator.h"
#include "distributed/DataParallel.h"
#include "distributed/ParameterShards.h"
#include "distributed/ShardedOptimizer.h"
#include "model/DecoderOptions.h"
#include "train/FusedAdamW.h"
#include "train/OptimizerFactory.h"
#include "train/TokenLoss.h"

namespace shadowgrad::train {

namespace {
std::function<bool(int64_t)>& nan_fault_hook() {
  static std::function<bool(int64_t)> hook;
  return hook;
}

// ZeRO-3: the weights cut here from the whole model, unless the model was built cut (`built`). Every process checks it
// starts from the same weights: each unit was hashed while it was whole (ParameterShards::start_checksum), and a LoRA
// run's adapters, which are not cut, are hashed after them.
std::unique_ptr<distributed::ParameterShards> shard_weights(distributed::DataParallel* dp, model::Decoder& model,
                                                            std::unique_ptr<distributed::ParameterShards> built) {
  if (!dp || !dp->shard_parameters()) {
    if (built) throw std::logic_error("TrainStep: weight shards given to a run without shard_parameters_over_data");
    return nullptr;
  }
  auto shards = built ? std::move(built)
                      : std::make_unique<distributed::ParameterShards>(dp->shared_communicator(), model->unit_tensors(),
                                                                       dp->reshard_after_forward());
  dp->verify_same_start(model->options().lora.enabled() ? model->parameters() : std::vector<at::Tensor>{},
                        shards->start_checksum());
  shards->cast_before_gather(model->options().compute_dtype);  // bf16 travels under bf16 compute
  model->set_unit_hooks(shards->hooks());
  return shards;
}
} // namespace

void TrainStep::set_nan_fault_hook(std::function<bool(int64_t)> hook) { nan_fault_hook() = std::move(hook); }

TrainStep::TrainStep(const StepOptions& o, model::Decoder model, const data::DataSource& source, c10::Device device,
                     std::shared_ptr<distributed::DataParallel> dp)
    : TrainStep(o, std::move(model), source, device, std::move(dp), nullptr) {}

TrainStep::TrainStep(const StepOptions& o, model::Decoder model, const data::DataSource& source, c10::Device device,
                     std::shared_ptr<distributed::DataParallel> dp,
                     std::unique_ptr<distributed::ParameterShards> weights)
    : options_(o),
      model_(std::move(model)),
      source_(source),
      pairs_(dynamic_cast<const data::PairSource*>(&source)),
      device_(device),
      micro_batch_(o.microbatch),
      micro_steps_(o.accumulation_steps),
      schedule_(o.lr_schedule(o.microbatch * o.accumulation_steps * (dp ? dp->world_size() : 1))),
      weights_(shard_weights(dp.get(), model_, std::move(weights))),
      // With sharded gradients the shadow tree is this process's range of it (DataParallel::gradient_ranges).
      accumulator_(std::make_unique<accumulate::ShadowAccumulator>(
          model_->parameters(), o.grad_dtype,
          dp ? dp->gradient_ranges(model_->parameters()) : std::vector<accumulate::ShadowRange>{})),
      dp_(std::move(dp)),
      // Under LoRA the weight shards hold the frozen base; the optimizer's pieces are then the adapters' own.
      zero_(dp_ && dp_->shard_optimizer()
                ? std::make_unique<distributed::ShardedOptimizer>(
                      dp_->shared_communicator(), model_->parameters(), dp_->bucket_bytes(),
                      weights_ && !model_->options().lora.enabled() ? weights_.get() : nullptr)
                : nullptr),
      optimizer_(make_optimizer(o.optimizer, zero_ ? zero_->pieces() : model_->parameters())) {
  if (dp_ && !weights_) dp_->verify_same_start(model_->parameters());
  if (dp_) dp_->attach(*accumulator_);  // sharded gradients: the fold sink and the global norm
  // The gradient noise scale needs a small batch besides the global one: two microbatches over all processes (at
  // the run's largest batch; a step with one microbatch in all logs no estimate).
  const bool small_batches = std::max(micro_steps_, o.max_accumulation_steps) * (dp_ ? dp_->world_size() : 1) >= 2;
  // A tied embedding that trains receives two gradients per backward (the gather and the output matmul); a
  // microbatch's norm needs their sum, and the folds see them one at a time, so the cross term between them is not
  // measured. Decided from the trained set: under LoRA the tied embedding is a frozen buffer and gets no gradient.
  const bool tied = model_->options().tied_output && model_->named_parameters().find("embedding") != nullptr;
  if (o.noise_scale && small_batches && !tied && !pairs_) noise_ = std::make_unique<NoiseScale>(o.noise_ema_decay);
  if (o.noise_scale && pairs_)
    spdlog::info("gradient_noise_scale: not measured on preference pairs (its estimator assumes a token-mean loss); no "
                 "noise scale is logged");
  if (o.noise_scale && !small_batches)
    spdlog::info("gradient_noise_scale: one microbatch per step on one process has no small batch to compare with "
                 "the global batch, so no noise scale is logged (it needs gradient_accumulation_steps >= 2 or "
                 "several processes)");
  else if (o.noise_scale && tied && !pairs_)
    spdlog::info("gradient_noise_scale: not measured for a model whose output projection is its embedding "
                 "(logits_via_embedding=true, tie_word_embeddings): that weight gets two gradients per backward and "
                 "a microbatch's norm needs their sum (docs/huggingface.md, 'The tie'); no noise scale is logged");
  accumulator_->set_measure_sq_norms(noise_ != nullptr);
  // Each process rounds its own microbatches: its rank is part of the seed, so their bits differ.
  accumulator_->set_rounding(o.rounding == config::GradRounding::stochastic ? accumulate::Rounding::kStochastic
                                                                           : accumulate::Rounding::kNearest,
                             accumulate::rounding_key(o.rounding_seed, {uint64_t(dp_ ? dp_->rank() : 0)}));
  // Gradients reach the shadow tree in the compute dtype, straight from the cast (see FoldingCast.h).
  if (!o.fold_in_compute_dtype) return;
  auto* engine = accumulator_.get();
  model_->set_weight_casts(
      {[engine](const at::Tensor& p, c10::ScalarType dtype) { return engine->cast(p, dtype); },
       [engine](const at::Tensor& p, const at::Tensor& index, c10::ScalarType dtype) {
         return engine->gather_rows(p, index, dtype);
       }});
}

TrainStep::~TrainStep() {
  model_->set_weight_casts({});  // the casts point into accumulator_
  model_->set_unit_hooks({});    // and the unit hooks into weights_
}

void TrainStep::gather_weights() {
  if (weights_) weights_->gather_all();
}

void TrainStep::release_weights(bool adopt) {
  if (!weights_) return;
  if (adopt) weights_->adopt_values();
  weights_->release_all();
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point& mark) {
  const auto now = Clock::now();
  const double s = std::chrono::duration<double>(now - mark).count();
  mark = now;
  return s;
}

} // namespace

StepBatch TrainStep::fixed_batch(int64_t step) const {
  const int64_t global = options_.microbatch * options_.accumulation_steps * (dp_ ? dp_->world_size() : 1);
  return {global, step * global, 1.0};
}

int64_t TrainStep::micro_steps_for(int64_t global_batch) const {
  const int64_t per_k = micro_batch_ * (dp_ ? dp_->world_size() : 1);
  if (global_batch < per_k || global_batch % per_k != 0)
    throw std::invalid_argument(fmt::format("a global batch of {} sequences does not split into per_device_batch_size={} "
                                            "x {} processes",
                                            global_batch, micro_batch_, dp_ ? dp_->world_size() : 1));
  return global_batch / per_k;
}

Accumulated TrainStep::accumulate_batch(int64_t step, const StepBatch& plan) {
  if (pairs_) return accumulate_pairs(step, plan);
  micro_steps_ = micro_steps_for(plan.global_batch);
  Accumulated sums;
  auto mark = Clock::now();
  // The whole global batch is known up front, so its valid-token count is too: every microbatch's
  // loss sum is divided by that one number, and the folded sum is the big-batch gradient.
  // With several processes this one takes examples [rank*local, (rank+1)*local) of the same global batch, and
  // the count is summed over processes: a shard that is mostly padding gets no extra weight.
  const int64_t local = micro_batch_ * micro_steps_;
  data::Batch batch =
      data::read_examples(source_, order_, step, plan.first_sequence, dp_ ? dp_->rank() * local : 0, local);
  sums.tokens = dp_ ? dp_->global_tokens(batch.valid_tokens()) : batch.valid_tokens();
  // Padding is counted only where a batch has any (SFT rows): language-model windows keep their one all-reduce.
  sums.row_positions = batch.tokens.numel() * (dp_ ? dp_->world_size() : 1);
  sums.input_tokens = !batch.segments.defined() ? sums.tokens
                      : dp_                     ? dp_->global_tokens(batch.real_tokens())
                                                : batch.real_tokens();
  const bool poisoned = nan_fault_hook() && nan_fault_hook()(step);
  const double inv_tokens = poisoned         ? std::numeric_limits<double>::quiet_NaN()  // set_nan_fault_hook (tests)
                            : sums.tokens > 0 ? 1.0 / double(sums.tokens)
                                             : 0.0;

  at::Tensor loss_sum = at::zeros({}, at::TensorOptions(device_).dtype(at::kDouble));
  // The window is numbered by the step, so stochastic rounding draws the same bits after a resume.
  accumulator_->begin(step, options_.fidelity_period > 0 && (step + 1) % options_.fidelity_period == 0);
  std::vector<int64_t> micro_tokens;
  sums.data_s += seconds_since(mark);
  for (int64_t m = 0; m < micro_steps_; ++m) {
    // Contiguous slicing: microbatch m is examples [m*B, (m+1)*B) of the global batch. model_inputs() lets rows of one
    // example each (unpacked SFT) take the plain causal attention instead of a [B, T, T] mask.
    data::Batch micro = batch.slice(m * micro_batch_, micro_batch_).model_inputs();
    model_->set_lora_dropout_rows(plan.first_sequence + (dp_ ? dp_->rank() * local : 0) + m * micro_batch_);
    if (noise_) micro_tokens.push_back(micro.valid_tokens());
    auto tokens = micro.tokens.to(device_), targets = micro.targets.to(device_);
    auto segments = micro.segments.defined() ? micro.segments.to(device_) : micro.segments;
    auto positions = micro.positions.defined() ? micro.positions.to(device_) : micro.positions;
    sums.data_s += seconds_since(mark);
    at::Tensor loss;
    if (options_.loss_chunk_tokens > 0) {
      // hidden() first, in its own statement: ZeRO-3 gathers the output's unit there, and output_weight() reads it
      // (under bf16 compute it casts it); as arguments of one call their order would be the compiler's.
      at::Tensor h = model_->hidden(tokens, segments, positions);
      loss = linear_token_loss_sum(h, model_->output_weight(), targets, options_.loss_chunk_tokens,
                                   options_.fused_kernels);
    } else {
      loss = token_loss_sum(model_->forward(tokens, segments, positions), targets);
    }
    sums.forward_s += seconds_since(mark);
    if (dp_) dp_->before_backward(*accumulator_, m == micro_steps_ - 1);  // overlap: the last backward sends buckets
    (loss * inv_tokens).backward();
    loss_sum += loss.detach();
    sums.backward_s += seconds_since(mark);
  }
  end_folds(step, sums);
  double loss = loss_sum.item<double>();
  const at::Tensor rider = noise_ && dp_ ? noise_rider(micro_tokens) : at::Tensor();
  if (dp_) {
    dp_->reduce_gradients(*accumulator_, rider);  // the one reduction of the step, after the last microbatch
    loss = dp_->global_sum(loss);
  }
  sums.loss = loss * inv_tokens;
  if (noise_) read_noise_inputs(rider, micro_tokens, sums.noise);
  return sums;
}

void TrainStep::end_folds(int64_t step, Accumulated& sums) {
  if (dp_) dp_->after_last_backward(*accumulator_);  // sharded gradients: the last buckets, before the window closes
  accumulator_->end();
  sums.fold_s = accumulator_->fold_seconds();
  sums.grad_rel_error = accumulator_->reference_error();
  if (accumulator_->grad_dtype() == at::kHalf) sums.underflow_fraction = warn_on_underflow(step);
  model_->clear_weight_cache();  // hoist_weight_cast: the cast weights are dead after the last backward
  if (weights_) weights_->release_all();  // ZeRO-3: what the backward kept (the tied embedding, the last unit)
}

Accumulated TrainStep::accumulate_pairs(int64_t step, const StepBatch& plan) {
  micro_steps_ = micro_steps_for(plan.global_batch);
  Accumulated sums;
  auto mark = Clock::now();
  // This process's pairs [rank*local, (rank+1)*local) of the global batch, read whole first: the global pair and
  // chosen-token counts that normalise every microbatch are known before the first backward.
  const int64_t local = micro_batch_ * micro_steps_;
  const int64_t first = plan.first_sequence + (dp_ ? dp_->rank() * local : 0);
  std::vector<data::PairBatch> micro;
  std::vector<double> counts(4, 0.0);  // chosen answer tokens, target tokens, real input tokens, row positions
  for (int64_t m = 0; m < micro_steps_; ++m) {
    micro.push_back(pairs_->pairs(first + m * micro_batch_, micro_batch_));
    const data::PairBatch& b = micro.back();
    counts[0] += double(b.answer.ge(0).logical_and(b.answer.remainder(2).eq(0)).sum().item<int64_t>());
    counts[1] += double(b.rows.valid_tokens());
    counts[2] += double(b.rows.real_tokens());
    counts[3] += double(b.rows.tokens.numel());
  }
  if (dp_) counts = dp_->global_sums(counts);
  sums.tokens = int64_t(counts[1]);
  sums.input_tokens = int64_t(counts[2]);
  sums.row_positions = int64_t(counts[3]);
  const bool poisoned = nan_fault_hook() && nan_fault_hook()(step);
  const double inv_pairs = poisoned ? std::numeric_limits<double>::quiet_NaN() : 1.0 / double(plan.global_batch);
  const double inv_chosen = counts[0] > 0 ? 1.0 / counts[0] : 0.0;
  accumulator_->begin(step, options_.fidelity_period > 0 && (step + 1) % options_.fidelity_period == 0);
  PreferenceSums pref;
  sums.data_s += seconds_since(mark);
  for (int64_t m = 0; m < micro_steps_; ++m) {
    model_->set_lora_dropout_rows(2 * (first + m * micro_batch_));  // two sequences per pair
    const AnswerScores scores = answer_scores(model_, micro[size_t(m)], device_, options_.loss_chunk_tokens,
                                              options_.fused_kernels);
    at::Tensor objective =
        preference_objective(scores, micro[size_t(m)].reference, options_.preference, inv_pairs, inv_chosen, pref);
    sums.forward_s += seconds_since(mark);
    if (dp_) dp_->before_backward(*accumulator_, m == micro_steps_ - 1);
    objective.backward();
    sums.backward_s += seconds_since(mark);
  }
  end_folds(step, sums);
  if (dp_) {
    dp_->reduce_gradients(*accumulator_, at::Tensor());  // the one reduction of the step
    pref = PreferenceSums::from_values(dp_->global_sums(pref.values()));
  }
  sums.loss = poisoned ? std::numeric_limits<double>::quiet_NaN() : pref.objective(options_.preference.nll_weight);
  sums.preference = pref;
  return sums;
}

at::Tensor TrainStep::noise_rider(const std::vector<int64_t>& micro_tokens) {
  // Slots [rank*K, rank*K + K) hold this process's norms, the same slots after world*K its token counts, zeros
  // elsewhere: the sum over processes is every process's values (fp32: exact for token counts below 2^24).
  const int64_t world = dp_->world_size(), rank = dp_->rank(), K = micro_steps_;
  at::Tensor rider = at::zeros({2 * world * K}, at::kFloat);
  auto* r = rider.data_ptr<float>();
  const auto& sq = accumulator_->microbatch_sq_norms();
  for (int64_t m = 0; m < K; ++m) {
    r[rank * K + m] = int64_t(sq.size()) == K ? float(sq[m]) : std::numeric_limits<float>::quiet_NaN();
    r[world * K + rank * K + m] = float(micro_tokens[m]);
  }
  return rider.to(device_);  // NCCL reduces device tensors
}

void TrainStep::read_noise_inputs(const at::Tensor& rider, const std::vector<int64_t>& micro_tokens,
                                  NoiseScaleInputs& out) {
  const auto& sq = accumulator_->microbatch_sq_norms();
  if (rider.defined()) {
    const at::Tensor all = rider.cpu();
    const int64_t n = all.numel() / 2;
    const float* r = all.data_ptr<float>();
    for (int64_t j = 0; j < n; ++j) {
      out.folded_sq.push_back(double(r[j]));
      out.micro_tokens.push_back(std::llround(r[n + j]));
    }
  } else {
    out.folded_sq = sq;
    out.micro_tokens = micro_tokens;
    out.big_sq_fp32 = accumulator_->reference_sq_norm();  // one process: the reference is the whole batch's
  }
  if (int64_t(sq.size()) != micro_steps_) {
    if (!warned_noise_)
      spdlog::warn("gradient_noise_scale: {} backward passes were measured for {} microbatches (a parameter that some "
                   "microbatch did not reach?); steps like this log no noise scale",
                   sq.size(), micro_steps_);
    warned_noise_ = true;
    out.folded_sq.assign(out.micro_tokens.size(), std::numeric_limits<double>::quiet_NaN());
  }
  out.big_sq = accumulator_->squared_norm();
}

double TrainStep::warn_on_underflow(int64_t step) {
  const accumulate::RoundingLoss loss = accumulator_->rounding_loss();
  const double fraction = loss.elements > 0 ? double(loss.underflowed) / double(loss.elements) : 0.0;
  // Stochastic rounding keeps values below fp16's smallest subnormal (6e-8) in expectation: its zeros lose
  // nothing on average. Round-to-nearest's zeros are gone.
  const bool lost = accumulator_->rounding() == accumulate::Rounding::kNearest && loss.underflowed > 0;
  if ((lost || loss.overflowed > 0) && !warned_underflow_) {
    spdlog::warn("grad_dtype=float16: at step {}, {} of {} folded gradient values ({:.3g}%) underflowed to zero "
                 "(rounding={}) and {} overflowed to Inf. Lost gradients bias the update: use grad_dtype=bfloat16, or "
                 "grad_accum_rounding=stochastic (unbiased below fp16's smallest subnormal). metrics.jsonl has "
                 "fp16_underflow_fraction for every step.",
                 step + 1, loss.underflowed, loss.elements, 100.0 * fraction,
                 accumulate::rounding_name(accumulator_->rounding()), loss.overflowed);
    warned_underflow_ = true;
  }
  return fraction;
}

StepStats TrainStep::run(int64_t step, const StepBatch& batch) {
  const auto start = std::chrono::steady_clock::now();
  StepStats s;
  s.step = step;
  s.global_batch = batch.global_batch;
  const Accumulated sums = accumulate_batch(step, batch);
  s.loss = sums.loss;
  s.tokens = sums.tokens;
  s.input_tokens = sums.input_tokens;
  s.padding_fraction = 1.0 - double(sums.input_tokens) / double(std::max<int64_t>(1, sums.row_positions));
  static_cast<PhaseSeconds&>(s) = sums;
  static_cast<FoldNumerics&>(s) = sums;
  s.preference = sums.preference;
  auto mark = Clock::now();
  RECORD_FUNCTION("shadowgrad::clip_and_update", std::vector<c10::IValue>());  // a row in profiler=trace
  if (noise_ && std::isfinite(sums.loss)) {
    s.noise = noise_->update(sums.noise.folded_sq, sums.noise.micro_tokens, sums.noise.big_sq, sums.tokens);
    s.grad_sq_norm_global_fp32 = sums.noise.big_sq_fp32;
  }
  s.grad_norm = accumulator_->global_norm();
  const double clip = accumulate::ShadowAccumulator::clip_factor(s.grad_norm, options_.clip_threshold);
  s.lr = schedule_.of_step(step, batch.first_sequence, batch.global_batch) * batch.lr_factor;
  s.skipped = !std::isfinite(s.loss) || !std::isfinite(s.grad_norm);
  // No target anywhere in the global batch (SFT rows that are all prompt): nothing to learn, and AdamW would still
  // move the weights (momentum, decay). Every process sees the same global count, so all skip together.
  s.no_targets = sums.tokens == 0 && !s.skipped;
  if (s.no_targets)
    spdlog::warn("step {}: the global batch has no target token (every token is prompt or padding); update skipped",
                 step + 1);
  if (s.skipped || s.no_targets) {
    accumulator_->zero_();
  } else {
    set_learning_rate(*optimizer_, s.lr);
    // Clipping: the fused AdamW scales each gradient as it reads it, the same bits without a pass of its own.
    auto* fused = zero_ ? nullptr : dynamic_cast<FusedAdamW*>(optimizer_.get());
    if (clip != 1.0 && fused)
      fused->scale_next_gradients(clip);
    else if (clip != 1.0)
      accumulator_->scale_(clip);
    if (zero_)
      zero_->step(*accumulator_, *optimizer_);  // update this process's slice, then all-gather the parameters
    else
      accumulator_->step(*optimizer_);
  }
  s.optimizer_s = seconds_since(mark);
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

} // namespace shadowgrad::train
