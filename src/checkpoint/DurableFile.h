#pragma once
// File primitives for crash-safe writes: a file is durable once its bytes and its directory entry have
// been fsync'ed. Every failure throws std::runtime_error naming the path and the OS reason
// (e.g. "No space left on device").
//
//   write_durably(dir + "/model.pt", bytes);   // write + fsync the file
//   sync_directory(dir);                       // fsync the directory, so the entry survives a crash
#include <cstddef>
#include <cstdint>
#include <string>

namespace shadowgrad::checkpoint {

// Streams bytes into a new file and keeps their CRC-32, so a large file never has to exist in memory:
//
//   DurableWriter w(path);  w.write(p, n); ...;  w.commit();   // commit = fsync + close; w.crc32(), w.bytes()
class DurableWriter {
 public:
  explicit DurableWriter(const std::string& path);
  ~DurableWriter();  // closes without fsync if commit() was not reached (an exception is on its way)
  DurableWriter(const DurableWriter&) = delete;
  DurableWriter& operator=(const DurableWriter&) = delete;

  void write(const void* data, size_t size);
  void commit();
  uint32_t crc32() const { return crc_; }
  int64_t bytes() const { return bytes_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint32_t crc_ = 0;
  int64_t bytes_ = 0;
};

void write_durably(const std::string& path, const std::string& bytes);
void sync_directory(const std::string& dir);
// The whole file; throws if it cannot be opened or read.
std::string read_whole_file(const std::string& path);

} // namespace shadowgrad::checkpoint
