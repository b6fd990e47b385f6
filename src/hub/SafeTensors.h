#pragma once
// The safetensors format, read and written by us (docs/huggingface.md; the header: hub/SafeTensorsHeader.h).
//
//   SafeTensorsFile f = SafeTensorsFile::open("model.safetensors");   // mapped, header validated
//   param.copy_(f.view(*f.find("model.norm.weight")));                 // the one copy, converted to param's dtype
//   write_safetensors("out.safetensors", {{"model.norm.weight", w}}, {{"format", "pt"}});
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "hub/SafeTensorsHeader.h"

namespace shadowgrad::hub {

class SafeTensorsFile {
 public:
  static SafeTensorsFile open(const std::string& path);
  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(const std::string& name) const;
  // The tensor's bytes as a CPU tensor of its own dtype, over the mapping (no copy when aligned); valid while this
  // file object (or a copy of it) lives. Throws ModelFileError for a dtype that is not F32, BF16 or F16.
  at::Tensor view(const TensorInfo& info) const;
  // Drops the tensor's pages from this process's memory once it has been copied, so that loading a model holds
  // about one model's bytes, not also the file's.
  void release(const TensorInfo& info) const;

 private:
  std::string path_;
  std::shared_ptr<const void> mapping_;  // the whole file, read-only; unmapped with the last copy
  const unsigned char* data_ = nullptr;  // start of the data section
  std::vector<TensorInfo> tensors_;
};

// Writes `tensors` (CPU or not, any layout; F32, BF16 or F16) in the given order, header padded with spaces to a
// multiple of 8. Written to path + ".tmp" and renamed.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata);

// The safetensors dtype name of a scalar type (F32, BF16, F16); throws std::invalid_argument for others.
const char* safetensors_dtype(c10::ScalarType type);

} // namespace shadowgrad::hub
