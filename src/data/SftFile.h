#pragma once
// The SFT file (scripts/prepare_sft.sh writes it; docs/data.md, "SFT file"), read whole and checked: every field of
// the header, the file size it implies, every target flag and every example offset. All little-endian:
//   bytes  0-7   magic "SGSFT\0\0\0"
//          8-11  version (1)                        12-15 bytes per token (4)
//         16-23  num_examples                       24-31 num_tokens
//         32-39  num_targets (flags set)            40-43 the largest token id        44-63 zero
//   then num_tokens uint32 tokens; num_tokens uint8 target flags (1: the token is predicted from the one before it,
//   as transformers' labels != -100), zero-padded to a multiple of 8 bytes; then num_examples + 1 uint64 offsets
//   (0 first, num_tokens last, each example at least 2 tokens, its first token never a target).
//
//   SftFile f = SftFile::open("data/train.sft", "dataset_path");  // throws DataError naming the file and the field
//   f.examples(); f.length(i); f.tokens(i); f.targets(i);
#include <cstdint>
#include <string>
#include <vector>

namespace shadowgrad::data {

inline constexpr char kSftMagic[8] = {'S', 'G', 'S', 'F', 'T', 0, 0, 0};
inline constexpr uint32_t kSftVersion = 1;
inline constexpr int64_t kSftHeaderBytes = 64;

class SftFile {
 public:
  // `key` names the config key in messages ("dataset_path", "eval_dataset_path").
  static SftFile open(const std::string& path, const std::string& key);
  // The same checks on a file's bytes already read; `label` names it in messages ("dataset_path 'FILE'"). Nothing is
  // allocated before the sizes the header gives agree with bytes.size(). Used by open() and fuzz/sft_fuzzer.cpp.
  static SftFile parse(const std::string& bytes, const std::string& label);

  int64_t examples() const { return int64_t(offsets_.size()) - 1; }
  int64_t length(int64_t i) const { return int64_t(offsets_[i + 1] - offsets_[i]); }
  const uint32_t* tokens(int64_t i) const { return tokens_.data() + offsets_[i]; }
  const uint8_t* targets(int64_t i) const { return flags_.data() + offsets_[i]; }
  int64_t total_tokens() const { return int64_t(tokens_.size()); }
  int64_t total_targets() const { return num_targets_; }
  uint32_t max_token() const { return max_token_; }
  const std::string& label() const { return label_; }  // "dataset_path 'FILE'"

 private:
  std::string label_;
  std::vector<uint32_t> tokens_;
  std::vector<uint8_t> flags_;
  std::vector<uint64_t> offsets_;
  int64_t num_targets_ = 0;
  uint32_t max_token_ = 0;
};

// Writes an SFT file (what prepare_sft.py writes), for tests and tools: examples[i] are token ids, targets[i] the
// flags, one per token. Throws std::runtime_error on I/O errors.
void write_sft_file(const std::string& path, const std::vector<std::vector<uint32_t>>& examples,
                    const std::vector<std::vector<uint8_t>>& targets);

} // namespace shadowgrad::data
