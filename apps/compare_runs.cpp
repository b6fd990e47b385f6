// compare_runs: compares one metric of two training runs step by step, e.g. a gradient-accumulation run against
// the full-batch run it should reproduce. Thin by design: parse flags, call src/compare, choose the exit code.

#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "VersionLine.h"

#include "util/Errors.h"
#include "compare/ConfigDiff.h"
#include "compare/Report.h"
#include "compare/RunComparison.h"

namespace {

// Exit codes are part of the interface: scripts and tests branch on them.
constexpr int kPass = 0;
constexpr int kFail = 1;
constexpr int kBadInput = 2;

constexpr const char *kDescription = R"(Compare one metric of two runs step by step.

RUN_A and RUN_B are run directories holding metrics.jsonl (or paths to the .jsonl files).
Only steps present in both runs are compared; steps in one run only are reported, not failed.

A step is within tolerance when |a - b| <= atol + rtol * |b| (numpy.isclose, B is the reference;
rel diff = |a - b| / |b|). NaN never matches, not even NaN (a diverged run must not pass);
equal infinities match. In metrics.jsonl, NaN/nan/Infinity/inf and null are read as non-finite values.

Exit codes: 0 all compared steps within tolerance; 1 some step outside tolerance;
2 bad input (missing run or file, malformed line, metric absent, no overlapping steps, bad --steps).)";

} // namespace

int main(int argc, char **argv) {
  namespace cmp = shadowgrad::compare;
  CLI::App app(kDescription, "compare_runs");
  std::string runA, runB, steps;
  cmp::CompareOptions options;
  bool json = false;
  app.add_option("RUN_A", runA, "first run directory or metrics.jsonl")->required();
  app.add_option("RUN_B", runB, "second (reference) run directory or metrics.jsonl")->required();
  app.add_option("--metric", options.metric, "metric key to compare")->capture_default_str();
  app.add_option("--rtol", options.tolerance.rtol, "relative tolerance")->capture_default_str();
  app.add_option("--atol", options.tolerance.atol, "absolute tolerance")->capture_default_str();
  app.add_option("--steps", steps, "inclusive step range FROM:TO, FROM:, :TO or STEP (default: all)");
  app.add_flag("--json", json, "print one JSON object (steps, verdict, counts, max diffs) instead of the table");
  app.set_version_flag("--version", version_line("compare_runs"));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    int code = app.exit(e); // prints help (code 0) or the usage error
    return code == 0 ? kPass : kBadInput;
  }

  try {
    if (!steps.empty())
      options.steps = cmp::StepRange::parse(steps);
    cmp::RunComparison result = cmp::compareRuns(runA, runB, options);
    if (json) {
      std::cout << cmp::formatJson(result) << "\n";
    } else {
      // Said first: a different steps or learning_rate explains a table full of mismatches.
      std::cout << "A: " << result.runA << "\nB: " << result.runB << "\n"
                << cmp::formatConfigDiff(cmp::configDiff(runA, runB)) << cmp::formatTable(result)
                << cmp::formatVerdict(result) << "\n";
    }
    return result.passed() ? kPass : kFail;
  } catch (const shadowgrad::InputError &e) {
    std::cerr << "compare_runs: error: " << e.what() << "\n";
    return kBadInput;
  } catch (const std::exception &e) {
    std::cerr << "compare_runs: unexpected error: " << e.what() << "\n";
    return kBadInput;
  }
}
