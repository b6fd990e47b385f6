#pragma once
// A fast non-cryptographic hash of large byte ranges (model weights): 1 MiB blocks hashed with xxHash64's four-lane
// round on the intra-op threads, their digests chained in order, so the value does not depend on the thread count.
// About memory speed, where byte-at-a-time FNV-1a (util/Hash.h) took 9-18 s for the 4.4 GB of a 1.1 B model.
//
//   uint64_t h = util::kFnv1aOffset;
//   for (const auto& t : tensors) h = util::block_hash_chain(t.data_ptr(), t.nbytes(), h);
#include <cstddef>
#include <cstdint>

namespace shadowgrad::util {

// The n bytes at `data`, chained after `h`.
uint64_t block_hash_chain(const void* data, size_t n, uint64_t h);

} // namespace shadowgrad::util
