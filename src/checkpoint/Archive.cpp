#include "checkpoint/Archive.h"

#include <exception>
#include <new>

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "checkpoint/DurableFile.h"
#include "checkpoint/Manifest.h"
#include "util/Errors.h"

namespace shadowgrad::checkpoint {
namespace {

// The first line of LibTorch's message, at most 200 bytes: its reason, without the backtrace or the source excerpt.
std::string reason(const std::string& what) {
  std::string line = what.substr(0, what.find('\n'));
  if (line.size() > 200) line = line.substr(0, 200) + "...";
  return line;
}

CorruptCheckpointError unreadable(const std::string& path, const std::string& why) {
  return CorruptCheckpointError(fmt::format("checkpoint file '{}' is corrupt: LibTorch cannot read it ({})", path,
                                            reason(why)));
}

} // namespace

void serialize(DurableWriter& out, const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  torch::serialize::OutputArchive archive;
  fill(archive);
  // An exception must not cross the zip writer (its destructor would write again and terminate): the first
  // failure (e.g. a full disk) is kept, later bytes are dropped, and it is rethrown once the writer is done.
  std::exception_ptr failure;
  archive.save_to([&](const void* data, size_t size) {
    if (!failure) {
      try {
        out.write(data, size);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    return size;
  });
  if (failure) std::rethrow_exception(failure);
}

void deserialize(const std::string& bytes, const std::string& path,
                 const std::function<void(torch::serialize::InputArchive&)>& read) {
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(bytes.data(), bytes.size());
    read(archive);
  } catch (const InputError&) {
    throw;  // ours, CorruptCheckpointError included: already names the file
  } catch (const c10::Error& e) {
    throw unreadable(path, e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    throw unreadable(path, "a size in it is too large to allocate");
  } catch (const std::exception& e) {
    throw unreadable(path, e.what());
  }
}

} // namespace shadowgrad::checkpoint
