#include "data/TextSource.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "data/Windows.h"
#include "util/Errors.h"

namespace shadowgrad::data {

TextSource::TextSource(const std::string& path, uint64_t seed, int64_t vocab_size, int64_t max_length,
                       const std::string& key)
    : seed_(seed), max_length_(max_length) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw DataError(fmt::format("{} '{}' does not exist or is not a regular file", key, path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(fmt::format("{} '{}' cannot be read", key, path));
  bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (bytes_.empty()) throw DataError(fmt::format("{} '{}' is empty", key, path));
  if (static_cast<int64_t>(bytes_.size()) <= max_length)
    throw DataError(fmt::format("{} '{}' holds {} bytes; max_target_length={} needs at least {}", key, path,
                                bytes_.size(), max_length, max_length + 1));
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (bytes_[i] == 0)
      throw DataError(fmt::format("{} '{}' looks binary (NUL byte at offset {}); give a text file", key, path, i));
    if (bytes_[i] >= vocab_size)
      throw DataError(fmt::format("{} '{}': byte {} at offset {} is >= vocab_size={}; text needs "
                                  "vocab_size=256",
                                  key, path, int(bytes_[i]), i, vocab_size));
  }
}

Batch TextSource::examples(int64_t step, int64_t first, int64_t count) const {
  const uint64_t windows = bytes_.size() - static_cast<uint64_t>(max_length_);
  return read_windows(
      count, max_length_, [&](int64_t i) { return int64_t(example_hash(seed_, step, first + i) % windows); },
      [&](int64_t at, int64_t n, int64_t* out) { std::copy(bytes_.begin() + at, bytes_.begin() + at + n, out); });
}

Batch TextSource::eval_examples(int64_t first, int64_t count) const {
  return read_windows(
      count, max_length_, [&](int64_t i) { return (first + i) * max_length_; },
      [&](int64_t at, int64_t n, int64_t* out) { std::copy(bytes_.begin() + at, bytes_.begin() + at + n, out); });
}

int64_t TextSource::eval_capacity() const { return (int64_t(bytes_.size()) - 1) / max_length_; }

} // namespace shadowgrad::data
