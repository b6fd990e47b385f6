#include "train/LossPlot.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace shadowgrad::train {

bool plot_loss_if_possible(const std::string& run_dir) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    spdlog::debug("gnuplot not installed; skipping loss.png");
    return false;
  }
  namespace fs = std::filesystem;
  const std::string data = run_dir + "/loss.dat", script = run_dir + "/loss.gp", png = run_dir + "/loss.png";
  {
    // gnuplot cannot read JSON: extract "step loss" pairs with a tiny scan.
    std::ifstream in(run_dir + "/metrics.jsonl");
    std::ofstream out(data);
    std::string line;
    auto field = [&](const std::string& key) {
      auto at = line.find("\"" + key + "\": ");
      return at == std::string::npos ? std::string() : line.substr(at + key.size() + 4, line.find_first_of(",}", at) - at - key.size() - 4);
    };
    while (std::getline(in, line)) out << field("step") << ' ' << field("loss") << '\n';
  }
  std::ofstream(script) << fmt::format(
      "set terminal pngcairo size 800,500 noenhanced\nset output '{}'\nset title '{}'\n"
      "set xlabel 'step'\nset ylabel 'loss'\nset grid\nplot '{}' using 1:2 with lines lw 2 title 'loss'\n",
      png, fs::path(run_dir).filename().string(), data);
  bool ok = std::system(fmt::format("gnuplot '{}' >/dev/null 2>&1", script).c_str()) == 0;
  std::error_code ec;
  fs::remove(data, ec);
  fs::remove(script, ec);
  if (!ok) spdlog::debug("gnuplot failed; no loss.png");
  return ok;
}

} // namespace shadowgrad::train
