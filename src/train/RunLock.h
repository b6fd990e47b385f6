#pragma once
// One trainer per run directory: an exclusive flock(2) on <run_dir>/trainer.lock, held while the RunLock lives.
// The kernel drops the lock when the process ends in any way, kill -9 included, so a stale lock never blocks a
// resume. The file stays, and holds the last holder's pid and host for the message a second trainer gets:
//
//   auto lock = RunLock::acquire(dir);
//   // InputError: run directory 'runs/demo' is in use by another trainer (pid 4242 on host n1); ...
//
// With several processes rank 0 holds it. flock works across machines on NFSv4 and Lustre; see docs/reliability.md.
#include <optional>
#include <string>

namespace shadowgrad::train {

class RunLock {
 public:
  static constexpr const char* kFileName = "trainer.lock";

  // Takes the lock, creating the file. Throws InputError naming the directory and the holder's pid and host when
  // another process holds it.
  static RunLock acquire(const std::string& run_dir);
  // acquire() when run_dir already holds a trainer.lock (some trainer has used it); nullopt, creating nothing,
  // when it does not. Lets the check come before anything else looks at an existing directory.
  static std::optional<RunLock> acquire_if_present(const std::string& run_dir);

  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  ~RunLock();

 private:
  explicit RunLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

} // namespace shadowgrad::train
