// Progress output: a live line on a terminal, plain lines without carriage returns elsewhere.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "TrainerProcess.h"
#include "train/Progress.h"
#include "Skip.h"

namespace {

// What a shell command line printed (stdout and stderr).
std::string capture(const std::string& cmd) { return trainer_process::run_command(cmd).output; }

std::string tiny_run(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("sg_progress_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir / name);
  return std::string(TRAINER_BIN) + " base.yml steps=4 log_period=2" + trainer_process::kTinyModel +
         " base_output_directory=" + dir.string() + " run_name=" + name;
}

} // namespace

TEST_CASE("a progress line shows step/steps, loss, tokens/s, peak memory and ETA with no control characters",
          "[progress]") {
  shadowgrad::train::ProgressLine p;
  p.step = 3;
  p.loss = 2.5;
  p.tokens_per_s = 1234;
  p.peak_bytes = 3 * 1048576;
  p.eta_s = 7;
  std::string line = shadowgrad::train::format_progress(p, 10);
  CHECK_THAT(line, Catch::StartsWith("step 3/10 | loss 2.5000"));
  CHECK_THAT(line, Catch::Contains("1234 tok/s") && Catch::Contains("peak 3.0 MiB") && Catch::Contains("eta 7s"));
  CHECK(line.find('\r') == std::string::npos);
  CHECK(line.find('\n') == std::string::npos);
}

TEST_CASE("a progress line shows the latest eval_loss once an evaluation has run", "[progress]") {
  shadowgrad::train::ProgressLine p;
  p.step = 4;
  p.loss = 2.5;
  CHECK_THAT(shadowgrad::train::format_progress(p, 10), !Catch::Contains("eval_loss"));
  p.eval_loss = 3.25;
  CHECK_THAT(shadowgrad::train::format_progress(p, 10), Catch::StartsWith("step 4/10 | loss 2.5000 | eval_loss 3.2500"));
}

TEST_CASE("a preference run's progress line shows the reward accuracy and margin", "[progress]") {
  shadowgrad::train::ProgressLine p;
  p.step = 2;
  p.loss = 0.6;
  CHECK_THAT(shadowgrad::train::format_progress(p, 10), !Catch::Contains("acc "));
  p.reward_accuracy = 0.75;
  p.reward_margin = 0.125;
  CHECK_THAT(shadowgrad::train::format_progress(p, 10),
             Catch::StartsWith("step 2/10 | loss 0.6000 | acc 0.750 margin 0.1250"));
}

TEST_CASE("not on a terminal: plain log lines every log_period, no carriage return", "[progress]") {
  std::string out = capture(tiny_run("pipe"));
  CHECK(out.find('\r') == std::string::npos);
  CHECK_THAT(out, Catch::Contains("step 2/4") && Catch::Contains("step 4/4"));
  CHECK_THAT(out, !Catch::Contains("step 3/4"));
}

TEST_CASE("on a terminal: one live line redrawn with carriage returns", "[progress][can_skip]") {
  if (std::system("command -v script >/dev/null 2>&1") != 0) {
    SG_SKIP("util-linux 'script' is not installed, so no pseudo-terminal is available");
  }
  // script(1) runs the trainer on a pseudo-terminal.
  std::string out = capture("script -qec '" + tiny_run("tty") + "' /dev/null");
  CHECK_THAT(out, Catch::Contains("\r\033[Kstep 3/4"));
}
