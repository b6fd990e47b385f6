#pragma once
// Sums a tree of tensors over all processes through ONE fp32 bucket of bounded size.
//
//   int64_t n = all_reduce_sum_bucketed(comm, shadows, 25 << 20);  // n all_reduce calls, one per bucket
//
// The tensors are read as one flat vector (FlatView) and processed bucket by bucket: copy a range into the
// fp32 bucket (bf16/fp16 -> fp32 is exact), all-reduce it (the sum is computed in fp32, which Gloo also needs:
// it rejects bf16), and copy it back (rounded once into each tensor's dtype). The extra memory is one bucket,
// never a full fp32 tree, whatever the tree's size.
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace shadowgrad::distributed {

class Communicator;

// fp32 elements in one bucket of `bucket_bytes` (at least 1).
int64_t bucket_elements(int64_t bucket_bytes);
// How many buckets a flat vector of `numel` elements needs.
int64_t bucket_count(int64_t numel, int64_t bucket_bytes);

// Returns the number of buckets reduced (one all_reduce each). OverlappedReduce starts the same buckets during the
// last backward instead.
int64_t all_reduce_sum_bucketed(Communicator& comm, const std::vector<at::Tensor>& tensors, int64_t bucket_bytes);

} // namespace shadowgrad::distributed
