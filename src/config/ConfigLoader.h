#pragma once
// Loading a config: YAML file first, then key=value overrides, then cross-field validation.
//
//   auto path = shadowgrad::config::resolve_config_path("base.yml", "/repo/configs");
//   auto cfg  = shadowgrad::config::load_config(path, {"gradient_accumulation_steps=4"});
//
// Every failure throws ConfigError with one line naming the file, line, key or value at fault.
#include <string>
#include <vector>

#include "config/Config.h"

namespace shadowgrad::config {

// `arg` as given if it exists (relative to the current directory), else `configs_dir/arg`.
std::string resolve_config_path(const std::string& arg, const std::string& configs_dir);

// Reads the YAML file (a flat map of schema keys), applies the overrides in order, then validates. A file may name
// `base_config: OTHER.yml` (MaxText's key): OTHER is read first (looked up beside the file, else as CONFIG is: the
// current directory, then `configs_dir`), then this file's keys over it, so a recipe lists only what it changes; a
// cycle, a missing base or one that is not a regular file is a ConfigError naming FILE:LINE. Records in
// cfg.given_keys which keys were given (see Config.h). gradient_accumulation_steps is derived from global_batch_size
// later, by derive_accumulation_steps (config/GlobalBatch.h), once the process count is known.
// A key given twice, in the file or among the overrides, is an error: a sweep that sets a key twice
// is almost always a mistake, and silently picking one hides it.
Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   const std::string& configs_dir = "");

// The same for YAML already in memory; `path` only names it in messages (used by fuzz/config_fuzzer.cpp).
Config load_config_text(const std::string& text, const std::string& path, const std::vector<std::string>& overrides,
                        const std::string& configs_dir = "");

// Applies "key=value" overrides to `cfg` (without validating the result).
void apply_overrides(Config& cfg, const std::vector<std::string>& overrides);

// Cross-field checks, e.g. base_num_query_heads % base_num_kv_heads == 0.
void validate(const Config& cfg);

} // namespace shadowgrad::config
