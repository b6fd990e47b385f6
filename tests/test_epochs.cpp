// num_epochs: steps derived from the data's size and the global batch (SFT rows after packing, pairs, windows), the
// same at any process count when global_batch_size fixes the batch, and refused with steps, with synthetic data and
// with a changing batch; the trainer runs that many steps and reshuffles each epoch.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>

#include <ATen/ATen.h>

#include "TinyConfig.h"
#include "TokenFiles.h"
#include "TrainerProcess.h"
#include "config/GlobalBatch.h"
#include "data/DataSource.h"
#include "data/PairFile.h"
#include "data/SftFile.h"
#include "data/SftSource.h"
#include "train/EpochSteps.h"
#include "util/Errors.h"

using namespace shadowgrad;

namespace {

// `n` examples of 3..14 tokens, the second half of each a target.
std::string epoch_sft_file(const std::string& name, int n) {
  std::vector<std::vector<uint32_t>> tokens;
  std::vector<std::vector<uint8_t>> targets;
  for (int i = 0; i < n; ++i) {
    const int length = 3 + (i * 7) % 12;
    std::vector<uint32_t> t;
    std::vector<uint8_t> f;
    for (int j = 0; j < length; ++j) t.push_back(uint32_t((i + j) % 64)), f.push_back(j >= length / 2);
    tokens.push_back(t);
    targets.push_back(f);
  }
  const std::string path = token_files::temp_path(name);
  data::write_sft_file(path, tokens, targets);
  return path;
}

config::Config epoch_sft_config(const std::string& path, bool packing) {
  config::Config c = tiny_config();
  c.dataset_type = config::DatasetType::sft;
  c.dataset_path = path;
  c.packing = packing;
  c.num_epochs = 3;
  return c;
}

int64_t epoch_derived_steps(config::Config c, const data::DataSource& source, int64_t world) {
  config::derive_accumulation_steps(c, world);
  train::derive_steps_from_epochs(c, source, world);
  return c.steps;
}

int64_t epoch_targets_in_rows(const data::DataSource& s, int64_t rows) { return s.examples(0, 0, rows).valid_tokens(); }

} // namespace

TEST_CASE("num_epochs: unpacked SFT, pairs and token windows give ceil(epochs x size / global batch) steps",
          "[epochs]") {
  const std::string sft = epoch_sft_file("epochs_unpacked.sft", 22);
  config::Config c = epoch_sft_config(sft, false);
  auto source = data::make_source(data::DataOptions::from_config(c));
  CHECK(epoch_derived_steps(c, *source, 1) == 17);  // 3 x 22 rows / 4 = 16.5
  // Each epoch reshuffles: epoch 1 holds epoch 0's rows in another order.
  const data::Batch first = source->examples(0, 0, 22), second = source->examples(0, 22, 22);
  CHECK_FALSE(first.tokens.equal(second.tokens));
  CHECK(first.tokens.sum().item<int64_t>() == second.tokens.sum().item<int64_t>());

  std::vector<data::PairTokens> pairs;
  for (uint32_t i = 0; i < 10; ++i) pairs.push_back({{1, 2, i}, {3, 4}, {5, 6, 7}});
  const std::string pair_path = token_files::temp_path("epochs.pairs");
  data::write_pair_file(pair_path, pairs);
  config::Config p = tiny_config();
  p.dataset_type = config::DatasetType::preference;
  p.use_dpo = true;
  p.dataset_path = pair_path;
  p.num_epochs = 2;
  auto pair_source = data::make_source(data::DataOptions::from_config(p));
  CHECK(epoch_derived_steps(p, *pair_source, 1) == 5);  // 2 x 10 pairs / 4

  config::Config t = tiny_config();
  t.dataset_type = config::DatasetType::tokens;
  t.dataset_path = token_files::llmc_file("epochs.bin", token_files::counting_tokens(16 * 40 + 1, 64));
  t.num_epochs = 1;
  auto token_source = data::make_source(data::DataOptions::from_config(t));
  CHECK(epoch_derived_steps(t, *token_source, 1) == 10);  // 40 windows of 16 / 4
}

TEST_CASE("num_epochs: packed SFT steps cover exactly the epochs' rows, each epoch every example once", "[epochs]") {
  const config::Config c = epoch_sft_config(epoch_sft_file("epochs_packed.sft", 60), true);
  auto s = data::make_source(data::DataOptions::from_config(c));
  auto* sft = dynamic_cast<data::SftSource*>(s.get());
  REQUIRE(sft);
  const int64_t one = sft->rows_per_first_epoch(), three = s->examples_in_epochs(3);
  REQUIRE(one < 60);  // packed: fewer rows than examples
  // Every epoch holds every example once, so it holds the same targets: 3 epochs' rows hold 3x the first's targets,
  // and one row fewer misses some (control).
  const int64_t per_epoch = epoch_targets_in_rows(*s, one);
  CHECK(epoch_targets_in_rows(*s, three) == 3 * per_epoch);
  CHECK(epoch_targets_in_rows(*s, three - 1) < 3 * per_epoch);
  CHECK(epoch_derived_steps(c, *s, 1) == (three + 3) / 4);
}

TEST_CASE("num_epochs: global_batch_size keeps the derived steps at any process count", "[epochs]") {
  config::Config c = epoch_sft_config(epoch_sft_file("epochs_world.sft", 22), false);
  auto source = data::make_source(data::DataOptions::from_config(c));
  c.per_device_batch_size = 2;
  c.global_batch_size = 8;
  CHECK(epoch_derived_steps(c, *source, 1) == 9);  // 66 rows / 8
  CHECK(epoch_derived_steps(c, *source, 2) == 9);
  CHECK(epoch_derived_steps(c, *source, 4) == 9);
  // Control: without global_batch_size the global batch, and so the steps, follow the process count.
  c.global_batch_size = 0;
  c.gradient_accumulation_steps = 4;
  CHECK(epoch_derived_steps(c, *source, 1) == 9);
  CHECK(epoch_derived_steps(c, *source, 2) == 5);
}

TEST_CASE("num_epochs is refused with steps, train_tokens, synthetic data and a changing batch", "[epochs][errors]") {
  config::Config c = epoch_sft_config(epoch_sft_file("epochs_refused.sft", 22), false);
  auto source = data::make_source(data::DataOptions::from_config(c));
  auto error = [&](config::Config x) {
    try {
      train::derive_steps_from_epochs(x, *source, 1);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  config::Config with_steps = c;
  with_steps.given_keys.insert("steps");
  CHECK_THAT(error(with_steps), Catch::Contains("num_epochs=3 and steps=8 both set the run's length"));
  config::Config with_tokens = c;
  with_tokens.train_tokens = 1000;
  CHECK_THAT(error(with_tokens), Catch::Contains("train_tokens=1000"));
  config::Config growing = c;
  growing.batch_size_schedule = "0:4,100:8";
  CHECK_THAT(error(growing), Catch::Contains("give train_tokens=1056 instead"));  // 66 rows x 16 tokens
  CHECK(error(c).empty());

  config::Config synthetic = tiny_config();
  synthetic.num_epochs = 1;
  auto endless = data::make_source(data::DataOptions::from_config(synthetic));
  try {
    train::derive_steps_from_epochs(synthetic, *endless, 1);
    FAIL("synthetic data has no epoch");
  } catch (const ConfigError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("dataset_type=synthetic is endless"));
  }
}

TEST_CASE("the trainer prints the derived steps, runs them, and exits 2 for num_epochs with steps", "[epochs]") {
  const std::string sft = epoch_sft_file("epochs_trainer.sft", 22);
  const std::string dir = token_files::temp_path("epochs_runs");
  std::filesystem::remove_all(dir);
  const std::string common = std::string(SHADOWGRAD_SOURCE_DIR) + "/configs/tiny.yml dataset_type=sft dataset_path=" +
                             sft + " packing=false base_output_directory=" + dir;
  auto ok = trainer_process::run(common + " run_name=a num_epochs=2 log_period=100 enable_checkpointing=false");
  INFO(ok.output);
  REQUIRE(ok.code == 0);
  CHECK_THAT(ok.output, Catch::Contains("num_epochs=2: 44 rows of dataset_path in 2 epoch(s) / global batch 2 = "
                                        "steps=22"));
  CHECK_THAT(ok.output, Catch::Contains("done: 22 steps"));
  // A run stopped at step 12 (3 from the non-finite guard) resumes from its step-10 checkpoint to the same 22 steps.
  const std::string resumable = common + " run_name=r num_epochs=2 log_period=100 checkpoint_period=10 "
                                         "max_consecutive_nonfinite=1";
  auto stopped = trainer_process::run_command("SHADOWGRAD_TEST_NAN_STEPS=12:1 " + std::string(TRAINER_BIN) + " " + resumable);
  CHECK(stopped.code == 3);
  auto resumed = trainer_process::run(resumable);
  INFO(resumed.output);
  CHECK(resumed.code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("= steps=22") && Catch::Contains("done: 22 steps"));
  const auto lines = trainer_process::lines(dir + "/r/metrics.jsonl");
  REQUIRE(lines.size() == 22);
  CHECK_THAT(lines.back(), Catch::StartsWith("{\"step\": 22,"));
  auto both = trainer_process::run(common + " run_name=b num_epochs=2 steps=5");
  CHECK(both.code == 2);
  CHECK_THAT(both.output, Catch::Contains("num_epochs=2 and steps=5 both set the run's length"));
}
