#include "checkpoint/Crc32.h"

#include <algorithm>

#include <fmt/format.h>
#include <zlib.h>

namespace shadowgrad::checkpoint {

uint32_t crc32(const void* data, size_t size, uint32_t previous) {
  // zlib's CRC-32 processes several bytes per step: a 600 MB checkpoint costs ~0.1 s, not the ~2 s of
  // a byte-at-a-time table. Its length argument is 32-bit, hence the slices.
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = previous;
  while (size > 0) {
    const auto n = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    c = ::crc32(c, p, n);
    p += n;
    size -= n;
  }
  return static_cast<uint32_t>(c);
}

std::string crc32_hex(uint32_t crc) { return fmt::format("{:08x}", crc); }

} // namespace shadowgrad::checkpoint
