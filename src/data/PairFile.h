#pragma once
// The pair file (scripts/prepare_preference.sh writes it; docs/data.md, "The pair file"), read whole and checked: every
// field of the header, the file size it implies, every offset and every token. All little-endian:
//   bytes  0-7   magic "SGPAIR\0\0"
//          8-11  version (1)                        12-15 bytes per token (4)
//         16-23  num_pairs                          24-31 num_tokens
//         32-35  the largest token id               36-63 zero
//   then num_tokens uint32 tokens (per pair: prompt, chosen answer, rejected answer, back to back); then
//   3 x num_pairs + 1 uint64 offsets (0 first, num_tokens last): pair i's prompt is [off[3i], off[3i+1]), its chosen
//   answer [off[3i+1], off[3i+2]), its rejected answer [off[3i+2], off[3i+3]); each part at least 1 token.
//
//   PairFile f = PairFile::open("data/train.pairs", "dataset_path");  // throws DataError naming the file and field
//   f.pairs(); f.prompt(i); f.answer(i, Answer::chosen);
#include <cstdint>
#include <string>
#include <vector>

namespace shadowgrad::data {

inline constexpr char kPairMagic[8] = {'S', 'G', 'P', 'A', 'I', 'R', 0, 0};
inline constexpr uint32_t kPairVersion = 1;
inline constexpr int64_t kPairHeaderBytes = 64;

enum class Answer { chosen = 0, rejected = 1 };

// A run of tokens inside the file.
struct TokenSpan {
  const uint32_t* ids = nullptr;
  int64_t length = 0;
};

class PairFile {
 public:
  // `key` names the config key in messages ("dataset_path", "eval_dataset_path").
  static PairFile open(const std::string& path, const std::string& key);
  // The same checks on bytes already read; `label` names them in messages. Nothing is allocated before the sizes the
  // header gives agree with bytes.size(). Used by open() and fuzz/pair_fuzzer.cpp.
  static PairFile parse(const std::string& bytes, const std::string& label);

  int64_t pairs() const { return (int64_t(offsets_.size()) - 1) / 3; }
  TokenSpan prompt(int64_t i) const { return span(3 * i); }
  TokenSpan answer(int64_t i, Answer a) const { return span(3 * i + 1 + int64_t(a)); }
  int64_t total_tokens() const { return int64_t(tokens_.size()); }
  uint32_t max_token() const { return max_token_; }
  uint64_t fingerprint() const { return fingerprint_; }  // FNV-1a of the whole file: what the reference cache is for
  const std::string& label() const { return label_; }  // "dataset_path 'FILE'"

 private:
  TokenSpan span(int64_t part) const {
    return {tokens_.data() + offsets_[size_t(part)], int64_t(offsets_[size_t(part) + 1] - offsets_[size_t(part)])};
  }
  std::string label_;
  std::vector<uint32_t> tokens_;
  std::vector<uint64_t> offsets_;
  uint32_t max_token_ = 0;
  uint64_t fingerprint_ = 0;
};

// One pair's token ids, for write_pair_file.
struct PairTokens {
  std::vector<uint32_t> prompt, chosen, rejected;
};

// Writes a pair file (what scripts/lib/prepare_preference.py writes), for tests and tools. Throws std::runtime_error
// on I/O errors.
void write_pair_file(const std::string& path, const std::vector<PairTokens>& pairs);

} // namespace shadowgrad::data
