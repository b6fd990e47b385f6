#include "checkpoint/Checkpointer.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/output-archive.h>

#include "checkpoint/Agreement.h"
#include "checkpoint/Archive.h"
#include "checkpoint/Crc32.h"
#include "checkpoint/DurableFile.h"
#include "checkpoint/LoadAttempt.h"
#include "checkpoint/RunLayout.h"
#include "config/Config.h"
#include "util/Hash.h"

namespace shadowgrad::checkpoint {
namespace fs = std::filesystem;
namespace {

std::function<void(const std::string&)>& fault_hook() {
  static std::function<void(const std::string&)> hook;
  return hook;
}

void stage(const std::string& name) {
  if (fault_hook()) fault_hook()(name);
}

std::string fnv1a64_hex(const std::string& text) { return fmt::format("{:016x}", util::fnv1a64(text.data(), text.size())); }

std::string fingerprint(const std::vector<std::pair<std::string, std::string>>& frozen) {
  std::string text;
  for (const auto& [k, v] : frozen) text += k + "=" + v + "\n";
  return fnv1a64_hex(text);
}

} // namespace

std::string run_dir_of(const config::Config& cfg) {
  return (fs::path(cfg.base_output_directory) / cfg.run_name).string();
}

bool can_resume(const config::Config& cfg) {
  if (!cfg.resume || cfg.run_name.empty()) return false;
  std::error_code ec;
  fs::path dir = fs::path(run_dir_of(cfg)) / "checkpoints";
  if (!fs::is_directory(dir, ec)) return false;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().filename().string().rfind("step-", 0) == 0) return true;
  return false;
}

Checkpointer::Checkpointer(CheckpointOptions options, std::string run_dir, Topology topology)
    : options_(std::move(options)), dir_(std::move(run_dir) + "/checkpoints"), topology_(std::move(topology)) {}

void Checkpointer::set_fault_hook(std::function<void(const std::string&)> hook) { fault_hook() = std::move(hook); }

bool Checkpointer::due(int64_t completed) const {
  return options_.enable && (completed % options_.period == 0 || completed == options_.steps);
}

std::string Checkpointer::step_dir(int64_t step) const { return fmt::format("{}/step-{}", dir_, step); }

std::vector<int64_t> Checkpointer::steps() const {
  std::vector<int64_t> out;
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 || name.size() == 5 || name.size() > 23) continue;
    if (name.find_first_not_of("0123456789", 5) != std::string::npos) continue;
    out.push_back(std::stoll(name.substr(5)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

void Checkpointer::remove_leftovers() const {
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".old-step-", 0) == 0) {
      // A crash while replacing step-N: the old copy is complete; put it back if the new one never landed.
      fs::path target = fs::path(dir_) / name.substr(5);
      if (!fs::exists(target)) {
        fs::rename(entry.path(), target, ec);
        continue;
      }
    }
    if (name.rfind(".tmp-", 0) == 0 || name.rfind(".old-", 0) == 0 || name.rfind(".deleting-", 0) == 0) {
      spdlog::info("removing the incomplete checkpoint directory {}", entry.path().string());
      fs::remove_all(entry.path(), ec);
    }
  }
}

void Checkpointer::save(const TrainState& state, torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  const std::string final_dir = step_dir(state.step);
  const std::string tmp = fmt::format("{}/.tmp-step-{}", dir_, state.step);
  if (topology_.rank != 0) {
    save_own_shard(tmp, final_dir, optimizer, topology_);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  int64_t total_bytes = 0;
  std::error_code ec;
  bool shards_started = false;  // the other ranks wait in save_optimizer_shards until rank 0 gets there
  try {
    fs::create_directories(dir_);
    remove_leftovers();
    fs::create_directories(tmp);

    Manifest m;
    m.state = state;
    m.data_position = state.step_order ? state.step : state.sequences;
    m.lr_schedule_position = state.step;
    m.optimizer_updates = state.step - state.skipped_steps;
    m.frozen = options_.frozen;
    m.config_fingerprint = fingerprint(m.frozen);
    record_layout(m, options_.layout, topology_);
    const bool sharded_weights = !topology_.weight_pieces.empty();  // ZeRO-3: every rank wrote its model shard
    m.model_shards = sharded_weights ? topology_.world_size : 0;
    if (topology_.sharded) {
      shards_started = true;
      for (const auto& entry : save_optimizer_shards(tmp, optimizer, topology_, /*ready=*/true)) {
        m.files.push_back(entry);
        total_bytes += entry.bytes;
      }
      stage("optimizer-shards");
    }

    auto put = [&](const std::string& name, const std::function<void(DurableWriter&)>& produce) {
      DurableWriter w(tmp + "/" + name);
      produce(w);
      w.commit();
      m.files.push_back({name, w.bytes(), crc32_hex(w.crc32())});
      total_bytes += w.bytes();
      stage(name);
    };
    auto put_archive = [&](const std::string& name, const std::function<void(torch::serialize::OutputArchive&)>& fill) {
      put(name, [&](DurableWriter& w) { serialize(w, fill); });
    };
    if (!sharded_weights)
      put_archive("model.pt", [&](auto& a) {
        for (const auto& p : model.named_parameters()) a.write(p.key(), p.value().detach());
      });
    if (!topology_.sharded) put_archive("optimizer.pt", [&](auto& a) { optimizer.save(a); });
    put_archive("rng.pt", [&](auto& a) {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      a.write("cpu_generator", gen.get_state());
    });
    const std::string& config_text = options_.config_yaml;
    put("config.yml", [&](DurableWriter& w) { w.write(config_text.data(), config_text.size()); });
    write_durably(tmp + "/manifest.yml", m.to_text());
    stage("manifest.yml");
    sync_directory(tmp);
    stage("before-rename");

    // step-N exists when an earlier step was loaded explicitly and training reached N again.
    const std::string old = fmt::format("{}/.old-step-{}", dir_, state.step);
    if (fs::exists(final_dir)) {
      fs::rename(final_dir, old);
      stage("old-moved-aside");
    }
    fs::rename(tmp, final_dir);
    sync_directory(dir_);
    stage("renamed");
    fs::remove_all(old, ec);
  } catch (const std::exception& e) {
    if (topology_.sharded && !shards_started) cancel_shards(tmp, optimizer, topology_);
    fs::remove_all(tmp, ec);
    throw std::runtime_error(fmt::format("cannot write checkpoint '{}': {}; earlier checkpoints are untouched",
                                         final_dir, e.what()));
  }
  prune();
  spdlog::info("checkpoint {} written: {:.2f} MB in {:.2f} s", final_dir, total_bytes / 1e6,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void Checkpointer::prune() const {
  if (options_.max_to_keep <= 0) return;
  std::vector<int64_t> all = steps();
  std::error_code ec;
  std::erase(all, protected_step_);  // neither deleted nor counted among the newest
  for (size_t i = 0; i + size_t(options_.max_to_keep) < all.size(); ++i) {
    // Renamed first, so a crash half-way through the delete never leaves a damaged step-N behind.
    const std::string doomed = fmt::format("{}/.deleting-step-{}", dir_, all[i]);
    fs::rename(step_dir(all[i]), doomed, ec);
    if (!ec) fs::remove_all(doomed, ec);
  }
  sync_directory(dir_);
}

TrainState Checkpointer::restore(torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  if (!options_.resume) return {};
  if (topology_.rank == 0) remove_leftovers();
  // Rank 0's list, after its clean-up: every rank tries the same checkpoints in the same order.
  std::vector<int64_t> candidates = from_rank0(topology_, topology_.rank == 0 ? steps() : std::vector<int64_t>{});
  if (options_.load_checkpoint_step > 0) {
    if (std::find(candidates.begin(), candidates.end(), options_.load_checkpoint_step) == candidates.end())
      throw InputError(fmt::format("load_checkpoint_step={}: there is no checkpoint '{}'{}",
                                   options_.load_checkpoint_step,
                                   step_dir(options_.load_checkpoint_step),
                                   candidates.empty() ? std::string()
                                                      : fmt::format(" (available: {})", fmt::join(candidates, ", "))));
    candidates = {options_.load_checkpoint_step};
  }
  std::string first_error;
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    const std::string dir = step_dir(*it);
    const Attempt a = attempt(dir, *it, options_, topology_, model, optimizer, /*restoring=*/true);
    if (a.state) return *a.state;
    if (a.agreed.verdict != Verdict::kCorrupt || options_.load_checkpoint_step > 0) give_up(a);
    if (first_error.empty()) first_error = a.agreed.message;
    spdlog::warn("{}; falling back to the previous checkpoint", a.agreed.message);
  }
  if (!first_error.empty())
    throw CorruptCheckpointError(first_error + "; no earlier checkpoint is loadable (remove the run directory to "
                                               "start over)");
  return {};
}

TrainState Checkpointer::load(int64_t step, torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  const Attempt a = attempt(step_dir(step), step, options_, topology_, model, optimizer, /*restoring=*/false);
  if (!a.state) give_up(a);
  return *a.state;
}

} // namespace shadowgrad::checkpoint
