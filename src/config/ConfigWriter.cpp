#include "config/ConfigWriter.h"

#include <fmt/format.h>

#include "config/ConfigSchema.h"

namespace shadowgrad::config {
namespace {

std::string type_text(const KeySpec& k) {
  return k.constraint.empty() ? k.type : fmt::format("{} {}", k.type, k.constraint);
}

} // namespace

std::string to_yaml(const Config& cfg) {
  std::string out = "# shadowgrad config. Every key, its default and its meaning: trainer --help-config\n";
  std::string section;
  for (const auto& k : schema()) {
    if (k.section != section) {
      section = k.section;
      out += fmt::format("\n# --- {} ---\n", section);
    }
    out += fmt::format("# {} ({})\n{}: {}\n", k.help, type_text(k), k.name, k.get(cfg));
  }
  return out;
}

std::string help_text() {
  std::string out = "Config keys (set in the YAML file or as key=value overrides):\n";
  std::string section;
  for (const auto& k : schema()) {
    if (k.section != section) {
      section = k.section;
      out += fmt::format("\n[{}]\n", section);
    }
    out += fmt::format("  {:<36} {:<34} default {}\n      {}\n", k.name, type_text(k), k.default_text, k.help);
  }
  return out;
}

std::string markdown_reference() {
  std::string out =
      "# Config reference\n\n"
      "Generated from `src/config/ConfigKeys.def` by `build/trainer --help-config-markdown`; a test keeps it in sync.\n"
      "Set keys in a YAML file (see `configs/base.yml`) or as `key=value` overrides on the command line.\n";
  std::string section;
  for (const auto& k : schema()) {
    if (k.section != section) {
      section = k.section;
      out += fmt::format("\n## {}\n\n| key | type | default | meaning |\n|---|---|---|---|\n", section);
    }
    std::string type = type_text(k);
    for (size_t at = type.find('|'); at != std::string::npos; at = type.find('|', at + 2)) type.insert(at, "\\");
    out += fmt::format("| `{}` | {} | `{}` | {} |\n", k.name, type, k.default_text, k.help);
  }
  return out;
}

} // namespace shadowgrad::config
