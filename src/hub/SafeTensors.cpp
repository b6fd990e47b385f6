#include "hub/SafeTensors.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <map>

namespace shadowgrad::hub {

using nlohmann::json;

SafeTensorsFile SafeTensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ModelFileError(fmt::format("{}: cannot open ({})", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ModelFileError(fmt::format("{}: not a regular file", path));
  }
  const uint64_t size = uint64_t(st.st_size);
  if (size < 8) {
    ::close(fd);
    throw ModelFileError(fmt::format("{}: {} bytes is too short for a safetensors file (8-byte header length)", path, size));
  }
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) throw ModelFileError(fmt::format("{}: cannot map ({})", path, std::strerror(errno)));
  SafeTensorsFile f;
  f.path_ = path;
  f.mapping_ = std::shared_ptr<const void>(base, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
  const auto parsed = parse_safetensors(static_cast<const unsigned char*>(base), size, path);
  f.tensors_ = parsed.tensors;
  f.data_ = static_cast<const unsigned char*>(base) + parsed.data_start;
  return f;
}

const TensorInfo* SafeTensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

at::Tensor SafeTensorsFile::view(const TensorInfo& t) const {
  c10::ScalarType type;
  if (t.dtype == "F32") type = at::kFloat;
  else if (t.dtype == "BF16") type = at::kBFloat16;
  else if (t.dtype == "F16") type = at::kHalf;
  else
    throw ModelFileError(fmt::format("{}: tensor '{}' is {}; weights must be F32, BF16 or F16", path_, t.name, t.dtype));
  auto* p = const_cast<unsigned char*>(data_ + t.begin);  // read-only use: the tensor is only ever copied from
  const auto elem = int64_t(c10::elementSize(type));
  if (reinterpret_cast<uintptr_t>(p) % uintptr_t(elem) != 0)  // misaligned offsets are legal: read them bytewise
    return at::from_blob(p, {int64_t(t.end - t.begin)}, at::kByte).clone().view(type).view(t.shape);
  return at::from_blob(p, t.shape, at::TensorOptions().dtype(type));
}

void SafeTensorsFile::release(const TensorInfo& t) const {
  const auto page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<uintptr_t>(data_ + t.begin) + page - 1) / page * page;  // whole pages only
  const auto end = reinterpret_cast<uintptr_t>(data_ + t.end) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

const char* safetensors_dtype(c10::ScalarType type) {
  switch (type) {
    case at::kFloat: return "F32";
    case at::kBFloat16: return "BF16";
    case at::kHalf: return "F16";
    default: throw std::invalid_argument(fmt::format("safetensors export: unsupported dtype {}", c10::toString(type)));
  }
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t bytes = uint64_t(t.numel()) * t.element_size();
    header[name] = {{"dtype", safetensors_dtype(t.scalar_type())}, {"shape", t.sizes().vec()},
                    {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), std::streamsize(text.size()));
  for (const auto& [name, t] : tensors) {
    auto c = t.detach().to(at::kCPU).contiguous();
    out.write(static_cast<const char*>(c.const_data_ptr()), std::streamsize(c.numel() * c.element_size()));
  }
  out.close();
  if (!out) throw std::runtime_error(fmt::format("cannot write {}", tmp));
  std::filesystem::rename(tmp, path);
}

} // namespace shadowgrad::hub
