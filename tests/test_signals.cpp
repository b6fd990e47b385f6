// Stop signals as launchers send them (src/train/Signals.h): a burst (the terminal's SIGINT plus a launcher's SIGTERM)
// is one stop request; a signal during start-up is kept, also when the parent left SIGINT ignored; and a run stopped
// before its first checkpoint starts again when the same command is rerun, but a different command cannot touch it.
// The process-group cases under scripts/launch.sh and torchrun are tests/signals_test.sh.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <signal.h>
#include <unistd.h>

#include "TrainerProcess.h"

namespace fs = std::filesystem;
namespace tp = trainer_process;

namespace {

std::string args_for(const std::string& base, const std::string& extra) {
  return "base.yml base_output_directory=" + base + " run_name=r" + tp::kTiny + " " + extra;
}

// True once `pid` runs the trainer binary and catches SIGINT (bit 2 of SigCgt in /proc/PID/status): the first
// thing its main does. Model building, data and the run directory all come later, so this is start-up.
bool catches_sigint(pid_t pid) {
  std::error_code ec;
  if (fs::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec) != fs::canonical(TRAINER_BIN, ec)) return false;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("SigCgt:", 0) == 0) return (std::strtoull(line.c_str() + 7, nullptr, 16) >> (SIGINT - 1)) & 1;
  return false;
}

// Starts the trainer like tp::spawn, with `prelude` run by the shell first (e.g. `trap '' INT`).
pid_t spawn_after(const std::string& prelude, const std::string& args, const std::string& log) {
  const std::string cmd = prelude + "; exec " + std::string(TRAINER_BIN) + " " + args + " >" + log + " 2>&1";
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// SIGINT as soon as the trainer's main has installed its handler; returns the exit code.
int sigint_during_startup(pid_t pid) {
  for (int i = 0; i < 30000 && !catches_sigint(pid); ++i) std::this_thread::sleep_for(std::chrono::microseconds(200));
  ::kill(pid, SIGINT);
  return tp::wait_for(pid);
}

} // namespace

TEST_CASE("a burst of SIGINT and SIGTERM is one stop: the step finishes, a checkpoint is written, exit by the first",
          "[signals]") {
  const bool sigint_first = GENERATE(true, false);
  const int first = sigint_first ? SIGINT : SIGTERM, second = sigint_first ? SIGTERM : SIGINT;
  const std::string base = tp::fresh_dir(sigint_first ? "burst_int" : "burst_term");
  const pid_t pid = tp::spawn(args_for(base, "steps=100000 checkpoint_period=100000"), base + ".log");
  tp::wait_for_lines(base + "/r/metrics.jsonl", 2);
  ::kill(pid, first);
  // Once the first is recorded (pending together, the kernel would deliver SIGINT first whatever the order sent),
  // the second, milliseconds later: as a terminal's Ctrl-C and then launch.sh's or torchrun's SIGTERM.
  const std::string said = std::string(first == SIGINT ? "SIGINT" : "SIGTERM") + ": finishing";
  for (int i = 0; i < 2000 && tp::read_text(base + ".log").find(said) == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ::kill(pid, second);
  const int code = tp::wait_for(pid);
  const std::string log = tp::read_text(base + ".log");
  INFO(log);
  CHECK(code == 128 + first);
  CHECK_THAT(log, Catch::Contains("within 2 s of the first signal: the same stop request"));
  CHECK_THAT(log, !Catch::Contains("exiting now"));
  const auto steps = tp::field(base + "/r/metrics.jsonl", "step");
  REQUIRE(steps.size() >= 2);
  CHECK(fs::exists(base + "/r/checkpoints/step-" + steps.back()));  // the step under way finished and was saved
  fs::remove_all(base);
}

TEST_CASE("a SIGINT during start-up stops before step 1, also when the parent left SIGINT ignored, and the same "
          "command then starts the run again, and another command cannot take its directory",
          "[signals]") {
  const bool ignored = GENERATE(false, true);  // true: as a background job of a script (scripts/sweep.sh, launch.sh)
  const std::string base = tp::fresh_dir(ignored ? "startup_ign" : "startup");
  const std::string args = args_for(base, "steps=3");
  const pid_t pid = spawn_after(ignored ? "trap '' INT" : ":", args, base + ".log");
  const int code = sigint_during_startup(pid);
  {
    const std::string log = tp::read_text(base + ".log");
    INFO(log);
    CHECK(code == 130);
    CHECK_THAT(log, Catch::Contains("stopped by SIGINT before step 1; rerun the same command to start it again"));
    CHECK(tp::lines(base + "/r/metrics.jsonl").empty());
    REQUIRE(fs::exists(base + "/r/config.yml"));  // the run directory exists, without a checkpoint
    CHECK_FALSE(fs::exists(base + "/r/checkpoints/step-1"));
  }
  if (!ignored) return;  // the reruns below once are enough
  // A typo'd rerun (another learning rate) still cannot overwrite that run, and says what differs.
  const auto other = tp::run(args + " learning_rate=0.5");
  INFO(other.output);
  CHECK(other.code == 2);
  CHECK_THAT(other.output, Catch::Contains("already exists"));
  CHECK_THAT(other.output, Catch::Contains("where this command has 'learning_rate: 0.5'"));
  // The same command starts it again from step 0 and finishes.
  const auto again = tp::run(args);
  INFO(again.output);
  CHECK(again.code == 0);
  CHECK_THAT(again.output, Catch::Contains("starting it again from step 0"));
  CHECK(tp::field(base + "/r/metrics.jsonl", "step") == std::vector<std::string>{"1", "2", "3"});
  REQUIRE(fs::exists(base + "/r/summary.json"));
  // A finished run without a checkpoint (as with enable_checkpointing=false) is never started again over its results.
  fs::remove_all(base + "/r/checkpoints");
  const auto finished = tp::run(args);
  INFO(finished.output);
  CHECK(finished.code == 2);
  fs::remove_all(base);
}
