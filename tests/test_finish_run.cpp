// A run stopped by a signal during its last step has a checkpoint at that step but no end-of-run files. Re-running
// the same command must finish it from disk (summary.json, memory_report.json, loss.png) without training, and
// report the throughput metrics.jsonl recorded rather than 0 tokens/s.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "TrainerProcess.h"

namespace fs = std::filesystem;
namespace tp = trainer_process;

TEST_CASE("a run stopped during its last step is finished by re-running the same command", "[finish]") {
  const std::string base = tp::fresh_dir("finish_last");
  // The default 256-wide model at K=8 in fp32, fast on every CPU (bf16 is not, without avx512_bf16 or AMX): step 2
  // still takes long enough (about a second or more) to be interrupted for certain.
  const std::string args = "base.yml steps=2 run_name=r per_device_batch_size=8 gradient_accumulation_steps=8 "
                           "dtype=float32 num_threads=1 log_period=1 base_output_directory=" + base;
  const std::string run_dir = base + "/r";
  const pid_t pid = tp::spawn(args, base + ".log");
  for (int i = 0; i < 6000 && tp::lines(run_dir + "/metrics.jsonl").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ::kill(pid, SIGINT);  // step 1 is written; step 2 is under way
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
