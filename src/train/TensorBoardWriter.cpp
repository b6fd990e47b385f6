#include "train/TensorBoardWriter.h"

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <unistd.h>

#include <fmt/format.h>

#include "util/Errors.h"

namespace shadowgrad::train {

namespace {

// Protocol buffer wire format: a field's key is (number << 3) | wire type.
enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char(uint8_t(v) | 0x80);
    v >>= 7;
  }
  out += char(uint8_t(v));
}

void key(std::string& out, uint32_t field, Wire wire) { varint(out, (uint64_t(field) << 3) | wire); }

template <typename T>
void little_endian(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86-64 and aarch64 are little-endian, as the format is
  out.append(bytes, sizeof(T));
}

void bytes_field(std::string& out, uint32_t field, const std::string& bytes) {
  key(out, field, kBytes);
  varint(out, bytes.size());
  out += bytes;
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Event (tensorboard/compat/proto/event.proto): wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
// summary = 5 (Summary), session_log = 7 (SessionLog).
std::string event_head(int64_t step) {
  std::string e;
  key(e, 1, kFixed64);
  little_endian(e, wall_time());
  key(e, 2, kVarint);
  varint(e, uint64_t(step));
  return e;
}

// events.out.tfevents.<seconds>.<host>.<n>: TensorBoard reads a directory's files in name order, so a later process
// (a resume) must sort after the earlier ones, also within the same second: n counts the files already there.
std::string new_file_name(const std::filesystem::path& dir) {
  std::error_code ec;
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().filename().string().find("tfevents") != std::string::npos) ++n;
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const auto seconds = int64_t(wall_time());
  return fmt::format("events.out.tfevents.{:010d}.{}.{:06d}", seconds, host, n);
}

} // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // the reflected Castagnoli polynomial
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t first_step) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw InputError(fmt::format("cannot create the TensorBoard directory '{}': {}", dir, ec.message()));
  path_ = (std::filesystem::path(dir) / new_file_name(dir)).string();
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) throw InputError(fmt::format("cannot open '{}' for writing", path_));
  std::string version = event_head(0);
  bytes_field(version, 3, "brain.Event:2");
  record(version);
  // SessionLog { status = 1: START }: TensorBoard drops earlier files' events from this step on.
  std::string start = event_head(first_step);
  std::string session_log;
  key(session_log, 1, kVarint);
  varint(session_log, 1);
  bytes_field(start, 7, session_log);
  record(start);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::write(int64_t step, const JsonNumbers& fields) {
  std::string summary;
  for (const auto& [tag, value] : fields) {
    if (tag == "step" || !std::isfinite(value)) continue;
    // Summary.Value: tag = 1 (string), simple_value = 2 (float).
    std::string v;
    bytes_field(v, 1, tag);
    key(v, 2, kFixed32);
    little_endian(v, float(value));
    bytes_field(summary, 1, v);  // Summary: value = 1 (repeated)
  }
  std::string event = event_head(step);
  bytes_field(event, 5, summary);
  record(event);
}

void TensorBoardWriter::record(const std::string& event) {
  std::string framed;
  little_endian(framed, uint64_t(event.size()));
  little_endian(framed, masked_crc32c(framed.data(), 8));
  framed += event;
  little_endian(framed, masked_crc32c(event.data(), event.size()));
  if (std::fwrite(framed.data(), 1, framed.size(), file_) != framed.size() || std::fflush(file_) != 0)
    throw std::runtime_error(fmt::format("cannot write to '{}' (disk full?)", path_));
}

} // namespace shadowgrad::train
