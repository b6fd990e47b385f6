// A run stopped by a signal during its last step has a checkpoint at that step but no end-of-run files. Re-running
// the same command must finish it from disk (summary.json, memory_report.json, loss.png) without training, and
// report the throughput metrics.jsonl recorded rather than 0 tokens/s.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "TrainerProcess.h"

namespace fs = std::filesystem;
namespace tp = trainer_process;

TEST_CASE("a run stopped during its last step is finished by re-running the same command", "[finish]") {
  const std::string base = tp::fresh_dir("finish_last");
  const std::string args = "base.yml steps=2 run_name=r base_output_directory=" + base + tp::kTiny;
  const std::string run_dir = base + "/r";
  // Held before step 2 (SHADOWGRAD_TEST_HOLD): the SIGINT lands there, so step 2 is the step it finishes.
  const pid_t pid = tp::spawn_held(args, base + ".log", "step-2");
  INFO(tp::read_text(base + ".log"));
  REQUIRE(pid > 0);
  ::kill(pid, SIGINT);
  REQUIRE(tp::wait_for(pid) == 130);
  INFO(tp::read_text(base + ".log"));
  REQUIRE(fs::exists(run_dir + "/checkpoints/step-2"));
  REQUIRE_FALSE(fs::exists(run_dir + "/summary.json"));
  REQUIRE_FALSE(fs::exists(run_dir + "/memory_report.json"));

  auto r = tp::run(args);
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("writing its summary from metrics.jsonl and the checkpoint"));
  CHECK_THAT(r.output, !Catch::Contains(" 0 tokens/s average"));
  REQUIRE(fs::exists(run_dir + "/summary.json"));
  CHECK(fs::exists(run_dir + "/memory_report.json"));
  const std::string summary = tp::read_text(run_dir + "/summary.json");
  const auto losses = tp::field(run_dir + "/metrics.jsonl", "loss");
  REQUIRE(losses.size() == 2);  // nothing was trained again
  CHECK_THAT(summary, Catch::Contains("\"steps\": 2"));
  CHECK_THAT(summary, Catch::Contains("\"final_loss\": " + losses[1]));
  CHECK_THAT(summary, Catch::Contains("\"first_loss\": " + losses[0]));
  CHECK_THAT(summary, !Catch::Contains("\"avg_tokens_per_s\": 0,"));
  CHECK_THAT(tp::read_text(run_dir + "/memory_report.json"), Catch::Contains("read back from metrics.jsonl"));

  // A third time there is nothing left to do, and the files stay as they are.
  auto again = tp::run(args);
  CHECK(again.code == 0);
  CHECK_THAT(again.output, Catch::Contains("nothing to do"));
  CHECK(tp::read_text(run_dir + "/summary.json") == summary);
}
