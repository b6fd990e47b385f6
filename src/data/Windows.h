#pragma once
// Language-model windows over a token sequence: window i is tokens [o_i, o_i + T] for an offset o_i; the
// example's tokens are the first T and its targets the last T (every target valid, no padding).
//
//   Batch b = read_windows(count, T, [&](int64_t i) { return offset(i); },
//                          [&](int64_t at, int64_t n, int64_t* out) { file.copy(at, n, out); });
#include <vector>

#include <ATen/ATen.h>

#include "data/Batch.h"

namespace shadowgrad::data {

template <class OffsetOf, class Copy>
Batch read_windows(int64_t count, int64_t max_length, OffsetOf offset_of, Copy copy) {
  auto tokens = at::empty({count, max_length}, at::kLong);
  auto targets = at::empty({count, max_length}, at::kLong);
  std::vector<int64_t> window(size_t(max_length) + 1);
  for (int64_t i = 0; i < count; ++i) {
    copy(offset_of(i), max_length + 1, window.data());
    int64_t* tok = tokens.data_ptr<int64_t>() + i * max_length;
    int64_t* tgt = targets.data_ptr<int64_t>() + i * max_length;
    std::copy(window.begin(), window.end() - 1, tok);
    std::copy(window.begin() + 1, window.end(), tgt);
  }
  return {tokens, targets, {}, {}};  // no segments or positions: plain causal windows
}

} // namespace shadowgrad::data
