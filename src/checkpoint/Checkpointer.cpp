#include "checkpoint/Checkpointer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <yaml-cpp/yaml.h>

#include "checkpoint/Agreement.h"
#include "checkpoint/Archive.h"
#include "checkpoint/Crc32.h"
#include "checkpoint/DurableFile.h"
#include "checkpoint/RunLayout.h"
#include "config/Config.h"
#include "config/ConfigSchema.h"
#include "util/Hash.h"
#include "util/Printable.h"

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

// A step-N directory whose manifest and files all pass their checks, read into memory.
struct Verified {
  Manifest manifest;
  std::map<std::string, std::string> files;  // name -> bytes
};

// `topology` decides which optimizer shards this process keeps in memory; every file is checked either way.
Verified verify(const std::string& dir, const Topology& topology) {
  const std::string manifest_path = dir + "/manifest.yml";
  if (!fs::exists(manifest_path))
    throw CorruptCheckpointError(fmt::format("checkpoint file '{}' is missing", manifest_path));
  Verified v;
  v.manifest = Manifest::parse(read_whole_file(manifest_path), manifest_path);
  for (const auto& f : v.manifest.files) {
    const std::string path = dir + "/" + f.name;
    if (!fs::exists(path)) throw CorruptCheckpointError(fmt::format("checkpoint file '{}' is missing", path));
    std::string bytes = read_whole_file(path);
    if (int64_t(bytes.size()) != f.bytes)
      throw CorruptCheckpointError(fmt::format("checkpoint file '{}' is corrupt: {} bytes, the manifest says {} "
                                               "(truncated?)",
                                               path, bytes.size(), f.bytes));
    const std::string crc = crc32_hex(crc32(bytes.data(), bytes.size()));
    if (crc != f.crc32)
      throw CorruptCheckpointError(fmt::format("checkpoint file '{}' is corrupt: crc32 {} does not match the "
                                               "manifest's {}",
                                               path, crc, f.crc32));
    if (needed_by(topology, v.manifest, f.name)) v.files[f.name] = std::move(bytes);
  }
  std::vector<std::string> required = optimizer_files(v.manifest);
  required.insert(required.end(), {"model.pt", "rng.pt"});
  for (const auto& name : required)
    if (std::none_of(v.manifest.files.begin(), v.manifest.files.end(), [&](const auto& f) { return f.name == name; }))
      throw CorruptCheckpointError(fmt::format("checkpoint '{}' lists no {} in its manifest", dir, name));
  return v;
}

void check_frozen_keys(const Manifest& m, const CheckpointOptions& options, const std::string& dir) {
  std::map<std::string, std::string> saved(m.frozen.begin(), m.frozen.end());
  for (const auto& [key, value] : options.frozen) {
    auto it = saved.find(key);
    if (it == saved.end()) continue;  // a key added to the list after this checkpoint was written
    if (it->second != value)
      throw InputError(fmt::format("checkpoint '{}' was written with {}={}, but the config has {}={}; {} cannot "
                                   "change on resume: use a new run_name, or give {}={} again",
                                   dir, key, util::printable(it->second), key, value, key, key,
                                   util::printable(it->second)));
  }
}

void log_changed_keys(const Verified& v, const CheckpointOptions& options) {
  auto it = v.files.find("config.yml");
  if (it == v.files.end()) return;
  YAML::Node saved;
  try {
    saved = YAML::Load(it->second);
  } catch (const YAML::Exception&) {
    return;
  }
  std::vector<std::string> changes;
  for (const auto& [key, now] : options.printed) {
    if (!saved[key] || !saved[key].IsScalar()) continue;
    const std::optional<std::string> was = config::canonical_value(key, saved[key].Scalar());
    if (!was) continue;
    if (*was != now) changes.push_back(fmt::format("{} {} -> {}", key, *was, now));
  }
  if (!changes.empty()) spdlog::info("resuming with changed keys: {}", fmt::join(changes, ", "));
}

// What restore() and load() both require of a verified step-N directory: its manifest says step N, and the
// keys that fix the model's and optimizer's shapes match the config.
void check_loadable(const Verified& v, int64_t step, const CheckpointOptions& options, const Topology& topology,
                    const std::string& dir) {
  if (v.manifest.state.step != step)
    throw CorruptCheckpointError(fmt::format("checkpoint '{}' holds step {} in its manifest", dir, v.manifest.state.step));
  check_frozen_keys(v.manifest, options, dir);
  // A batch that grows (schedule, gns policy) follows the checkpoint's state instead (train/BatchSizePolicy.h).
  if (options.layout.grows) return;
  check_global_batch(v.manifest, options.layout, topology.world_size, dir);
  log_new_layout(v.manifest, options.layout, topology);
}

// What a load of a verified checkpoint reads before anything is changed: the parameters and the RNG state (both
// checked against the model), while the optimizer already holds the checkpoint's state (load_optimizer_state).
// Every way a file that passed its CRC can still be wrong is found here, on the process that reads it.
struct Prepared {
  Verified verified;
  std::vector<at::Tensor> params;  // model.named_parameters() order
  at::Tensor rng_state;
};

std::vector<at::Tensor> read_model(const std::string& bytes, const std::string& path, torch::nn::Module& model) {
  std::vector<at::Tensor> out;
  deserialize(bytes, path, [&](torch::serialize::InputArchive& archive) {
    for (auto& p : model.named_parameters()) {
      at::Tensor saved;
      if (!archive.try_read(p.key(), saved))
        throw CorruptCheckpointError(fmt::format("checkpoint file '{}' is corrupt: it has no parameter '{}'", path,
                                                 p.key()));
      if (saved.sizes() != p.value().sizes() || saved.scalar_type() != p.value().scalar_type())
        throw CorruptCheckpointError(fmt::format("checkpoint file '{}' is corrupt: parameter '{}' is {}, the model "
                                                 "has {}",
                                                 path, p.key(), c10::str(saved.scalar_type(), saved.sizes()),
                                                 c10::str(p.value().scalar_type(), p.value().sizes())));
      out.push_back(saved);
    }
  });
  return out;
}

at::Tensor read_rng(const std::string& bytes, const std::string& path) {
  at::Tensor state;
  deserialize(bytes, path, [&](torch::serialize::InputArchive& archive) {
    archive.read("cpu_generator", state);
    at::Generator scratch = at::make_generator<at::CPUGeneratorImpl>();
    scratch.set_state(state);  // throws for a state of the wrong type or size, or an invalid mt19937 state
  });
  return state;
}

Prepared prepare(const std::string& dir, int64_t step, const CheckpointOptions& options, const Topology& topology,
                 torch::nn::Module& model, torch::optim::Optimizer& optimizer, bool check_steps) {
  Prepared p;
  p.verified = verify(dir, topology);
  const Verified& v = p.verified;
  check_loadable(v, step, options, topology, dir);
  if (check_steps && v.manifest.state.step > options.steps)
    throw InputError(fmt::format("checkpoint '{}' is at step {}, past steps={}; raise steps or pick an earlier "
                                 "load_checkpoint_step",
                                 dir, v.manifest.state.step, options.steps));
  torch::NoGradGuard no_grad;
  p.params = read_model(v.files.at("model.pt"), dir + "/model.pt", model);
  p.rng_state = read_rng(v.files.at("rng.pt"), dir + "/rng.pt");
  load_optimizer_state(v.files, v.manifest, optimizer, topology, dir);
  return p;
}

void put_in_place(const Prepared& p, torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  size_t i = 0;
  for (auto& param : model.named_parameters()) param.value().copy_(p.params.at(i++));
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(p.rng_state);
}

// prepare() on every process, then their verdict, agreed: with several processes no rank loads, falls back or
// gives up unless every rank does the same. Loads and returns the state when every rank could; otherwise returns
// the agreed verdict (never kLoadable) and leaves the model and the RNG untouched.
struct Attempt {
  std::optional<TrainState> state;
  Agreed agreed;
  std::exception_ptr own;  // this process's error, when it is the one the verdict names
};

// `restoring`: restore() (the step must not be past options.steps, and rank 0 logs the keys that changed).
Attempt attempt(const std::string& dir, int64_t step, const CheckpointOptions& options, const Topology& topology,
                torch::nn::Module& model, torch::optim::Optimizer& optimizer, bool restoring) {
  std::optional<Prepared> prepared;
  Outcome mine;
  std::exception_ptr own;
  try {
    prepared = prepare(dir, step, options, topology, model, optimizer, restoring);
  } catch (const CorruptCheckpointError& e) {
    mine = {Verdict::kCorrupt, e.what()};
    own = std::current_exception();
  } catch (const InputError& e) {
    mine = {Verdict::kBadInput, util::printable(e.what())};
    own = std::current_exception();
  } catch (const c10::Error& e) {
    mine = {Verdict::kFailed, util::printable(e.what_without_backtrace())};
    own = std::current_exception();
  } catch (const std::exception& e) {
    mine = {Verdict::kFailed, util::printable(e.what())};
    own = std::current_exception();
  }
  Attempt a;
  a.agreed = agree(topology, mine);
  if (a.agreed.verdict == Verdict::kLoadable) {
    if (restoring && topology.rank == 0) log_changed_keys(prepared->verified, options);
    put_in_place(*prepared, model);
    spdlog::info("resumed from {} (step {}, {} skipped)", dir, prepared->verified.manifest.state.step,
                 prepared->verified.manifest.state.skipped_steps);
    a.state = prepared->verified.manifest.state;
  } else if (a.agreed.rank == topology.rank) {
    a.own = own;
  } else {
    a.agreed.message = fmt::format("rank {} found: {}", a.agreed.rank, a.agreed.message);
  }
  return a;
}

// Throws what the agreed verdict says: this process's own error when it found it, else the same kind of error
// quoting the rank that did (exit 2 for a corrupt checkpoint or bad input on every rank, exit 1 for anything else).
[[noreturn]] void give_up(const Attempt& a) {
  if (a.own) std::rethrow_exception(a.own);
  switch (a.agreed.verdict) {
    case Verdict::kCorrupt: throw CorruptCheckpointError(a.agreed.message);
    case Verdict::kBadInput: throw InputError(a.agreed.message);
    default: throw std::runtime_error(a.agreed.message);
  }
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
