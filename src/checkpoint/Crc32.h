#pragma once
// CRC-32 (IEEE 802.3, the polynomial zlib and PNG use), computed by zlib.
//
//   uint32_t c = shadowgrad::checkpoint::crc32(bytes.data(), bytes.size());   // crc32("123456789") == 0xCBF43926
#include <cstddef>
#include <cstdint>
#include <string>

namespace shadowgrad::checkpoint {

// `previous` chains calls: crc32(b, nb, crc32(a, na)) == crc32 of a followed by b.
uint32_t crc32(const void* data, size_t size, uint32_t previous = 0);

// Eight lowercase hex digits.
std::string crc32_hex(uint32_t crc);

} // namespace shadowgrad::checkpoint
