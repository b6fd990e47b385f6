#include "util/File.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

namespace shadowgrad::util {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw std::runtime_error(fmt::format("cannot {} '{}': {}", what, path, std::strerror(errno)));
}

} // namespace

FileWriter::FileWriter(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("create", path);
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void FileWriter::write(const void* data, size_t size) {
  const auto* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd_, p + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("write", path_);
    done += size_t(n);
  }
}

void FileWriter::commit() {
  if (::fsync(fd_) != 0) fail("fsync", path_);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close", path_);
}

void write_durably(const std::string& path, const std::string& bytes) {
  FileWriter w(path);
  w.write(bytes.data(), bytes.size());
  w.commit();
}

void sync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("open directory", dir);
  if (::fsync(fd) != 0) {
    int saved = errno;
    ::close(fd);
    errno = saved;
    fail("fsync directory", dir);
  }
  ::close(fd);
}

void rename_durably(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) fail(fmt::format("rename '{}' to", from), to);
  const auto parent = std::filesystem::path(to).parent_path();
  sync_directory(parent.empty() ? "." : parent.string());
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  write_durably(tmp, bytes);
  rename_durably(tmp, path);
}

std::string read_whole_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("open", path);
  std::string out;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) out.reserve(size_t(st.st_size));  // one allocation, no regrowth
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int saved = errno;
      ::close(fd);
      errno = saved;
      fail("read", path);
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

bool same_path(const std::string& a, const std::string& b) {
  if (a == b) return true;
  if (a.empty() || b.empty()) return false;
  std::error_code ec_a, ec_b;
  const std::filesystem::path ra = std::filesystem::weakly_canonical(std::filesystem::absolute(a), ec_a);
  const std::filesystem::path rb = std::filesystem::weakly_canonical(std::filesystem::absolute(b), ec_b);
  if (ec_a || ec_b) return false;
  // weakly_canonical keeps a trailing separator of a path that does not exist ("x/" against "x")
  return (ra / "").lexically_normal() == (rb / "").lexically_normal();
}

} // namespace shadowgrad::util
