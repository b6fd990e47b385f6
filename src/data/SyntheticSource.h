#pragma once
// Learnable synthetic sequences: each example is x_{t+1} = (x_t + stride) mod vocab, with a random start
// and a random stride in [1, 8]. After two tokens the rest is predictable, so the loss falls well below
// ln(vocab). Each example keeps a random number of valid tokens in
// [ceil(min_length_fraction * max_length), max_length] and is right-padded, so microbatches hold
// different numbers of valid tokens.
#include "data/DataSource.h"

namespace shadowgrad::data {

class SyntheticSource : public DataSource {
 public:
  SyntheticSource(uint64_t seed, int64_t vocab_size, int64_t max_length, double min_length_fraction);
  Batch examples(int64_t step, int64_t first, int64_t count) const override;
  Batch eval_examples(int64_t first, int64_t count) const override { return examples(-1, first, count); }
  int64_t eval_capacity() const override { return -1; }

 private:
  uint64_t seed_;
  int64_t vocab_size_, max_length_, min_length_;
};

} // namespace shadowgrad::data
