#include "data/DataFileHeader.h"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "data/LittleEndian.h"
#include "util/Errors.h"
#include "util/File.h"

namespace shadowgrad::data {

std::string read_data_file(const std::string& path, const std::string& label) {
  try {
    return util::read_whole_file(path);
  } catch (const std::runtime_error& e) {
    throw DataError(fmt::format("{}: {}", label, e.what()));
  }
}

void check_data_file_start(const std::string& bytes, const std::string& label, const DataFileKind& kind) {
  const auto size = int64_t(bytes.size());
  if (size < kind.header_bytes)
    throw DataError(fmt::format("{} is truncated: {} bytes, shorter than the {}'s header ({} bytes)", label, size,
                                kind.name, kind.header_bytes));
  if (std::memcmp(bytes.data(), kind.magic, 8) != 0)
    throw DataError(fmt::format("{} is not {} (no {} magic); make one with {}", label, kind.a_name,
                                std::string(kind.magic, strnlen(kind.magic, 8)), kind.maker));
  const auto version = read_le<uint32_t>(bytes, 8), width = read_le<uint32_t>(bytes, 12);
  if (version != kind.version || width != 4)
    throw DataError(fmt::format("{}: {} version {} with {}-byte tokens; this trainer reads version {} with 4-byte "
                                "tokens",
                                label, kind.name, version, width, kind.version));
}

} // namespace shadowgrad::data
