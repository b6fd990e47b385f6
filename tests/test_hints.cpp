// Every hint an error message prints must work when followed: each TEST_CASE provokes one error, checks that its
// message gives the hint, then does what the hint says and checks that the run goes through. (The hint of
// `WORLD_SIZE=.. but RANK is not set ...; or use scripts/launch.sh` is followed in tests/distributed_test.sh, and
// `rerun the same command to resume` by every resume test in test_checkpoint.cpp.)
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "TrainerProcess.h"
#include "Skip.h"

namespace fs = std::filesystem;
namespace tp = trainer_process;

namespace {

// The trainer on the tiny model in run `r` under `base`.
tp::Result tiny(const std::string& base, const std::string& args) {
  return tp::run("base.yml run_name=r base_output_directory=" + base + tp::kTinyModel + " " + args);
}

void expect_hint(const tp::Result& r, int code, const std::string& hint) {
  INFO(r.output);
  CHECK(r.code == code);
  CHECK_THAT(r.output, Catch::Contains(hint));
}

void expect_ok(const tp::Result& r) {
  INFO(r.output);
  CHECK(r.code == 0);
}

std::string text_file(const std::string& name, const std::string& text) {
  const std::string dir = tp::fresh_dir("hint_files");
  fs::create_directories(dir);
  std::ofstream(dir + "/" + name, std::ios::binary) << text;
  return dir + "/" + name;
}

} // namespace

TEST_CASE("hint: a key that cannot change on resume -> give the checkpoint's value again, or a new run_name",
          "[hints]") {
  const std::string base = tp::fresh_dir("hint_frozen");
  REQUIRE(tiny(base, "steps=2").code == 0);
  // tiny() sets base_emb_dim=32; a second value for it is refused as given twice, so build this line by hand.
  std::string other = tp::kTinyModel;
  other.replace(other.find("base_emb_dim=32"), 15, "base_emb_dim=48");
  auto r = tp::run("base.yml run_name=r steps=4 base_output_directory=" + base + other);
  expect_hint(r, 2, "use a new run_name, or give base_emb_dim=32 again");
  expect_ok(tiny(base, "steps=4"));  // the checkpoint's value again: resumes
  expect_ok(tp::run("base.yml run_name=r2 steps=2 base_output_directory=" + base + other));  // a new run_name
}

TEST_CASE("hint: an existing run directory without checkpoints -> pick another run_name or remove it", "[hints]") {
  const std::string base = tp::fresh_dir("hint_exists");
  fs::create_directories(base + "/r");
  std::ofstream(base + "/r/notes.txt") << "not a run\n";
  expect_hint(tiny(base, "steps=1"), 2, "pick another run_name or remove it");
  expect_ok(tp::run("base.yml run_name=other steps=1 base_output_directory=" + base + tp::kTinyModel));
  fs::remove_all(base + "/r");
  expect_ok(tiny(base, "steps=1"));
}

TEST_CASE("hint: resume=false on an existing run -> pick another run_name or remove it", "[hints]") {
  const std::string base = tp::fresh_dir("hint_noresume");
  REQUIRE(tiny(base, "steps=1").code == 0);
  expect_hint(tiny(base, "steps=1 resume=false"), 2, "pick another run_name or remove it");
  fs::remove_all(base + "/r");
  expect_ok(tiny(base, "steps=1 resume=false"));
}

TEST_CASE("hint: a checkpoint past steps -> raise steps, or pick an earlier load_checkpoint_step", "[hints]") {
  const std::string base = tp::fresh_dir("hint_past");
  REQUIRE(tiny(base, "steps=2 checkpoint_period=1").code == 0);
  expect_hint(tiny(base, "steps=1 checkpoint_period=1"), 2, "raise steps or pick an earlier load_checkpoint_step");
  expect_ok(tiny(base, "steps=1 checkpoint_period=1 load_checkpoint_step=1"));
  expect_ok(tiny(base, "steps=3 checkpoint_period=1"));
}

TEST_CASE("hint: a complete run -> raise steps to train further", "[hints]") {
  const std::string base = tp::fresh_dir("hint_complete");
  REQUIRE(tiny(base, "steps=2").code == 0);
  expect_hint(tiny(base, "steps=2"), 0, "raise steps to train further");
  auto r = tiny(base, "steps=3");
  expect_ok(r);
  CHECK_THAT(r.output, Catch::Contains("resumed from"));
  CHECK(tp::lines(base + "/r/metrics.jsonl").size() == 3);
}

TEST_CASE("hint: no loadable checkpoint -> remove the run directory to start over", "[hints]") {
  const std::string base = tp::fresh_dir("hint_corrupt");
  REQUIRE(tiny(base, "steps=2").code == 0);
  fs::resize_file(base + "/r/checkpoints/step-2/model.pt", 10);
  expect_hint(tiny(base, "steps=3"), 2, "remove the run directory to start over");
  fs::remove_all(base + "/r");
  expect_ok(tiny(base, "steps=3"));
}

TEST_CASE("hint: load_checkpoint_step=0 -> use -1 (the latest) or N >= 1", "[hints]") {
  const std::string base = tp::fresh_dir("hint_step0");
  REQUIRE(tiny(base, "steps=2 checkpoint_period=1").code == 0);
  expect_hint(tiny(base, "steps=3 load_checkpoint_step=0"), 2, "use -1 (the latest) or N >= 1");
  expect_ok(tiny(base, "steps=3 load_checkpoint_step=-1"));
}

TEST_CASE("hint: dataset_path with synthetic data -> set dataset_type=text", "[hints]") {
  const std::string base = tp::fresh_dir("hint_text");
  const std::string text = text_file("t.txt", std::string(4000, 'a') + "\n");
  // vocab_size=256: text is bytes (tiny() sets vocab_size=64, which the next hint is about).
  std::string model = tp::kTinyModel;
  model.replace(model.find("vocab_size=64"), 13, "vocab_size=256");
  const std::string args = "base.yml run_name=r steps=1 base_output_directory=" + base + model + " dataset_path=" + text;
  expect_hint(tp::run(args), 2, "set dataset_type=text or tokens to use it");
  expect_ok(tp::run(args + " dataset_type=text"));
}

TEST_CASE("hint: text bytes >= vocab_size -> text needs vocab_size=256", "[hints]") {
  const std::string base = tp::fresh_dir("hint_vocab");
  const std::string text = text_file("t.txt", std::string(4000, 'z') + "\n");
  expect_hint(tiny(base, "steps=1 dataset_type=text dataset_path=" + text), 2, "text needs vocab_size=256");
  std::string model = tp::kTinyModel;
  model.replace(model.find("vocab_size=64"), 13, "vocab_size=256");
  expect_ok(tp::run("base.yml run_name=r steps=1 dataset_type=text dataset_path=" + text + " base_output_directory=" +
                    base + model));
}

TEST_CASE("hint: too many non-finite steps -> lower learning_rate", "[hints]") {
  const std::string base = tp::fresh_dir("hint_lr");
  // Plain SGD at the largest learning rate the schema allows, unclipped, in fp32 (tiny.yml): the weights blow up to inf.
  const std::string diverging = "steps=30 opt_type=sgd gradient_clipping_threshold=0 "
                                "max_consecutive_nonfinite=2 warmup_steps_fraction=0 ";
  expect_hint(tiny(base, diverging + "learning_rate=1000"), 3, "lower learning_rate or check the data");
  fs::remove_all(base);
  expect_ok(tiny(base, diverging + "learning_rate=0.01"));
}

TEST_CASE("hint: hardware=cuda without CUDA -> use hardware=cpu", "[hints][can_skip]") {
  const std::string base = tp::fresh_dir("hint_cuda");
  auto r = tiny(base, "steps=1 hardware=cuda");
  if (r.code == 0) {
    SG_SKIP("this LibTorch has CUDA and a GPU, so the hint is not printed");
  }
  expect_hint(r, 2, "use hardware=cpu");
  expect_ok(tiny(base, "steps=1 hardware=cpu"));
}

TEST_CASE("hint: a key overridden twice -> give it once, a missing CONFIG -> the usage example", "[hints]") {
  expect_hint(tp::run("base.yml steps=2 steps=3 --print-config"), 2, "give it once");
  expect_ok(tp::run("base.yml steps=3 --print-config"));
  auto r = tp::run("steps=10");
  expect_hint(r, 2, "e.g. trainer base.yml steps=10");
  expect_ok(tp::run("base.yml steps=10 --print-config"));
}

TEST_CASE("hint: a config key written as a flag -> key=value, a key in capitals -> its lower-case name", "[hints]") {
  const std::string base = tp::fresh_dir("hint_flag");
  expect_hint(tiny(base, "--steps 1"), 2, "did you mean 'steps=1'?");
  expect_hint(tiny(base, "--log-period=1 steps=1"), 2, "did you mean 'log_period=1'?");
  expect_hint(tiny(base, "STEPS=1"), 2, "did you mean 'steps'?");
  expect_ok(tiny(base, "steps=1"));
}
