#include "distributed/BucketedReduce.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "distributed/Communicator.h"
#include "distributed/FlatView.h"

namespace shadowgrad::distributed {

int64_t bucket_elements(int64_t bucket_bytes) { return std::max<int64_t>(1, bucket_bytes / int64_t(sizeof(float))); }

int64_t bucket_count(int64_t numel, int64_t bucket_bytes) {
  const int64_t per = bucket_elements(bucket_bytes);
  return (numel + per - 1) / per;
}

int64_t all_reduce_sum_bucketed(Communicator& comm, const std::vector<at::Tensor>& tensors, int64_t bucket_bytes) {
  FlatView flat(tensors);
  const int64_t total = flat.numel();
  if (total == 0) return 0;
  const int64_t per = std::min(total, bucket_elements(bucket_bytes));
  at::Tensor bucket = at::empty({per}, tensors.front().options().dtype(at::kFloat));
  int64_t buckets = 0;
  for (int64_t begin = 0; begin < total; begin += per, ++buckets) {
    at::Tensor part = bucket.narrow(0, 0, std::min(per, total - begin));  // a prefix: contiguous
    flat.read(begin, part);
    comm.all_reduce_sum_(part);
    flat.write(begin, part);
  }
  return buckets;
}

} // namespace shadowgrad::distributed
