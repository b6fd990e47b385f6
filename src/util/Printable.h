#pragma once
// Text that is safe to print: what a message quotes from a file (a checkpoint's record names, a manifest's keys,
// LibTorch's description of a damaged archive) may hold any bytes, and none of them may reach a terminal raw.
//
//   throw InputError("checkpoint file '" + path + "' is corrupt: " + util::printable(libtorch_reason));
//
// Printable ASCII and valid UTF-8 stay as they are; every other byte (control characters, DEL, bytes that are not
// valid UTF-8, and the C1 controls and bidirectional overrides written in UTF-8) becomes \xNN, one per byte.
#include <string>
#include <string_view>

namespace shadowgrad::util {

std::string printable(std::string_view text);

} // namespace shadowgrad::util
