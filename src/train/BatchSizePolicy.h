#pragma once
// The global batch of each step, when it may change during a run: batch_size_schedule (points in tokens or steps) or
// batch_size_policy=gns (double when the measured gradient noise scale says a larger batch pays). Both only grow the
// batch, by integer factors, and keep the count of sequences trained so far, which is where the next step's examples
// start (data/ExampleOrder.h). Its state is in every checkpoint, so a resumed run, at any process count, makes the
// same decisions.
//
//   BatchSizePolicy policy(BatchPolicyOptions::from_config(cfg), restored_state);
//   for (s = ...) {
//     if (auto change = policy.before_step(s)) log(change->reason);     // a schedule point was crossed
//     StepStats st = step.run(s, policy.step_batch());
//     if (auto change = policy.after_step(s, gns_reading)) log(...);    // gns: the next step's batch doubles
//   }
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "config/BatchSizeSchedule.h"
#include "config/ConfigEnums.h"
#include "train/TrainStep.h"

namespace shadowgrad::config {
struct Config;
}

namespace shadowgrad::train {

struct BatchPolicyOptions {
  config::BatchSizeSchedule schedule;  // empty: no schedule
  bool gns = false;                    // batch_size_policy=gns
  int64_t start_batch = 8;             // B0, the run's first global batch (sequences)
  int64_t max_batch = int64_t(1) << 20;  // gns: never past this
  double margin = 8;                   // gns: double once gns_tokens > margin x the batch in tokens
  int64_t min_steps_between_changes = 50;  // (both as ConfigKeys.def's defaults)
  int64_t settle_updates = 20;         // gns: EMA updates before the estimate is trusted: 1 / (1 - gns_ema_decay)
  int64_t tokens_per_sequence = 128;   // max_target_length (x 2 for pairs): schedule points count examples x this
  config::BatchLrScaling lr_scaling = config::BatchLrScaling::sqrt;
  double max_lr_factor = 0;            // batch_size_lr_max / learning_rate; 0: no cap

  // After derive_accumulation_steps (global_batch_size is the schedule's first batch, K is resolved).
  static BatchPolicyOptions from_config(const config::Config& cfg, int64_t world_size);
  bool changes() const { return gns || !schedule.empty(); }
  int64_t largest_batch() const { return gns ? max_batch : schedule.empty() ? start_batch : schedule.largest(); }
};

// What a checkpoint records (manifest.yml's batch: line).
struct BatchState {
  int64_t global_batch = 0;      // of the next step; 0: not started (the policy starts at start_batch)
  int64_t sequences = 0;         // training sequences so far: the next step's first example
  int64_t last_change_step = 0;  // 0-based step that first used the current batch (0 while it never changed)
};

// One change of the global batch, at 0-based step `step` (the first to use `to`).
struct BatchChange {
  int64_t step = 0, from = 0, to = 0;
  std::string reason;
};

// What the gns policy reads after a step: the noise scale as logged, and the EMA's update count.
struct GnsReading {
  double gns_tokens = 0;
  int64_t updates = 0;
};

class BatchSizePolicy {
 public:
  BatchSizePolicy(BatchPolicyOptions options, BatchState restored);

  // Before 0-based step `step`: the schedule's batch at the tokens trained so far. Returns the change, if any.
  std::optional<BatchChange> before_step(int64_t step);
  // The batch `step` trains on: its size, first example and LR factor.
  StepBatch step_batch() const;
  // Maps this process's choice of the next step's batch to the one every process takes (rank 0's). Collective.
  using Agree = std::function<int64_t(int64_t mine)>;
  // After `step` trained on step_batch(): counts its sequences; gns decides whether the next step doubles (a
  // skipped step, or one without an estimate, passes nullptr), and with several processes `agree` (called at every
  // step with gns) makes rank 0's decision everyone's.
  std::optional<BatchChange> after_step(int64_t step, const GnsReading* reading, const Agree& agree = nullptr);

  const BatchState& state() const { return state_; }
  const BatchPolicyOptions& options() const { return options_; }
  double lr_factor(int64_t batch) const;

 private:
  std::optional<BatchChange> change_to(int64_t step, int64_t batch, std::string reason);
  std::optional<BatchChange> gns_proposal(int64_t step, const GnsReading* reading) const;
  BatchPolicyOptions options_;
  BatchState state_;
};

} // namespace shadowgrad::train
