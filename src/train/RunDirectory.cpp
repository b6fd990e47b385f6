#include "train/RunDirectory.h"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "config/Config.h"
#include "config/GlobalBatch.h"
#include "util/Errors.h"

namespace shadowgrad::train {

namespace fs = std::filesystem;

std::string generated_run_name() {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[32];
  std::strftime(buf, sizeof buf, "run-%Y%m%d-%H%M%S", &local);
  return buf;
}

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') out.push_back(line);  // keys only, not their help comments
  return out;
}

// The first key line where two config.yml texts differ, for the message of a rerun that is not the same command.
std::string first_difference(const std::string& was, const std::string& now) {
  const auto a = lines_of(was), b = lines_of(now);
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string la = i < a.size() ? a[i] : "(nothing)", lb = i < b.size() ? b[i] : "(nothing)";
    if (la != lb) return fmt::format("it has '{}' where this command has '{}'", la, lb);
  }
  return "only in its comments";
}

bool holds_checkpoint(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir / "checkpoints", ec))
    if (entry.path().filename().string().rfind("step-", 0) == 0) return true;
  return false;
}

} // namespace

RunDirectory RunDirectory::create(const config::Config& cfg, bool resuming, const std::string& config_yaml) {
  std::string name = cfg.run_name.empty() ? generated_run_name() : cfg.run_name;
  fs::path dir = fs::path(cfg.base_output_directory) / name;
  std::error_code ec;
  if (!resuming && fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && fs::is_empty(dir, ec))) {
    // A run stopped before its first checkpoint (a signal during start-up, enable_checkpointing=false, a forced
    // exit) starts again from step 0 when this is the same command: nothing can be lost, there is no checkpoint.
    const bool unfinished = !fs::exists(dir / "summary.json", ec) && !holds_checkpoint(dir);
    const bool has_config = fs::exists(dir / "config.yml", ec);
    // The same command at another process count derives another K from global_batch_size: still the same command.
    if (unfinished && has_config && !config_yaml.empty() &&
        config::without_derived_k(read_text(dir / "config.yml")) == config::without_derived_k(config_yaml))
      return open(dir, name, true);
    std::string why = cfg.resume ? "and holds no checkpoint to resume from" : "(resume=false)";
    if (unfinished && has_config && !config_yaml.empty())
      why += fmt::format("; rerunning the command that started it would start it again, but its config.yml differs "
                         "({})",
                         first_difference(read_text(dir / "config.yml"), config_yaml));
    throw InputError(
        fmt::format("run directory '{}' already exists {}; pick another run_name or remove it", dir.string(), why));
  }
  return open(dir, name, false);
}

RunDirectory RunDirectory::open(const fs::path& dir, const std::string& name, bool restarted) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw InputError(fmt::format("cannot create run directory '{}': {}", dir.string(), ec.message()));
  // Creating a directory can succeed on a read-only mount point that already exists; probe a write.
  fs::path probe = dir / ".write-test";
  if (!std::ofstream(probe)) throw InputError(fmt::format("run directory '{}' is not writable", dir.string()));
  fs::remove(probe, ec);
  return RunDirectory(dir.string(), name, restarted);
}

} // namespace shadowgrad::train
