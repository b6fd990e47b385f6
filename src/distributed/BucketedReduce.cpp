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

int64_t all_reduce_sum_bucketed(Communicator& comm, const std::vector<at::Tensor>& tensors, int64_t bucket_bytes,
                                const at::Tensor& rider) {
  FlatView flat(tensors);
  const int64_t total = flat.numel();
  const int64_t extra = rider.defined() ? rider.numel() : 0;
  if (total == 0 && extra == 0) return 0;
  const int64_t per = std::min(total, bucket_elements(bucket_bytes));
  const auto options = (tensors.empty() ? rider : tensors.front()).options().dtype(at::kFloat);
  at::Tensor bucket = at::empty({per + extra}, options);
  int64_t buckets = 0;
  int64_t begin = 0;
  do {
    const int64_t len = std::min(per, total - begin);
    const bool last = begin + len >= total;
    at::Tensor part = bucket.narrow(0, 0, len);  // a prefix: contiguous
    if (len > 0) flat.read(begin, part);
    // The rider travels at the end of the last bucket: no collective of its own.
    if (last && extra > 0) bucket.narrow(0, len, extra).copy_(rider.reshape({-1}));
    at::Tensor sent = bucket.narrow(0, 0, len + (last ? extra : 0));
    comm.all_reduce_sum_(sent);
    if (len > 0) flat.write(begin, part);
    if (last && extra > 0) rider.view({-1}).copy_(bucket.narrow(0, len, extra));
    begin += len;
    ++buckets;
  } while (begin < total);
  return buckets;
}

} // namespace shadowgrad::distributed
