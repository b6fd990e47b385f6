#include "train/RunDirectory.h"

#include <ctime>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "config/Config.h"
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

RunDirectory RunDirectory::create(const config::Config& cfg, bool resuming) {
  std::string name = cfg.run_name.empty() ? generated_run_name() : cfg.run_name;
  fs::path dir = fs::path(cfg.base_output_directory) / name;
  std::error_code ec;
  if (!resuming && fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && fs::is_empty(dir, ec)))
    throw InputError(fmt::format("run directory '{}' already exists {}; pick another run_name or remove it",
                                 dir.string(), cfg.resume ? "and holds no checkpoint to resume from" : "(resume=false)"));
  fs::create_directories(dir, ec);
  if (ec) throw InputError(fmt::format("cannot create run directory '{}': {}", dir.string(), ec.message()));
  // Creating a directory can succeed on a read-only mount point that already exists; probe a write.
  fs::path probe = dir / ".write-test";
  if (!std::ofstream(probe)) throw InputError(fmt::format("run directory '{}' is not writable", dir.string()));
  fs::remove(probe, ec);
  return RunDirectory(dir.string(), name);
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw std::runtime_error(fmt::format("cannot write '{}'", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw std::runtime_error(fmt::format("cannot rename '{}' to '{}': {}", tmp, path, ec.message()));
}

} // namespace shadowgrad::train
