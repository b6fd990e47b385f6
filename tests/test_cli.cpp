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

TEST_CASE("bad input exits 2 with one clear message and writes nothing", "[cli][errors]") {
  const std::string out = fresh_dir("bad");
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"base.yml gradient_acumulation_steps=4",
       "unknown config key 'gradient_acumulation_steps' (did you mean 'gradient_accumulation_steps'?)"},
      {"base.yml steps=abc", "invalid value 'abc' for config key 'steps': expected an integer"},
      {"base.yml steps=0", "expected an integer >= 1"},
      {"base.yml grad_dtype=float8", "expected one of float32|bfloat16|float16"},
      {"base.yml steps", "override 'steps' is not of the form key=value"},
      {"no_such_config.yml", "config file 'no_such_config.yml' does not exist"},
      {"base.yml base_num_query_heads=6 base_num_kv_heads=4", "must be a multiple of base_num_kv_heads (4)"},
      {"base.yml dataset_type=text dataset_path=/nonexistent.txt", "dataset_path '/nonexistent.txt' does not exist"},
      {"base.yml steps=1 steps=2", "overridden twice"},
      {"", "missing CONFIG"},
      {"base.yml --no-such-flag", "no-such-flag"},
  };
  for (const auto& c : cases) {
    INFO(c.args);
    Result r = run_trainer(c.args + " base_output_directory=" + out);
    CHECK(r.code == 2);
    CHECK_THAT(r.output, Catch::Contains(c.message));
    CHECK_THAT(r.output, Catch::StartsWith("error: "));
  }
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("YAML syntax errors give the line", "[cli][errors]") {
  auto path = fs::temp_directory_path() / "sg_cli_syntax.yml";
  std::ofstream(path) << "steps: 2\nlog_period: 1\nlearning_rate: [0.1\n";
  Result r = run_trainer(path.string());
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("sg_cli_syntax.yml:") && Catch::Contains("YAML syntax error"));
}

TEST_CASE("trainer --help-config lists every key and --print-config prints the resolved config", "[cli]") {
  Result help = run_trainer("--help-config");
  CHECK(help.code == 0);
  CHECK_THAT(help.output, Catch::Contains("gradient_accumulation_steps") && Catch::Contains("grad_dtype"));
  Result print = run_trainer("base.yml gradient_accumulation_steps=3 --print-config");
  CHECK(print.code == 0);
  CHECK_THAT(print.output, Catch::Contains("gradient_accumulation_steps: 3"));
}

TEST_CASE("a tiny run writes config, metrics and summary; its config.yml reruns it; the dir is never overwritten",
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

  Result again = run_trainer("base.yml steps=3 run_name=a base_output_directory=" + out + kTiny);
  CHECK(again.code == 2);
  CHECK_THAT(again.output, Catch::Contains("already exists"));

  Result rerun = run_trainer(dir + "/config.yml run_name=b");
  CHECK(rerun.code == 0);
  std::ifstream a(dir + "/metrics.jsonl"), b(out + "/b/metrics.jsonl");
  std::string la, lb;
  while (std::getline(a, la) && std::getline(b, lb))
    CHECK(la.substr(0, la.find("\"step_time_s\"")) == lb.substr(0, lb.find("\"step_time_s\"")));
}
