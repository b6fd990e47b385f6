#pragma once
// The run directory <base_output_directory>/<run_name>. Created only after the config and data have
// been validated, and never over an existing non-empty directory unless `resuming` (it holds
// checkpoints to continue from; see checkpoint::can_resume).
//
//   auto dir = RunDirectory::create(cfg, resuming);   // throws InputError if it exists or cannot be written
//   dir.file("metrics.jsonl")
#include <string>

namespace shadowgrad::config {
struct Config;
}

namespace shadowgrad::train {

class RunDirectory {
 public:
  static RunDirectory create(const config::Config& cfg, bool resuming = false);
  const std::string& path() const { return path_; }
  const std::string& name() const { return name_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  RunDirectory(std::string path, std::string name) : path_(std::move(path)), name_(std::move(name)) {}
  std::string path_, name_;
};

// run-YYYYmmdd-HHMMSS in local time.
std::string generated_run_name();

// Writes `text` to `path` through a temporary file and a rename, so readers never see half a file.
void write_file_atomically(const std::string& path, const std::string& text);

} // namespace shadowgrad::train
