#include "train/RunLock.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/format.h>

#include "util/Errors.h"

namespace shadowgrad::train {
namespace {

// "pid 4242 on host n1", as the holder wrote it; empty if it has not yet.
std::string holder_of(int fd) {
  char buf[512] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string text = n > 0 ? std::string(buf, size_t(n)) : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

} // namespace

RunLock RunLock::acquire(const std::string& run_dir) {
  const std::string path = run_dir + "/" + kFileName;
  // O_CLOEXEC: a child (gnuplot for loss.png) must not inherit the lock and keep it past the trainer's death.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError(fmt::format("cannot open the lock file '{}': {}", path, std::strerror(errno)));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = holder_of(fd);
    ::close(fd);
    if (err == EWOULDBLOCK)
      throw InputError(fmt::format("run directory '{}' is in use by another trainer ({}); wait for it to finish, or "
                                   "stop it and rerun this command to resume",
                                   run_dir, holder.empty() ? "its pid is not written yet" : holder));
    throw InputError(fmt::format("cannot lock '{}': {}", path, std::strerror(err)));
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string line = fmt::format("pid {} on host {}\n", ::getpid(), host);
  // Best effort: the lock holds without the note, which only makes the second trainer's message clearer.
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd, line.data(), line.size(), 0);
  }
  return RunLock(fd);
}

std::optional<RunLock> RunLock::acquire_if_present(const std::string& run_dir) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::path(run_dir) / kFileName, ec)) return std::nullopt;
  return acquire(run_dir);
}

RunLock::RunLock(RunLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  std::swap(fd_, other.fd_);  // ours, if any, is released when `other` goes
  return *this;
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

} // namespace shadowgrad::train
