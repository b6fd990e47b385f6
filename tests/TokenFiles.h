#pragma once
// Token files for tests: llm.c (through the library's writer), raw uint16, and hand-made broken headers.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "data/TokenFile.h"

namespace token_files {

inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("sg_tok_" + std::to_string(::getpid()) + "_" + name)).string();
}

// A learnable stream: runs of x, x+1, x+2, ... mod vocab, restarting at pseudo-random points.
inline std::vector<uint32_t> counting_tokens(size_t n, uint32_t vocab, uint32_t seed = 1) {
  std::vector<uint32_t> t(n);
  uint32_t x = seed % vocab, h = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    h = h * 1664525u + 1013904223u;
    x = (h >> 28) == 0 ? (h >> 8) % vocab : (x + 1) % vocab;
    t[i] = x;
  }
  return t;
}

inline std::string llmc_file(const std::string& name, const std::vector<uint32_t>& tokens) {
  const std::string path = temp_path(name);
  shadowgrad::data::write_llmc_tokens(path, tokens.data(), tokens.size());
  return path;
}

inline std::string raw_u16_file(const std::string& name, const std::vector<uint32_t>& tokens) {
  const std::string path = temp_path(name);
  std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(narrow.data()), narrow.size() * 2);
  return path;
}

// An llm.c header with the given fields followed by `token_bytes` bytes of zeros.
inline std::string header_file(const std::string& name, int32_t magic, int32_t version, int32_t count,
                               size_t token_bytes) {
  const std::string path = temp_path(name);
  std::vector<int32_t> header(256, 0);
  header[0] = magic, header[1] = version, header[2] = count;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out << std::string(token_bytes, '\0');
  return path;
}

} // namespace token_files

#include <cstdlib>

namespace token_files {

// English-like text of `lines` lines from a small word list (deterministic).
inline std::string tiny_corpus(int lines) {
  static const char* words[] = {"the",     "light",   "and",     "darkness", "was",    "upon",  "face",
                                "of",      "deep",    "god",     "said",     "let",    "there", "be",
                                "day",     "night",   "water",   "earth",    "heaven", "first", "second",
                                "morning", "evening", "divided", "called",   "good"};
  std::string text;
  uint32_t h = 7;
  for (int i = 0; i < lines; ++i) {
    const int n = 5 + int(h % 9);
    for (int w = 0; w < n; ++w) {
      h = h * 1664525u + 1013904223u;
      text += std::string(words[(h >> 16) % (sizeof(words) / sizeof(*words))]) + (w + 1 < n ? " " : ".\n");
    }
    if (i % 7 == 6) text += "\n"; // a blank line ends a document
  }
  return text;
}

// A SentencePiece model of `pieces` pieces trained on tiny_corpus by build/tokenize (made once per test process;
// through the binary because SentencePiece cannot share a process with LibTorch).
inline std::string tiny_tokenizer(int pieces = 100) {
  const std::string dir = temp_path("spm" + std::to_string(pieces));
  if (!std::filesystem::exists(dir + "/tokenizer.model")) {
    const std::string text = temp_path("spm_corpus.txt");
    std::ofstream(text, std::ios::binary) << tiny_corpus(400);
    const std::string cmd = std::string(TOKENIZE_BIN) + " " + text + " --out-dir " + dir + " --vocab-size " +
                            std::to_string(pieces) + " --model-type bpe >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) return "";
  }
  return dir + "/tokenizer.model";
}

} // namespace token_files
