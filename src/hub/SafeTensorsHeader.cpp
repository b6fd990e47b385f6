#include "hub/SafeTensorsHeader.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace shadowgrad::hub {

namespace {

using nlohmann::json;

// Sizes of every dtype the format defines, so that a file with tensors we do not read is still checked whole.
int64_t dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, int64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

// A header nests three levels (file, tensor, shape); deeper JSON is refused while parsing, before it can grow.
constexpr int kMaxDepth = 4;

json parse_json(std::string_view text, const std::string& path) {
  try {
    return json::parse(text.begin(), text.end(), [&](int depth, json::parse_event_t, json&) {
      if (depth > kMaxDepth) throw ModelFileError(fmt::format("{}: header JSON nests deeper than a safetensors header", path));
      return true;
    });
  } catch (const json::exception& e) {
    throw ModelFileError(fmt::format("{}: header is not valid JSON ({})", path, e.what()));
  }
}

uint64_t unsigned_at(const json& v, const std::string& path, const std::string& name, const char* what) {
  if (!v.is_number_unsigned())
    throw ModelFileError(fmt::format("{}: tensor '{}': {} must be a non-negative integer, got {}", path, name, what,
                                     v.dump().substr(0, 40)));
  return v.get<uint64_t>();
}

TensorInfo parse_entry(const std::string& name, const json& e, uint64_t data_bytes, const std::string& path) {
  if (!e.is_object()) throw ModelFileError(fmt::format("{}: tensor '{}' is not a JSON object", path, name));
  TensorInfo t;
  t.name = name;
  auto field = [&](const char* key) -> const json& {
    auto it = e.find(key);
    if (it == e.end()) throw ModelFileError(fmt::format("{}: tensor '{}' has no '{}'", path, name, key));
    return *it;
  };
  const json& dtype = field("dtype");
  if (!dtype.is_string()) throw ModelFileError(fmt::format("{}: tensor '{}': dtype is not a string", path, name));
  t.dtype = dtype.get<std::string>();
  const int64_t size = dtype_bytes(t.dtype);
  if (size == 0)
    throw ModelFileError(fmt::format("{}: tensor '{}' has unknown dtype '{}'", path, name, t.dtype.substr(0, 40)));
  const json& shape = field("shape");
  if (!shape.is_array() || shape.size() > 8)
    throw ModelFileError(fmt::format("{}: tensor '{}': shape must be an array of at most 8 sizes", path, name));
  // numel x size, each product checked for overflow (two factors each below a data section over 4 GiB can wrap:
  // [2^31, 2^31] F32 made 0 bytes) and against the data section.
  uint64_t bytes = uint64_t(size);
  bool empty = false;
  for (const auto& d : shape) {
    const uint64_t n = unsigned_at(d, path, name, "a shape entry");
    if (n > uint64_t(INT64_MAX)) throw ModelFileError(fmt::format("{}: tensor '{}': size {} too large", path, name, n));
    t.shape.push_back(int64_t(n));
    if (n == 0) empty = true;
    if (!empty && (__builtin_mul_overflow(bytes, n, &bytes) || bytes > data_bytes))
      throw ModelFileError(
          fmt::format("{}: tensor '{}': shape {} of {} needs more bytes than the file's {} of data", path, name,
                      shape.dump().substr(0, 80), t.dtype, data_bytes));
  }
  if (empty) bytes = 0;
  const json& offsets = field("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2)
    throw ModelFileError(fmt::format("{}: tensor '{}': data_offsets must be [begin, end]", path, name));
  t.begin = unsigned_at(offsets[0], path, name, "data_offsets");
  t.end = unsigned_at(offsets[1], path, name, "data_offsets");
  if (t.begin > t.end || t.end > data_bytes)
    throw ModelFileError(fmt::format("{}: tensor '{}': data_offsets [{}, {}] out of the data section's {} bytes", path,
                                     name, t.begin, t.end, data_bytes));
  if (t.end - t.begin != bytes)
    throw ModelFileError(fmt::format("{}: tensor '{}': shape {} of {} is {} bytes, but data_offsets [{}, {}] hold {}",
                                     path, name, shape.dump().substr(0, 80), t.dtype, bytes, t.begin, t.end,
                                     t.end - t.begin));
  return t;
}

} // namespace

std::vector<TensorInfo> parse_safetensors_header(std::string_view text, uint64_t data_bytes, const std::string& path) {
  const json header = parse_json(text, path);
  if (!header.is_object()) throw ModelFileError(fmt::format("{}: header is not a JSON object", path));
  std::vector<TensorInfo> tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw ModelFileError(fmt::format("{}: __metadata__ is not an object", path));
      for (const auto& [key, value] : entry.items())
        if (!value.is_string())
          throw ModelFileError(fmt::format("{}: __metadata__ '{}' is not a string", path, key.substr(0, 40)));
      continue;
    }
    tensors.push_back(parse_entry(name, entry, data_bytes, path));
  }
  // The data section is exactly the tensors, back to back: no gap, no overlap, nothing after.
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  for (const auto& t : tensors) {
    if (t.begin != at)
      throw ModelFileError(fmt::format("{}: tensor '{}' starts at byte {} of the data section, expected {} ({})", path,
                                       t.name, t.begin, at, t.begin < at ? "it overlaps the tensor before" : "a gap"));
    at = t.end;
  }
  if (at != data_bytes)
    throw ModelFileError(fmt::format("{}: the tensors end at byte {} of the data section, but it holds {} bytes", path,
                                     at, data_bytes));
  return tensors;
}

ParsedSafeTensors parse_safetensors(const unsigned char* bytes, uint64_t size, const std::string& path) {
  if (size < 8)
    throw ModelFileError(fmt::format("{}: {} bytes is too short for a safetensors file (8-byte header length)", path, size));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];  // little-endian, whatever the host
  if (n > kMaxHeaderBytes || n > size - 8)
    throw ModelFileError(fmt::format("{}: header length {} is past the end of the {}-byte file{}", path, n, size,
                                     n > kMaxHeaderBytes ? " (or over the format's 100 MB limit)" : ""));
  ParsedSafeTensors p;
  p.tensors = parse_safetensors_header(std::string_view(reinterpret_cast<const char*>(bytes + 8), n), size - 8 - n, path);
  p.data_start = 8 + n;
  return p;
}

} // namespace shadowgrad::hub
