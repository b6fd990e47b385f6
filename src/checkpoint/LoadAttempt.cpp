#include "checkpoint/LoadAttempt.h"

#include <map>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <yaml-cpp/yaml.h>

#include "checkpoint/Archive.h"
#include "checkpoint/RunLayout.h"
#include "checkpoint/StepFiles.h"
#include "checkpoint/WeightShards.h"
#include "config/ConfigSchema.h"
#include "util/File.h"
#include "util/Printable.h"

namespace shadowgrad::checkpoint {
namespace {

// A step-N directory whose manifest and files all pass their checks, read into memory.
struct Verified {
  Manifest manifest;
  std::map<std::string, std::string> files;  // name -> bytes
};

// `topology` decides which optimizer shards this process keeps in memory; every file is checked either way.
Verified verify(const std::string& dir, int64_t step, const Topology& topology) {
  Verified v;
  v.manifest = read_manifest(dir, step);
  for (const auto& f : v.manifest.files) {
    std::string bytes = read_listed_file(dir, f);
    if (needed_by(topology, v.manifest, f.name)) v.files[f.name] = std::move(bytes);
  }
  std::vector<std::string> required = optimizer_files(v.manifest);
  for (const auto& name : model_files(v.manifest)) required.push_back(name);
  required.push_back("rng.pt");
  for (const auto& name : required) listed(v.manifest, name, dir);
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

// A key naming a file or directory (dataset_path, load_parameters_path, base_output_directory, ...).
bool names_a_place(const std::string& key) {
  auto ends_with = [&](const std::string& tail) {
    return key.size() > tail.size() && key.compare(key.size() - tail.size(), tail.size(), tail) == 0;
  };
  return ends_with("_path") || ends_with("_directory");
}

// A string value as config.yml prints it ("'a b'") back to its text.
std::string unquoted(const std::string& yaml) {
  try {
    return YAML::Load(yaml).as<std::string>();
  } catch (const YAML::Exception&) {
    return yaml;
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
    if (!was || *was == now) continue;
    // A path given relative one time and absolute the next (a resume reads its base from where the run recorded
    // it) is the same place, not a change.
    if (names_a_place(key) && util::same_path(saved[key].Scalar(), unquoted(now))) continue;
    changes.push_back(fmt::format("{} {} -> {}", key, *was, now));
  }
  if (!changes.empty()) spdlog::info("resuming with changed keys: {}", fmt::join(changes, ", "));
}

// What restore() and load() both require of a verified step-N directory (whose manifest says step N): the keys that
// fix the model's and optimizer's shapes match the config.
void check_loadable(const Verified& v, const CheckpointOptions& options, const Topology& topology,
                    const std::string& dir) {
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
  std::vector<at::Tensor> params;  // model.named_parameters() order; or, under ZeRO-3,
  at::Tensor range;                // this process's range of the flat parameters
  at::Tensor rng_state;
};

// The weights of a verified checkpoint as this process keeps them (WeightShards.h's table).
void read_weights(Prepared& p, const Topology& topology, torch::nn::Module& model, const std::string& dir) {
  const Verified& v = p.verified;
  if (topology.weight_pieces.empty()) {
    p.params = v.manifest.model_shards > 0 ? read_sharded_parameters(v.files, v.manifest, dir, model)
                                           : read_parameters(v.files.at("model.pt"), dir + "/model.pt", model);
    return;
  }
  const int64_t total = element_count(topology.params);
  const at::ScalarType dtype = topology.weight_pieces.front().scalar_type();
  p.range = v.manifest.model_shards > 0
                ? read_weight_range(v.files, v.manifest, topology.shard_begin, topology.shard_owned, total, dtype, dir)
                : cut_range(read_parameters(v.files.at("model.pt"), dir + "/model.pt", model), topology.shard_begin,
                            topology.shard_owned);
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
  p.verified = verify(dir, step, topology);
  const Verified& v = p.verified;
  check_loadable(v, options, topology, dir);
  if (check_steps && v.manifest.state.step > options.steps)
    throw InputError(fmt::format("checkpoint '{}' is at step {}, past steps={}; raise steps or pick an earlier "
                                 "load_checkpoint_step",
                                 dir, v.manifest.state.step, options.steps));
  torch::NoGradGuard no_grad;
  read_weights(p, topology, model, dir);
  p.rng_state = read_rng(v.files.at("rng.pt"), dir + "/rng.pt");
  load_optimizer_state(v.files, v.manifest, optimizer, topology, dir);
  return p;
}

void put_in_place(const Prepared& p, const Topology& topology, torch::nn::Module& model) {
  if (p.range.defined()) put_range(p.range, topology.weight_pieces);
  else put_parameters(p.params, model);
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(p.rng_state);
}

} // namespace

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
    put_in_place(*prepared, topology, model);
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

[[noreturn]] void give_up(const Attempt& a) {
  if (a.own) std::rethrow_exception(a.own);
  switch (a.agreed.verdict) {
    case Verdict::kCorrupt: throw CorruptCheckpointError(a.agreed.message);
    case Verdict::kBadInput: throw InputError(a.agreed.message);
    default: throw std::runtime_error(a.agreed.message);
  }
}

} // namespace shadowgrad::checkpoint
