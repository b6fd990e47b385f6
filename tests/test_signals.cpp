// Stop signals as launchers send them (src/train/Signals.h): a burst (the terminal's SIGINT plus a launcher's SIGTERM)
// is one stop request; a signal during start-up is kept, also when the parent left SIGINT ignored; and a run stopped
// before its first checkpoint starts again when the same command is rerun, but a different command cannot touch it.
// The process-group cases under scripts/launch.sh and torchrun are tests/signals_test.sh.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include <signal.h>
#include <unistd.h>

#include "TrainerProcess.h"

namespace fs = std::filesystem;
namespace tp = trainer_process;

namespace {

std::string args_for(const std::string& base, const std::string& extra) {
  return "base.yml base_output_directory=" + base + " run_name=r" + tp::kTiny + " " + extra;
}

// Starts the trainer like tp::spawn, with `prelude` run by the shell first (e.g. `trap '' INT`), held at start-up
// (SHADOWGRAD_TEST_HOLD=start-up: right after main installs its handlers, before the model, the data and the run
// directory); returns once it says it holds there, or -1 if it exited first.
pid_t spawn_held_at_startup(const std::string& prelude, const std::string& args, const std::string& log) {
  const std::string cmd = prelude + "; export SHADOWGRAD_TEST_HOLD=start-up; exec " + std::string(TRAINER_BIN) + " " +
                          args + " >" + log + " 2>&1";
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return tp::wait_for_text(log, "test hold: at start-up,", pid) ? pid : -1;
}

} // namespace

TEST_CASE("a burst of SIGINT and SIGTERM is one stop: the step finishes, a checkpoint is written, exit by the first",
          "[signals]") {
  const bool sigint_first = GENERATE(true, false);
  const int first = sigint_first ? SIGINT : SIGTERM, second = sigint_first ? SIGTERM : SIGINT;
  const std::string base = tp::fresh_dir(sigint_first ? "burst_int" : "burst_term");
  // Held before step 3 until both signals have come (SHADOWGRAD_TEST_HOLD=step-3:2), so the second always finds the
  // step under way, however loaded the machine.
  const pid_t pid = tp::spawn_held(args_for(base, "steps=10 checkpoint_period=100000"), base + ".log", "step-3:2");
  INFO(tp::read_text(base + ".log"));
  REQUIRE(pid > 0);
  ::kill(pid, first);
  // Once the first is recorded (pending together, the kernel would deliver SIGINT first whatever the order sent),
  // the second, milliseconds later: as a terminal's Ctrl-C and then launch.sh's or torchrun's SIGTERM.
  const std::string said = std::string(first == SIGINT ? "SIGINT" : "SIGTERM") + ": finishing";
  REQUIRE(tp::wait_for_text(base + ".log", said, pid));
  ::kill(pid, second);
  const int code = tp::wait_for(pid);
  const std::string log = tp::read_text(base + ".log");
  INFO(log);
  CHECK(code == 128 + first);
  CHECK_THAT(log, Catch::Contains("within 2 s of the first signal: the same stop request"));
  CHECK_THAT(log, !Catch::Contains("exiting now"));
  CHECK(tp::field(base + "/r/metrics.jsonl", "step") == std::vector<std::string>{"1", "2", "3"});
  CHECK(fs::exists(base + "/r/checkpoints/step-3"));  // the step under way finished and was saved
  fs::remove_all(base);
}

TEST_CASE("a SIGINT during start-up stops before step 1, also when the parent left SIGINT ignored, and the same "
          "command then starts the run again, and another command cannot take its directory",
          "[signals]") {
  const bool ignored = GENERATE(false, true);  // true: as a background job of a script (scripts/sweep.sh, launch.sh)
  const std::string base = tp::fresh_dir(ignored ? "startup_ign" : "startup");
  const std::string args = args_for(base, "steps=3");
  const pid_t pid = spawn_held_at_startup(ignored ? "trap '' INT" : ":", args, base + ".log");
  INFO(tp::read_text(base + ".log"));
  REQUIRE(pid > 0);
  ::kill(pid, SIGINT);
  const int code = tp::wait_for(pid);
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
