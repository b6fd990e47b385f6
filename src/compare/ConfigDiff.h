#pragma once

// The config keys whose values differ between two runs' config.yml, so that a comparison that fails can say why
// before its table does (a different `steps` changes the LR schedule, so every loss differs).
//
//   for (const auto& d : configDiff("runs/a", "runs/b")) std::cout << d.key << ": " << d.a << " vs " << d.b;
//
// Reads the `key: value` lines the trainer writes. Keys that only name the run (run_name, base_output_directory)
// are left out. Empty when either side is not a run directory with a config.yml.

#include <string>
#include <vector>

namespace shadowgrad::compare {

struct ConfigDifference {
  std::string key, a, b;  // a or b is "(absent)" when only one run has the key
};

std::vector<ConfigDifference> configDiff(const std::string &runA, const std::string &runB);

// "config.yml differs in 2 keys: steps (A: 40, B: 20), learning_rate (A: 0.01, B: 0.003)\n", or "" when none.
std::string formatConfigDiff(const std::vector<ConfigDifference> &diffs);

} // namespace shadowgrad::compare
