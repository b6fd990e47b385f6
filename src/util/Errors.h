#pragma once
// Typed errors thrown by the library. Only apps/ catches them and maps them to exit codes:
//   InputError (bad config, bad data, unusable run directory) -> exit 2
//   NonFiniteError (too many non-finite steps in a row)       -> exit 3
//   InterruptedError (SIGINT / SIGTERM, after a checkpoint)   -> exit 128 + signal (130, 143)
//   anything else                                            -> exit 1
#include <stdexcept>
#include <string>

namespace shadowgrad {

// The user gave us something we cannot use. The message names the culprit (key, file or line).
class InputError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

class ConfigError : public InputError {
 public:
  using InputError::InputError;
};

class DataError : public InputError {
 public:
  using InputError::InputError;
};

// max_consecutive_nonfinite optimizer steps in a row had a non-finite loss or gradient norm.
class NonFiniteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The run stopped cleanly on SIGINT or SIGTERM (current step finished, checkpoint written if enabled).
class InterruptedError : public std::runtime_error {
 public:
  InterruptedError(const std::string& what, int signal) : std::runtime_error(what), signal_(signal) {}
  int signal() const { return signal_; }
  // What shells report for a process killed by the signal: 128 + signal number.
  int exit_code() const { return 128 + signal_; }

 private:
  int signal_;
};

} // namespace shadowgrad
