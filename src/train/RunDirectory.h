#pragma once
// The run directory <base_output_directory>/<run_name>. Created only after the config and data have
// been validated, and never over an existing non-empty directory unless `resuming` (it holds
// checkpoints to continue from; see checkpoint::can_resume), or unless it is a run stopped before its first
// checkpoint and its config.yml equals `config_yaml` (this command's resolved config): that run starts again from
// step 0 (restarted() is true). A different config.yml, say a typo'd rerun, still cannot touch it.
//
//   auto dir = RunDirectory::create(cfg, resuming, config::to_yaml(cfg));  // throws InputError if it exists or
//   dir.file("metrics.jsonl")                                              // cannot be written
#include <filesystem>
#include <string>

#include "util/File.h"

namespace shadowgrad::config {
struct Config;
}

namespace shadowgrad::train {

class RunDirectory {
 public:
  static RunDirectory create(const config::Config& cfg, bool resuming = false, const std::string& config_yaml = "");
  const std::string& path() const { return path_; }
  bool restarted() const { return restarted_; }
  const std::string& name() const { return name_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  RunDirectory(std::string path, std::string name, bool restarted)
      : path_(std::move(path)), name_(std::move(name)), restarted_(restarted) {}
  static RunDirectory open(const std::filesystem::path& dir, const std::string& name, bool restarted);
  std::string path_, name_;
  bool restarted_ = false;
};

// run-YYYYmmdd-HHMMSS in local time.
std::string generated_run_name();

// Run files (config.yml, summary.json, ...) are replaced whole, durably: util::write_file_atomically.
using util::write_file_atomically;

} // namespace shadowgrad::train
