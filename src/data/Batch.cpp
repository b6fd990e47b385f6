#include "data/Batch.h"

#include <ATen/ATen.h>

namespace shadowgrad::data {

int64_t Batch::valid_tokens() const { return targets.ne(kIgnoreIndex).sum().item<int64_t>(); }

Batch Batch::slice(int64_t begin, int64_t count) const {
  return {tokens.slice(0, begin, begin + count), targets.slice(0, begin, begin + count)};
}

} // namespace shadowgrad::data
