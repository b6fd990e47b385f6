// The LR schedule: warmup, cosine and wsd shapes against plain formulas; and, when the global batch changes, the
// schedule measured in tokens, so a growing batch warms up and decays at the same points in data as a fixed one.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "TinyConfig.h"
#include "train/BatchSizePolicy.h"
#include "train/LrSchedule.h"
#include "train/StepOptions.h"

using namespace shadowgrad;
using train::LrSchedule;
using train::LrScheduleOptions;

namespace {

LrScheduleOptions shape(double length, double warmup, double final_fraction) {
  LrScheduleOptions o;
  o.peak = 1.0;
  o.length = length;
  o.warmup_fraction = warmup;
  o.final_fraction = final_fraction;
  return o;
}

} // namespace

TEST_CASE("warmup rises linearly, cosine decays to the final fraction", "[schedule]") {
  LrSchedule s(shape(100, 0.1, 0.1));
  CHECK(s(0) == Approx(0.1));
  CHECK(s(4) == Approx(0.5));
  CHECK(s(9) == Approx(1.0));
  CHECK(s(10) == Approx(1.0));
  CHECK(s(55) == Approx(0.1 + 0.9 * 0.5));
  CHECK(s(100) == Approx(0.1));
  CHECK(s(500) == Approx(0.1));
  for (int i = 10; i < 99; ++i) CHECK(s(i + 1) <= s(i));
}

TEST_CASE("wsd: the peak, then a linear decay over the last wsd_decay_steps_fraction", "[schedule]") {
  auto o = shape(100, 0, 0);
  o.type = config::LrScheduleType::wsd;
  o.decay_fraction = 0.2;
  LrSchedule s(o);
  CHECK(s.decay_start() == 80);
  // Plain formula: 1 up to step 80, then (100 - step) / 20, then 0.
  for (int step = 0; step < 110; ++step) {
    const double expected = step < 80 ? 1.0 : step < 100 ? (100.0 - step) / 20.0 : 0.0;
    CHECK(s(step) == Approx(expected).margin(1e-12));
  }
  // With a warmup and a final fraction: warmup as for cosine, the decay ends at final_fraction.
  o.warmup_fraction = 0.1;
  o.final_fraction = 0.1;
  LrSchedule w(o);
  CHECK(w(4) == Approx(0.5));
  CHECK(w(50) == 1.0);
  CHECK(w(90) == Approx(0.1 + 0.9 * 0.5));
  CHECK(w(100) == Approx(0.1));
  // Cosine style: half way through the decay is half way between peak and final.
  o.decay_style = config::WsdDecayStyle::cosine;
  LrSchedule c(o);
  CHECK(c(90) == Approx(0.1 + 0.9 * 0.5));
  CHECK(c(85) == Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.25))));
}

TEST_CASE("in tokens, a fixed batch gets bit for bit the LRs it gets in steps", "[schedule]") {
  auto o = shape(50, 0.1, 0.1);
  LrSchedule steps(o);
  o.unit = train::LrUnit::tokens;
  o.tokens_per_sequence = 16;
  o.length = 50 * 8 * 16;  // 50 steps of 8 sequences
  LrSchedule tokens(o);
  for (int64_t s = 0; s < 60; ++s) CHECK(tokens.of_step(s, s * 8, 8) == steps(s));
}

namespace {

// One run's scheduled LRs (before batch_size_lr_scaling's factor) as the trainer computes them: the config's
// StepOptions and BatchSizePolicy, step by step. Returns the tokens before each step and its LR.
struct Trace {
  std::vector<int64_t> tokens;
  std::vector<double> lr;
};

Trace trace(const std::vector<std::string>& overrides, bool force_steps = false) {
  auto cfg = config::load_config(SHADOWGRAD_SOURCE_DIR "/configs/tiny.yml", overrides);
  auto options = train::StepOptions::from_config(cfg);
  if (force_steps) options.lr.unit = train::LrUnit::steps;  // the schedule before it was measured in tokens
  train::BatchSizePolicy policy(train::BatchPolicyOptions::from_config(cfg, 1), {});
  LrSchedule schedule(options.lr_schedule(policy.options().start_batch));
  Trace t;
  for (int64_t s = 0; policy.state().sequences * cfg.max_target_length < cfg.train_tokens; ++s) {
    policy.before_step(s);
    const auto b = policy.step_batch();
    t.tokens.push_back(b.first_sequence * cfg.max_target_length);
    t.lr.push_back(schedule.of_step(s, b.first_sequence, b.global_batch));
    policy.after_step(s, nullptr);
  }
  return t;
}

// The tokens before the first step whose LR is below the peak after the warmup: where the decay starts in data.
int64_t decay_start_tokens(const Trace& t, double peak) {
  for (size_t i = 1; i < t.lr.size(); ++i)
    if (t.lr[i] < peak && t.lr[i] < t.lr[i - 1]) return t.tokens[i];
  return -1;
}

} // namespace

TEST_CASE("a growing batch reaches the decay at the same token count as a fixed batch", "[schedule][batch]") {
  // tiny.yml: 16 tokens a sequence. 64 Ki tokens = 4096 sequences; the wsd decay starts at 80 %: 52428.8 tokens,
  // i.e. the first step that starts at or after it. Fixed: 8 sequences (128 tokens) a step; ramp: 8 -> 16 -> 32 -> 64
  // from 4k, 12k, 24k tokens.
  const std::vector<std::string> common{"lr_schedule_type=wsd",       "wsd_decay_steps_fraction=0.2",
                                        "warmup_steps_fraction=0.05", "cosine_learning_rate_final_fraction=0",
                                        "learning_rate=1e-2",          "train_tokens=65536",
                                        "steps=100000",                "per_device_batch_size=8",
                                        "global_batch_size=8"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return extra;
  };
  const Trace fixed = trace(with({}));
  const Trace ramp = trace(with({"batch_size_schedule=0:8,4096:16,12288:32,24576:64"}));
  REQUIRE(fixed.lr.size() == 512);  // 65536 / 128
  REQUIRE(ramp.lr.size() < 200);    // far fewer steps for the same tokens
  const int64_t fixed_start = decay_start_tokens(fixed, 1e-2), ramp_start = decay_start_tokens(ramp, 1e-2);
  // The decay starts at 52428.8 tokens: in the fixed run at the step that starts at 52480 (410 x 128), in the ramp at
  // the first step of 64 x 16 = 1024 tokens that starts past it, 53248.
  CHECK(fixed_start == 52480);
  CHECK(ramp_start == 53248);
  CHECK(std::abs(double(fixed_start - ramp_start)) <= 64 * 16);  // within one step of the largest batch
  // At any token count the two runs share, the scheduled LR is the same.
  size_t shared = 0;
  for (size_t i = 0, j = 0; i < fixed.tokens.size() && j < ramp.tokens.size();) {
    if (fixed.tokens[i] < ramp.tokens[j]) {
      ++i;
    } else if (fixed.tokens[i] > ramp.tokens[j]) {
      ++j;
    } else {
      if (fixed.tokens[i] >= 4096) CHECK(fixed.lr[i] == ramp.lr[j]);  // past the warmup: the same position
      ++shared, ++i, ++j;
    }
  }
  CHECK(shared == ramp.tokens.size());  // every ramp step starts at a token count the fixed run also passes
  // The last step of both runs is in the decay's last 1 %: both end where the schedule does.
  CHECK(fixed.lr.back() < 1e-2 * 0.02);
  CHECK(ramp.lr.back() < 1e-2 * 0.1);

  // The schedule as it was, in steps, set to the fixed run's 512: the ramp's 128 steps read as the first 128 of 512,
  // so it never decays at all. That variant must fail the check above.
  const Trace by_steps = trace(with({"batch_size_schedule=0:8,4096:16,12288:32,24576:64",
                                     "learning_rate_schedule_steps=512"}),
                               /*force_steps=*/true);
  CHECK(by_steps.lr.size() == 128);
  CHECK(decay_start_tokens(by_steps, 1e-2) != fixed_start);
  CHECK(by_steps.lr.back() == 1e-2);
}

TEST_CASE("a wsd decay overlapping the warmup is a config error", "[schedule]") {
  const std::string tiny = SHADOWGRAD_SOURCE_DIR "/configs/tiny.yml";
  CHECK_THROWS_WITH(config::load_config(tiny, {"lr_schedule_type=wsd", "warmup_steps_fraction=0.5",
                                               "wsd_decay_steps_fraction=0.6"}),
                    Catch::Contains("would overlap"));
  CHECK_NOTHROW(config::load_config(tiny, {"lr_schedule_type=wsd", "warmup_steps_fraction=0.4",
                                           "wsd_decay_steps_fraction=0.6"}));
}
