#pragma once
// The learning rate of each optimizer step: a linear warmup to the peak, then MaxText's cosine decay to
// final_fraction x peak, or wsd (warmup-stable-decay): the peak until the last decay_fraction of the schedule, then a
// linear (or cosine) decay to final_fraction x peak. Evaluated once per optimizer step, never per microbatch.
//
// The schedule runs in one of two units. In steps, a step's position is its 0-based index. In tokens (a run whose
// global batch changes, or one with a token budget), a step's position is the tokens trained before it and its size
// the tokens it trains, so a run whose batch grows warms up and decays at the same points in data as a fixed-batch
// run (OLMo-core asks the same of its batch-size scheduler). For a fixed batch the two give the same LRs.
//
//   LrSchedule s({.peak = 3e-3, .length = 100, .warmup_fraction = 0.1, .final_fraction = 0.1});
//   double lr = s(step);                                // step is 0-based
//   LrSchedule t({..., .unit = LrUnit::tokens, .length = 1e6});
//   double lr2 = t.of_step(step, /*first_sequence=*/sequences_before, /*sequences=*/global_batch);
#include <cstdint>

#include "config/ConfigEnums.h"

namespace shadowgrad::train {

enum class LrUnit { steps, tokens };

struct LrScheduleOptions {
  double peak = 3e-3;
  LrUnit unit = LrUnit::steps;
  double length = 300;  // the whole schedule, in `unit`; past it the LR stays at final_fraction x peak
  double warmup_fraction = 0.1;
  double final_fraction = 0.1;
  config::LrScheduleType type = config::LrScheduleType::cosine;
  double decay_fraction = 0.1;  // wsd: the last part of the schedule over which the LR decays
  config::WsdDecayStyle decay_style = config::WsdDecayStyle::linear;
  int64_t tokens_per_sequence = 1;  // unit tokens: a step of B examples trains B x this (max_target_length, x 2 for pairs)
};

class LrSchedule {
 public:
  explicit LrSchedule(LrScheduleOptions options);
  // The LR of the step at `position` (in the schedule's unit: a step index, or the tokens before it) that trains
  // `size` units (1 step, or its tokens). The warmup counts the step's end, so that the first step already moves.
  double at(double position, double size) const;
  double operator()(int64_t step) const { return at(double(step), 1.0); }
  // The LR of 0-based `step`, which trains `sequences` sequences after `first_sequence` earlier ones: by its index in
  // steps, by its tokens in tokens.
  double of_step(int64_t step, int64_t first_sequence, int64_t sequences) const;
  // Where the LR first leaves the peak, in the schedule's unit: the end of the warmup (cosine), or the start of the
  // decay (wsd).
  double decay_start() const;
  const LrScheduleOptions& options() const { return o_; }

 private:
  LrScheduleOptions o_;
  double warmup_;  // in the schedule's unit, rounded to a whole number of them (steps, tokens)
};

} // namespace shadowgrad::train
