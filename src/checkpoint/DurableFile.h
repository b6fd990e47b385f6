#pragma once
// A durable file writer that also keeps the CRC-32 of what it wrote, so a large checkpoint file never has to
// exist in memory to be checksummed. Whole-file helpers (write_durably, read_whole_file, ...) are util/File.h.
//
//   DurableWriter w(path);  w.write(p, n); ...;  w.commit();   // commit = fsync + close; w.crc32(), w.bytes()
#include <cstddef>
#include <cstdint>
#include <string>

#include "util/File.h"

namespace shadowgrad::checkpoint {

using util::read_whole_file;
using util::sync_directory;
using util::write_durably;

class DurableWriter {
 public:
  explicit DurableWriter(const std::string& path) : file_(path) {}

  void write(const void* data, size_t size);
  void commit() { file_.commit(); }
  uint32_t crc32() const { return crc_; }
  int64_t bytes() const { return bytes_; }

 private:
  util::FileWriter file_;
  uint32_t crc_ = 0;
  int64_t bytes_ = 0;
};

} // namespace shadowgrad::checkpoint
