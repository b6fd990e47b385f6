#pragma once
// Little-endian integers in a byte string: the on-disk data files (SFT file, pair file) are little-endian whatever the
// host. Header-only; callers check bounds before reading.
//
//   uint64_t n = read_le<uint64_t>(bytes, 16);
//   append_le<uint32_t>(out, 1);
#include <cstddef>
#include <cstdint>
#include <string>

namespace shadowgrad::data {

template <class T> T read_le(const std::string& bytes, size_t at) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= T(uint8_t(bytes[at + i])) << (8 * i);
  return v;
}

template <class T> void append_le(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(char(uint8_t(v >> (8 * i))));
}

} // namespace shadowgrad::data
