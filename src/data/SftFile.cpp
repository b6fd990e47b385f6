#include "data/SftFile.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "data/DataFileHeader.h"
#include "data/LittleEndian.h"
#include "util/Errors.h"
#include "util/File.h"

namespace shadowgrad::data {

namespace {

int64_t padded8(int64_t n) { return (n + 7) / 8 * 8; }

} // namespace

SftFile SftFile::open(const std::string& path, const std::string& key) {
  const std::string label = fmt::format("{} '{}'", key, path);
  return parse(read_data_file(path, label), label);
}

SftFile SftFile::parse(const std::string& bytes, const std::string& label) {
  SftFile f;
  f.label_ = label;
  const std::string& L = f.label_;
  const int64_t size = int64_t(bytes.size());
  check_data_file_start(bytes, L, {kSftMagic, kSftVersion, kSftHeaderBytes, "SFT file", "an SFT file",
                                   "scripts/prepare_sft.sh"});
  const auto n = read_le<uint64_t>(bytes, 16), tokens = read_le<uint64_t>(bytes, 24);
  const auto targets = read_le<uint64_t>(bytes, 32);
  f.max_token_ = read_le<uint32_t>(bytes, 40);
  // Sizes from the header, checked against the file before anything is allocated (no overflow: both < 2^40).
  if (n == 0 || n > (uint64_t(1) << 40) || tokens > (uint64_t(1) << 40))
    throw DataError(fmt::format("{}: the header says {} examples of {} tokens in all", L, n, tokens));
  const int64_t T = int64_t(tokens), N = int64_t(n);
  const int64_t expected = kSftHeaderBytes + 4 * T + padded8(T) + 8 * (N + 1);
  if (size != expected)
    throw DataError(fmt::format("{} {}: the header says {} examples and {} tokens, so {} bytes; the file has {}", L,
                                size < expected ? "is truncated" : "has trailing bytes", N, T, expected, size));
  f.tokens_.resize(size_t(T));
  f.offsets_.resize(size_t(N + 1));
  for (int64_t i = 0; i < T; ++i) f.tokens_[i] = read_le<uint32_t>(bytes, size_t(kSftHeaderBytes + 4 * i));
  const auto flags_begin = bytes.begin() + kSftHeaderBytes + 4 * T;
  f.flags_.assign(flags_begin, flags_begin + T);  // not memcpy: with T = 0 its destination would be null
  const size_t offsets_at = size_t(kSftHeaderBytes + 4 * T + padded8(T));
  for (int64_t i = 0; i <= N; ++i) f.offsets_[i] = read_le<uint64_t>(bytes, offsets_at + 8 * size_t(i));

  if (f.offsets_.front() != 0 || f.offsets_.back() != tokens)
    throw DataError(fmt::format("{}: example offsets run from {} to {}; they must run from 0 to num_tokens={}", L,
                                f.offsets_.front(), f.offsets_.back(), T));
  // Each end within num_tokens before its example's first flag is read, and the length by subtraction: offsets[i] + 2
  // wraps near 2^64 (offsets [0, 2^64-1, T] passed), and [0, 2^63, 2^63+2, T] read flags[2^63] before failing.
  for (int64_t i = 0; i < N; ++i) {
    if (f.offsets_[i + 1] > tokens || f.offsets_[i + 1] < f.offsets_[i] || f.offsets_[i + 1] - f.offsets_[i] < 2)
      throw DataError(fmt::format("{}: example {} has offsets [{}, {}); an example holds at least 2 tokens, within "
                                  "num_tokens={}",
                                  L, i, f.offsets_[i], f.offsets_[i + 1], T));
    if (f.flags_[f.offsets_[i]] != 0)
      throw DataError(fmt::format("{}: example {}'s first token is flagged as a target; nothing precedes it", L, i));
  }
  int64_t counted = 0;
  uint32_t top = 0;
  for (int64_t i = 0; i < T; ++i) {
    if (f.flags_[i] > 1)
      throw DataError(fmt::format("{}: target flag {} at token {} (flags are 0 or 1)", L, int(f.flags_[i]), i));
    counted += f.flags_[i];
    top = std::max(top, f.tokens_[i]);
  }
  if (counted != int64_t(targets) || top != f.max_token_)
    throw DataError(fmt::format("{}: the header says {} targets and largest token {}; the data has {} and {}", L,
                                targets, f.max_token_, counted, top));
  f.num_targets_ = counted;
  return f;
}

void write_sft_file(const std::string& path, const std::vector<std::vector<uint32_t>>& examples,
                    const std::vector<std::vector<uint8_t>>& targets) {
  std::string tok, flags, offsets;
  uint64_t at = 0, count = 0;
  uint32_t top = 0;
  append_le<uint64_t>(offsets, 0);
  for (size_t i = 0; i < examples.size(); ++i) {
    for (size_t j = 0; j < examples[i].size(); ++j) {
      append_le<uint32_t>(tok, examples[i][j]);
      flags.push_back(char(targets[i][j]));
      count += targets[i][j];
      top = std::max(top, examples[i][j]);
    }
    at += examples[i].size();
    append_le<uint64_t>(offsets, at);
  }
  flags.resize(size_t(padded8(int64_t(flags.size()))), '\0');
  std::string out(kSftMagic, sizeof(kSftMagic));
  append_le<uint32_t>(out, kSftVersion);
  append_le<uint32_t>(out, 4);
  append_le<uint64_t>(out, examples.size());
  append_le<uint64_t>(out, at);
  append_le<uint64_t>(out, count);
  append_le<uint32_t>(out, top);
  out.resize(size_t(kSftHeaderBytes), '\0');
  util::write_file_atomically(path, out + tok + flags + offsets);
}

} // namespace shadowgrad::data
