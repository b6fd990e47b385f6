#include "data/TextSource.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "util/Errors.h"

namespace shadowgrad::data {

TextSource::TextSource(const std::string& path, uint64_t seed, int64_t vocab_size, int64_t max_length)
    : seed_(seed), max_length_(max_length) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw DataError(fmt::format("dataset_path '{}' does not exist or is not a regular file", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(fmt::format("dataset_path '{}' cannot be read", path));
  bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (bytes_.empty()) throw DataError(fmt::format("dataset_path '{}' is empty", path));
  if (static_cast<int64_t>(bytes_.size()) <= max_length)
    throw DataError(fmt::format("dataset_path '{}' holds {} bytes; max_target_length={} needs at least {}", path,
                                bytes_.size(), max_length, max_length + 1));
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (bytes_[i] == 0)
      throw DataError(fmt::format("dataset_path '{}' looks binary (NUL byte at offset {}); give a text file", path, i));
    if (bytes_[i] >= vocab_size)
      throw DataError(fmt::format("dataset_path '{}': byte {} at offset {} is >= vocab_size={}; text needs "
                                  "vocab_size=256",
                                  path, int(bytes_[i]), i, vocab_size));
  }
}

Batch TextSource::examples(int64_t step, int64_t first, int64_t count) const {
  auto tokens = at::empty({count, max_length_}, at::kLong);
  auto targets = at::empty({count, max_length_}, at::kLong);
  auto tok = tokens.accessor<int64_t, 2>();
  auto tgt = targets.accessor<int64_t, 2>();
  const uint64_t windows = bytes_.size() - static_cast<uint64_t>(max_length_);
  for (int64_t i = 0; i < count; ++i) {
    uint64_t offset = example_hash(seed_, step, first + i) % windows;
    for (int64_t t = 0; t < max_length_; ++t) {
      tok[i][t] = bytes_[offset + t];
      tgt[i][t] = bytes_[offset + t + 1];
    }
  }
  return {tokens, targets};
}

} // namespace shadowgrad::data
