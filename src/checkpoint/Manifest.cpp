#include "checkpoint/Manifest.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "checkpoint/Crc32.h"

namespace shadowgrad::checkpoint {
namespace {

constexpr const char* kCrcPrefix = "# crc32 of the lines above: ";

// Doubles travel as their 64 bits in hex: a resumed EMA continues bit for bit.
uint64_t double_bits(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

double double_from_bits(const std::string& hex) {
  size_t used = 0;
  uint64_t b = 0;
  try {
    b = std::stoull(hex, &used, 16);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != hex.size())
    throw YAML::Exception(YAML::Mark::null_mark(), "gns_ema: not a 16-digit hex number: '" + hex + "'");
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// A YAML double-quoted scalar: a frozen string key's value is itself quoted ("\"q_proj,v_proj\"").
std::string double_quoted(const std::string& text) {
  YAML::Emitter out;
  out << YAML::DoubleQuoted << text;
  return out.c_str();
}

// A file name inside the checkpoint directory: letters, digits, '.', '_', '-', not starting with '.'.
bool plain_file_name(const std::string& name) {
  if (name.empty() || name[0] == '.' || name.size() > 255) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

} // namespace

std::string Manifest::to_text() const {
  std::string out = "# shadowgrad checkpoint manifest; see docs/reliability.md\n";
  const int64_t version = model_shards > 0 ? std::max(format_version, kModelShardsVersion) : format_version;
  out += fmt::format("format_version: {}\n", version);
  out += fmt::format("step: {}\n", state.step);
  out += fmt::format("data_order: {}\n", state.step_order ? "steps" : "sequences");
  out += fmt::format("data_position: {}\n", data_position);
  out += fmt::format("batch_last_change_step: {}\n", state.batch_last_change_step);
  out += fmt::format("lr_schedule_position: {}\n", lr_schedule_position);
  out += fmt::format("optimizer_updates: {}\n", optimizer_updates);
  out += fmt::format("skipped_steps: {}\n", state.skipped_steps);
  out += fmt::format("consecutive_nonfinite: {}\n", state.consecutive_nonfinite);
  out += fmt::format("gns_ema: {{grad_sq_bits: \"{:016x}\", trace_bits: \"{:016x}\", updates: {}}}  # {} / {}\n",
                     double_bits(state.gns_ema_grad_sq), double_bits(state.gns_ema_trace), state.gns_updates,
                     state.gns_ema_trace, state.gns_ema_grad_sq);
  out += fmt::format("config_fingerprint: \"{}\"\n", config_fingerprint);
  out += fmt::format("global_batch: {}\n", global_batch);
  out += fmt::format("per_device_batch_size: {}\n", per_device_batch_size);
  out += fmt::format("gradient_accumulation_steps: {}\n", gradient_accumulation_steps);
  out += fmt::format("world_size: {}\n", world_size);
  out += fmt::format("optimizer_shards: {}\n", optimizer_shards);
  out += fmt::format("model_shards: {}\n", model_shards);
  out += "frozen_keys:\n";
  for (const auto& [key, value] : frozen) out += fmt::format("  {}: {}\n", key, double_quoted(value));
  out += "files:\n";
  for (const auto& f : files) out += fmt::format("  {}: {{bytes: {}, crc32: \"{}\"}}\n", f.name, f.bytes, f.crc32);
  return out + kCrcPrefix + crc32_hex(crc32(out.data(), out.size())) + "\n";
}

Manifest Manifest::parse(const std::string& text, const std::string& path) {
  auto corrupt = [&](const std::string& why) {
    return CorruptCheckpointError(fmt::format("checkpoint file '{}' is corrupt: {}", path, why));
  };
  const size_t mark = text.rfind(kCrcPrefix);
  if (mark == std::string::npos) throw corrupt("no checksum line (truncated?)");
  const std::string body = text.substr(0, mark);
  std::string stored = text.substr(mark + std::char_traits<char>::length(kCrcPrefix));
  while (!stored.empty() && (stored.back() == '\n' || stored.back() == '\r')) stored.pop_back();
  const std::string actual = crc32_hex(crc32(body.data(), body.size()));
  if (stored != actual) throw corrupt(fmt::format("crc32 {} does not match the stored {}", actual, stored));

  Manifest m;
  try {
    YAML::Node root = YAML::Load(body);
    m.format_version = root["format_version"].as<int64_t>();
    if (m.format_version > kFormatVersion)
      throw InputError(fmt::format("checkpoint '{}' has format_version {}, newer than this trainer's {}; "
                                   "use a newer shadowgrad", path, m.format_version, kFormatVersion));
    m.state.step = root["step"].as<int64_t>();
    m.data_position = root["data_position"].as<int64_t>();
    m.lr_schedule_position = root["lr_schedule_position"].as<int64_t>();
    m.optimizer_updates = root["optimizer_updates"].as<int64_t>();
    m.state.skipped_steps = root["skipped_steps"].as<int64_t>();
    m.state.consecutive_nonfinite = root["consecutive_nonfinite"].as<int64_t>();
    m.config_fingerprint = root["config_fingerprint"].as<std::string>();
    auto optional = [&](const char* key, int64_t absent) { return root[key] ? root[key].as<int64_t>() : absent; };
    m.global_batch = optional("global_batch", -1);
    m.per_device_batch_size = optional("per_device_batch_size", -1);
    m.gradient_accumulation_steps = optional("gradient_accumulation_steps", -1);
    m.world_size = optional("world_size", -1);
    m.optimizer_shards = optional("optimizer_shards", 0);
    m.model_shards = optional("model_shards", 0);
    // Before format 3 there is no data_order: example i of step s was key (s, i).
    const std::string order = root["data_order"] ? root["data_order"].as<std::string>() : "steps";
    if (order != "steps" && order != "sequences")
      throw YAML::Exception(YAML::Mark::null_mark(), "data_order: expected sequences or steps, not '" + order + "'");
    m.state.step_order = order == "steps";
    m.state.sequences = m.state.step_order ? 0 : m.data_position;
    m.state.global_batch = m.global_batch > 0 ? m.global_batch : 0;
    m.state.batch_last_change_step = optional("batch_last_change_step", 0);
    if (const YAML::Node gns = root["gns_ema"]) {  // absent before the gradient noise scale
      m.state.gns_ema_grad_sq = double_from_bits(gns["grad_sq_bits"].as<std::string>());
      m.state.gns_ema_trace = double_from_bits(gns["trace_bits"].as<std::string>());
      m.state.gns_updates = gns["updates"].as<int64_t>();
    }
    for (const auto& kv : root["frozen_keys"])
      m.frozen.emplace_back(kv.first.as<std::string>(), kv.second.as<std::string>());
    for (const auto& kv : root["files"])
      m.files.push_back({kv.first.as<std::string>(), kv.second["bytes"].as<int64_t>(),
                         kv.second["crc32"].as<std::string>()});
  } catch (const YAML::Exception& e) {
    throw corrupt(e.what());
  }
  for (const auto& f : m.files) {
    if (!plain_file_name(f.name))
      throw corrupt(fmt::format("it lists a file named '{}', which is not a plain file name", f.name));
    if (f.bytes < 0) throw corrupt(fmt::format("it gives {} a size of {} bytes", f.name, f.bytes));
  }
  return m;
}

} // namespace shadowgrad::checkpoint
