#include "data/PairFile.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "data/DataFileHeader.h"
#include "data/LittleEndian.h"
#include "util/Errors.h"
#include "util/File.h"
#include "util/Hash.h"

namespace shadowgrad::data {

namespace {

const char* part_name(int64_t part) {
  static const char* names[] = {"prompt", "chosen answer", "rejected answer"};
  return names[part % 3];
}

} // namespace

PairFile PairFile::open(const std::string& path, const std::string& key) {
  const std::string label = fmt::format("{} '{}'", key, path);
  return parse(read_data_file(path, label), label);
}

PairFile PairFile::parse(const std::string& bytes, const std::string& label) {
  PairFile f;
  f.label_ = label;
  const std::string& L = f.label_;
  const int64_t size = int64_t(bytes.size());
  check_data_file_start(bytes, L, {kPairMagic, kPairVersion, kPairHeaderBytes, "pair file", "a pair file",
                                   "scripts/prepare_preference.sh"});
  const auto n = read_le<uint64_t>(bytes, 16), tokens = read_le<uint64_t>(bytes, 24);
  f.max_token_ = read_le<uint32_t>(bytes, 32);
  // Sizes from the header, checked against the file before anything is allocated (no overflow: both < 2^40).
  if (n == 0 || n > (uint64_t(1) << 40) || tokens > (uint64_t(1) << 40))
    throw DataError(fmt::format("{}: the header says {} pairs of {} tokens in all", L, n, tokens));
  const int64_t T = int64_t(tokens), P = int64_t(n);
  const int64_t expected = kPairHeaderBytes + 4 * T + 8 * (3 * P + 1);
  if (size != expected)
    throw DataError(fmt::format("{} {}: the header says {} pairs and {} tokens, so {} bytes; the file has {}", L,
                                size < expected ? "is truncated" : "has trailing bytes", P, T, expected, size));
  f.tokens_.resize(size_t(T));
  f.offsets_.resize(size_t(3 * P + 1));
  uint32_t top = 0;
  for (int64_t i = 0; i < T; ++i) {
    f.tokens_[size_t(i)] = read_le<uint32_t>(bytes, size_t(kPairHeaderBytes + 4 * i));
    top = std::max(top, f.tokens_[size_t(i)]);
  }
  const size_t offsets_at = size_t(kPairHeaderBytes + 4 * T);
  for (int64_t i = 0; i <= 3 * P; ++i) f.offsets_[size_t(i)] = read_le<uint64_t>(bytes, offsets_at + 8 * size_t(i));
  if (f.offsets_.front() != 0 || f.offsets_.back() != tokens)
    throw DataError(fmt::format("{}: offsets run from {} to {}; they must run from 0 to num_tokens={}", L,
                                f.offsets_.front(), f.offsets_.back(), T));
  // Each end within num_tokens, and lengths by subtraction, so offsets near 2^64 cannot wrap.
  for (int64_t part = 0; part < 3 * P; ++part) {
    const uint64_t begin = f.offsets_[size_t(part)], end = f.offsets_[size_t(part) + 1];
    if (end > tokens || end <= begin)
      throw DataError(fmt::format("{}: pair {}'s {} has offsets [{}, {}); each part holds at least 1 token, within "
                                  "num_tokens={}",
                                  L, part / 3, part_name(part), begin, end, T));
  }
  if (top != f.max_token_)
    throw DataError(fmt::format("{}: the header says the largest token is {}; the data's is {}", L, f.max_token_, top));
  f.fingerprint_ = util::fnv1a64(bytes.data(), bytes.size());
  return f;
}

void write_pair_file(const std::string& path, const std::vector<PairTokens>& pairs) {
  std::string tok, offsets;
  uint64_t at = 0;
  uint32_t top = 0;
  append_le<uint64_t>(offsets, 0);
  for (const PairTokens& p : pairs)
    for (const auto* part : {&p.prompt, &p.chosen, &p.rejected}) {
      for (uint32_t id : *part) {
        append_le<uint32_t>(tok, id);
        top = std::max(top, id);
      }
      at += part->size();
      append_le<uint64_t>(offsets, at);
    }
  std::string out(kPairMagic, sizeof(kPairMagic));
  append_le<uint32_t>(out, kPairVersion);
  append_le<uint32_t>(out, 4);
  append_le<uint64_t>(out, pairs.size());
  append_le<uint64_t>(out, at);
  append_le<uint32_t>(out, top);
  out.resize(size_t(kPairHeaderBytes), '\0');
  util::write_file_atomically(path, out + tok + offsets);
}

} // namespace shadowgrad::data
