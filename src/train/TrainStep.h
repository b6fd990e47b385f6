#pragma once
// One optimizer step, in the order a reader expects:
//   for each of K microbatches: forward -> token-loss sum / global valid tokens -> backward (folds into shadow)
//   -> clip the accumulated gradient once -> set the LR once -> optimizer update once.
// A non-finite loss or gradient norm skips the update (StepStats::skipped): the shadow is zeroed and
// neither the parameters nor the optimizer state change.
//
//   auto options = StepOptions::from_config(cfg);
//   TrainStep step(options, model, *source, device);       // one process
//   TrainStep step(options, model, *source, device, dp);   // data parallel: dp from DataParallel::from_environment
//   StepStats s = step.run(0);
//
// With several processes, each takes its own slice [rank*local, (rank+1)*local) of the same global batch, the
// valid-token count is summed before the loop, and the shadow tree is summed once, after the last microbatch.
#include <limits>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <c10/core/Device.h>

#include "accumulate/ShadowAccumulator.h"
#include "data/ExampleOrder.h"
#include "model/Decoder.h"
#include "train/LrSchedule.h"
#include "train/NoiseScale.h"
#include "train/StepOptions.h"

namespace torch::optim {
class Optimizer;
}
namespace shadowgrad::data {
class DataSource;
class PairSource;
}
namespace shadowgrad::distributed {
class DataParallel;
class ParameterShards;
class ShardedOptimizer;
}

namespace shadowgrad::train {

// Where a step's wall time went (seconds): building the batch, forward + loss, backward (which includes folding
// each gradient into the shadow tree: fold_s is that part of backward_s).
struct PhaseSeconds {
  double data_s = 0, forward_s = 0, backward_s = 0, fold_s = 0;
};

// What the fold cost in accuracy (docs/numerics.md); NaN when not measured this step. Both are this process's
// folds, before the multi-process reduction.
struct FoldNumerics {
  // grad_fidelity_period steps: ||shadow - fp32 reference|| / ||reference||.
  double grad_rel_error = std::numeric_limits<double>::quiet_NaN();
  // grad_dtype=float16: the fraction of folded values that underflowed to zero.
  double underflow_fraction = std::numeric_limits<double>::quiet_NaN();
};

// The gradient noise scale's inputs (NoiseScale.h), over every microbatch of the global batch on all processes, in
// (rank, microbatch) order; empty when not measured.
struct NoiseScaleInputs {
  std::vector<double> folded_sq;     // squared norm of what each microbatch folded (loss divided by `tokens`)
  std::vector<int64_t> micro_tokens;  // its valid tokens
  double big_sq = std::numeric_limits<double>::quiet_NaN();  // squared norm of the reduced shadow tree, before clipping
  double big_sq_fp32 = std::numeric_limits<double>::quiet_NaN();  // the same from the fp32 reference (one process,
                                                                  // grad_fidelity_period steps)
};

// The microbatch loop's result: the global batch's token-mean loss and valid-token count.
struct Accumulated : PhaseSeconds, FoldNumerics {
  double loss = 0;
  int64_t tokens = 0;
  int64_t input_tokens = 0;   // non-padding tokens fed to the model (Batch::real_tokens), over all processes
  int64_t row_positions = 0;  // rows x max_target_length over all processes: input_tokens plus the padding
  NoiseScaleInputs noise;
  std::optional<PreferenceSums> preference;  // use_dpo: the global batch's sums over its pairs
};

struct StepStats : PhaseSeconds, FoldNumerics {
  int64_t step = 0;        // 0-based optimizer step
  int64_t global_batch = 0;  // sequences in this step over all processes
  double loss = 0;         // token-mean loss of the global batch, before the update
  double grad_norm = 0;    // global norm of the accumulated gradient, before clipping
  double lr = 0;
  int64_t tokens = 0;      // valid target tokens in the global batch
  int64_t input_tokens = 0;  // non-padding input tokens in the global batch (what tokens/s counts)
  double padding_fraction = 0;  // 1 - input_tokens / (rows x max_target_length)
  bool no_targets = false;  // the global batch had no valid target (every token prompt or padding): no update, the
                            // same on every process since the count is global
  double seconds = 0;
  double optimizer_s = 0;  // clip + optimizer update
  bool skipped = false;    // loss or grad_norm was non-finite: no update; parameters and optimizer state untouched
  std::optional<NoiseScaleStep> noise;  // gradient_noise_scale, with at least two microbatches over all processes
  double grad_sq_norm_global_fp32 = std::numeric_limits<double>::quiet_NaN();  // see NoiseScaleInputs
  std::optional<PreferenceSums> preference;  // use_dpo: rewards and log-probs over the global batch's pairs
};

// Which global batch a step trains on (train/BatchSizePolicy.h decides it when the batch may change).
struct StepBatch {
  int64_t global_batch = 0;    // sequences over all processes; K = global_batch / (per_device_batch_size x processes)
  int64_t first_sequence = 0;  // training sequences before this step: its examples are [first, first + global_batch)
  double lr_factor = 1;        // batch_size_lr_scaling's factor on the scheduled LR
};

class TrainStep {
 public:
  // Test seam: while set, a step (0-based) for which the hook returns true gets a NaN loss, as a diverging model
  // would; it exercises the non-finite guard (tests/test_checkpoint.cpp; the trainer binary reads it from
  // SHADOWGRAD_TEST_NAN_STEPS). Not a config key: users never need it.
  static void set_nan_fault_hook(std::function<bool(int64_t step)> hook);
  TrainStep(const StepOptions& options, model::Decoder model, const data::DataSource& source, c10::Device device,
            std::shared_ptr<distributed::DataParallel> dp = nullptr);
  // ZeRO-3 with the model built unit by unit (train/ModelBuild.h): `weights` holds this process's range already, and
  // the whole model never existed. With a null `weights` the model is cut here, as the constructor above does.
  TrainStep(const StepOptions& options, model::Decoder model, const data::DataSource& source, c10::Device device,
            std::shared_ptr<distributed::DataParallel> dp, std::unique_ptr<distributed::ParameterShards> weights);
  ~TrainStep();

  // The step with the options' fixed global batch (first_sequence = step x global batch).
  StepStats run(int64_t step) { return run(step, fixed_batch(step)); }
  StepStats run(int64_t step, const StepBatch& batch);

  // The microbatch loop alone: afterwards the shadow tree holds the gradient of the global batch's
  // token-mean loss, exactly as one un-split batch would give it.
  Accumulated accumulate_batch(int64_t step) { return accumulate_batch(step, fixed_batch(step)); }
  Accumulated accumulate_batch(int64_t step, const StepBatch& batch);
  StepBatch fixed_batch(int64_t step) const;
  const LrSchedule& lr_schedule() const { return schedule_; }
  // ExampleOrder::steps only for a run resumed from a checkpoint that predates data_order (data/ExampleOrder.h).
  void set_example_order(data::ExampleOrder order) { order_ = order; }
  data::ExampleOrder example_order() const { return order_; }

  accumulate::ShadowAccumulator& accumulator() { return *accumulator_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  distributed::DataParallel* data_parallel() { return dp_.get(); }
  // ZeRO-1's slice of the optimizer state; null without shard_optimizer_over_data (or with one process).
  const distributed::ShardedOptimizer* sharded_optimizer() const { return zero_.get(); }
  model::Decoder& model() { return model_; }
  // ZeRO-3 (shard_parameters_over_data): this process's range of the weights; null otherwise.
  distributed::ParameterShards* parameter_shards() { return weights_.get(); }
  // What reads or writes the whole weights (loading or fingerprinting the starting weights for a preference run's
  // reference) runs between these two under ZeRO-3: every unit gathered, then given back; `adopt`: the pieces take
  // the values written into the whole tensors meanwhile. Collective; no-ops without ZeRO-3. Checkpoints need neither:
  // each process writes and reads its own model shard (checkpoint/WeightShards.h).
  void gather_weights();
  void release_weights(bool adopt);
  const StepOptions& options() const { return options_; }
  // The gradient noise scale's EMAs (null when gradient_noise_scale is off or there is one microbatch in all):
  // restored from and saved into checkpoints.
  NoiseScale* noise_scale() { return noise_.get(); }

 private:
  // float16 shadows: the fraction of this step's folded values that underflowed; warns the first time any did.
  double warn_on_underflow(int64_t step);
  // After the loop: this process's per-microbatch norms and tokens, gathered from all processes through the
  // gradient reduction's last bucket (`rider`), and the reduced tree's squared norm.
  at::Tensor noise_rider(const std::vector<int64_t>& micro_tokens);
  void read_noise_inputs(const at::Tensor& rider, const std::vector<int64_t>& micro_tokens, NoiseScaleInputs& out);
  // use_dpo: the microbatch loop over pairs (PreferenceLoss.h); the global batch counts pairs.
  Accumulated accumulate_pairs(int64_t step, const StepBatch& plan);
  // After the last backward of the loop: the sharded reduction's last buckets, then end the window and read what the
  // fold measured.
  void end_folds(int64_t step, Accumulated& sums);
  // K for a global batch: it must split into whole microbatches on every process.
  int64_t micro_steps_for(int64_t global_batch) const;
  StepOptions options_;
  model::Decoder model_;
  const data::DataSource& source_;
  const data::PairSource* pairs_;  // source_ when it holds preference pairs, else null
  c10::Device device_;
  int64_t micro_batch_, micro_steps_;  // micro_steps_: K of the step running now
  data::ExampleOrder order_ = data::ExampleOrder::sequences;
  LrSchedule schedule_;
  bool warned_underflow_ = false;
  bool warned_noise_ = false;
  std::unique_ptr<NoiseScale> noise_;
  // ZeRO-3: set when dp and shard_parameters_over_data. Made before the accumulator: cutting the weights gives each
  // parameter new storage (Tensor::set_), which must precede the accumulator's hooks on its gradient node.
  std::unique_ptr<distributed::ParameterShards> weights_;
  std::unique_ptr<accumulate::ShadowAccumulator> accumulator_;
  std::shared_ptr<distributed::DataParallel> dp_;        // null for one process
  std::unique_ptr<distributed::ShardedOptimizer> zero_;  // ZeRO-1: set when dp_ and shard_optimizer_over_data
  std::unique_ptr<torch::optim::Optimizer> optimizer_;   // over zero_->pieces() when sharded
};

} // namespace shadowgrad::train
