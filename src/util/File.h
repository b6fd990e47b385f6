#pragma once
// Whole-file I/O, each written once: durable writes (fsync of the file, then of its directory), atomic replacement
// (write a temporary, fsync, rename over the target, fsync the directory) and whole-file reads. Every failure
// throws std::runtime_error naming the path and the OS reason (e.g. "No space left on device").
//
//   util::write_file_atomically(dir + "/summary.json", text);  // readers see the old file or the new one, whole
//   std::string text = util::read_whole_file(path);
//   util::FileWriter w(path); w.write(p, n); ...; w.commit();  // streamed; commit = fsync + close
#include <cstddef>
#include <string>

namespace shadowgrad::util {

class FileWriter {
 public:
  explicit FileWriter(const std::string& path);  // creates or truncates
  ~FileWriter();                                 // closes without fsync if commit() was not reached
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void write(const void* data, size_t size);
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// Writes `bytes` to a new file at `path` and fsyncs it.
void write_durably(const std::string& path, const std::string& bytes);
// fsyncs a directory, so that entries created or renamed in it survive a crash.
void sync_directory(const std::string& dir);
// Renames `from` over `to` and fsyncs the directory of `to`.
void rename_durably(const std::string& from, const std::string& to);
// write_durably(path + ".tmp") then rename_durably over `path`.
void write_file_atomically(const std::string& path, const std::string& bytes);
// The whole file; throws if it cannot be opened or read.
std::string read_whole_file(const std::string& path);
// Whether two paths name the same place: the same text, or the same once made absolute against the working directory
// and normalised (symlinks resolved as far as they exist), so that "models/x" and "/home/me/models/x/" agree.
// "" equals only "". Touches nothing; a path that does not exist is compared by its text so resolved.
bool same_path(const std::string& a, const std::string& b);

} // namespace shadowgrad::util
