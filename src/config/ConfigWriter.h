#pragma once
// Renders the schema and a config as text: the YAML a run writes to <run_dir>/config.yml (and that
// configs/base.yml is generated from), the --help-config table, and docs/config.md.
//
//   std::ofstream("run/config.yml") << shadowgrad::config::to_yaml(cfg);
#include <string>

#include "config/Config.h"

namespace shadowgrad::config {

// Every key, grouped by section, each preceded by its help as a comment. load_config() reads it back exactly.
std::string to_yaml(const Config& cfg);

// A plain-text table of every key: name, type, default and help (for `trainer --help-config`).
std::string help_text();

// The same as a Markdown reference (docs/config.md).
std::string markdown_reference();

} // namespace shadowgrad::config
