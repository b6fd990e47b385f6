#pragma once
// Typed errors thrown by the library. Only apps/ catches them and maps them to exit codes:
//   InputError (bad config, bad data, unusable run directory) -> exit 2
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

} // namespace shadowgrad
