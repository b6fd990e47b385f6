#include "data/Batch.h"

#include <ATen/ATen.h>

namespace shadowgrad::data {

int64_t Batch::valid_tokens() const { return targets.ne(kIgnoreIndex).sum().item<int64_t>(); }

int64_t Batch::real_tokens() const {
  return segments.defined() ? segments.ne(0).sum().item<int64_t>() : valid_tokens();
}

Batch Batch::slice(int64_t begin, int64_t count) const {
  auto rows = [&](const at::Tensor& t) { return t.defined() ? t.slice(0, begin, begin + count) : t; };
  return {rows(tokens), rows(targets), rows(segments), rows(positions)};
}

} // namespace shadowgrad::data
