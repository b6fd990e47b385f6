#include "checkpoint/DurableFile.h"

#include "checkpoint/Crc32.h"

namespace shadowgrad::checkpoint {

void DurableWriter::write(const void* data, size_t size) {
  crc_ = checkpoint::crc32(static_cast<const char*>(data), size, crc_);
  bytes_ += static_cast<int64_t>(size);
  file_.write(data, size);
}

} // namespace shadowgrad::checkpoint
