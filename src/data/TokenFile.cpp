#include "data/TokenFile.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "util/Errors.h"
#include "util/File.h"

namespace shadowgrad::data {

namespace {

int32_t read_le32(const unsigned char* p) {
  return static_cast<int32_t>(uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24);
}

template <class T> T max_of(const T* p, int64_t n) {
  T m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, p[i]); // vectorises: one pass at memory speed
  return m;
}

// The header's fields and where the tokens start; throws DataError for what cannot be an llm.c file.
struct Layout {
  size_t offset;
  int64_t count;
  int width;
};

Layout llmc_layout(const std::string& label, const unsigned char* bytes, size_t size) {
  if (size < kLlmcHeaderBytes)
    throw DataError(
        fmt::format("{} is truncated: {} bytes, shorter than llm.c's {}-byte header", label, size, kLlmcHeaderBytes));
  const int32_t magic = read_le32(bytes), version = read_le32(bytes + 4), count = read_le32(bytes + 8);
  int width = 0;
  if (magic == kLlmcMagicU16 && version == 1) width = 2;
  if (magic == kLlmcMagicU32 && version == 7) width = 4;
  if (width == 0 && (magic == kLlmcMagicU16 || magic == kLlmcMagicU32))
    throw DataError(fmt::format("{}: llm.c magic {} needs version {}, the header says version {}", label, magic,
                                magic == kLlmcMagicU16 ? 1 : 7, version));
  if (width == 0)
    throw DataError(fmt::format("{}: magic {} is not llm.c's ({} for uint16 or {} for uint32 tokens); for a "
                                "headerless nanoGPT uint16 file set token_file_format=raw_uint16",
                                label, magic, kLlmcMagicU16, kLlmcMagicU32));
  if (count < 0) throw DataError(fmt::format("{}: the header's token count is negative ({})", label, count));
  const size_t expected = kLlmcHeaderBytes + size_t(count) * size_t(width);
  if (size < expected)
    throw DataError(fmt::format("{} is truncated: the header says {} tokens ({} bytes in all), the file has {} bytes",
                                label, count, expected, size));
  if (size > expected)
    throw DataError(fmt::format("{}: the header's token count ({}, so {} bytes in all) disagrees with the file size "
                                "({} bytes)",
                                label, count, expected, size));
  return {kLlmcHeaderBytes, count, width};
}

Layout raw_layout(const std::string& label, const unsigned char* bytes, size_t size) {
  if (size % 2 != 0)
    throw DataError(fmt::format("{} is truncated: {} bytes is not a whole number of uint16 tokens", label, size));
  // A raw file that starts with llm.c's header would train on the header as if it were tokens.
  if (size >= kLlmcHeaderBytes && (read_le32(bytes) == kLlmcMagicU16 || read_le32(bytes) == kLlmcMagicU32))
    throw DataError(
        fmt::format("{} starts with llm.c's magic {}; set token_file_format=llmc", label, read_le32(bytes)));
  return {0, int64_t(size / 2), 2};
}

} // namespace

TokenFile TokenFile::open(const std::string& path, config::TokenFileFormat format, const std::string& key) {
  const std::string label = fmt::format("{} '{}'", key, path);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw DataError(fmt::format("{} does not exist or is not a regular file", label));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError(fmt::format("{} cannot be read: {}", label, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw DataError(fmt::format("{} cannot be read: {}", label, std::strerror(err)));
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    throw DataError(fmt::format("{} is empty", label));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd); // the mapping keeps the file open
  if (map == MAP_FAILED) throw DataError(fmt::format("{} cannot be memory-mapped: {}", label, std::strerror(err)));
  const auto* bytes = static_cast<const unsigned char*>(map);
  try {
    const Layout l = format == config::TokenFileFormat::raw_uint16 ? raw_layout(label, bytes, size) : llmc_layout(label, bytes, size);
    ::madvise(map, size, MADV_RANDOM); // windows are read at random offsets: no read-ahead of whole megabytes
    return TokenFile(label, map, size, l.offset, l.count, l.width);
  } catch (...) {
    ::munmap(map, size);
    throw;
  }
}

TokenFile::TokenFile(std::string label, void* map, size_t map_bytes, size_t offset, int64_t count, int width)
    : label_(std::move(label)), map_(map), map_bytes_(map_bytes),
      tokens_(static_cast<const unsigned char*>(map) + offset), count_(count), width_(width) {}

TokenFile::TokenFile(TokenFile&& o) noexcept
    : label_(std::move(o.label_)), map_(o.map_), map_bytes_(o.map_bytes_), tokens_(o.tokens_), count_(o.count_),
      width_(o.width_) {
  o.map_ = nullptr;
}

TokenFile::~TokenFile() {
  if (map_) ::munmap(map_, map_bytes_);
}

// llm.c files are little-endian, as is every machine LibTorch supports on CPU here.
uint32_t TokenFile::token(int64_t i) const {
  if (width_ == 2) {
    uint16_t t;
    std::memcpy(&t, tokens_ + size_t(i) * 2, 2);
    return t;
  }
  uint32_t t;
  std::memcpy(&t, tokens_ + size_t(i) * 4, 4);
  return t;
}

void TokenFile::copy(int64_t offset, int64_t n, int64_t* out) const {
  if (width_ == 2) {
    const auto* p = reinterpret_cast<const uint16_t*>(tokens_) + offset; // the header is 1024 bytes: aligned
    for (int64_t i = 0; i < n; ++i) out[i] = p[i];
  } else {
    const auto* p = reinterpret_cast<const uint32_t*>(tokens_) + offset;
    for (int64_t i = 0; i < n; ++i) out[i] = p[i];
  }
}

uint32_t TokenFile::max_token(int64_t* position) const {
  const uint32_t m = width_ == 2 ? max_of(reinterpret_cast<const uint16_t*>(tokens_), count_)
                                 : max_of(reinterpret_cast<const uint32_t*>(tokens_), count_);
  if (position) {
    *position = 0;
    while (*position < count_ && token(*position) != m) ++*position;
  }
  return m;
}

void write_llmc_tokens(const std::string& path, const uint32_t* tokens, size_t count) {
  if (count > size_t(INT32_MAX))
    throw std::runtime_error(fmt::format("{}: {} tokens do not fit llm.c's int32 token count", path, count));
  const bool narrow = std::all_of(tokens, tokens + count, [](uint32_t t) { return t <= 0xFFFF; });
  std::vector<int32_t> header(256, 0);
  header[0] = narrow ? kLlmcMagicU16 : kLlmcMagicU32;
  header[1] = narrow ? 1 : 7;
  header[2] = static_cast<int32_t>(count);
  const std::string tmp = path + ".tmp";
  {
    util::FileWriter f(tmp);
    f.write(header.data(), header.size() * sizeof(int32_t));
    if (narrow) {
      std::vector<uint16_t> narrowed(tokens, tokens + count);
      f.write(narrowed.data(), count * 2);
    } else {
      f.write(tokens, count * 4);
    }
    f.commit();
  }
  util::rename_durably(tmp, path);
}

} // namespace shadowgrad::data
