#include "compare/ConfigDiff.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

namespace shadowgrad::compare {
namespace {

// The run's config.yml as key -> value text; empty when there is none.
std::map<std::string, std::string> readConfig(const std::string &run) {
  std::filesystem::path dir(run);
  if (dir.filename() == "metrics.jsonl") dir = dir.parent_path();
  std::ifstream in(dir / "config.yml");
  std::map<std::string, std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (line.empty() || line[0] == '#' || line[0] == ' ' || colon == std::string::npos) continue;
    const auto value = line.find_first_not_of(' ', colon + 1);
    out[line.substr(0, colon)] = value == std::string::npos ? "" : line.substr(value);
  }
  return out;
}

} // namespace

std::vector<ConfigDifference> configDiff(const std::string &runA, const std::string &runB) {
  const auto a = readConfig(runA), b = readConfig(runB);
  if (a.empty() || b.empty()) return {};
  static const std::set<std::string> kNamesOnly = {"run_name", "base_output_directory"};
  std::set<std::string> keys;
  for (const auto &kv : a) keys.insert(kv.first);
  for (const auto &kv : b) keys.insert(kv.first);
  std::vector<ConfigDifference> out;
  for (const auto &key : keys) {
    if (kNamesOnly.count(key)) continue;
    auto ia = a.find(key), ib = b.find(key);
    const std::string va = ia == a.end() ? "(absent)" : ia->second, vb = ib == b.end() ? "(absent)" : ib->second;
    if (va != vb) out.push_back({key, va, vb});
  }
  return out;
}

std::string formatConfigDiff(const std::vector<ConfigDifference> &diffs) {
  if (diffs.empty()) return "";
  std::string out = "config.yml differs in " + std::to_string(diffs.size()) + (diffs.size() == 1 ? " key: " : " keys: ");
  for (size_t i = 0; i < diffs.size(); ++i)
    out += (i ? ", " : "") + diffs[i].key + " (A: " + diffs[i].a + ", B: " + diffs[i].b + ")";
  return out + "\n";
}

} // namespace shadowgrad::compare
