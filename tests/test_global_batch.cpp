// global_batch_size: K derived from it and the process count, the two ways it is refused (exit 2 before anything is
// written), where the derived K is recorded, and a checkpoint of 2 processes x K=2 resumed by 1 process x K=4 with
// the same command.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "TrainerProcess.h"
#include "config/ConfigLoader.h"
#include "config/GlobalBatch.h"
#include "util/Errors.h"

using namespace shadowgrad;
namespace fs = std::filesystem;
namespace tp = trainer_process;

namespace {

config::Config loaded(const std::vector<std::string>& overrides) {
  return config::load_config(SHADOWGRAD_SOURCE_DIR "/configs/base.yml", overrides);
}

std::string derive_error(config::Config cfg, int64_t world) {
  try {
    config::derive_accumulation_steps(cfg, world);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// The trainer as rank `rank` of `world` processes on loopback (what a launcher would set).
pid_t spawn_rank(const std::string& args, const std::string& log, int rank, int world, int port) {
  return tp::spawn(args, log, "RANK=" + std::to_string(rank) + " WORLD_SIZE=" + std::to_string(world) +
                                  " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port));
}

std::vector<double> losses(const std::string& run_dir) {
  std::vector<double> out;
  for (const auto& text : tp::field(run_dir + "/metrics.jsonl", "loss")) out.push_back(std::stod(text));
  return out;
}

} // namespace

TEST_CASE("global_batch_size: K = global_batch_size / (per_device_batch_size x WORLD_SIZE)", "[global-batch][unit]") {
  auto cfg = loaded({"global_batch_size=16", "per_device_batch_size=2"});
  CHECK_FALSE(cfg.given_keys.count("gradient_accumulation_steps"));  // base.yml lists it at its default: not given
  config::derive_accumulation_steps(cfg, 2);
  CHECK(cfg.gradient_accumulation_steps == 4);
  config::derive_accumulation_steps(cfg, 2);  // again: unchanged
  CHECK(cfg.gradient_accumulation_steps == 4);
  CHECK(config::global_batch(cfg, 2) == 16);
  config::derive_accumulation_steps(cfg, 1);  // an elastic restart on one process: K doubles
  CHECK(cfg.gradient_accumulation_steps == 8);

  auto plain = loaded({"gradient_accumulation_steps=3"});  // 0 (the default): K as given
  config::derive_accumulation_steps(plain, 4);
  CHECK(plain.gradient_accumulation_steps == 3);
  auto agreeing = loaded({"global_batch_size=16", "per_device_batch_size=2", "gradient_accumulation_steps=8"});
  config::derive_accumulation_steps(agreeing, 1);
  CHECK(agreeing.gradient_accumulation_steps == 8);
}

TEST_CASE("global_batch_size: a split that does not divide, or an explicit K that disagrees, is a ConfigError",
          "[global-batch][unit][errors]") {
  CHECK(derive_error(loaded({"global_batch_size=12", "per_device_batch_size=5"}), 2) ==
        "global_batch_size=12 is not a multiple of per_device_batch_size=5 x WORLD_SIZE=2; per_device_batch_size "
        "values that divide it: 1, 2, 3, 6");
  CHECK(derive_error(loaded({"global_batch_size=9", "per_device_batch_size=1"}), 2) ==
        "global_batch_size=9 is not a multiple of per_device_batch_size=1 x WORLD_SIZE=2; no per_device_batch_size "
        "divides it: make global_batch_size a multiple of WORLD_SIZE=2");
  CHECK(derive_error(loaded({"global_batch_size=8", "per_device_batch_size=16"}), 1) ==  // K would be 0
        "global_batch_size=8 is not a multiple of per_device_batch_size=16 x WORLD_SIZE=1; per_device_batch_size "
        "values that divide it: 1, 2, 4, 8");
  CHECK(derive_error(loaded({"global_batch_size=8", "per_device_batch_size=2", "gradient_accumulation_steps=1"}), 2) ==
        "gradient_accumulation_steps=1 was given, but global_batch_size=8 / (per_device_batch_size=2 x WORLD_SIZE=2) "
        "makes it 2; give one of the two");
}

TEST_CASE("global_batch_size: the trainer refuses a bad split with exit 2 and writes nothing", "[global-batch][cli]") {
  const std::string out = tp::fresh_dir("gbs_bad");
  auto r = tp::run("base.yml steps=2 global_batch_size=7 base_output_directory=" + out + tp::kTiny);
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("error: global_batch_size=7 is not a multiple of per_device_batch_size=2 x "
                                       "WORLD_SIZE=1; per_device_batch_size values that divide it: 1, 7"));
  r = tp::run("base.yml steps=2 global_batch_size=8 gradient_accumulation_steps=2 base_output_directory=" + out +
              tp::kTiny);
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("error: gradient_accumulation_steps=2 was given, but global_batch_size=8 / "
                                       "(per_device_batch_size=2 x WORLD_SIZE=1) makes it 4"));
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("global_batch_size: the run line, config.yml and the manifest record the derived K",
          "[global-batch][cli]") {
  const std::string out = tp::fresh_dir("gbs_record");
  auto r = tp::run("base.yml steps=2 global_batch_size=8 run_name=a base_output_directory=" + out + tp::kTiny);
  INFO(r.output);
  REQUIRE(r.code == 0);
  const std::string run_line = tp::line_with(r.output, "] run ");
  CHECK_THAT(run_line, Catch::Contains("K=4 x 2 sequences x 16 tokens x 1 processes = global batch 8 "
                                    "(global_batch_size; K derived)"));
  const std::string config_yml = tp::read_text(out + "/a/config.yml");
  CHECK_THAT(config_yml, Catch::Contains("\nglobal_batch_size: 8\n") &&
                             Catch::Contains("\ngradient_accumulation_steps: 4\n"));
  const std::string manifest = tp::read_text(out + "/a/checkpoints/step-2/manifest.yml");
  CHECK_THAT(manifest, Catch::Contains("gradient_accumulation_steps: 4") && Catch::Contains("global_batch: 8"));
  // config.yml reruns the run at the same process count (its K agrees with the derived one).
  r = tp::run(out + "/a/config.yml steps=3");
  INFO(r.output);
  CHECK(r.code == 0);
  fs::remove_all(out);
}

TEST_CASE("global_batch_size: a checkpoint of 2 processes x K=2 resumes on 1 process x K=4 with the same command",
          "[global-batch][multiprocess]") {
  const std::string out = tp::fresh_dir("gbs_resume");
  const std::string args = "base.yml steps=6 checkpoint_period=3 max_num_checkpoints_to_keep=0 global_batch_size=8 "
                           "synthetic_min_length_fraction=0.2 run_name=r collective_timeout_s=60 "
                           "base_output_directory=" + out + tp::kTiny;
  const int port = free_port();
  std::vector<pid_t> ranks;
  for (int rank = 0; rank < 2; ++rank)
    ranks.push_back(spawn_rank(args, out + ".rank" + std::to_string(rank) + ".log", rank, 2, port));
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    INFO(tp::read_text(out + ".rank" + std::to_string(rank) + ".log"));
    REQUIRE(tp::wait_for(ranks[rank]) == 0);
  }
  CHECK_THAT(tp::read_text(out + ".rank0.log"), Catch::Contains("K=2 x 2 sequences x 16 tokens x 2 processes"));
  const std::vector<double> straight = losses(out + "/r");
  REQUIRE(straight.size() == 6);
  // As if the job had lost a node after the step-3 checkpoint: the later checkpoint and the summary never existed.
  fs::remove_all(out + "/r/checkpoints/step-6");
  fs::remove(out + "/r/summary.json");

  auto r = tp::run(args);  // the same command, one process, no key changed
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("K=4 x 2 sequences x 16 tokens x 1 processes = global batch 8"));
  CHECK_THAT(r.output, Catch::Contains("resumed from") && Catch::Contains("step-3"));
  CHECK_THAT(r.output, Catch::Contains("resharding: the checkpoint was written by 2 processes with "
                                       "gradient_accumulation_steps=2"));
  const std::vector<double> resumed = losses(out + "/r");
  REQUIRE(resumed.size() == 6);  // every step once
  for (size_t s = 0; s < 6; ++s) {
    INFO("step " << s + 1 << ": " << resumed[s] << " vs " << straight[s]);
    CHECK(std::abs(resumed[s] - straight[s]) <= 1e-5 * std::abs(straight[s]));
  }
  fs::remove_all(out);
  fs::remove(out + ".rank0.log");
  fs::remove(out + ".rank1.log");
}

TEST_CASE("global_batch_size: a run stopped before its first checkpoint restarts at another process count",
          "[global-batch][cli]") {
  // config.yml as 2 processes would have written it (K=2), in a directory with no checkpoint: a node was lost
  // before the first checkpoint, and the launcher restarts the same command on 1 process (K=4).
  const std::string out = tp::fresh_dir("gbs_restart");
  const std::string args = "base.yml steps=2 global_batch_size=8 run_name=r base_output_directory=" + out + tp::kTiny;
  const std::pair<const char*, const char*> rank0_of_2[] = {
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}};
  for (const auto& [name, value] : rank0_of_2) ::setenv(name, value, 1);
  auto printed = tp::run(args + " --print-config");  // as rank 0 of 2 resolves it; --print-config connects to nothing
  for (const auto& [name, value] : rank0_of_2) ::unsetenv(name);
  INFO(printed.output);
  REQUIRE(printed.code == 0);
  REQUIRE_THAT(printed.output, Catch::Contains("\ngradient_accumulation_steps: 2\n"));
  fs::create_directories(out + "/r");
  std::ofstream(out + "/r/config.yml") << printed.output;

  auto other = tp::run(args + " learning_rate=0.5");  // another command is still refused
  INFO(other.output);
  CHECK(other.code == 2);
  auto r = tp::run(args);
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("was stopped before its first checkpoint") &&
                           Catch::Contains("K=4 x 2 sequences x 16 tokens x 1 processes"));
  fs::remove_all(out);
}
