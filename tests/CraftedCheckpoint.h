#pragma once
// Crafted checkpoints for tests: a file changed after the checkpoint was written, and the manifest rewritten to
// vouch for it, so that it passes the size and CRC checks and only reading it can tell.
//
//   std::ofstream(dir + "/model.pt", std::ios::binary | std::ios::trunc) << damaged;
//   resign(dir, "model.pt");
//   CHECK(terminal_safe(trainer_output));
#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>

#include "checkpoint/Crc32.h"
#include "checkpoint/Manifest.h"
#include "util/Printable.h"

// Rewrites the size and crc32 that the manifest of checkpoint directory `dir` gives file `name`, for its bytes now.
inline void resign(const std::string& dir, const std::string& name) {
  namespace ck = shadowgrad::checkpoint;
  auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  const std::string manifest = dir + "/manifest.yml";
  auto m = ck::Manifest::parse(read(manifest), manifest);
  const std::string bytes = read(dir + "/" + name);
  for (auto& f : m.files)
    if (f.name == name) f = {name, int64_t(bytes.size()), ck::crc32_hex(ck::crc32(bytes.data(), bytes.size()))};
  std::ofstream(manifest, std::ios::binary | std::ios::trunc) << m.to_text();
}

// Valid UTF-8 with no control character but newline: what the trainer may print about such a file.
inline bool terminal_safe(const std::string& text) {
  for (size_t at = 0, end; at <= text.size(); at = end + 1) {
    end = std::min(text.find('\n', at), text.size());
    const std::string line = text.substr(at, end - at);
    if (shadowgrad::util::printable(line) != line) return false;
  }
  return true;
}
