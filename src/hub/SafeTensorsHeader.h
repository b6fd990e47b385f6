#pragma once
// The safetensors header, parsed and checked without LibTorch (so fuzz/safetensors_fuzzer.cpp builds in seconds):
// a u64 little-endian length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
// {string: string}}, then the data section.
//
//   ParsedSafeTensors p = parse_safetensors(bytes, size, "model.safetensors");  // ModelFileError when malformed
//   for (const TensorInfo& t : p.tensors) ... bytes + p.data_start + t.begin ...
//
// Every defect (a header length past the end or absurd, bad JSON, an unknown dtype, offsets out of range, overlapping
// or with gaps, shape x dtype size != bytes) throws ModelFileError naming the file and the tensor. The checks use the
// header and the file size alone, and nothing is allocated in proportion to a size the file claims.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "util/Errors.h"

namespace shadowgrad::hub {

// A Hugging Face model file (safetensors, config.json, index) that cannot be used. An InputError: exit 2.
class ModelFileError : public InputError {
 public:
  using InputError::InputError;
};

struct TensorInfo {
  std::string name;
  std::string dtype;  // as written: F32, BF16, F16 are read; others are refused when read
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // relative to the data section
};

// Parses and validates a header (the JSON text) for a data section of `data_bytes` bytes; `path` names the file in
// messages. Tensors come back in data order. Used by SafeTensorsFile::open and the fuzz target.
std::vector<TensorInfo> parse_safetensors_header(std::string_view json, uint64_t data_bytes, const std::string& path);

// The header length field's limit, as in the reference implementation.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct ParsedSafeTensors {
  std::vector<TensorInfo> tensors;  // in data order
  uint64_t data_start = 0;          // 8 + N
};

// A whole file's bytes (or a prefix of at least 8 + N bytes when `size` is the file's size... the data section is
// never read): the length field, then the header.
ParsedSafeTensors parse_safetensors(const unsigned char* bytes, uint64_t size, const std::string& path);

} // namespace shadowgrad::hub
