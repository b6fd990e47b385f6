#pragma once
// What the project's binary data files (the SFT file, the pair file) share: read whole, with any I/O failure a
// DataError naming the file; then the first 16 bytes checked: enough bytes for the header, the magic, the version and
// 4-byte tokens. The rest of each header is the file's own.
//
//   const std::string bytes = read_data_file(path, label);
//   check_data_file_start(bytes, label, {kPairMagic, kPairVersion, kPairHeaderBytes, "pair file", "a pair file",
//                                        "scripts/prepare_preference.sh"});
#include <cstdint>
#include <string>

namespace shadowgrad::data {

struct DataFileKind {
  const char* magic;      // 8 bytes
  uint32_t version;
  int64_t header_bytes;
  const char* name;       // "SFT file"
  const char* a_name;     // "an SFT file"
  const char* maker;      // the script that writes one
};

// The file's bytes; DataError "LABEL: why" when it cannot be read.
std::string read_data_file(const std::string& path, const std::string& label);
// DataError naming `label` unless the bytes start with the kind's header: its size, magic, version and 4-byte tokens.
void check_data_file_start(const std::string& bytes, const std::string& label, const DataFileKind& kind);

} // namespace shadowgrad::data
