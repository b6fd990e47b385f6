#include "data/TokenSource.h"

#include <fmt/format.h>

#include "data/Windows.h"
#include "util/Errors.h"

namespace shadowgrad::data {

TokenSource::TokenSource(TokenFile file, uint64_t seed, int64_t vocab_size, int64_t max_length)
    : file_(std::move(file)), seed_(seed), max_length_(max_length) {
  if (file_.size() <= max_length)
    throw DataError(fmt::format("{} holds {} tokens; max_target_length={} needs at least {} (one window)",
                                file_.label(), file_.size(), max_length, max_length + 1));
  int64_t at = 0;
  const uint32_t top = file_.max_token(&at);
  if (int64_t(top) >= vocab_size)
    throw DataError(fmt::format("{}: token id {} at position {} is >= vocab_size={}; raise vocab_size to at least {} "
                                "(the tokenizer's vocabulary)",
                                file_.label(), top, at, vocab_size, int64_t(top) + 1));
}

Batch TokenSource::examples(int64_t step, int64_t first, int64_t count) const {
  const auto windows = static_cast<uint64_t>(file_.size() - max_length_);
  return read_windows(
      count, max_length_, [&](int64_t i) { return int64_t(example_hash(seed_, step, first + i) % windows); },
      [&](int64_t at, int64_t n, int64_t* out) { file_.copy(at, n, out); });
}

Batch TokenSource::eval_examples(int64_t first, int64_t count) const {
  return read_windows(
      count, max_length_, [&](int64_t i) { return (first + i) * max_length_; },
      [&](int64_t at, int64_t n, int64_t* out) { file_.copy(at, n, out); });
}

int64_t TokenSource::eval_capacity() const {
  return (file_.size() - 1) / max_length_;
}

} // namespace shadowgrad::data
