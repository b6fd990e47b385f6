#include "checkpoint/Archive.h"

#include <exception>

#include <torch/serialize/output-archive.h>

#include "checkpoint/DurableFile.h"

namespace shadowgrad::checkpoint {

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

} // namespace shadowgrad::checkpoint
