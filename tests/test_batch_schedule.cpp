// A global batch that grows: the schedule parser, the example-index set across changes, the gns policy's
// decisions, and bitwise resume around a change (docs/batch-size.md).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <utility>
#include <vector>

#include "TinyConfig.h"
#include "TrainerProcess.h"
#include "checkpoint/Crc32.h"
#include "checkpoint/Manifest.h"
#include "config/BatchSizeSchedule.h"
#include "config/GlobalBatch.h"
#include "data/DataSource.h"
#include "model/Decoder.h"
#include "model/DecoderOptions.h"
#include "train/BatchSizePolicy.h"
#include "train/NoiseScale.h"
#include "train/StepOptions.h"
#include "train/TrainStep.h"
#include "util/Errors.h"

using namespace shadowgrad;
namespace tp = trainer_process;
namespace fs = std::filesystem;
using config::BatchSizeSchedule;

TEST_CASE("batch_size_schedule parses tokens with k/M/B, steps with s, and finds the point in effect", "[batch]") {
  const auto s = BatchSizeSchedule::parse("0:32, 2M:64,8M:128");
  REQUIRE(s.points().size() == 3);
  CHECK(s.points()[1].at == 2000000);
  CHECK(s.points()[2].batch == 128);
  CHECK_FALSE(s.in_steps());
  CHECK(s.batch_at(0, 0) == 32);
  CHECK(s.batch_at(999, 1999999) == 32);  // tokens decide, not steps
  CHECK(s.batch_at(1, 2000000) == 64);
  CHECK(s.batch_at(1, 9000000) == 128);
  CHECK(BatchSizeSchedule::parse("0:4,1.5k:8,3B:8").points()[1].at == 1500);
  const auto st = BatchSizeSchedule::parse("0:8,100s:16");
  CHECK(st.in_steps());
  CHECK(st.batch_at(99, 1 << 30) == 8);
  CHECK(st.batch_at(100, 0) == 16);
  CHECK(BatchSizeSchedule::parse("").empty());
}

TEST_CASE("a bad batch_size_schedule names the entry and says what is wrong", "[batch]") {
  const std::vector<std::pair<std::string, std::string>> bad{
      {"0:32,2M:48", "entry '2M:48': 48 is not an integer multiple of the batch before it (32"},
      {"0:64,2M:32", "entry '2M:32': the global batch may not shrink"},
      {"1M:32,2M:64", "entry '1M:32': the first point must be at 0"},
      {"0:32,2X:64", "entry '2X:64': the part before ':'"},
      {"0:32,2M", "entry '2M': expected AT:BATCH"},
      {"0:32,2M:0", "entry '2M:0': the part after ':'"},
      {"0:32,1M:64,500s:128", "entry '500s:128': mixes steps and tokens: '1M:64' counts tokens"},
      {"0:32,2M:64,1M:128", "entry '1M:128': points must be in increasing order"},
      {"0:32,1.5:64", "entry '1.5:64': 1.5 is not a whole number of tokens"},
  };
  for (const auto& [text, message] : bad) {
    INFO(text);
    std::string what;
    try {
      BatchSizeSchedule::parse(text);
    } catch (const ConfigError& e) {
      what = e.what();
    }
    CHECK_THAT(what, Catch::StartsWith("batch_size_schedule entry") && Catch::Contains(message));
  }
}

TEST_CASE("the trainer exits 2 naming the schedule entry: malformed, shrinking, or not splitting into microbatches",
          "[batch][cli]") {
  const std::string base = "base.yml" + tp::kTiny + " steps=2 enable_checkpointing=false base_output_directory=" +
                           tp::fresh_dir("batch_cli");
  const std::vector<std::pair<std::string, std::string>> cases{
      {"batch_size_schedule=0:8,1k:12", "error: batch_size_schedule entry '1k:12': 12 is not an integer multiple"},
      {"batch_size_schedule=0:8,1k:4", "error: batch_size_schedule entry '1k:4': the global batch may not shrink"},
      {"batch_size_schedule=0:3,1k:6",
       "error: batch_size_schedule entry '0:3': a global batch of 3 sequences does not split into "
       "per_device_batch_size=2 x WORLD_SIZE=1 microbatches"},
      {"batch_size_schedule=0:4 global_batch_size=8", "error: global_batch_size=8 but batch_size_schedule starts at 4"},
      {"batch_size_schedule=0:4 batch_size_policy=gns", "both set the global batch"},
  };
  for (const auto& [args, message] : cases) {
    auto r = tp::run(base + " " + args);
    INFO(args << "\n" << r.output);
    CHECK(r.code == 2);
    CHECK_THAT(r.output, Catch::Contains(message));
  }
}

TEST_CASE("with a schedule, global_batch_size is its first batch and K follows it", "[batch]") {
  auto c = tiny_config();
  c.per_device_batch_size = 2;
  c.batch_size_schedule = "0:8,1k:32";
  config::derive_accumulation_steps(c, 2);
  CHECK(c.global_batch_size == 8);
  CHECK(c.gradient_accumulation_steps == 2);
  const auto o = train::BatchPolicyOptions::from_config(c, 2);
  CHECK(o.largest_batch() == 32);
}

namespace {

// A source that remembers the (step key, index) of every training example it hands out.
class RecordingSource : public data::DataSource {
 public:
  explicit RecordingSource(std::unique_ptr<data::DataSource> inner) : inner_(std::move(inner)) {}
  data::Batch examples(int64_t step, int64_t first, int64_t count) const override {
    for (int64_t i = 0; i < count; ++i) keys.emplace_back(step, first + i);
    return inner_->examples(step, first, count);
  }
  data::Batch eval_examples(int64_t first, int64_t count) const override { return inner_->eval_examples(first, count); }
  int64_t eval_capacity() const override { return inner_->eval_capacity(); }
  mutable std::vector<std::pair<int64_t, int64_t>> keys;

 private:
  std::unique_ptr<data::DataSource> inner_;
};

// The keys a run reads: `schedule` (empty: fixed at global_batch_size) until at least `sequences` are trained.
std::vector<std::pair<int64_t, int64_t>> keys_read(const std::string& schedule, int64_t global, int64_t sequences,
                                                   data::ExampleOrder order) {
  auto c = tiny_config();
  c.per_device_batch_size = 2;
  c.batch_size_schedule = schedule;
  c.global_batch_size = schedule.empty() ? global : 0;
  config::derive_accumulation_steps(c, 1);
  RecordingSource source(data::make_source(data::DataOptions::from_config(c)));
  model::Decoder model(model::DecoderOptions::from_config(c));
  const auto batches = train::BatchPolicyOptions::from_config(c, 1);
  auto options = train::StepOptions::from_config(c);
  options.max_accumulation_steps = batches.largest_batch() / c.per_device_batch_size;
  train::TrainStep step(options, model, source, c10::kCPU);
  step.set_example_order(order);
  train::BatchSizePolicy policy(batches, {});
  for (int64_t s = 0; policy.state().sequences < sequences; ++s) {
    policy.before_step(s);
    step.run(s, policy.step_batch());
    policy.after_step(s, nullptr);
  }
  CHECK(policy.state().sequences == sequences);
  return source.keys;
}

} // namespace

TEST_CASE("across batch changes every example is read once: the same index set as a fixed-batch run", "[batch]") {
  // 16 tokens a sequence: 4 -> 8 from 128 tokens (8 sequences), -> 16 from 512 tokens (32 sequences).
  const auto grown = keys_read("0:4,128:8,512:16", 0, 96, data::ExampleOrder::sequences);
  const auto fixed = keys_read("", 8, 96, data::ExampleOrder::sequences);
  const std::set<std::pair<int64_t, int64_t>> a(grown.begin(), grown.end()), b(fixed.begin(), fixed.end());
  CHECK(grown.size() == 96);
  CHECK(a.size() == grown.size());  // nothing read twice
  CHECK(a == b);
  CHECK(a.begin()->second == 0);
  CHECK(a.rbegin()->second == 95);
  // The order before data_order numbers examples within each step: across a change it repeats some.
  const auto by_step = keys_read("0:4,128:8,512:16", 0, 96, data::ExampleOrder::steps);
  std::set<int64_t> indices;
  for (const auto& k : by_step) indices.insert(k.second);
  CHECK(indices.size() < by_step.size());
}

TEST_CASE("lr scaling: sqrt, linear or none of the batch over the first one, capped by batch_size_lr_max", "[batch]") {
  train::BatchPolicyOptions o;
  o.start_batch = 8;
  o.lr_scaling = config::BatchLrScaling::sqrt;
  CHECK(train::BatchSizePolicy(o, {}).lr_factor(32) == Approx(2.0));
  o.lr_scaling = config::BatchLrScaling::linear;
  CHECK(train::BatchSizePolicy(o, {}).lr_factor(32) == Approx(4.0));
  o.lr_scaling = config::BatchLrScaling::none;
  CHECK(train::BatchSizePolicy(o, {}).lr_factor(32) == 1.0);
  o.lr_scaling = config::BatchLrScaling::sqrt;
  o.max_lr_factor = 1.5;
  CHECK(train::BatchSizePolicy(o, {}).lr_factor(32) == Approx(1.5));
}

namespace {

struct Change {
  int64_t step, to;
};

// Feeds the gns policy a reading per step; returns its changes.
template <class Reading>
std::vector<Change> run_policy(train::BatchPolicyOptions o, int64_t steps, Reading reading) {
  train::BatchSizePolicy policy(o, {});
  std::vector<Change> out;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t batch = policy.step_batch().global_batch;
    const train::GnsReading r = reading(s, batch);
    if (auto c = policy.after_step(s, &r)) {
      CHECK(c->to == 2 * c->from);  // only doubles
      out.push_back({c->step, c->to});
    }
  }
  return out;
}

} // namespace

TEST_CASE("gns policy: doubles when gns_tokens exceeds margin x batch, not before, and not more often than allowed",
          "[batch][gns]") {
  train::BatchPolicyOptions o;
  o.gns = true;
  o.start_batch = 4;
  o.tokens_per_sequence = 1;
  o.margin = 1;
  o.min_steps_between_changes = 5;
  o.settle_updates = 3;
  o.max_batch = 64;
  // gns_tokens = 2 (s + 1) after 0-based step s: it passes 4 after step 2, but the first change may come only at
  // step 5; the estimate is always past the batch from then on, so each next change comes as soon as allowed, 5 steps
  // later: 16 at 10, 32 at 15, 64 at 20; 128 would pass max_batch.
  const auto linear = run_policy(o, 60, [](int64_t s, int64_t) { return train::GnsReading{2.0 * (s + 1), s + 1}; });
  const std::vector<std::pair<int64_t, int64_t>> expected{{5, 8}, {10, 16}, {15, 32}, {20, 64}};
  REQUIRE(linear.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    CHECK(linear[i].step == expected[i].first);
    CHECK(linear[i].to == expected[i].second);
  }
  // Not settled: nothing before settle_updates estimates, whatever they say.
  o.settle_updates = 12;
  const auto unsettled = run_policy(o, 20, [](int64_t s, int64_t) { return train::GnsReading{1e9, s + 1}; });
  REQUIRE_FALSE(unsettled.empty());
  CHECK(unsettled.front().step == 12);
  // A margin of 2: 2 (s + 1) > 2 x 4 first after step 4, so the first change is at step 5 still; 2(s+1) > 16 after
  // step 8: the second at 10; > 32 after 16: at 17, not 15.
  o.settle_updates = 3;
  o.margin = 2;
  const auto wide = run_policy(o, 60, [](int64_t s, int64_t) { return train::GnsReading{2.0 * (s + 1), s + 1}; });
  REQUIRE(wide.size() >= 3);
  CHECK(wide[0].step == 5);
  CHECK(wide[1].step == 10);
  CHECK(wide[2].step == 17);
}

TEST_CASE("gns policy on a stream whose noise scale rises: the estimator's EMA drives the doublings", "[batch][gns]") {
  // Exact expected squared norms of a stream with |G|^2 falling as 1 / (1 + t/10) and tr(Sigma) = 100 (per token):
  // B_simple = 100 (1 + t / 10) tokens, rising 10x over 90 steps. Every microbatch has b = 32 tokens.
  train::NoiseScale gns(0.9);
  train::BatchPolicyOptions o;
  o.gns = true;
  o.start_batch = 2;
  o.tokens_per_sequence = 16;
  o.margin = 1;
  o.min_steps_between_changes = 10;
  o.settle_updates = 10;
  o.max_batch = 1 << 10;
  double last_gns = 0;
  std::vector<std::pair<int64_t, double>> logged;  // (step, gns_tokens) per step
  const auto changes = run_policy(o, 90, [&](int64_t s, int64_t batch) {
    const double g2 = 1.0 / (1.0 + s / 10.0), trace = 100.0;
    const int64_t k = batch, b = 16, T = k * b;  // one sequence of 16 tokens per microbatch
    std::vector<double> folded(k);
    std::vector<int64_t> tokens(k, b);
    for (auto& f : folded) f = (g2 + trace / b) * std::pow(double(b) / double(T), 2);
    const auto e = gns.update(folded, tokens, g2 + trace / T, T);
    last_gns = e ? e->gns_tokens : 0;
    logged.emplace_back(s, last_gns);
    return train::GnsReading{last_gns, gns.state().updates};
  });
  REQUIRE(changes.size() >= 2);
  int64_t batch = o.start_batch, previous = 0;
  for (const auto& c : changes) {
    INFO("change at step " << c.step << " to " << c.to);
    CHECK(c.step - previous >= o.min_steps_between_changes);
    CHECK(c.step >= o.settle_updates);
    // It doubled because the estimate after the step before exceeded the batch in tokens...
    CHECK(logged[c.step - 1].second > o.margin * double(batch * o.tokens_per_sequence));
    // ...and not before: between the earliest allowed step and this one, the estimate stayed below.
    for (int64_t s = std::max(previous + o.min_steps_between_changes, o.settle_updates) - 1; s < c.step - 1; ++s)
      CHECK(logged[s].second <= o.margin * double(batch * o.tokens_per_sequence));
    batch = c.to;
    previous = c.step;
  }
  CHECK(batch <= o.max_batch);
}

TEST_CASE("bitwise resume from a checkpoint just before, at, and just after a schedule change", "[batch][resume]") {
  const std::string base = tp::fresh_dir("batch_resume");
  // 0-based step 5 is the first at 8 sequences: checkpoints after 4, 5 and 6 steps are before, at and after it.
  const std::string sched = "batch_size_schedule=0:4,5s:8,8s:16 checkpoint_period=1000";
  auto full = tp::run(tp::tiny_run_args(base, "straight", sched + " steps=10"));
  INFO(full.output);
  REQUIRE(full.code == 0);
  CHECK_THAT(full.output, Catch::Contains("global batch 4 -> 8 sequences from step 6 (K=4)") &&
                              Catch::Contains("LR x 1.414"));
  const auto want = tp::field(base + "/straight/metrics.jsonl", "loss");
  REQUIRE(want.size() == 10);
  const std::vector<std::string> scheduled{"4", "4", "4", "4", "4", "8", "8", "8", "16", "16"};
  CHECK(tp::field(base + "/straight/metrics.jsonl", "global_batch_size") == scheduled);
  CHECK(tp::field(base + "/straight/metrics.jsonl", "tokens_seen").back() == std::to_string((5 * 4 + 3 * 8 + 2 * 16) * 16));
  for (int stop : {4, 5, 6}) {
    const std::string name = "stop" + std::to_string(stop);
    REQUIRE(tp::run(tp::tiny_run_args(base, name, sched + " steps=" + std::to_string(stop))).code == 0);
    auto resumed = tp::run(tp::tiny_run_args(base, name, sched + " steps=10"));
    INFO(resumed.output);
    REQUIRE(resumed.code == 0);
    CHECK_THAT(resumed.output, Catch::Contains("resumed from") && Catch::Contains("step-" + std::to_string(stop)));
    CHECK(tp::field(base + "/" + name + "/metrics.jsonl", "loss") == want);
  }
}

TEST_CASE("train_tokens with a token-keyed wsd schedule: the run ends at its tokens, and resumes bit for bit",
          "[batch][resume][schedule]") {
  const std::string base = tp::fresh_dir("batch_resume_tokens");
  // tiny.yml: 16 tokens a sequence. 4 sequences (64 tokens) a step up to 320 tokens: 5 steps; 8 (128 tokens) up to
  // 640: 3 steps (704); then 16 (256 tokens): 4 steps to 1728 = train_tokens. 12 steps; the decay (the last 20 %)
  // starts at 1382.4 tokens, i.e. in the last step, which starts at 1472.
  const std::string run = "batch_size_schedule=0:4,320:8,640:16 train_tokens=1728 lr_schedule_type=wsd "
                          "wsd_decay_steps_fraction=0.2 warmup_steps_fraction=0 cosine_learning_rate_final_fraction=0 "
                          "learning_rate=1e-2 checkpoint_period=1000";
  auto args = [&](const std::string& name, const std::string& extra) {
    return "base.yml base_output_directory=" + base + " run_name=" + name + tp::kTiny + " " + extra;
  };
  auto full = tp::run(args("straight", run + " steps=100"));
  INFO(full.output);
  REQUIRE(full.code == 0);
  CHECK_THAT(full.output, Catch::Contains("decay from 1382 to 1728 tokens; the run ends at train_tokens=1728") &&
                              Catch::Contains("done: 12 steps"));
  const auto tokens = tp::field(base + "/straight/metrics.jsonl", "tokens_seen");
  const auto lr = tp::field(base + "/straight/metrics.jsonl", "lr");
  REQUIRE(tokens.size() == 12);
  CHECK(tokens.back() == "1728");
  // The peak (1e-2 at 4 sequences, x2 at 16 by sqrt scaling) until the last step, which starts at 1472 tokens.
  CHECK(std::stod(lr[10]) == Approx(2e-2));
  CHECK(std::stod(lr[11]) < 2e-2);
  CHECK(std::stod(lr[11]) == Approx(2e-2 * (1728 - 1472) / (1728 - 1382)));
  for (int stop : {5, 11}) {  // at the batch change to 8, and just before the decay
    const std::string name = "stop" + std::to_string(stop);
    auto part = tp::run(args(name, run + " steps=" + std::to_string(stop)));
    REQUIRE(part.code == 0);
    CHECK_THAT(part.output, Catch::Contains("stopped at steps=" + std::to_string(stop)));
    auto resumed = tp::run(args(name, run + " steps=100"));
    INFO(resumed.output);
    REQUIRE(resumed.code == 0);
    CHECK(tp::field(base + "/" + name + "/metrics.jsonl", "loss") == tp::field(base + "/straight/metrics.jsonl", "loss"));
    CHECK(tp::field(base + "/" + name + "/metrics.jsonl", "lr") == lr);
  }
  // Finished: a rerun trains nothing.
  auto again = tp::run(args("straight", run + " steps=100"));
  CHECK(again.code == 0);
  CHECK_THAT(again.output, Catch::Contains("already complete at step 12"));
}

TEST_CASE("bitwise resume at a gns policy change: the resumed run makes the same decisions", "[batch][resume][gns]") {
  const std::string base = tp::fresh_dir("batch_resume_gns");
  // K=2 at the start (the noise scale needs two microbatches), a tiny margin, an EMA that settles after 2 steps:
  // the batch doubles about every 3 steps, up to 32.
  const std::string gns = "global_batch_size=4 batch_size_policy=gns gns_batch_margin=0.01 gns_ema_decay=0.5 "
                          "gns_min_steps_between_changes=3 global_batch_size_max=32 checkpoint_period=1000";
  auto full = tp::run(tp::tiny_run_args(base, "straight", gns + " steps=12"));
  INFO(full.output);
  REQUIRE(full.code == 0);
  CHECK_THAT(full.output, Catch::Contains("batch_size_policy=gns: gns_tokens"));
  const auto batches = tp::field(base + "/straight/metrics.jsonl", "global_batch_size");
  REQUIRE(batches.size() == 12);
  CHECK(batches.front() == "4");
  CHECK(batches.back() != "4");
  CHECK(std::is_sorted(batches.begin(), batches.end(),
                       [](const std::string& a, const std::string& b) { return std::stoll(a) < std::stoll(b); }));
  // Checkpoints at the first change (the step after it is the first at the new batch) and just after it.
  const int first = int(std::find_if(batches.begin(), batches.end(), [](const std::string& b) { return b != "4"; }) -
                        batches.begin());
  for (int stop : {first, first + 1}) {
    const std::string name = "stop" + std::to_string(stop);
    REQUIRE(tp::run(tp::tiny_run_args(base, name, gns + " steps=" + std::to_string(stop))).code == 0);
    auto resumed = tp::run(tp::tiny_run_args(base, name, gns + " steps=12"));
    INFO(resumed.output);
    REQUIRE(resumed.code == 0);
    CHECK(tp::field(base + "/" + name + "/metrics.jsonl", "loss") == tp::field(base + "/straight/metrics.jsonl", "loss"));
    CHECK(tp::field(base + "/" + name + "/metrics.jsonl", "global_batch_size") == batches);
  }
}

namespace {

// Rewrites a checkpoint's manifest as a format-2 trainer wrote it: no data_order, no batch_last_change_step.
void make_format_2(const std::string& dir) {
  const std::string path = dir + "/manifest.yml";
  std::string body;
  for (const auto& line : tp::lines(path)) {
    if (line.rfind("# crc32", 0) == 0 || line.rfind("data_order:", 0) == 0 || line.rfind("batch_last_change", 0) == 0)
      continue;
    body += (line.rfind("format_version:", 0) == 0 ? "format_version: 2" : line) + "\n";
  }
  std::ofstream(path) << body << "# crc32 of the lines above: " << checkpoint::crc32_hex(checkpoint::crc32(body.data(), body.size()))
                      << "\n";
}

} // namespace

TEST_CASE("a checkpoint from before data_order resumes on its (step, index) data, and refuses a schedule",
          "[batch][resume]") {
  const std::string base = tp::fresh_dir("batch_old_checkpoint");
  const std::string fixed = "global_batch_size=4 checkpoint_period=1000";
  REQUIRE(tp::run(tp::tiny_run_args(base, "old", fixed + " steps=3")).code == 0);
  REQUIRE(tp::run(tp::tiny_run_args(base, "new", fixed + " steps=3")).code == 0);
  make_format_2(base + "/old/checkpoints/step-3");
  auto refused = tp::run(tp::tiny_run_args(base, "old", "batch_size_schedule=0:4,3s:8 checkpoint_period=1000 steps=6"));
  CHECK(refused.code == 2);
  CHECK_THAT(refused.output, Catch::Contains("error: checkpoint '") && Catch::Contains("step-3' predates batch-size "
                                                                                       "schedules"));
  auto resumed = tp::run(tp::tiny_run_args(base, "old", fixed + " steps=6"));
  INFO(resumed.output);
  REQUIRE(resumed.code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("predates data_order"));
  REQUIRE(tp::run(tp::tiny_run_args(base, "new", fixed + " steps=6")).code == 0);
  // Same weights at step 3, other examples from step 4 on (step 1's batch is the same in both orders).
  const auto a = tp::field(base + "/old/metrics.jsonl", "loss"), b = tp::field(base + "/new/metrics.jsonl", "loss");
  REQUIRE(a.size() == 6);
  CHECK(std::vector<std::string>(a.begin(), a.begin() + 3) == std::vector<std::string>(b.begin(), b.begin() + 3));
  CHECK(a[3] != b[3]);
}

TEST_CASE("manifest format 3 keeps the data order, the sequences trained and the batch, older ones read as steps",
          "[batch][checkpoint]") {
  checkpoint::Manifest m;
  m.state.step = 9;
  m.state.batch_last_change_step = 5;
  m.data_position = 96;  // Checkpointer::save: the sequences trained so far
  m.global_batch = 16;
  const std::string text = m.to_text();
  CHECK_THAT(text, Catch::Contains("format_version: 3\n") && Catch::Contains("data_order: sequences\n"));
  const auto back = checkpoint::Manifest::parse(text, "m.yml");
  CHECK_FALSE(back.state.step_order);
  CHECK(back.state.sequences == 96);
  CHECK(back.state.global_batch == 16);
  CHECK(back.state.batch_last_change_step == 5);
  // Without data_order (a format-2 manifest): the (step, index) order, nothing counted in sequences.
  std::string old;
  for (size_t at = 0, next; at < text.size(); at = next + 1) {
    next = text.find('\n', at);
    const std::string line = text.substr(at, next - at);
    if (line.rfind("data_order:", 0) == 0 || line.rfind("# crc32", 0) == 0) continue;
    old += line + "\n";
  }
  old += "# crc32 of the lines above: " + checkpoint::crc32_hex(checkpoint::crc32(old.data(), old.size())) + "\n";
  const auto legacy = checkpoint::Manifest::parse(old, "old.yml");
  CHECK(legacy.state.step_order);
  CHECK(legacy.state.sequences == 0);
}
