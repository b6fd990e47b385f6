#include "data/TokenizerVocab.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "util/Errors.h"

namespace shadowgrad::data {

namespace {

// A protobuf varint at `at`; false when it runs past the end or over 10 bytes.
bool read_varint(const std::string& bytes, size_t& at, uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 70 && at < bytes.size(); shift += 7) {
    const auto byte = static_cast<unsigned char>(bytes[at++]);
    value |= uint64_t(byte & 0x7F) << shift;
    if (!(byte & 0x80)) return true;
  }
  return false;
}

} // namespace

int64_t sentencepiece_vocab_size(const std::string& path, const std::string& key) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw DataError(fmt::format("{} '{}' does not exist or is not a regular file", key, path));
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in) throw DataError(fmt::format("{} '{}' cannot be read", key, path));
  const std::string bytes = ss.str();
  auto malformed = [&](size_t at) {
    return DataError(
        fmt::format("{} '{}' is not a readable SentencePiece model (malformed protobuf at byte {})", key, path, at));
  };
  int64_t pieces = 0;
  for (size_t at = 0; at < bytes.size();) {
    const size_t start = at;
    uint64_t tag = 0, value = 0;
    if (!read_varint(bytes, at, tag) || (tag >> 3) == 0) throw malformed(start);
    switch (tag & 7) {
    case 0:
      if (!read_varint(bytes, at, value)) throw malformed(start);
      break;
    case 1: at += 8; break;
    case 5: at += 4; break;
    case 2:
      if (!read_varint(bytes, at, value) || value > bytes.size() - at) throw malformed(start);
      at += value;
      if ((tag >> 3) == 1) ++pieces; // ModelProto.pieces
      break;
    default: throw malformed(start); // groups (3, 4) and 6, 7 never occur in a ModelProto
    }
    if (at > bytes.size()) throw malformed(start);
  }
  if (pieces == 0) throw DataError(fmt::format("{} '{}' is not a readable SentencePiece model (no pieces)", key, path));
  return pieces;
}

void check_vocabulary(const std::string& tokenizer_path, int64_t vocab_size) {
  const int64_t pieces = sentencepiece_vocab_size(tokenizer_path);
  if (pieces > vocab_size)
    throw DataError(fmt::format("tokenizer_path '{}' has a vocabulary of {} pieces, larger than vocab_size={}; set "
                                "vocab_size={} (or more)",
                                tokenizer_path, pieces, vocab_size, pieces));
}

} // namespace shadowgrad::data
