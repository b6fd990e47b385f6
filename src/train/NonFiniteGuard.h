#pragma once
// Counts optimizer steps skipped for a non-finite loss or gradient norm (TrainStep already left the
// parameters and optimizer state untouched) and stops the run after max_consecutive_nonfinite in a row.
//
//   NonFiniteGuard guard(cfg.max_consecutive_nonfinite, state);   // state: restored from a checkpoint
//   guard.record(stats);     // updates state.skipped_steps / consecutive_nonfinite, warns
//   guard.check(stats);      // throws NonFiniteError once the limit is reached
#include <cstdint>

#include "checkpoint/Manifest.h"
#include "train/TrainStep.h"

namespace shadowgrad::train {

class NonFiniteGuard {
 public:
  NonFiniteGuard(int64_t max_consecutive, checkpoint::TrainState& state) : max_(max_consecutive), state_(state) {}
  void record(const StepStats& s);
  void check(const StepStats& s) const;

 private:
  int64_t max_;
  checkpoint::TrainState& state_;
};

} // namespace shadowgrad::train
