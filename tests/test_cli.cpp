// The trainer binary end to end: exit codes and messages for bad input, and a tiny successful run.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "TrainerProcess.h"

namespace fs = std::filesystem;

namespace {

using trainer_process::Result;
using trainer_process::kTinyModel;

Result run_trainer(const std::string& args) { return trainer_process::run(args); }

std::string fresh_dir(const std::string& name) { return trainer_process::fresh_dir("cli_" + name); }

const std::string& kTiny = kTinyModel;

} // namespace

// Bad input (exit 2, one line naming the culprit) is tested row by row in test_bad_inputs.cpp.

TEST_CASE("trainer --help-config lists every key and --print-config prints the resolved config", "[cli]") {
  Result help = run_trainer("--help-config");
  CHECK(help.code == 0);
  CHECK_THAT(help.output, Catch::Contains("gradient_accumulation_steps") && Catch::Contains("grad_dtype"));
  Result print = run_trainer("base.yml gradient_accumulation_steps=3 --print-config");
  CHECK(print.code == 0);
  CHECK_THAT(print.output, Catch::Contains("gradient_accumulation_steps: 3"));
}

TEST_CASE("a tiny run writes config, metrics and summary, its config.yml reruns it, resume=false never reuses the dir",
          "[cli][run]") {
  const std::string out = fresh_dir("run");
  Result r = run_trainer("base.yml steps=3 log_period=1 gradient_accumulation_steps=2 grad_dtype=bfloat16 run_name=a"
                         " base_output_directory=" + out + kTiny);
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.output, !Catch::Contains("\r"));
  const std::string dir = out + "/a";
  std::ifstream metrics(dir + "/metrics.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(metrics, line)) {
    ++lines;
    for (const char* key : {"\"step\": ", "\"loss\": ", "\"grad_norm\": ", "\"lr\": ", "\"tokens\": ",
                            "\"step_time_s\": ", "\"tokens_per_s\": "})
      CHECK_THAT(line, Catch::Contains(key));
  }
  CHECK(lines == 3);
  CHECK(fs::exists(dir + "/summary.json"));

  Result again = run_trainer("base.yml steps=3 resume=false run_name=a base_output_directory=" + out + kTiny);
  CHECK(again.code == 2);
  CHECK_THAT(again.output, Catch::Contains("already exists (resume=false)"));

  Result rerun = run_trainer(dir + "/config.yml run_name=b");
  CHECK(rerun.code == 0);
  std::ifstream a(dir + "/metrics.jsonl"), b(out + "/b/metrics.jsonl");
  std::string la, lb;
  while (std::getline(a, la) && std::getline(b, lb))
    CHECK(la.substr(0, la.find("\"step_time_s\"")) == lb.substr(0, lb.find("\"step_time_s\"")));
}

TEST_CASE("profiler=trace records the chosen steps' ops into profile.trace.json, and no trace is written by default",
          "[cli][profiler]") {
  const std::string out = fresh_dir("profile");
  Result r = run_trainer("base.yml steps=4 profiler=trace skip_first_n_steps_for_profiler=1 profiler_steps=2"
                         " gradient_accumulation_steps=2 run_name=p base_output_directory=" + out + kTiny);
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("profiling steps 2..3"));
  const std::string trace = trainer_process::read_text(out + "/p/profile.trace.json");
  CHECK(trace.rfind("[", 0) == 0);
  CHECK(trace.find_last_not_of(" \n") == trace.rfind(']'));
  // The forward matmuls and the gradient fold both appear: it is the training step that was recorded.
  CHECK_THAT(trace, Catch::Contains("\"name\": \"aten::mm\"") && Catch::Contains("AccumulateGrad"));

  Result plain = run_trainer("base.yml steps=2 run_name=q base_output_directory=" + out + kTiny);
  REQUIRE(plain.code == 0);
  CHECK_FALSE(fs::exists(out + "/q/profile.trace.json"));
}
