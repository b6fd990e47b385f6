// The trainer binary end to end: exit codes and messages for bad input, and a tiny successful run.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <sys/wait.h>

namespace fs = std::filesystem;

namespace {

struct Result {
  int code;
  std::string output;  // stdout and stderr together
};

Result run_trainer(const std::string& args) {
  std::string cmd = std::string(TRAINER_BIN) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("sg_cli_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  return dir.string();
}

const std::string kTiny =
    " base_emb_dim=32 base_num_query_heads=2 base_num_kv_heads=1 head_dim=16 base_mlp_dim=64"
    " base_num_decoder_layers=2 vocab_size=64 max_target_length=16 per_device_batch_size=2 num_threads=1";

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
