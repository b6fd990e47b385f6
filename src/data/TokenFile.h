#pragma once
// A token file, memory-mapped read-only: pages are read in as windows touch them, never the whole file at once.
// Two layouts (token_file_format):
//   llmc:       llm.c's header of 256 little-endian int32 (1024 bytes): [0] magic, [1] version, [2] token count,
//               then the tokens: magic 20240520 version 1 = uint16, magic 20240801 version 7 = uint32.
//   raw_uint16: nanoGPT's headerless train.bin of uint16 tokens.
//
//   TokenFile f = TokenFile::open("data/train.bin", config::TokenFileFormat::llmc, "dataset_path");  // throws DataError naming the file
//   f.size();                      // tokens
//   f.copy(offset, n, out);        // tokens [offset, offset + n) as int64
//   f.max_token();                 // one pass over the whole file (what the vocab_size check costs)
#include <cstddef>
#include <cstdint>
#include <string>

#include "config/ConfigEnums.h"

namespace shadowgrad::data {

constexpr int32_t kLlmcMagicU16 = 20240520; // version 1, uint16 tokens
constexpr int32_t kLlmcMagicU32 = 20240801; // version 7, uint32 tokens
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

class TokenFile {
public:
  // `key` names the config key in messages ("dataset_path", "eval_dataset_path").
  static TokenFile open(const std::string& path, config::TokenFileFormat format, const std::string& key);
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&&) = delete;
  TokenFile(const TokenFile&) = delete;
  ~TokenFile();

  int64_t size() const { return count_; }
  int bytes_per_token() const { return width_; }
  uint32_t token(int64_t i) const;
  void copy(int64_t offset, int64_t n, int64_t* out) const;
  // The largest token id, and the position of the first token equal to it.
  uint32_t max_token(int64_t* position = nullptr) const;
  // "dataset_path 'FILE'", the prefix of every message about this file.
  const std::string& label() const { return label_; }

private:
  TokenFile(std::string label, void* map, size_t map_bytes, size_t offset, int64_t count, int width);
  std::string label_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;
  int64_t count_ = 0;
  int width_ = 2;
};

// Writes tokens in llm.c's format: uint16 (20240520, v1) when every id fits, else uint32 (20240801, v7).
// Written to PATH.tmp and renamed, so a crash never leaves a half file. Throws std::runtime_error on I/O errors.
void write_llmc_tokens(const std::string& path, const uint32_t* tokens, size_t count);

} // namespace shadowgrad::data
