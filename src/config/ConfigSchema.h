#pragma once
// The schema: what ConfigKeys.def declares, as data. Parsing of YAML and of key=value overrides,
// base.yml, --help-config and docs/config.md are all driven by this one table.
//
//   for (const auto& key : shadowgrad::config::schema()) std::cout << key.name << ": " << key.help;
//   shadowgrad::config::find_key("steps")->set(cfg, "20");   // throws ConfigError on "twenty"
#include <optional>
#include <string>
#include <vector>

#include "config/Config.h"

namespace shadowgrad::config {

struct KeySpec {
  std::string section;
  std::string name;
  std::string type;          // "int", "float", "bool", "string" or "enum"
  std::string constraint;    // human text: ">= 1", "in [0, 1]", "float32|bfloat16"
  std::string default_text;  // the default, formatted as YAML
  std::string help;
  // Plain function pointers (each row's lambdas capture nothing): as std::function, the ~150 rows' 300 wrappers
  // made ConfigSchema.cpp 13 s of clang's time in the config fuzzer's ASan build, 4.5 s so (2026-12-06).
  // Parses `text`, checks type and range, and stores it. Throws ConfigError naming key, value and expectation.
  void (*set)(Config&, const std::string& text) = nullptr;
  // The current value formatted as YAML.
  std::string (*get)(const Config&) = nullptr;
  bool frozen = false;  // a checkpoint pins it: resuming with another value is refused (SG_FROZEN_* rows)
};

const std::vector<KeySpec>& schema();

// nullptr when there is no such key.
const KeySpec* find_key(const std::string& name);

// `text` as key `name` prints once parsed ("1e-3" -> "0.001"), for comparing a saved config with a printed one;
// nullopt when there is no such key or `text` does not parse as its value.
std::optional<std::string> canonical_value(const std::string& name, const std::string& text);

// The closest key name by edit distance, ignoring case, or "" when nothing is close.
std::string suggest_key(const std::string& unknown);

// A command-line flag written for a config key ("--steps" followed by "5", or "--steps=5") as the override the
// trainer takes ("steps=5"); "" when `arg` is not a flag naming (nearly) a key.
std::string override_for_flag(const std::string& arg, const std::string& next);

} // namespace shadowgrad::config
