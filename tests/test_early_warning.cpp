// Early warning on eval_loss: the warning after early_warning_evals rises in a row, naming the best step; the same
// after a resume; keep_best_checkpoint's checks; and end to end, the best step's checkpoint kept out of the rotation
// and exported by export_hf --best.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "TrainerProcess.h"
#include "checkpoint/MetricsTail.h"
#include "config/ConfigLoader.h"
#include "train/EvalTrend.h"
#include "util/Errors.h"

using namespace shadowgrad;

TEST_CASE("eval_loss risen at N evaluations in a row warns, naming the best step", "[early_warning]") {
  train::EvalTrend trend(2, {});
  CHECK_FALSE(trend.add(5, 1.40));
  CHECK_FALSE(trend.add(10, 1.51));  // one rise
  const auto warning = trend.add(15, 1.85);
  REQUIRE(warning);
  CHECK_THAT(*warning, Catch::Contains("eval_loss has risen at 2 evaluations in a row: 1.4000 (step 5) -> 1.5100 "
                                       "(step 10) -> 1.8500 (step 15); the best was 1.4000 at step 5"));
  CHECK(trend.best_step() == 5);
  CHECK(trend.add(20, 1.90));  // a third rise warns again
  CHECK_FALSE(trend.add(25, 1.30));  // a fall resets, and is the new best
  CHECK(trend.best_step() == 25);

  // Control: N=3 does not warn at two rises; a dip between rises resets the count; 0 never warns.
  train::EvalTrend three(3, {});
  for (auto [s, l] : {std::pair{5, 1.40}, {10, 1.51}, {15, 1.85}}) CHECK_FALSE(three.add(s, l));
  train::EvalTrend dip(2, {});
  for (auto [s, l] : {std::pair{5, 1.40}, {10, 1.51}, {15, 1.45}, {20, 1.60}}) CHECK_FALSE(dip.add(s, l));
  train::EvalTrend off(0, {});
  for (auto [s, l] : {std::pair{5, 1.40}, {10, 1.51}, {15, 1.85}}) CHECK_FALSE(off.add(s, l));
  // A non-finite eval_loss is neither a rise nor a best.
  train::EvalTrend nan(2, {});
  CHECK_FALSE(nan.add(5, 1.40));
  CHECK_FALSE(nan.add(10, std::nan("")));
  CHECK_FALSE(nan.add(15, 1.50));
  CHECK(nan.best_step() == 5);
}

TEST_CASE("a resumed run warns where the straight run would: it starts from metrics.jsonl's evaluations",
          "[early_warning]") {
  train::EvalTrend resumed(2, {{5, 1.40}, {10, 1.51}});
  CHECK(resumed.best_step() == 5);
  CHECK(resumed.add(15, 1.85));
  train::EvalTrend fresh(2, {});  // control: without the earlier evaluations there is no warning yet
  CHECK_FALSE(fresh.add(15, 1.85));
}

TEST_CASE("keep_best_checkpoint needs an evaluation and checkpoints", "[early_warning][errors]") {
  const std::string tiny = SHADOWGRAD_SOURCE_DIR "/configs/tiny.yml";
  CHECK_THROWS_WITH(config::load_config(tiny, {"keep_best_checkpoint=true"}),
                    Catch::Contains("no evaluation is scheduled"));
  CHECK_THROWS_WITH(config::load_config(tiny, {"keep_best_checkpoint=true", "eval_interval=2", "eval_steps=1",
                                               "enable_checkpointing=false"}),
                    Catch::Contains("enable_checkpointing=false writes none"));
  CHECK_NOTHROW(config::load_config(tiny, {"keep_best_checkpoint=true", "eval_interval=2", "eval_steps=1"}));
}

namespace {

// The step of the lowest eval_loss in a run's metrics.jsonl, read here by a parser of its own.
int64_t lowest_eval_step(const std::string& run_dir) {
  int64_t best_step = -1;
  double best = 1e300;
  for (const auto& line : trainer_process::lines(run_dir + "/metrics.jsonl")) {
    const auto at = line.find("\"eval_loss\": ");
    if (at == std::string::npos) continue;
    const double loss = std::stod(line.substr(at + 13));
    if (loss < best) best = loss, best_step = std::stoll(line.substr(line.find("\"step\": ") + 8));
  }
  return best_step;
}

std::vector<std::string> checkpoint_names(const std::string& run_dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(run_dir + "/checkpoints"))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace

TEST_CASE("keep_best_checkpoint keeps the best step out of the rotation, and export_hf --best exports it",
          "[early_warning]") {
  const std::string dir = trainer_process::fresh_dir("early_warning_runs");
  const std::string export_hf = (std::filesystem::path(TRAINER_BIN).parent_path() / "export_hf").string();
  // A learning rate of 0.3 on the tiny model: eval_loss rises over the first steps (5.57, 6.27, 7.39, 7.41 here).
  const std::string common = std::string(SHADOWGRAD_SOURCE_DIR) + "/configs/tiny.yml steps=4 eval_interval=1 "
                             "eval_steps=1 learning_rate=0.3 warmup_steps_fraction=0 max_num_checkpoints_to_keep=1 "
                             "log_period=100 base_output_directory=" + dir;
  auto kept = trainer_process::run(common + " run_name=kept keep_best_checkpoint=true");
  INFO(kept.output);
  REQUIRE(kept.code == 0);
  const int64_t best = lowest_eval_step(dir + "/kept");
  REQUIRE(best >= 1);
  REQUIRE(best < 4);  // the case needs a best step before the last
  CHECK_THAT(kept.output, Catch::Contains("eval_loss has risen at 2 evaluations in a row") &&
                              Catch::Contains(fmt::format("at step {} (overfitting?", best)));
  CHECK(checkpoint_names(dir + "/kept") == std::vector<std::string>{fmt::format("step-{}", best), "step-4"});
  auto exported = trainer_process::run_command(export_hf + " --best " + dir + "/kept " + dir + "/kept-hf");
  INFO(exported.output);
  CHECK(exported.code == 0);
  CHECK_THAT(exported.output, Catch::Contains(fmt::format("from {}/kept step {}", dir, best)));
  CHECK(std::filesystem::exists(dir + "/kept-hf/config.json"));

  // Control: without keep_best_checkpoint the rotation keeps only the last, and --best says where the best went.
  auto rotated = trainer_process::run(common + " run_name=rotated");
  REQUIRE(rotated.code == 0);
  CHECK(checkpoint_names(dir + "/rotated") == std::vector<std::string>{"step-4"});
  auto missing = trainer_process::run_command(export_hf + " --best " + dir + "/rotated " + dir + "/rotated-hf");
  CHECK(missing.code == 2);
  CHECK_THAT(missing.output, Catch::Contains(fmt::format("was at step {}, whose checkpoint is not there", best)));
  auto both = trainer_process::run_command(export_hf + " --best --step 4 " + dir + "/kept " + dir + "/x");
  CHECK(both.code == 2);
}
