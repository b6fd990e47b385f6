#include "train/BatchSizePolicy.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "config/Config.h"

namespace shadowgrad::train {

BatchPolicyOptions BatchPolicyOptions::from_config(const config::Config& c, int64_t world_size) {
  BatchPolicyOptions o;
  o.schedule = config::BatchSizeSchedule::parse(c.batch_size_schedule);
  o.gns = c.batch_size_policy == config::BatchSizePolicy::gns;
  o.start_batch = c.global_batch_size > 0 ? c.global_batch_size : c.local_batch() * world_size;
  o.max_batch = c.global_batch_size_max > 0 ? c.global_batch_size_max : int64_t(1) << 20;
  o.margin = c.gns_batch_margin;
  o.min_steps_between_changes = c.gns_min_steps_between_changes;
  o.settle_updates = std::max<int64_t>(1, std::llround(1.0 / (1.0 - c.gns_ema_decay)));
  o.tokens_per_sequence = c.tokens_per_example();
  o.lr_scaling = c.batch_size_lr_scaling;
  o.max_lr_factor = c.batch_size_lr_max > 0 && c.learning_rate > 0 ? c.batch_size_lr_max / c.learning_rate : 0;
  return o;
}

BatchSizePolicy::BatchSizePolicy(BatchPolicyOptions options, BatchState restored)
    : options_(std::move(options)), state_(restored) {
  if (state_.global_batch == 0) state_.global_batch = options_.start_batch;
}

double BatchSizePolicy::lr_factor(int64_t batch) const {
  const double ratio = double(batch) / double(options_.start_batch);
  double f = 1.0;
  switch (options_.lr_scaling) {
  case config::BatchLrScaling::sqrt: f = std::sqrt(ratio); break;
  case config::BatchLrScaling::linear: f = ratio; break;
  case config::BatchLrScaling::none: break;
  }
  return options_.max_lr_factor > 0 ? std::min(f, std::max(1.0, options_.max_lr_factor)) : f;
}

std::optional<BatchChange> BatchSizePolicy::change_to(int64_t step, int64_t batch, std::string reason) {
  if (batch == state_.global_batch) return std::nullopt;
  BatchChange c{step, state_.global_batch, batch, std::move(reason)};
  state_.global_batch = batch;
  state_.last_change_step = step;
  return c;
}

std::optional<BatchChange> BatchSizePolicy::before_step(int64_t step) {
  if (options_.schedule.empty()) return std::nullopt;
  const int64_t tokens = state_.sequences * options_.tokens_per_sequence;
  const auto& point = options_.schedule.points()[options_.schedule.point_at(step, tokens)];
  const std::string where = options_.schedule.in_steps() ? fmt::format("step {} >= {}", step, point.at)
                                                         : fmt::format("{} tokens trained >= {}", tokens, point.at);
  return change_to(step, point.batch, fmt::format("batch_size_schedule point '{}' ({})", point.text, where));
}

StepBatch BatchSizePolicy::step_batch() const {
  return {state_.global_batch, state_.sequences, lr_factor(state_.global_batch)};
}

std::optional<BatchChange> BatchSizePolicy::after_step(int64_t step, const GnsReading* reading, const Agree& agree) {
  state_.sequences += state_.global_batch;
  if (!options_.gns) return std::nullopt;
  std::optional<BatchChange> mine = gns_proposal(step, reading);
  const int64_t chosen = mine ? mine->to : state_.global_batch;
  const int64_t agreed = agree ? agree(chosen) : chosen;
  if (agreed == chosen) return mine ? change_to(mine->step, mine->to, mine->reason) : std::nullopt;
  return change_to(step + 1, agreed, fmt::format("batch_size_policy=gns: rank 0's decision (this process chose {})", chosen));
}

std::optional<BatchChange> BatchSizePolicy::gns_proposal(int64_t step, const GnsReading* reading) const {
  if (!reading) return std::nullopt;
  const int64_t next = step + 1, doubled = 2 * state_.global_batch;
  const double batch_tokens = double(state_.global_batch * options_.tokens_per_sequence);
  // The EMA starts at zero; its ratio is unbiased from the start but noisy until it has seen about one EMA length.
  if (reading->updates < options_.settle_updates || next - state_.last_change_step < options_.min_steps_between_changes ||
      doubled > options_.max_batch || !(reading->gns_tokens > options_.margin * batch_tokens))
    return std::nullopt;
  return BatchChange{next, state_.global_batch, doubled,
                   fmt::format("batch_size_policy=gns: gns_tokens {:.4g} > gns_batch_margin {} x {:.0f} tokens ({} "
                               "sequences x {}), EMA settled ({} >= {} updates), {} steps since the last change",
                               reading->gns_tokens, options_.margin, batch_tokens, state_.global_batch,
                               options_.tokens_per_sequence, reading->updates, options_.settle_updates,
                               next - state_.last_change_step)};
}

} // namespace shadowgrad::train
