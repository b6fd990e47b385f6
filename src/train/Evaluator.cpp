#include "train/Evaluator.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/Config.h"
#include "data/DataSource.h"
#include "data/PairSource.h"
#include "distributed/Communicator.h"
#include "distributed/DataParallel.h"
#include "train/TokenLoss.h"
#include "util/Errors.h"

namespace shadowgrad::train {

Evaluator::Evaluator(const config::Config& c, int world_size)
    : source_(data::make_eval_source(data::DataOptions::from_config(c))), interval_(c.eval_interval),
      interval_sequences_(c.eval_interval_sequences), last_step_(c.steps),
      last_sequences_(c.train_examples()),
      batch_(c.eval_per_device_batch_size > 0 ? c.eval_per_device_batch_size : c.per_device_batch_size),
      world_(world_size), loss_chunk_tokens_(c.loss_chunk_tokens),
      fused_kernels_(c.fused_kernels), preference_(PreferenceOptions::from_config(c)), samples_(c) {
  if (!source_) return;
  const int64_t global = batch_ * world_, capacity = source_->eval_capacity();
  if (source_->eval_pads_past_end()) {
    // SFT (preference): every held-out example (pair) once, whatever the batch: the last batch's missing rows (pairs)
    // are empty.
    batches_ = c.eval_steps > 0 ? c.eval_steps : (capacity + global - 1) / global;
    const char* unit = dynamic_cast<const data::PairSource*>(source_.get()) ? "pairs" : "rows";
    spdlog::info("eval_loss every {} and after the last{}: {} {} {} of {} ({} batches of {} {})",
                 interval_sequences_ > 0 ? fmt::format("{} training sequences", interval_sequences_)
                                         : fmt::format("{} steps", interval_),
                 c.eval_on_start ? ", and before the first (eval_on_start)" : "",
                 c.eval_steps > 0 ? fmt::format("at most {} of the", batches_ * global) : "the", capacity, unit,
                 c.eval_dataset_path, batches_, global, unit);
    return;
  }
  batches_ = c.eval_steps > 0 ? c.eval_steps : capacity / global;
  if (capacity >= 0 && capacity < global)
    throw DataError(fmt::format("eval_dataset_path '{}' is shorter than one eval batch: it holds {} windows of "
                                "max_target_length+1={} tokens, one batch is {} (eval_per_device_batch_size={} x {} "
                                "processes)",
                                c.eval_dataset_path, capacity, c.max_target_length + 1, global, batch_, world_));
  if (capacity >= 0 && batches_ * global > capacity)
    throw DataError(fmt::format("eval_dataset_path '{}' holds {} windows of max_target_length+1={} tokens; "
                                "eval_steps={} batches of {} need {}; lower eval_steps (<= 0 evaluates the {} whole "
                                "batches it holds)",
                                c.eval_dataset_path, capacity, c.max_target_length + 1, batches_, global,
                                batches_ * global, capacity / global));
  spdlog::info("eval_loss every {} and after the last{}: {} batches of {} sequences ({} tokens) from {}",
               interval_sequences_ > 0 ? fmt::format("{} training sequences", interval_sequences_)
                                       : fmt::format("{} steps", interval_),
               c.eval_on_start ? ", and before the first (eval_on_start)" : "",
               batches_, global, batches_ * global * c.max_target_length,
               c.eval_dataset_path.empty() ? std::string("the synthetic generator (step -1)") : c.eval_dataset_path);
}

Evaluator::~Evaluator() = default;

bool Evaluator::due(int64_t completed_steps, int64_t sequences_before, int64_t sequences_after) const {
  if (!source_) return false;
  const bool by_steps = interval_ > 0 && completed_steps % interval_ == 0;
  const bool by_sequences =
      interval_sequences_ > 0 && sequences_after / interval_sequences_ > sequences_before / interval_sequences_;
  const bool budget_spent = last_sequences_ > 0 && sequences_before < last_sequences_ && sequences_after >= last_sequences_;
  return by_steps || by_sequences || completed_steps == last_step_ || budget_spent;
}

double Evaluator::run(model::Decoder& model, c10::Device device, distributed::DataParallel* dp) const {
  at::NoGradGuard no_grad; // no graph, no gradient, no fold: the shadow tree and optimizer never see this
  model->eval();            // no LoRA dropout
  struct TrainAgain {
    model::Decoder& m;
    ~TrainAgain() { m->train(); }
  } train_again{model};
  if (dynamic_cast<const data::PairSource*>(source_.get())) return run_pairs(model, device, dp);
  const int rank = dp ? dp->rank() : 0;
  double loss_sum = 0, tokens = 0;
  for (int64_t b = 0; b < batches_; ++b) {
    data::Batch batch = source_->eval_examples(b * batch_ * world_ + rank * batch_, batch_).model_inputs();
    auto x = batch.tokens.to(device), y = batch.targets.to(device);
    auto seg = batch.segments.defined() ? batch.segments.to(device) : batch.segments;
    auto pos = batch.positions.defined() ? batch.positions.to(device) : batch.positions;
    // The training step's own loss function, so eval_loss and loss mean the same thing.
    at::Tensor loss;
    if (loss_chunk_tokens_ > 0) {
      at::Tensor h = model->hidden(x, seg, pos);  // before output_weight(): ZeRO-3 gathers the output here
      loss = linear_token_loss_sum(h, model->output_weight(), y, loss_chunk_tokens_, fused_kernels_);
    } else {
      loss = token_loss_sum(model->forward(x, seg, pos), y);
    }
    loss_sum += loss.item<double>();
    tokens += double(batch.valid_tokens());
  }
  if (dp) { // one all-reduce of (loss sum, tokens) per evaluation
    at::Tensor sums = at::tensor({loss_sum, tokens}, at::kDouble).to(dp->communicator().device());
    dp->communicator().all_reduce_sum_(sums);
    sums = sums.cpu();
    loss_sum = sums[0].item<double>();
    tokens = sums[1].item<double>();
  }
  return tokens > 0 ? loss_sum / tokens : 0.0;
}

double Evaluator::run_pairs(model::Decoder& model, c10::Device device, distributed::DataParallel* dp) const {
  const auto& pairs = dynamic_cast<const data::PairSource&>(*source_);
  const int rank = dp ? dp->rank() : 0;
  PreferenceSums sums;
  for (int64_t b = 0; b < batches_; ++b) {
    const data::PairBatch batch = pairs.pairs_in_file_order(b * batch_ * world_ + rank * batch_, batch_);
    if (batch.pairs == 0) {  // past the last held-out pair
      if (dp && dp->shard_parameters()) model->pass_units();  // ZeRO-3: the others' gathers still need this one
      continue;
    }
    const AnswerScores scores = answer_scores(model, batch, device, loss_chunk_tokens_, fused_kernels_);
    preference_objective(scores, batch.reference, preference_, 1.0, 1.0, sums);  // sums only: no backward here
  }
  if (dp) sums = PreferenceSums::from_values(dp->global_sums(sums.values()));  // one all-reduce per evaluation
  last_preference_ = sums;
  return sums.objective(preference_.nll_weight);
}

} // namespace shadowgrad::train
