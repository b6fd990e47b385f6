#include "train/ReferenceFile.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "data/LittleEndian.h"
#include "util/File.h"

namespace shadowgrad::train {

namespace {

constexpr char kReferenceMagic[8] = {'S', 'G', 'R', 'E', 'F', 'L', 'P', 0};
constexpr uint32_t kReferenceVersion = 2;
constexpr size_t kReferenceHeaderBytes = 64;  // magic, version, 0, then data, start, how, pairs, chunk, chunks (u64)

} // namespace

int64_t StoredReference::done_count() const { return int64_t(std::count(done.begin(), done.end(), uint8_t(1))); }

ReferenceFileState read_reference_file(const std::string& path, StoredReference& s) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return ReferenceFileState::none;
  const std::string bytes = util::read_whole_file(path);
  if (bytes.size() < 16 || std::memcmp(bytes.data(), kReferenceMagic, sizeof(kReferenceMagic)) != 0)
    return ReferenceFileState::unreadable;
  if (data::read_le<uint32_t>(bytes, 8) == 1) return ReferenceFileState::earlier_version;
  if (data::read_le<uint32_t>(bytes, 8) != kReferenceVersion || bytes.size() < kReferenceHeaderBytes)
    return ReferenceFileState::unreadable;
  s.data = data::read_le<uint64_t>(bytes, 16);
  s.start = data::read_le<uint64_t>(bytes, 24);
  s.how = data::read_le<uint64_t>(bytes, 32);
  const uint64_t pairs = data::read_le<uint64_t>(bytes, 40), chunk = data::read_le<uint64_t>(bytes, 48),
                 chunks = data::read_le<uint64_t>(bytes, 56);
  const uint64_t done_bytes = (chunks + 7) / 8 * 8;
  if (pairs > (uint64_t(1) << 40) || chunks > pairs + 1 || chunk == 0 ||
      bytes.size() != kReferenceHeaderBytes + done_bytes + 16 * pairs)
    return ReferenceFileState::unreadable;
  s.chunk = int64_t(chunk);
  s.done.assign(bytes.begin() + kReferenceHeaderBytes, bytes.begin() + long(kReferenceHeaderBytes + chunks));
  s.logps.resize(size_t(2 * pairs));
  if (pairs > 0) std::memcpy(s.logps.data(), bytes.data() + kReferenceHeaderBytes + done_bytes, size_t(16 * pairs));
  return ReferenceFileState::ok;
}

void write_reference_file(const std::string& path, const StoredReference& s) {
  std::string out(kReferenceMagic, sizeof(kReferenceMagic));
  data::append_le<uint32_t>(out, kReferenceVersion);
  data::append_le<uint32_t>(out, 0);
  for (uint64_t v : {s.data, s.start, s.how, uint64_t(s.logps.size() / 2), uint64_t(s.chunk), uint64_t(s.done.size())})
    data::append_le<uint64_t>(out, v);
  out.append(reinterpret_cast<const char*>(s.done.data()), s.done.size());
  out.append((8 - s.done.size() % 8) % 8, '\0');
  if (!s.logps.empty()) out.append(reinterpret_cast<const char*>(s.logps.data()), 8 * s.logps.size());
  util::write_file_atomically(path, out);
}

std::string earlier_version_message(const std::string& path) {
  return fmt::format("{} was written by an earlier version of the trainer (one file for train and eval pairs), "
                     "which this one does not read; finish the run with the version that started it, or start a new "
                     "run",
                     path);
}

} // namespace shadowgrad::train
