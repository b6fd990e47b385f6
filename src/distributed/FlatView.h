#pragma once
// A list of tensors seen as one flat vector (their elements concatenated in order), without a copy.
// Bucketed reductions and ZeRO-1 shards are ranges of this vector, so they may span several tensors.
//
//   FlatView flat(shadows);                       // contiguous tensors, any dtypes
//   at::Tensor bucket = at::empty({n}, at::kFloat);
//   flat.read(begin, bucket);                     // elements [begin, begin+n) -> bucket (dtype converted)
//   flat.write(begin, bucket);                    // and back (rounded once into each tensor's dtype)
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace shadowgrad::distributed {

class FlatView {
 public:
  // Throws std::invalid_argument if a tensor is not contiguous.
  explicit FlatView(const std::vector<at::Tensor>& tensors);

  int64_t numel() const { return offsets_.empty() ? 0 : offsets_.back(); }
  // Copies elements [begin, begin + dst.numel()) into the 1-D tensor `dst`.
  void read(int64_t begin, const at::Tensor& dst) const;
  // Copies the 1-D tensor `src` into elements [begin, begin + src.numel()).
  void write(int64_t begin, const at::Tensor& src) const;

 private:
  template <typename F>
  void for_each_piece(int64_t begin, int64_t count, F&& f) const;
  std::vector<at::Tensor> flat_;   // detached 1-D views of the tensors
  std::vector<int64_t> offsets_;   // offsets_[i] = first flat index after tensor i
};

} // namespace shadowgrad::distributed
