#pragma once
// File primitives for crash-safe writes: a file is durable once its bytes and its directory entry have
// been fsync'ed. Every failure throws std::runtime_error naming the path and the OS reason
// (e.g. "No space left on device").
//
//   write_durably(dir + "/model.pt", bytes);   // write + fsync the file
//   sync_directory(dir);                       // fsync the directory, so the entry survives a crash
#include <string>

namespace shadowgrad::checkpoint {

void write_durably(const std::string& path, const std::string& bytes);
void sync_directory(const std::string& dir);
// The whole file; throws if it cannot be opened or read.
std::string read_whole_file(const std::string& path);

} // namespace shadowgrad::checkpoint
