#include "hub/BaseRecord.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "hub/Import.h"
#include "hub/SafeTensorsHeader.h"
#include "util/File.h"
#include "util/Hash.h"

namespace shadowgrad::hub {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr uint64_t kSampleBytes = uint64_t(1) << 20;  // of the data section, at each end

std::string hex(uint64_t h) { return fmt::format("{:016x}", h); }

struct Fingerprint {
  uint64_t bytes = 0;
  std::string header, sample;  // FNV-1a 64 in hex
};

Fingerprint fingerprint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelFileError(fmt::format("{}: cannot open", path));
  Fingerprint f;
  f.bytes = fs::file_size(path);
  auto read = [&](uint64_t at, uint64_t n) {
    std::string buf(n, '\0');
    in.seekg(std::streamoff(at));
    in.read(buf.data(), std::streamsize(n));
    if (!in) throw ModelFileError(fmt::format("{}: cannot read {} bytes at {}", path, n, at));
    return buf;
  };
  if (f.bytes < 8) throw ModelFileError(fmt::format("{}: {} bytes is too short for a safetensors file", path, f.bytes));
  const std::string length = read(0, 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(length[i])) << (8 * i);
  if (n > kMaxHeaderBytes || n > f.bytes - 8)
    throw ModelFileError(fmt::format("{}: header length {} does not fit a {}-byte file", path, n, f.bytes));
  const std::string header = read(8, n);
  f.header = hex(util::fnv1a64(header.data(), header.size(), util::fnv1a64(length.data(), 8)));
  const uint64_t data = 8 + n, data_bytes = f.bytes - data;
  const uint64_t head = std::min(kSampleBytes, data_bytes);
  const std::string first = read(data, head);
  uint64_t h = util::fnv1a64(first.data(), first.size());
  if (data_bytes > head) {  // the last MiB, or what of it the first did not cover
    const uint64_t tail = std::min(kSampleBytes, data_bytes - head);
    const std::string last = read(f.bytes - tail, tail);
    h = util::fnv1a64(last.data(), last.size(), h);
  }
  f.sample = hex(h);
  return f;
}

fs::path source_json(const std::string& run_dir) { return fs::path(carried_dir(run_dir)) / "source.json"; }

json read_source(const std::string& run_dir) {
  const fs::path path = source_json(run_dir);
  try {
    return json::parse(util::read_whole_file(path.string()));
  } catch (const json::exception& e) {
    throw ModelFileError(fmt::format("{}: not valid JSON ({})", path.string(), e.what()));
  }
}

const char* kWhy = "; a LoRA checkpoint holds only the adapters, so the run needs the base it was trained on: put "
                   "that base back where the run recorded it (its hf/source.json), or point load_parameters_path "
                   "(for export_hf and generate: in the run's config.yml) at an unchanged copy of it, or start a new "
                   "run";

} // namespace

void write_base_record(const std::string& model_dir, const std::string& run_dir) {
  if (!fs::exists(source_json(run_dir)))
    throw std::logic_error(fmt::format("write_base_record: no {} (carry_model_files writes it first)",
                                       source_json(run_dir).string()));
  json source = read_source(run_dir);
  for (auto& w : source.at("weights")) {
    const Fingerprint f = fingerprint((fs::path(model_dir) / w.at("file").get<std::string>()).string());
    w["bytes"] = f.bytes;
    w["header_fnv1a64"] = f.header;
    w["sample_fnv1a64"] = f.sample;
  }
  const fs::path index = fs::path(model_dir) / kSafeTensorsIndex;
  if (fs::exists(index)) {
    const std::string text = util::read_whole_file(index.string());
    source["index_fnv1a64"] = hex(util::fnv1a64(text.data(), text.size()));
  } else {
    source["index_fnv1a64"] = nullptr;
  }
  util::write_file_atomically(source_json(run_dir).string(), source.dump(2) + "\n");
}

bool verify_base_record(const std::string& model_dir, const std::string& run_dir) {
  if (!fs::exists(source_json(run_dir))) return false;
  const json source = read_source(run_dir);
  if (!source.contains("index_fnv1a64")) return false;  // sizes only: written before the record existed
  const std::string was = source.value("load_parameters_path", std::string());
  const fs::path index = fs::path(model_dir) / kSafeTensorsIndex;
  const json& recorded_index = source["index_fnv1a64"];
  if (recorded_index.is_null() != !fs::exists(index))
    throw ModelFileError(fmt::format("{}: {} since the run began (built on {}){}", index.string(),
                                     recorded_index.is_null() ? "appeared" : "is gone", was, kWhy));
  if (!recorded_index.is_null()) {
    const std::string text = util::read_whole_file(index.string());
    if (hex(util::fnv1a64(text.data(), text.size())) != recorded_index.get<std::string>())
      throw ModelFileError(fmt::format("{}: changed since the run began (built on {}){}", index.string(), was, kWhy));
  }
  for (const auto& w : source.at("weights")) {
    const std::string path = (fs::path(model_dir) / w.at("file").get<std::string>()).string();
    if (!fs::exists(path))
      throw ModelFileError(fmt::format("{}: missing; the run was built on {}, which had it{}", path, was, kWhy));
    const Fingerprint now = fingerprint(path);
    if (now.bytes != w.at("bytes").get<uint64_t>())
      throw ModelFileError(fmt::format("{}: {} bytes, but the run was built on {} bytes of it{}", path, now.bytes,
                                       w.at("bytes").get<uint64_t>(), kWhy));
    if (now.header != w.at("header_fnv1a64").get<std::string>())
      throw ModelFileError(fmt::format("{}: its safetensors header (names, dtypes, shapes, metadata) changed since the "
                                       "run began (FNV-1a {} against {}){}",
                                       path, now.header, w.at("header_fnv1a64").get<std::string>(), kWhy));
    if (now.sample != w.at("sample_fnv1a64").get<std::string>())
      throw ModelFileError(fmt::format("{}: its weights changed since the run began (the first or last MiB of its "
                                       "data differs){}",
                                       path, kWhy));
  }
  return true;
}

std::string run_base_dir(const std::string& given, const std::string& run_dir) {
  const std::string recorded = recorded_base_dir(run_dir);
  std::error_code ec;
  if (recorded.empty() || fs::is_directory(recorded, ec)) return recorded.empty() ? given : recorded;
  if (fs::is_directory(given, ec)) return given;
  throw ModelFileError(fmt::format("load_parameters_path={}: not a directory, and {} is gone from where {} recorded it{}",
                                   given, recorded, source_json(run_dir).string(), kWhy));
}

std::string recorded_base_dir(const std::string& run_dir) {
  if (!fs::exists(source_json(run_dir))) return "";
  return read_source(run_dir).value("load_parameters_path", std::string());
}

} // namespace shadowgrad::hub
