#include "distributed/FlatView.h"

#include <algorithm>
#include <stdexcept>

#include <ATen/ATen.h>
#include <fmt/format.h>

namespace shadowgrad::distributed {

FlatView::FlatView(const std::vector<at::Tensor>& tensors) {
  int64_t total = 0;
  for (const auto& t : tensors) {
    if (!t.is_contiguous()) throw std::invalid_argument("FlatView: every tensor must be contiguous");
    flat_.push_back(t.detach().view({-1}));  // shares storage; writes bypass autograd
    total += t.numel();
    offsets_.push_back(total);
  }
}

template <typename F>
void FlatView::for_each_piece(int64_t begin, int64_t count, F&& f) const {
  if (begin < 0 || count < 0 || begin + count > numel())
    throw std::out_of_range(fmt::format("FlatView: range [{}, {}) outside [0, {})", begin, begin + count, numel()));
  const int64_t end = begin + count;
  // First tensor whose range ends after `begin`.
  size_t i = std::upper_bound(offsets_.begin(), offsets_.end(), begin) - offsets_.begin();
  for (int64_t pos = begin; pos < end; ++i) {
    const int64_t tensor_begin = offsets_[i] - flat_[i].numel();
    const int64_t n = std::min(end, offsets_[i]) - pos;
    f(flat_[i].narrow(0, pos - tensor_begin, n), pos - begin, n);
    pos += n;
  }
}

void FlatView::read(int64_t begin, const at::Tensor& dst) const {
  for_each_piece(begin, dst.numel(),
                 [&](const at::Tensor& piece, int64_t at, int64_t n) { dst.narrow(0, at, n).copy_(piece); });
}

void FlatView::write(int64_t begin, const at::Tensor& src) const {
  for_each_piece(begin, src.numel(),
                 [&](const at::Tensor& piece, int64_t at, int64_t n) { piece.copy_(src.narrow(0, at, n)); });
}

} // namespace shadowgrad::distributed
